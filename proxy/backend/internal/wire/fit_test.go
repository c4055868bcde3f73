package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// TestFitCutsDocumentsAndNamesTheLimit: fit leaves a batch that fits alone; cuts a long document
// to the tighter of the server's pair limit and max_tokens_per_item, at a character boundary,
// to a prefix of the document that re-encodes within the budget; and under TRUNCATION_NONE names
// the limit that refused the document.
func TestFitCutsDocumentsAndNamesTheLimit(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("北京是中国的首都 and a long English sentence, ", 200)
	batch := func(opts *relevancev1.ScoreOptions, texts ...string) *relevancev1.ScoreBatchRequest {
		req := &relevancev1.ScoreBatchRequest{Query: "capital", Options: opts}
		for _, s := range texts {
			req.Items = append(req.Items, &relevancev1.Item{Text: s})
		}
		return req
	}
	if f, err := fit("n", batch(nil, "short", "also short"), backend.Limits{MaxItemTokens: 512}); f != nil || err != nil {
		t.Errorf("a batch that fits: %+v, %v; want it left alone", f, err)
	}
	for _, c := range []struct {
		name   string
		limits backend.Limits
		opts   *relevancev1.ScoreOptions
		budget int
	}{
		{"the server's limit", backend.Limits{MaxItemTokens: 300}, nil, 0},
		{"max_tokens_per_item", backend.Limits{MaxItemTokens: 8192}, &relevancev1.ScoreOptions{MaxTokensPerItem: 37}, 37},
	} {
		f, err := fit("n", batch(c.opts, "short", long), c.limits)
		if err != nil || f == nil {
			t.Fatalf("%s: %+v, %v", c.name, f, err)
		}
		cut := f.send.GetItems()[1].GetText()
		n := len(tok.EncodePlain(" " + cut))
		if !strings.HasPrefix(long, cut) || !utf8.ValidString(cut) || f.cut[1] == 0 || f.send.GetItems()[0].GetText() != "short" {
			t.Errorf("%s: cut to %q (%d tokens, %d cut)", c.name, cut, n, f.cut[1])
		}
		if c.budget > 0 && n > c.budget {
			t.Errorf("%s: %d tokens sent, over %d", c.name, n, c.budget)
		}
		none := &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE, MaxTokensPerItem: c.opts.GetMaxTokensPerItem()}
		f, _ = fit("n", batch(none, "short", long), c.limits)
		if f == nil || f.sent[1] != -1 || len(f.send.GetItems()) != 1 {
			t.Fatalf("%s under NONE: %+v, want the long document not sent", c.name, f)
		}
		want := "max_item_tokens"
		if c.budget > 0 {
			want = "max_tokens_per_item (37)"
		}
		if !strings.Contains(f.tooLong, want) {
			t.Errorf("%s under NONE: %q, want it to name %s", c.name, f.tooLong, want)
		}
	}
}
