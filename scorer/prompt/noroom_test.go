package prompt

import (
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
)

// TestQueryLeavingNoDocumentTokenIsRefused: a query whose prompt (template head, instruction,
// query, "<Document>:" and the template tail) takes exactly the prompt limit leaves no room for
// a single document token. The package promises an error for a query "whose prompt leaves no
// room for a document"; instead every document was cut to nothing and scored on the query alone
// — all items the same score, status TRUNCATED.
func TestQueryLeavingNoDocumentTokenIsRefused(t *testing.T) {
	tok := defaultTok(t)
	const q = "what is the capital of france"
	docs := []string{"Paris is the capital of France.", "Berlin is in Germany."}
	free := New(tok, 0)
	g, err := free.Build("", q, docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limit := len(g.Prefix) + len(free.tail) // the prompt without any document token

	// One token more: each document keeps one token (the limit works as before).
	if g, err := New(tok, limit+1).Build("", q, docs, scorer.TokenizeOptions{}); err != nil {
		t.Fatalf("limit %d (room for one document token): %v", limit+1, err)
	} else if len(g.Items[0]) != len(free.tail)+1 {
		t.Fatalf("limit %d: item of %d tokens, want one document token and the tail", limit+1, len(g.Items[0]))
	}

	for _, opt := range []scorer.TokenizeOptions{{}, {NoTruncate: true}} {
		g, err := New(tok, limit).Build("", q, docs, opt)
		if err == nil {
			t.Fatalf("limit %d, %+v: no error; items %v truncated %v too long %v — every document cut to nothing",
				limit, opt, g.Items, g.Truncated, g.TooLong)
		}
		if !strings.Contains(err.Error(), "no room for a document") {
			t.Errorf("limit %d, %+v: err %v, want one saying there is no room for a document", limit, opt, err)
		}
	}
}
