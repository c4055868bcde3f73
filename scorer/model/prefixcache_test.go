package model

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
)

// cacheGroups tokenizes two queries' batches (two distinct prefixes) for one pass.
func cacheGroups(t *testing.T, e *Engine) []*scorer.Group {
	t.Helper()
	var gs []*scorer.Group
	for _, q := range []string{"cheap espresso at home", "largest rainforest"} {
		g, err := e.Tokenize("", q, testDocs[:4], scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

func forwardLogits(t *testing.T, e *Engine, gs []*scorer.Group) (scorer.ForwardStats, [][]float32) {
	t.Helper()
	st, err := e.Forward(context.Background(), gs)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, g := range gs {
		out = append(out, g.Logits)
	}
	return st, out
}

func TestPrefixCachePublishesOnSuccess(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	reg := prometheus.NewRegistry()
	e := load(t, dir, Options{PrefixCacheBytes: 64 << 20, Registerer: reg})
	want := func() [][]float32 {
		ref := load(t, dir, Options{})
		_, l := forwardLogits(t, ref, cacheGroups(t, ref))
		return l
	}()

	gs0 := cacheGroups(t, e)
	tmpl := gs0[0].TemplateLen
	if tmpl == 0 || tmpl != gs0[1].TemplateLen {
		t.Fatalf("template lengths %d and %d: want one, > 0", tmpl, gs0[1].TemplateLen)
	}
	st, first := forwardLogits(t, e, gs0)
	// The two queries share their template (one instruction): computed once in the pass.
	if st.PrefixReused != tmpl || gs0[0].PrefixReused != 0 || gs0[1].PrefixReused != tmpl {
		t.Errorf("first pass reused %d prefix tokens (%d, %d), want the template's %d once", st.PrefixReused, gs0[0].PrefixReused, gs0[1].PrefixReused, tmpl)
	}
	gs := cacheGroups(t, e)
	st, second := forwardLogits(t, e, gs)
	if !gs[0].PrefixCached || !gs[1].PrefixCached || st.PrefixTokens != 0 || st.PrefixReused != len(gs[0].Prefix)+len(gs[1].Prefix) {
		t.Errorf("second pass: cached %v %v, stats %+v", gs[0].PrefixCached, gs[1].PrefixCached, st)
	}
	near := cmp.Comparer(func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-5*math.Max(1, math.Abs(float64(a))) })
	if d := cmp.Diff(want, first, near); d != "" {
		t.Errorf("uncached pass vs engine without cache (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, second, near); d != "" {
		t.Errorf("cached pass vs engine without cache (-want +got):\n%s", d)
	}
	// A third query of the same instruction: its prefix misses, its template hits, and only its
	// own tokens are computed; its logits are a cold engine's, bit for bit.
	third := func(e *Engine) *scorer.Group {
		g, err := e.Tokenize("", "a third query", testDocs[:3], scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g3 := third(e)
	st, got3 := forwardLogits(t, e, []*scorer.Group{g3})
	if g3.PrefixCached || g3.PrefixReused != tmpl || st.PrefixTokens != len(g3.Prefix)-tmpl || st.PrefixReused != tmpl {
		t.Errorf("third query: cached %v, reused %d, stats %+v; want the template's %d tokens reused", g3.PrefixCached, g3.PrefixReused, st, tmpl)
	}
	coldEngine := load(t, dir, Options{})
	_, want3 := forwardLogits(t, coldEngine, []*scorer.Group{third(coldEngine)})
	if d := cmp.Diff(want3, got3); d != "" {
		t.Errorf("template-extended pass vs engine without cache, bit for bit (-want +got):\n%s", d)
	}
	s, ok := e.PrefixCacheStats()
	if !ok || s.Entries != 4 || s.Hits != 2 || s.Misses != 3 || s.TemplateHits != 1 || s.TemplateMisses != 1 || s.Pending != 0 || s.Bytes <= 0 {
		t.Errorf("stats %+v, %v: want 3 prefixes and a template cached, 2 prefix hits, 3 misses, 1 template hit, 1 miss", s, ok)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP relevance_scorer_prefix_cache_hits_total Prefix lookups served from a published cache entry.
# TYPE relevance_scorer_prefix_cache_hits_total counter
relevance_scorer_prefix_cache_hits_total 2
# HELP relevance_scorer_prefix_cache_misses_total Prefix lookups that had to compute the prefix.
# TYPE relevance_scorer_prefix_cache_misses_total counter
relevance_scorer_prefix_cache_misses_total 3
# HELP relevance_scorer_prefix_cache_template_hits_total Template (template head + instruction) lookups served from a published cache entry, after the whole prefix missed.
# TYPE relevance_scorer_prefix_cache_template_hits_total counter
relevance_scorer_prefix_cache_template_hits_total 1
# HELP relevance_scorer_prefix_cache_template_misses_total Template (template head + instruction) lookups that had to compute the template.
# TYPE relevance_scorer_prefix_cache_template_misses_total counter
relevance_scorer_prefix_cache_template_misses_total 1
`), "relevance_scorer_prefix_cache_hits_total", "relevance_scorer_prefix_cache_misses_total",
		"relevance_scorer_prefix_cache_template_hits_total", "relevance_scorer_prefix_cache_template_misses_total"); err != nil {
		t.Error(err)
	}
	if probs, err := testutil.GatherAndLint(reg); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}

	// Estimates count a published prefix as free: the second pass costs less than a cold one.
	cold := load(t, dir, Options{PrefixCacheBytes: 64 << 20})
	if warm, c := e.EstimateSeconds(gs), cold.EstimateSeconds(gs); !(warm < c) {
		t.Errorf("estimate with published prefixes %v, cold %v", warm, c)
	}
	if _, ok := load(t, dir, Options{}).PrefixCacheStats(); ok {
		t.Error("PrefixCacheStats ok without a cache")
	}

	// A cache too small for one prefix holds nothing.
	small := load(t, dir, Options{PrefixCacheBytes: 1000})
	forwardLogits(t, small, cacheGroups(t, small))
	if s, _ := small.PrefixCacheStats(); s.Entries != 0 || s.Pending != 0 {
		t.Errorf("over-budget prefixes cached: %+v", s)
	}
}

// TestPrefixCacheFailedPass injects a failure (or a cancellation) in the middle of a pass, after
// the prefixes' first layers were computed, and checks that their KV is never visible to another
// epoch: not during the pass, not after; then the same batch recomputes the prefixes and gets
// the logits of an engine without a cache.
func TestPrefixCacheFailedPass(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1})
	ref := load(t, dir, Options{})
	_, want := forwardLogits(t, ref, cacheGroups(t, ref))
	errInjected := errors.New("injected failure")
	near := cmp.Comparer(func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-5*math.Max(1, math.Abs(float64(a))) })

	for _, tc := range []struct {
		name    string
		cancel  bool // cancel the pass's context instead of failing
		panics  bool // panic in the pass (a kernel bug) instead of failing
		atLayer int
		wantErr error
	}{
		{name: "failure at layer 1", atLayer: 1, wantErr: errInjected},
		{name: "failure at last layer", atLayer: -1, wantErr: errInjected},
		{name: "cancelled at layer 1", cancel: true, atLayer: 1, wantErr: context.Canceled},
		{name: "panic at layer 2", panics: true, atLayer: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := load(t, dir, Options{PrefixCacheBytes: 64 << 20})
			layer := tc.atLayer
			if layer < 0 {
				layer = len(e.model.Layers) - 1
			}
			gs := cacheGroups(t, e)
			tmpl := gs[0].TemplateLen
			keys := []prefixcache.Key{prefixcache.KeyOf(e.identity, gs[0].Prefix), prefixcache.KeyOf(e.identity, gs[1].Prefix),
				prefixcache.KeyOf(e.identity, gs[0].Prefix[:tmpl])}
			// otherEpochSees reports whether another batch would be served any of the prefixes.
			otherEpochSees := func() bool {
				ep := e.cache.Begin()
				defer ep.Abort()
				for _, k := range keys {
					if l, err := ep.Acquire(k); err != nil || l.Hit || l.Local || l.Value != nil {
						return true
					}
				}
				return false
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hooked := false
			e.model.BeforeLayer = func(l int) error {
				if l != layer {
					return nil
				}
				hooked = true
				if s, _ := e.PrefixCacheStats(); s.Pending != 3 {
					t.Errorf("at layer %d: %d pending reservations, want the pass's 3 registered (2 prefixes, their template)", l, s.Pending)
				}
				if otherEpochSees() {
					t.Errorf("at layer %d: another epoch sees the prefix being computed", l)
				}
				switch {
				case tc.cancel:
					cancel()
					return nil
				case tc.panics:
					panic(errInjected)
				}
				return errInjected
			}
			var recovered any
			err := func() error {
				defer func() { recovered = recover() }()
				_, err := e.Forward(ctx, gs)
				return err
			}()
			if tc.panics {
				if recovered != errInjected {
					t.Fatalf("Forward: recovered %v, want the injected panic", recovered)
				}
			} else if !hooked || !errors.Is(err, tc.wantErr) {
				t.Fatalf("Forward: hook ran %v, err %v, want %v", hooked, err, tc.wantErr)
			}
			if s, _ := e.PrefixCacheStats(); s.Entries != 0 || s.Pending != 0 || s.Bytes != 0 || s.Hits != 0 {
				t.Errorf("failed pass left %+v", s)
			}
			if otherEpochSees() {
				t.Error("another epoch sees the failed pass's prefix")
			}

			// The same batch again recomputes the prefixes and gets the reference logits.
			e.model.BeforeLayer = nil
			gs = cacheGroups(t, e)
			st, got := forwardLogits(t, e, gs)
			if gs[0].PrefixCached || gs[1].PrefixCached || st.PrefixTokens != len(gs[0].Prefix)+len(gs[1].Prefix)-tmpl {
				t.Errorf("retry: cached %v %v, stats %+v", gs[0].PrefixCached, gs[1].PrefixCached, st)
			}
			if d := cmp.Diff(want, got, near); d != "" {
				t.Errorf("retry after the failed pass (-want +got):\n%s", d)
			}
			if s, _ := e.PrefixCacheStats(); s.Entries != 3 || s.Pending != 0 {
				t.Errorf("after the retry %+v", s)
			}
		})
	}
}

// TestPrefixCacheSamePrefixTwiceInOnePass: two groups with one prefix in a pass compute it once
// and publish it once (and its template once).
func TestPrefixCacheSamePrefixTwiceInOnePass(t *testing.T) {
	e := load(t, generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}), Options{PrefixCacheBytes: 64 << 20})
	var gs []*scorer.Group
	for _, docs := range [][]string{testDocs[:2], testDocs[2:5]} {
		g, err := e.Tokenize("", "cheap espresso at home", docs, scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	st, _ := forwardLogits(t, e, gs)
	if st.PrefixTokens != len(gs[0].Prefix) || st.PrefixReused != len(gs[1].Prefix) {
		t.Errorf("stats %+v", st)
	}
	if s, _ := e.PrefixCacheStats(); s.Entries != 2 || s.Misses != 1 || s.TemplateMisses != 1 || s.Pending != 0 {
		t.Errorf("cache %+v: want the prefix and its template, one miss each", s)
	}
}

// TestModelIdentity: the cache key's model part follows the weights, not just the name.
func TestModelIdentity(t *testing.T) {
	a := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1})
	b := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 2})
	opt := Options{PrefixCacheBytes: 1 << 20, Name: "same-name"}
	ia, ia2, ib := load(t, a, opt).identity, load(t, a, opt).identity, load(t, b, opt).identity
	if ia != ia2 {
		t.Errorf("one checkpoint, two identities: %s, %s", ia, ia2)
	}
	if ia == ib {
		t.Errorf("checkpoints of seeds 1 and 2 share the identity %s", ia)
	}
}

// TestEstimateDuringForward: EstimateSeconds reads the cache while Forward publishes into it
// (run with -race).
func TestEstimateDuringForward(t *testing.T) {
	e := load(t, generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}), Options{PrefixCacheBytes: 64 << 20})
	gs := cacheGroups(t, e)
	cold := e.EstimateSeconds(gs)
	done := make(chan struct{})
	calls := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				calls <- n
				return
			default:
				e.EstimateSeconds(gs)
				_, _ = e.PrefixCacheStats()
				n++
			}
		}
	}()
	for range 2 {
		forwardLogits(t, e, cacheGroups(t, e))
	}
	close(done)
	if n := <-calls; n == 0 {
		t.Log("no estimate ran during the passes")
	}
	if warm := e.EstimateSeconds(gs); !(warm < cold) {
		t.Errorf("estimate after publishing %v, before %v", warm, cold)
	}
}

// TestTemplateLenIsTheSharedHead: Tokenize marks as template exactly the tokens every query of
// an instruction shares — the common token prefix of two queries' prefixes — for the default
// and a custom instruction; prompts of different instructions share only the template head.
func TestTemplateLenIsTheSharedHead(t *testing.T) {
	e := load(t, generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}), Options{})
	common := func(a, b []int32) int {
		n := 0
		for n < min(len(a), len(b)) && a[n] == b[n] {
			n++
		}
		return n
	}
	var firsts []*scorer.Group
	for _, instr := range []string{"", "Find passages that answer the query"} {
		var gs []*scorer.Group
		for _, q := range []string{"cheap espresso at home", "largest rainforest", "右三角形", " leading space"} {
			g, err := e.Tokenize(instr, q, testDocs[:2], scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if g.TemplateLen <= 0 || g.TemplateLen >= len(g.Prefix) {
				t.Fatalf("instruction %q query %q: template %d of a %d-token prefix", instr, q, g.TemplateLen, len(g.Prefix))
			}
			gs = append(gs, g)
		}
		for _, g := range gs[1:] {
			if c := common(gs[0].Prefix, g.Prefix); g.TemplateLen != gs[0].TemplateLen || c != g.TemplateLen {
				t.Errorf("instruction %q: templates of %d and %d tokens, prefixes share %d", instr, gs[0].TemplateLen, g.TemplateLen, c)
			}
		}
		firsts = append(firsts, gs[0])
	}
	if c := common(firsts[0].Prefix, firsts[1].Prefix); c >= firsts[0].TemplateLen || c >= firsts[1].TemplateLen {
		t.Errorf("two instructions' prompts share %d tokens, as many as a template (%d, %d)", c, firsts[0].TemplateLen, firsts[1].TemplateLen)
	}
}
