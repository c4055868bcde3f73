package wire

import (
	"strings"
	"testing"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// TestFitEncodesDocumentsThatNFCExpands: fit skips encoding a document of at most budget-1 bytes
// ("a token is at least one byte"). A
// token is at least one byte of the *NFC-normalized* text, and NFC can grow text: U+FB2C (3
// bytes) is U+05E9 U+05BC U+05C1 (6 bytes). HF (tokenizers 0.23.2) gives " "+100×U+FB2C 500 ids
// for its 301 bytes, so a document over max_tokens_per_item goes out uncut / not refused.
func TestFitEncodesDocumentsThatNFCExpands(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Repeat("\ufb2c", 100) // 300 bytes
	n := len(tok.EncodePlain(" " + doc))
	const perItem = 400
	if n <= perItem || len(doc)+1 > perItem {
		t.Fatalf("precondition: %d bytes, %d tokens, budget %d", len(doc), n, perItem)
	}
	req := &relevancev1.ScoreBatchRequest{Query: "q",
		Options: &relevancev1.ScoreOptions{MaxTokensPerItem: perItem, Truncation: relevancev1.Truncation_TRUNCATION_NONE},
		Items:   []*relevancev1.Item{{Text: doc}}}
	f, err := fit("n", req, backend.Limits{MaxItemTokens: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if f == nil || f.sent[0] != -1 {
		t.Errorf("document of %d tokens (budget %d) sent as is (fitting %+v); want TOO_LONG", n, perItem, f)
	}
}
