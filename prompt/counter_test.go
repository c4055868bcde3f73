package prompt

import (
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
