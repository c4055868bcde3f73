package prompt

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
)

// TestPromptMatchesTheModelCardRecipe pins whole prompts, truncation included, to the ids of the
// Qwen3-Reranker model card's transformers example (format_instruction + process_inputs):
// prefix_tokens + tokenizer(body, truncation="longest_first", max_length=max_length -
// len(prefix_tokens) - len(suffix_tokens)) + suffix_tokens, made with Hugging Face tokenizers
// 0.23.2 by testdata/official.js. TestPrefixPlusItemEqualsWhole checks the builder against
// itself and the tokenizer fixtures check single strings; this checks the composition (the
// template's exact ids, the body's framing, the default instruction, the document cut at the
// body's end with the suffix kept whole) against the reference. User strings here hold no
// added-token text, where the two differ by design (EncodePlain).
func TestPromptMatchesTheModelCardRecipe(t *testing.T) {
	f, err := os.Open("testdata/official.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tok := defaultTok(t)
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	n, cut := 0, 0
	for sc.Scan() {
		var c struct {
			I, Q, D string
			Max     int
			Cut     bool
			IDs     []int32
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		n++
		g, err := New(tok, c.Max).Build(c.I, c.Q, []string{c.D}, scorer.TokenizeOptions{})
		if err != nil {
			t.Errorf("case %d (%q, %q): %v", n, c.Q, c.D, err)
			continue
		}
		if got := slices.Concat(g.Prefix, g.Items[0]); !slices.Equal(got, c.IDs) {
			t.Errorf("case %d (instruction %q, query %q, doc %q, max %d):\n got %v\nwant %v", n, c.I, c.Q, c.D, c.Max, got, c.IDs)
		}
		if (g.Truncated[0] > 0) != c.Cut {
			t.Errorf("case %d: truncated %d tokens, the reference cut: %v", n, g.Truncated[0], c.Cut)
		}
		if c.Cut {
			cut++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 40 || cut == 0 {
		t.Fatalf("%d cases, %d cut: the fixture is not the one testdata/official.js writes", n, cut)
	}
}
