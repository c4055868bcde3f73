package wire

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// fitting is a batch cut to what its server takes (see fit).
type fitting struct {
	send    *relevancev1.ScoreBatchRequest // the items sent, their documents cut
	sent    []int                          // per item of the batch: its index in send, -1 when not sent
	cut     []int                          // per item of the batch: document tokens cut off
	tooLong string                         // why an item was not sent
}

// counter counts prompts as a scorer node tokenizes them (loaded on first use).
var counter = sync.OnceValues(func() (*prompt.Counter, error) { return prompt.NewCounter(prompt.CountExact) })

// fit cuts req's documents to what the server takes, as a scorer node cuts its own: at the
// document's end, the template's tail kept whole, to limits.MaxItemTokens prompt tokens a pair
// (template, instruction and query included) and to options.max_tokens_per_item document tokens,
// counted with the shipped Qwen3 tokenizer (the reranker's). Under TRUNCATION_NONE a document over
// the limit is not sent: it is answered ITEM_STATUS_TOO_LONG. Without this an over-long pair
// failed the whole batch on the server (llama.cpp's 500, TEI's 413), was retried on another node,
// and reached the caller as a retryable 503. nil when nothing needs cutting.
func fit(node string, req *relevancev1.ScoreBatchRequest, limits backend.Limits) (*fitting, error) {
	perItem := int(req.GetOptions().GetMaxTokensPerItem())
	if limits.MaxItemTokens <= 0 && perItem <= 0 {
		return nil, nil
	}
	tok, err := tokenizer.Default()
	if err != nil {
		return nil, Errorf(node, codes.Internal, "tokenizer: %v", err)
	}
	c, err := counter()
	if err != nil {
		return nil, Errorf(node, codes.Internal, "%v", err)
	}
	budget, why := math.MaxInt, ""
	if limits.MaxItemTokens > 0 {
		// The proxy's Qwen3 template around the document, also for a server that renders its
		// own (template: server): a conservative bound there.
		around := c.Prefix(req.GetInstruction(), req.GetQuery()) + c.Tail()
		if budget = limits.MaxItemTokens - around; budget <= 0 {
			return nil, Errorf(node, codes.InvalidArgument, "the query, instruction and template take %d tokens, over the server's limit of %d a pair (max_item_tokens)", around, limits.MaxItemTokens)
		}
		why = fmt.Sprintf("prompt longer than the server's limit of %d tokens (max_item_tokens) and truncation is NONE", limits.MaxItemTokens)
	}
	if perItem > 0 && perItem < budget {
		budget, why = perItem, fmt.Sprintf("document longer than max_tokens_per_item (%d) and truncation is NONE", perItem)
	}
	none := req.GetOptions().GetTruncation() == relevancev1.Truncation_TRUNCATION_NONE
	n := len(req.GetItems())
	f := &fitting{sent: make([]int, n), cut: make([]int, n), tooLong: why}
	items := make([]*relevancev1.Item, 0, n)
	changed := false
	for i, it := range req.GetItems() {
		var toks []int32
		// A token is at least one byte of the normalised text: a document already in NFC of no
		// more bytes than the budget fits without being encoded (most of them, at a server
		// limit of hundreds of tokens). NFC can grow text (U+FB2C: 3 bytes, 6 after), so one
		// that is not in NFC is encoded.
		if len(it.GetText())+1 > budget || !norm.NFC.IsNormalString(it.GetText()) {
			toks = tok.EncodePlain(" " + it.GetText())
		}
		if len(toks) <= budget {
			f.sent[i] = len(items)
			items = append(items, it)
			continue
		}
		changed = true
		if none {
			f.sent[i] = -1
			continue
		}
		text, kept := cutText(tok, toks, budget)
		f.cut[i] = len(toks) - kept
		f.sent[i] = len(items)
		items = append(items, &relevancev1.Item{Id: it.GetId(), Text: text})
	}
	if !changed {
		return nil, nil
	}
	f.send = proto.CloneOf(req)
	f.send.Items = items
	return f, nil
}

// cutText is the document whose tokens (" " + document, as a prompt carries it) are toks cut to
// at most budget, and how many tokens it keeps: decoded, a character cut in two dropped, and
// shortened a token more while its encoding comes out longer than budget.
func cutText(tok *tokenizer.Tokenizer, toks []int32, budget int) (string, int) {
	for keep := budget; keep > 0; keep-- {
		b := tok.DecodeBytes(toks[:keep])
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
		s := strings.TrimPrefix(string(b), " ")
		if n := len(tok.EncodePlain(" " + s)); n <= budget {
			return s, n
		}
	}
	return "", 0
}

// reply makes resp, the reply to the items sent, the batch's: scores in its item order, a cut
// document marked TRUNCATED with the tokens cut (and counted in the usage, as a scorer node
// counts them), one not sent TOO_LONG.
func (f *fitting) reply(req *relevancev1.ScoreBatchRequest, resp *relevancev1.ScoreBatchResponse) {
	sent := resp.GetScores()
	out := make([]*relevancev1.ItemScore, len(req.GetItems()))
	var truncated uint64
	for i, it := range req.GetItems() {
		j := f.sent[i]
		if j < 0 {
			out[i] = &relevancev1.ItemScore{Index: uint32(i), Id: it.GetId(), Status: relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, Error: f.tooLong}
			continue
		}
		s := sent[j]
		s.Index, s.Id = uint32(i), it.GetId()
		if f.cut[i] > 0 {
			s.Status, s.TruncatedTokens = relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED, uint32(f.cut[i])
			truncated += uint64(f.cut[i])
		}
		out[i] = s
	}
	resp.Scores = out
	if truncated > 0 {
		if resp.Usage == nil {
			resp.Usage = &relevancev1.Usage{}
		}
		resp.Usage.TokensTruncated += truncated
	}
}
