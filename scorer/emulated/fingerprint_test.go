package emulated

import (
	"context"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
)

// TestFingerprintChangesWithMaxTokens: two emulated nodes on the same cost profile but with
// different max_tokens cut a long document at different places and so return different logits
// for the same (query, document); their fingerprints — the proxy's score-cache key and its
// one-model-per-request pin — must therefore differ.
func TestFingerprintChangesWithMaxTokens(t *testing.T) {
	small, _ := newEngine(t, func(o *Options) { o.MaxTokens = 128 })
	large, _ := newEngine(t, func(o *Options) { o.MaxTokens = 2048 })
	doc := strings.Repeat("a long product description with many words ", 60)
	score := func(e *Engine) float32 {
		g, err := e.Tokenize("", "laptop", []string{doc}, scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
			t.Fatal(err)
		}
		return g.Logits[0]
	}
	ls, ll := score(small), score(large)
	if ls == ll {
		t.Fatalf("setup: both engines gave logit %v", ls)
	}
	if small.Info().Fingerprint == large.Info().Fingerprint {
		t.Errorf("max_tokens 128 and 2048 score the same document %v and %v, but share fingerprint %s",
			ls, ll, small.Info().Fingerprint)
	}
}
