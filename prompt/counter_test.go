package prompt

import (
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/tokenizer"
)

// TestEstimateCounterSkipsTokenizer: the estimate counter must not load the BPE tokenizer (it
// costs start-up time and memory for nothing); the exact one must.
func TestEstimateCounterSkipsTokenizer(t *testing.T) {
	loads := 0
	orig := loadTokenizer
	loadTokenizer = func() (*tokenizer.Tokenizer, error) { loads++; return orig() }
	defer func() { loadTokenizer = orig }()
	if _, err := NewCounter(CountEstimate); err != nil {
		t.Fatal(err)
	}
	if loads != 0 {
		t.Errorf("estimate counter loaded the tokenizer %d times, want 0", loads)
	}
	if _, err := NewCounter(CountExact); err != nil {
		t.Fatal(err)
	}
	if loads != 1 {
		t.Errorf("exact counter loaded the tokenizer %d times, want 1", loads)
	}
}

// TestEstimateTemplateNearExact: without the tokenizer, the template's head and tail are still
// estimated within the estimator's own accuracy on prose (markers are exact; the tail, paid by
// every item, must be within 2 tokens).
func TestEstimateTemplateNearExact(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, text string }{{"head", HeadText}, {"tail", TailText}} {
		exact, est := len(tok.Encode(tc.text)), estimateTemplate(tc.text)
		tol := max(2, exact*15/100)
		if d := est - exact; d < -tol || d > tol {
			t.Errorf("%s: estimate %d tokens, exact %d: off by more than %d", tc.name, est, exact, tol)
		} else {
			t.Logf("%s: estimate %d, exact %d", tc.name, est, exact)
		}
	}
}

// TestEstimateCountsLongRunsExactly: the estimate counter counts runs of 16 or more word
// characters (base64, hashes, identifiers) exactly, where tokenizer.EstimateTokens alone reads a
// quarter to a half of their tokens; prose without such runs is the estimator's own count.
func TestEstimateCountsLongRunsExactly(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCounter(CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	prose := "Wireless noise cancelling headphones, 30 h battery, foldable, with a hard case and USB-C charging."
	if got, want := c.Item(prose)-c.Tail(), tokenizer.EstimateTokens(prose); got != want {
		t.Errorf("prose: %d, want the estimator's %d", got, want)
	}
	b64 := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	for _, text := range []string{
		prose + ` <img src="data:image/png;base64,` + strings.Repeat(b64, 12) + `">`,
		"sku " + strings.Repeat("qzkxwvbnmtrplkjh", 20) + " and a0f3c9d2e8b7a6f5c4d3e2f1a0b9c8d7e6f5a4b3",
	} {
		exact := len(tok.EncodePlain(" " + text))
		got := c.Item(text) - c.Tail()
		if r := float64(got) / float64(exact); r < 0.9 || r > 1.1 {
			t.Errorf("%.40q…: %d tokens counted, %d exact (ratio %.2f; the estimator alone %d)", text, got, exact, r, tokenizer.EstimateTokens(text))
		}
	}
}
