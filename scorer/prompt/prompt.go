// Package prompt builds the Qwen3-Reranker prompt of a (query, documents) batch as token ids,
// split into the shared prefix and each document's own tokens:
//
//	<|im_start|>system\n{System}<|im_end|>\n<|im_start|>user\n            template head (exact ids)
//	<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}    body, EncodePlain as one string
//	<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n            template tail (exact ids)
//
// The body is tokenized as one string, as the reference implementation does, with EncodePlain so
// that user text never becomes control tokens. The prefix boundary is taken in token space: the
// tokens of the body up to "<Document>:" are checked to begin every document's body tokens (with
// byte-level BPE the space after ':' joins the document's first word), and the prefix is shortened
// to the common part if a document ever disagrees. So Prefix+Items[i] is always exactly the token
// sequence of item i's whole prompt tokenized alone (Whole).
//
// The template text itself is the shared contract of package prompt (top level), which the
// proxy reads too; this package turns it into ids.
//
// A Builder is immutable and safe for concurrent use.
package prompt

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	template "github.com/relevance-scoring/relevance/prompt"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// The template is the shared contract in package prompt (top level); these names keep the
// builder's callers reading as before.
const (
	System             = template.System
	DefaultInstruction = template.DefaultInstruction
	HeadText           = template.HeadText
	TailText           = template.TailText
)

// BodyPrefix is template.BodyPrefix: the body up to "<Document>:".
func BodyPrefix(instruction, query string) string { return template.BodyPrefix(instruction, query) }

// Identity is template.Identity: the template as the scores depend on it, for fingerprints.
func Identity() []byte { return template.Identity() }

// Builder tokenizes prompts for one tokenizer and token limit.
type Builder struct {
	tok        *tokenizer.Tokenizer
	maxTokens  int
	head, tail []int32
}

// New returns a builder. maxTokens caps a whole prompt (prefix + item); ≤ 0 means no limit.
func New(tok *tokenizer.Tokenizer, maxTokens int) *Builder {
	return &Builder{tok: tok, maxTokens: maxTokens, head: tok.Encode(HeadText), tail: tok.Encode(TailText)}
}

// MaxTokens is the prompt limit (0: none).
func (b *Builder) MaxTokens() int { return max(b.maxTokens, 0) }

// TemplateTokens is the number of template tokens around the body (head + tail).
func (b *Builder) TemplateTokens() int { return len(b.head) + len(b.tail) }

// Whole returns the tokens of one whole prompt, tokenized alone and never truncated: the
// reference that Build's Prefix+Items[i] equals.
func (b *Builder) Whole(instruction, query, doc string) []int32 {
	out := append([]int32(nil), b.head...)
	out = append(out, b.tok.EncodePlain(BodyPrefix(instruction, query)+" "+doc)...)
	return append(out, b.tail...)
}

// boundarySlack bounds how many of the body prefix's last tokens a document's encoding may
// merge differently (pre-tokenization splits at the space before the document, so in practice
// at most one). A variable so that a test can turn the early refusal off and compare.
var boundarySlack = 4

// ErrEmptyQuery is returned (wrapped) for an empty query.
var ErrEmptyQuery = errors.New("query is empty")

// Build tokenizes one query's batch. A document over the limit (the builder's prompt limit, or
// opt.MaxDocTokens document tokens) is cut at the end of its document tokens, keeping the tail
// template whole (as transformers' truncation="only_first" does on the body ids), and
// Truncated[i] records how many tokens were cut; with opt.NoTruncate it is marked TooLong and
// gets no tokens instead. A query whose prompt leaves no room for a document is an error.
func (b *Builder) Build(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("build prompt: %w", ErrEmptyQuery)
	}
	if opt.MaxDocTokens < 0 {
		return nil, fmt.Errorf("build prompt: max doc tokens must be ≥ 0, got %d", opt.MaxDocTokens)
	}
	bp := BodyPrefix(instruction, query)
	pt := b.tok.EncodePlain(bp)
	// A query that leaves no room for any document is refused before the documents are
	// encoded: each is encoded with the body prefix before it, so a huge query cost its length
	// times the documents (a 4 MiB query with 16 empty documents took ~1 s of a node's CPU)
	// only to be refused below. The slack covers the few tokens by which a document's encoding
	// may shorten the prefix at the boundary (docStart below); within it, the per-document check
	// decides.
	if over := len(b.head) + len(pt) + len(b.tail); b.maxTokens > 0 && over-boundarySlack > b.maxTokens {
		return nil, fmt.Errorf("build prompt: the query, instruction and template take %d tokens, over the limit of %d", over, b.maxTokens)
	}
	fulls := make([][]int32, len(docs))
	p := len(pt)
	for i, d := range docs {
		fulls[i] = b.tok.EncodePlain(bp + " " + d)
		p = min(p, commonPrefix(pt, fulls[i]))
	}
	g := &scorer.Group{
		Prefix:    append(append([]int32(nil), b.head...), pt[:p]...),
		Items:     make([][]int32, len(docs)),
		Truncated: make([]int, len(docs)),
		TooLong:   make([]bool, len(docs)),
	}
	for i, full := range fulls {
		// Document tokens start after the body prefix's tokens (or at the shortened boundary in
		// the rare case the document's tokens disagree with them).
		docStart := p
		if commonPrefix(pt, full) == len(pt) {
			docStart = len(pt)
		}
		nDoc := len(full) - docStart
		allowed := nDoc
		if opt.MaxDocTokens > 0 {
			allowed = min(allowed, opt.MaxDocTokens)
		}
		if b.maxTokens > 0 {
			room := b.maxTokens - len(b.head) - docStart - len(b.tail)
			if room < 0 {
				return nil, fmt.Errorf("build prompt: the query, instruction and template take %d tokens, over the limit of %d", len(b.head)+docStart+len(b.tail), b.maxTokens)
			}
			if room == 0 && nDoc > 0 {
				// Not one document token fits: every document would be cut to nothing and
				// scored on the query alone.
				return nil, fmt.Errorf("build prompt: the query, instruction and template take %d tokens, leaving no room for a document within the limit of %d", len(b.head)+docStart+len(b.tail), b.maxTokens)
			}
			allowed = min(allowed, room)
		}
		if allowed < nDoc {
			if opt.NoTruncate {
				g.TooLong[i] = true
				continue
			}
			g.Truncated[i] = nDoc - allowed
		}
		item := make([]int32, 0, docStart+allowed-p+len(b.tail))
		item = append(item, full[p:docStart+allowed]...)
		item = append(item, b.tail...)
		// Re-check the cut: the whole prompt must fit.
		if b.maxTokens > 0 && len(g.Prefix)+len(item) > b.maxTokens {
			return nil, fmt.Errorf("build prompt: document %d: %d tokens after truncation exceed %d", i, len(g.Prefix)+len(item), b.maxTokens)
		}
		g.Items[i] = item
	}
	return g, nil
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Templates marks how many leading prefix tokens every query of an instruction shares: the
// template head and the body up to "<Query>:" (scorer.Group.TemplateLen). Both engines, the real
// one and the emulated one, mark their groups with it, so an emulated node reuses the template
// exactly where a real one would. It memoises each instruction's template tokens (bounded: a
// client sending a new instruction per request must not grow it without end). Safe for
// concurrent use.
type Templates struct {
	tok  *tokenizer.Tokenizer
	head []int32
	mu   sync.Mutex
	m    map[string][]int32
}

// maxTemplateMemo bounds the instructions remembered (a node serves a handful).
const maxTemplateMemo = 256

// NewTemplates returns an empty memo over tok.
func NewTemplates(tok *tokenizer.Tokenizer) *Templates {
	return &Templates{tok: tok, head: tok.Encode(HeadText)}
}

// Len is how many leading tokens of prefix (a prompt prefix for instruction) every query of the
// instruction shares: as tokens, the common part of prefix and the instruction's template
// tokenized alone. Byte-level BPE joins the space after "<Query>:" to the query's first word, so
// the boundary is taken in token space, as the builder takes the document's. Any common token
// prefix is exact: a position's KV depends on the tokens up to it only.
func (t *Templates) Len(instruction string, prefix []int32) int {
	t.mu.Lock()
	toks, ok := t.m[instruction]
	t.mu.Unlock()
	if !ok {
		toks = append(append([]int32(nil), t.head...), t.tok.EncodePlain(template.QueryLead(instruction))...)
		t.mu.Lock()
		if t.m == nil || len(t.m) >= maxTemplateMemo {
			t.m = map[string][]int32{}
		}
		t.m[instruction] = toks
		t.mu.Unlock()
	}
	return commonLen(toks, prefix)
}

func commonLen[T comparable](a, b []T) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}
