package model

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// TestForwardFeatures: a pass reports the work it did in the cost model's terms, and that is
// what CostFeatures predicted before it: a prefix repeated within the pass or published in the
// cache is not counted, nor is a computed prefix's template when an earlier group of the pass
// computes it or the cache holds it (its tokens after the template cost as an item of it), and
// items too long to score are not counted.
func TestForwardFeatures(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	e := load(t, dir, Options{PrefixCacheBytes: 64 << 20})
	if p := e.CostPrior(); p.Source != scorer.CostSourceShape || p.Coeffs.A <= 0 || p.Coeffs.B <= 0 || p.Coeffs.C <= 0 {
		t.Errorf("prior without Options.Cost = %+v, want a positive shape guess", p)
	}
	tok := func(q string, docs ...string) *scorer.Group {
		g, err := e.Tokenize("", q, docs, scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	lens := func(g *scorer.Group) []int {
		var l []int
		for i, it := range g.Items {
			if !g.TooLong[i] {
				l = append(l, len(it))
			}
		}
		return l
	}
	a, a2, b := tok("espresso", testDocs[:3]...), tok("espresso", testDocs[3:5]...), tok("rainforest", testDocs[:2]...)
	b.TooLong[1] = true // not scored: not work
	// b's query is new, but its template (one instruction) is a's, computed once.
	tmpl := b.TemplateLen
	if tmpl == 0 || tmpl != a.TemplateLen {
		t.Fatalf("template lengths %d, %d", a.TemplateLen, tmpl)
	}
	want := costmodel.BatchFeatures(len(a.Prefix), lens(a), false).
		Add(costmodel.BatchFeatures(len(a2.Prefix), lens(a2), true)).
		Add(costmodel.BatchFeatures(len(b.Prefix), lens(b), true)).Add(costmodel.ItemFeatures(tmpl, len(b.Prefix)-tmpl))
	gs := []*scorer.Group{a, a2, b}
	if d := cmp.Diff(want, e.CostFeatures(gs)); d != "" {
		t.Errorf("CostFeatures before the pass (-want +got):\n%s", d)
	}
	st, _ := forwardLogits(t, e, gs)
	if d := cmp.Diff(want, st.Features); d != "" {
		t.Errorf("pass features (-want +got):\n%s", d)
	}

	// Both prefixes are published now: the same groups again compute no prefix.
	again := []*scorer.Group{tok("espresso", testDocs[:3]...), tok("rainforest", testDocs[:2]...)}
	want = costmodel.BatchFeatures(len(a.Prefix), lens(again[0]), true).Add(costmodel.BatchFeatures(len(b.Prefix), lens(again[1]), true))
	if d := cmp.Diff(want, e.CostFeatures(again)); d != "" {
		t.Errorf("CostFeatures with published prefixes (-want +got):\n%s", d)
	}
	st, _ = forwardLogits(t, e, again)
	if d := cmp.Diff(want, st.Features); d != "" {
		t.Errorf("cached pass features (-want +got):\n%s", d)
	}

	// A new query: its template is published, only the query's tokens are computed.
	c3 := tok("a third query", testDocs[:2]...)
	want = costmodel.BatchFeatures(len(c3.Prefix), lens(c3), true).Add(costmodel.ItemFeatures(tmpl, len(c3.Prefix)-tmpl))
	if d := cmp.Diff(want, e.CostFeatures([]*scorer.Group{c3})); d != "" {
		t.Errorf("CostFeatures with a published template (-want +got):\n%s", d)
	}
	st, _ = forwardLogits(t, e, []*scorer.Group{c3})
	if d := cmp.Diff(want, st.Features); d != "" {
		t.Errorf("template-extended pass features (-want +got):\n%s", d)
	}

	c := costmodel.Coeffs{A: 1e-4, B: 1e-8, C: 1e-3}
	if p := load(t, dir, Options{Cost: c}).CostPrior(); p != (scorer.CostPrior{Coeffs: c, Source: scorer.CostSourceConfig}) {
		t.Errorf("prior with Options.Cost = %+v", p)
	}
	if _, err := Load(dir, Options{Cost: costmodel.Coeffs{A: -1}}); err == nil {
		t.Error("negative Options.Cost: no error")
	}
}

// TestPairSecondsIsTheAttentionsCost: the engine's own timing of b is positive and finite, and
// of the order of the attention's arithmetic: every layer's QKᵀ and PV products for one pair on
// every head, 4·heads·head_dim FLOPs, at between 0.05 and 500 GFLOP/s.
func TestPairSecondsIsTheAttentionsCost(t *testing.T) {
	e := load(t, generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}), Options{})
	b, err := e.PairSeconds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.model.Config
	flops := 4 * float64(cfg.NumAttentionHeads*cfg.HeadDim*cfg.NumHiddenLayers)
	if !(b > flops/500e9 && b < flops/0.05e9) {
		t.Errorf("b = %g s a pair: %.3g GFLOP/s for %g FLOPs a pair", b, flops/b/1e9, flops)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.PairSeconds(ctx); err == nil {
		t.Error("a cancelled context: no error")
	}
}
