package fakenode

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// TestCostPriorFitsTheLatency: the node starts from the scripted cost, so that its deadline check
// and reported load agree with what its passes take; a latency function is fitted.
func TestCostPriorFitsTheLatency(t *testing.T) {
	truth := costmodel.Coeffs{A: 4e-6, B: 5e-9, C: 1e-3}
	for _, tc := range []struct {
		name string
		opts Options
		want costmodel.Coeffs
	}{
		{"coeffs", Options{Coeffs: truth}, truth},
		{"constant latency", Options{Latency: func(Batch) time.Duration { return 300 * time.Millisecond }}, costmodel.Coeffs{C: 0.3}},
		{"formula as latency", Options{Latency: func(b Batch) time.Duration {
			return secondsToDuration(truth.Seconds(costmodel.BatchFeatures(b.PrefixTokens, b.ItemTokens, false)))
		}}, truth},
		{"zero latency", Options{Latency: func(Batch) time.Duration { return 0 }, Coeffs: truth}, costmodel.Coeffs{}},
	} {
		p := NewScriptedEngine(tc.opts).CostPrior()
		got := p.Coeffs
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"a", got.A, tc.want.A}, {"b", got.B, tc.want.B}, {"c", got.C, tc.want.C}} {
			if math.Abs(c.got-c.want) > 1e-3*c.want+1e-15 {
				t.Errorf("%s: %s = %g, want %g", tc.name, c.name, c.got, c.want)
			}
		}
		if p.Source != scorer.CostSourceConfig {
			t.Errorf("%s: source %q", tc.name, p.Source)
		}
	}
}

// TestMergedPass: a pass over several groups takes the sum of their times on a serial node, the
// longest with Parallel; each group is scored by the model that tokenized it.
func TestMergedPass(t *testing.T) {
	lat := func(b Batch) time.Duration { return time.Duration(len(b.ItemTokens)) * 10 * time.Millisecond }
	for _, tc := range []struct {
		parallel bool
		want     time.Duration
	}{{false, 30 * time.Millisecond}, {true, 20 * time.Millisecond}} {
		e := NewScriptedEngine(Options{Latency: lat, Parallel: tc.parallel})
		b := e.WithModel("fp", 0.25)
		g1, _ := e.Tokenize("", "q", []string{"a"}, scorer.TokenizeOptions{})
		g2, _ := b.Tokenize("", "q", []string{"b", "c"}, scorer.TokenizeOptions{})
		st, err := e.Forward(context.Background(), []*scorer.Group{g1, g2}) // the loaded engine runs b's groups too
		if err != nil {
			t.Fatal(err)
		}
		if st.Duration != tc.want {
			t.Errorf("parallel %v: pass of 10ms and 20ms took %v, want %v", tc.parallel, st.Duration, tc.want)
		}
		if got := sigmoid(g1.Logits[0]); got != Score("q", "a") {
			t.Errorf("score %v, want %v", got, Score("q", "a"))
		}
		if got, want := sigmoid(g2.Logits[1]), min(Score("q", "c")+0.25, 1-1e-6); math.Abs(float64(got-want)) > 1e-5 {
			t.Errorf("shifted score %v, want %v", got, want)
		}
		if b.Batches() != 2 || b.Items() != 3 || b.Info().Fingerprint != "fp" || e.Info().Fingerprint != "" {
			t.Errorf("batches %d items %d fingerprints %q %q", b.Batches(), b.Items(), b.Info().Fingerprint, e.Info().Fingerprint)
		}
	}
}
