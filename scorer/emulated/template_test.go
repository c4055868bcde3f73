package emulated

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
)

// TestTokenizeMarksTheRealEnginesTemplate: the emulated Tokenize gives the real engine's group,
// TemplateLen included, for the default, a custom and a CJK instruction and queries whose first
// word BPE joins to the space before it, so both reuse the same tokens.
func TestTokenizeMarksTheRealEnginesTemplate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate(dir, model.GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	real, err := model.Load(dir, model.Options{MaxTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	emu, _ := newEngine(t, func(o *Options) { o.MaxTokens = 512 })
	docs := []string{"Red running shoes, size 42", "东京タワーは赤と白の塔です。"}
	for _, instr := range []string{"", "Find listings that match the query", "找到与查询相关的商品"} {
		for _, q := range []string{"red shoes", "a", " leading space", "右三角形", "size:42"} {
			want, err := real.Tokenize(instr, q, docs, scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := emu.Tokenize(instr, q, docs, scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want.TemplateLen <= 0 {
				t.Fatalf("instruction %q query %q: the real engine marks no template", instr, q)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("instruction %q query %q: group (-real +emulated):\n%s", instr, q, d)
			}
		}
	}
}

// TestNewQueryReusesTheTemplate: a query seen for the first time after another query of the
// same instruction computes only its own tokens. It sleeps less than on a cold engine by exactly
// the template's prefix work (the formula's A·t + B·t²/2), reports the template as reused
// (stats, group, cache counters) and estimates what it then sleeps.
func TestNewQueryReusesTheTemplate(t *testing.T) {
	docs := []string{"Red running shoes, size 42", "Leather boots"}
	cold, coldSleep := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	gc := tokenize(t, cold, "blue kettle", docs...)
	if _, err := cold.Forward(context.Background(), []*scorer.Group{gc}); err != nil {
		t.Fatal(err)
	}

	warm, warmSleep := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	if _, err := warm.Forward(context.Background(), []*scorer.Group{tokenize(t, warm, "red shoes", docs...)}); err != nil {
		t.Fatal(err)
	}
	g := tokenize(t, warm, "blue kettle", docs...)
	tl := g.TemplateLen
	if tl <= 0 || tl >= len(g.Prefix) {
		t.Fatalf("template %d of a %d-token prefix", tl, len(g.Prefix))
	}
	est := warm.EstimateSeconds([]*scorer.Group{g})
	st, err := warm.Forward(context.Background(), []*scorer.Group{g})
	if err != nil {
		t.Fatal(err)
	}

	saved := coldSleep.slept[0].Seconds() - warmSleep.slept[1].Seconds()
	if want := testProfile.Seconds(costmodel.PrefixFeatures(tl)); math.Abs(saved-want) > 1e-6 {
		t.Errorf("a template hit saved %.6fs, want the template's %.6fs (cold %v, warm %v)", saved, want, coldSleep.slept[0], warmSleep.slept[1])
	}
	if want := warmSleep.slept[1].Seconds(); math.Abs(est-want) > 1e-6 {
		t.Errorf("EstimateSeconds before the pass = %.6f, slept %.6f", est, want)
	}
	wantStats := scorer.ForwardStats{Duration: st.Duration, PrefixTokens: len(g.Prefix) - tl, PrefixReused: tl,
		ItemTokens: g.ItemTokens(), Features: templateReused(g)}
	if d := cmp.Diff(wantStats, st); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
	if g.PrefixReused != tl || g.PrefixCached {
		t.Errorf("group reused %d (cached %v), want the template's %d, not cached", g.PrefixReused, g.PrefixCached, tl)
	}
	if s, _ := warm.PrefixCacheStats(); s.Hits != 0 || s.Misses != 2 || s.TemplateHits != 1 || s.TemplateMisses != 1 || s.Entries != 3 {
		t.Errorf("cache stats %+v: want 2 prefix misses, 1 template miss then 1 hit, 3 entries", s)
	}
}

// TestTemplateSharedWithinOnePass: two new queries of one instruction in one pass compute the
// template once, the second group reusing the first's; the template is reserved and counted once
// and published with the pass, for the next pass's new query to hit.
func TestTemplateSharedWithinOnePass(t *testing.T) {
	e, fs := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	a, b := tokenize(t, e, "red shoes", "Leather boots"), tokenize(t, e, "blue kettle", "Stainless kettle")
	st, err := e.Forward(context.Background(), []*scorer.Group{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if a.PrefixReused != 0 || b.PrefixReused != b.TemplateLen || st.PrefixReused != b.TemplateLen {
		t.Errorf("reused %d and %d (pass %d), want 0 and the template's %d", a.PrefixReused, b.PrefixReused, st.PrefixReused, b.TemplateLen)
	}
	want := testProfile.Seconds(costmodel.BatchFeatures(len(a.Prefix), a.ItemLens(), false).Add(templateReused(b)))
	if got := fs.slept[0].Seconds(); math.Abs(got-want) > 1e-6 {
		t.Errorf("slept %.6fs, want %.6fs", got, want)
	}
	if s, _ := e.PrefixCacheStats(); s.TemplateMisses != 1 || s.TemplateHits != 0 || s.Entries != 3 {
		t.Errorf("cache stats %+v: want the template looked up once, 3 entries (2 prefixes, 1 template)", s)
	}
	c := tokenize(t, e, "green tea", "Sencha, 100 g")
	if _, err := e.Forward(context.Background(), []*scorer.Group{c}); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.PrefixCacheStats(); c.PrefixReused != c.TemplateLen || s.TemplateHits != 1 {
		t.Errorf("next pass: reused %d, template hits %d; want the template's %d and 1 hit", c.PrefixReused, s.TemplateHits, c.TemplateLen)
	}
}

// TestCancelledPassPublishesNoTemplate: a pass that ends with its context publishes neither the
// prefix nor the template it computed: the next query of the instruction computes its whole
// prefix and sleeps what a cold engine sleeps.
func TestCancelledPassPublishesNoTemplate(t *testing.T) {
	e, fs := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	fs.err = context.Canceled
	if _, err := e.Forward(context.Background(), []*scorer.Group{tokenize(t, e, "red shoes", "Leather boots")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward err = %v, want context.Canceled", err)
	}
	fs.err = nil
	g := tokenize(t, e, "blue kettle", "Leather boots")
	st, err := e.Forward(context.Background(), []*scorer.Group{g})
	if err != nil {
		t.Fatal(err)
	}
	if g.PrefixReused != 0 || st.PrefixReused != 0 || st.PrefixTokens != len(g.Prefix) {
		t.Errorf("after a cancelled pass: reused %d (stats %+v), want the whole prefix computed", g.PrefixReused, st)
	}
	if want := predicted([]*scorer.Group{g}, []bool{false}); math.Abs(fs.slept[0].Seconds()-want) > 1e-6 {
		t.Errorf("slept %v, want the cold %.6fs", fs.slept[0], want)
	}
	if s, _ := e.PrefixCacheStats(); s.TemplateHits != 0 || s.Pending != 0 || s.Entries != 2 {
		t.Errorf("cache stats %+v: want no template hit, nothing pending, only the second pass's 2 entries", s)
	}
}

// TestReplayTemplateHitCostsTheQueryTokensOnly: in samples mode a pass whose template is
// published is replayed near the work it does, the query's tokens and the items: far below the
// same pass cold, and not below the same pass with its whole prefix cached.
func TestReplayTemplateHitCostsTheQueryTokensOnly(t *testing.T) {
	prof := powerLawProfile(t)
	var cold, tmpl, whole []float64
	for seed := range uint64(15) {
		fs := &fakeSleep{}
		e, err := New(Options{Profile: prof, Tokenize: shapeTokenize, Sleep: fs.sleep, Seed: seed, PrefixCacheBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		run := func(p string) *scorer.Group {
			// shapeTokenize's prefixes are zeros: "200" and "201" share their first 190 tokens.
			g, err := e.Tokenize("", p, docs(1, 16), scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			g.TemplateLen = 190
			if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
				t.Fatal(err)
			}
			return g
		}
		run("200") // cold: publishes the prefix and the template
		if g := run("201"); g.PrefixReused != 190 {
			t.Fatalf("second pass reused %d tokens, want the template's 190", g.PrefixReused)
		}
		run("200") // whole prefix cached
		cold, tmpl, whole = append(cold, fs.slept[0].Seconds()), append(tmpl, fs.slept[1].Seconds()), append(whole, fs.slept[2].Seconds())
	}
	c, tm, w := median(cold), median(tmpl), median(whole)
	if !(tm < c/2) || tm < 0.9*w {
		t.Errorf("medians: cold %.4fs, template hit %.4fs, whole prefix cached %.4fs; want the template hit below half the cold pass and not below the cached one", c, tm, w)
	}
}
