package prompt

import (
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/tokenizer"
)

// TestEstimateLongPunctuationAndBlankLineRuns: EstimateTokens prices a run of ASCII punctuation,
// and a run of white space after a line break, as one feature unit whatever its length; BPE does
// not (Qwen3 has tokens for at most a few punctuation bytes or one blank line). The estimate
// counter counts such runs exactly, so that dot leaders, ASCII art or padded items are not priced
// as nearly free.
func TestEstimateLongPunctuationAndBlankLineRuns(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCounter(CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"dot leaders":          "Contents" + strings.Repeat(".", 3000) + "1",
		"punctuation noise":    strings.Repeat("!@#$%^&*()", 300),
		"blank indented lines": "def f():" + strings.Repeat("\n    ", 1000) + "return 1",
		"control bytes":        strings.Repeat("\x01\x02\x03", 1000),
	} {
		exact := len(tok.EncodePlain(" " + text))
		got := c.Item(text) - c.Tail()
		if r := float64(got) / float64(exact); r < 0.5 {
			t.Errorf("%s: %d tokens counted, %d exact (ratio %.3f)", name, got, exact, r)
		}
	}
}
