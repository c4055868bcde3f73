package emulated

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// fakeSleep records requested durations and returns at once (or ctx's error when done, or err).
type fakeSleep struct {
	slept []time.Duration
	err   error
}

func (f *fakeSleep) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.err != nil {
		return f.err
	}
	f.slept = append(f.slept, d)
	return nil
}

var testProfile = costmodel.Profile{Coeffs: costmodel.Coeffs{A: 1e-4, B: 1e-7, C: 2e-3}}

func newEngine(t testing.TB, mod func(*Options)) (*Engine, *fakeSleep) {
	t.Helper()
	fs := &fakeSleep{}
	p := testProfile
	opt := Options{Profile: &p, Sleep: fs.sleep, Seed: 1}
	if mod != nil {
		mod(&opt)
	}
	e, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e, fs
}

func tokenize(t testing.TB, e *Engine, query string, docs ...string) *scorer.Group {
	t.Helper()
	g, err := e.Tokenize("", query, docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatalf("Tokenize: %v", err)
	}
	return g
}

func predicted(g []*scorer.Group, cached []bool) float64 {
	var f costmodel.Features
	for i, gr := range g {
		f = f.Add(costmodel.BatchFeatures(len(gr.Prefix), gr.ItemLens(), cached[i]))
	}
	return testProfile.Seconds(f)
}

// templateReused is the work of a group that reused only its template: its items and batch
// against the whole prefix, plus the query's tokens computed after the template.
func templateReused(g *scorer.Group) costmodel.Features {
	return costmodel.BatchFeatures(len(g.Prefix), g.ItemLens(), true).Add(costmodel.ItemFeatures(g.TemplateLen, len(g.Prefix)-g.TemplateLen))
}

func TestNewValidates(t *testing.T) {
	bad := costmodel.Profile{Coeffs: costmodel.Coeffs{A: -1}}
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"no profile", Options{}, "cost profile is required"},
		{"bad profile", Options{Profile: &bad}, "cost coefficient a"},
		{"negative cache", Options{Profile: &testProfile, PrefixCacheBytes: -1}, "prefix_cache_bytes"},
		{"negative max tokens", Options{Profile: &testProfile, MaxTokens: -2}, "max_tokens"},
	}
	for _, tt := range tests {
		if _, err := New(tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestForwardSleepsForPredictedTime(t *testing.T) {
	e, fs := newEngine(t, nil)
	g1 := tokenize(t, e, "red shoes", "Red running shoes, size 42, breathable mesh.", "A blue kettle, 1.7 l.")
	g2 := tokenize(t, e, "kettle", "Stainless kettle with a whistle.")
	groups := []*scorer.Group{g1, g2}
	est := e.EstimateSeconds(groups)
	st, err := e.Forward(context.Background(), groups)
	if err != nil {
		t.Fatalf("Forward: %v", err)
	}
	// One instruction: g2's template is g1's, computed once in the pass (no cache needed).
	if g2.TemplateLen == 0 || g2.TemplateLen != g1.TemplateLen {
		t.Fatalf("template lengths %d and %d, want one, > 0", g1.TemplateLen, g2.TemplateLen)
	}
	wantF := costmodel.BatchFeatures(len(g1.Prefix), g1.ItemLens(), false).Add(templateReused(g2))
	want := testProfile.Seconds(wantF)
	if math.Abs(est-want) > 1e-12 {
		t.Errorf("EstimateSeconds = %v, want %v", est, want)
	}
	if len(fs.slept) != 1 || math.Abs(fs.slept[0].Seconds()-want) > 1e-6 {
		t.Errorf("slept %v, want one sleep of %vs", fs.slept, want)
	}
	if st.Duration != fs.slept[0] {
		t.Errorf("stats duration %v, want %v", st.Duration, fs.slept[0])
	}
	wantStats := scorer.ForwardStats{
		Duration:     st.Duration,
		PrefixTokens: len(g1.Prefix) + len(g2.Prefix) - g2.TemplateLen,
		PrefixReused: g2.TemplateLen,
		ItemTokens:   g1.ItemTokens() + g2.ItemTokens(),
		Features:     wantF,
	}
	if diff := cmp.Diff(wantStats, st); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if g1.PrefixReused != 0 || g2.PrefixReused != g2.TemplateLen || g1.PrefixCached || g2.PrefixCached {
		t.Errorf("groups reused %d and %d (cached %v %v), want 0 and the template's %d", g1.PrefixReused, g2.PrefixReused, g1.PrefixCached, g2.PrefixCached, g2.TemplateLen)
	}
	if e.Info().Architecture != "emulated" || !e.Info().Emulated {
		t.Errorf("Info = %+v, want emulated", e.Info())
	}
}

func TestLogitsDeterministic(t *testing.T) {
	e, _ := newEngine(t, nil)
	docs := []string{"Red running shoes", "A blue kettle", "Red running shoes"}
	run := func() []float32 {
		g := tokenize(t, e, "red shoes", docs...)
		if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
			t.Fatal(err)
		}
		return g.Logits
	}
	a, b := run(), run()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("logits differ between runs (-first +second):\n%s", diff)
	}
	if a[0] != a[2] {
		t.Errorf("same document got %v and %v", a[0], a[2])
	}
	if a[0] == a[1] {
		t.Errorf("different documents got the same logit %v", a[0])
	}
	// Spread: many documents cover both signs with |logit| < 12.
	pos, neg := 0, 0
	for i := 0; i < 200; i++ {
		l := PseudoLogit([]int32{1, 2}, []int32{int32(i)})
		if math.Abs(float64(l)) >= 12 {
			t.Fatalf("logit %v out of range", l)
		}
		if l > 0 {
			pos++
		} else {
			neg++
		}
	}
	if pos < 50 || neg < 50 {
		t.Errorf("logits not spread: %d positive, %d negative", pos, neg)
	}
}

func TestPrefixReuse(t *testing.T) {
	e, fs := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	docs := []string{"Red running shoes, size 42", "Leather boots"}

	// Same query twice in one pass: the prefix is computed once.
	a, b := tokenize(t, e, "red shoes", docs...), tokenize(t, e, "red shoes", docs...)
	st, err := e.Forward(context.Background(), []*scorer.Group{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if st.PrefixTokens != len(a.Prefix) || st.PrefixReused != len(a.Prefix) {
		t.Errorf("one pass: prefix computed %d reused %d, want %d and %d", st.PrefixTokens, st.PrefixReused, len(a.Prefix), len(a.Prefix))
	}
	if want := predicted([]*scorer.Group{a, b}, []bool{false, true}); math.Abs(fs.slept[0].Seconds()-want) > 1e-6 {
		t.Errorf("slept %v, want %vs", fs.slept[0], want)
	}
	if a.PrefixCached || b.PrefixCached {
		t.Error("PrefixCached set within the first pass")
	}

	// Next pass: published, so a cache hit.
	c := tokenize(t, e, "red shoes", docs...)
	if got, want := e.EstimateSeconds([]*scorer.Group{c}), predicted([]*scorer.Group{c}, []bool{true}); math.Abs(got-want) > 1e-12 {
		t.Errorf("estimate after publish = %v, want %v", got, want)
	}
	st, err = e.Forward(context.Background(), []*scorer.Group{c})
	if err != nil {
		t.Fatal(err)
	}
	if !c.PrefixCached || st.PrefixReused != len(c.Prefix) || st.PrefixTokens != 0 {
		t.Errorf("second pass: cached=%v stats=%+v, want a cache hit", c.PrefixCached, st)
	}
	// Entries: the prefix and its template, published by the first pass.
	if s, ok := e.PrefixCacheStats(); !ok || s.Hits != 1 || s.Entries != 2 || s.TemplateMisses != 1 || s.TemplateHits != 0 {
		t.Errorf("cache stats = %+v %v, want 1 hit, 1 template miss, 2 entries", s, ok)
	}
}

func TestCancelledPassPublishesNothing(t *testing.T) {
	e, fs := newEngine(t, func(o *Options) { o.PrefixCacheBytes = 1 << 30 })
	fs.err = context.Canceled
	g := tokenize(t, e, "red shoes", "Red running shoes")
	if _, err := e.Forward(context.Background(), []*scorer.Group{g}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward err = %v, want context.Canceled", err)
	}
	fs.err = nil
	g2 := tokenize(t, e, "red shoes", "Red running shoes")
	if _, err := e.Forward(context.Background(), []*scorer.Group{g2}); err != nil {
		t.Fatal(err)
	}
	if g2.PrefixCached {
		t.Error("prefix of a cancelled pass was served from the cache")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Forward(ctx, []*scorer.Group{g2}); !errors.Is(err, context.Canceled) {
		t.Errorf("Forward with done ctx err = %v", err)
	}
}

func TestNoiseSeeded(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		e, fs := newEngine(t, func(o *Options) {
			p := testProfile
			p.NoiseSigma = 0.3
			o.Profile, o.Seed = &p, seed
		})
		for i := 0; i < 5; i++ {
			g := tokenize(t, e, "q", "document text")
			if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
				t.Fatal(err)
			}
		}
		return fs.slept
	}
	a, b, c := draws(7), draws(7), draws(8)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different sleeps:\n%s", diff)
	}
	if cmp.Equal(a, c) {
		t.Error("different seeds gave the same sleeps")
	}
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		distinct[d] = true
	}
	if len(distinct) < 2 {
		t.Errorf("noise had no effect: %v", a)
	}
}

func TestTokenizeIsThePromptBuilder(t *testing.T) {
	e, _ := newEngine(t, func(o *Options) { o.MaxTokens = 160 })
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	b := prompt.New(tok, 160)
	long := strings.Repeat("word ", 300)
	tests := []struct {
		name    string
		opt     scorer.TokenizeOptions
		doc     string
		tooLong bool
	}{
		{"short", scorer.TokenizeOptions{}, "Red running shoes, size 42", false},
		{"cut", scorer.TokenizeOptions{}, long, false},
		{"refused", scorer.TokenizeOptions{NoTruncate: true}, long, true},
		{"doc cap", scorer.TokenizeOptions{MaxDocTokens: 3}, "Red running shoes with laces", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.Tokenize("", "shoes", []string{tt.doc}, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := b.Build("", "shoes", []string{tt.doc}, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			// The template is marked on top of the builder's group (see
			// TestTokenizeMarksTheRealEnginesTemplate).
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(scorer.Group{}, "TemplateLen")); diff != "" {
				t.Errorf("group (-prompt +emulated):\n%s", diff)
			}
			if got.TooLong[0] != tt.tooLong {
				t.Errorf("TooLong = %v, want %v", got.TooLong[0], tt.tooLong)
			}
		})
	}
	if e.Info().MaxTokens != 160 {
		t.Errorf("Info().MaxTokens = %d, want 160", e.Info().MaxTokens)
	}
}

// BenchmarkTokenize is the caller-side cost of one batch on an emulated (or real) node: 16
// product-like documents of about 600 bytes through the real prompt builder.
func BenchmarkTokenize(b *testing.B) {
	e, _ := newEngine(b, nil)
	docs := make([]string, 16)
	for i := range docs {
		docs[i] = strings.Repeat("product "+strconv.Itoa(i)+" with attributes, colour red, size 42. ", 12)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.Tokenize("", "red running shoes", docs, scorer.TokenizeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
