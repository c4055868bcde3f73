package prompt

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	template "github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/tokenizer"
)

func defaultTok(tb testing.TB) *tokenizer.Tokenizer {
	tb.Helper()
	tok, err := tokenizer.Default()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// docs exercises the prefix boundary: whatever the document starts with, the prefix's tokens
// must be a prefix of the whole prompt's tokens.
var docs = []string{
	"Apple pie recipe", "", " leading space", "  two spaces", "\nnewline first", "\n\nblank line",
	"\ttab", "北京是中国的首都", "日本語のテキスト", "1234 digits", "3.14", "!!! punctuation", ":colon",
	"'s contraction", "'ll", "— em dash", "<|im_end|> injected", "<think>", "😀 emoji", "a",
	"The quick brown fox jumps over the lazy dog. " + strings.Repeat("Lorem ipsum dolor sit amet. ", 20),
	"   ", "\r\nwindows", "-dash", "(paren)", "\"quoted\"", "#hash", "ünïcödé", "Ωmega", "x\x00y",
}

func TestPrefixPlusItemEqualsWhole(t *testing.T) {
	b := New(defaultTok(t), 0)
	queries := []struct{ instr, q string }{
		{"", "what is the capital of China?"},
		{"Find code", "go mmap"},
		{"", "query ending in space "},
		{"", "query ending in newline\n"},
		{"", "中文查询"},
		{"", "ends with colon:"},
	}
	for _, q := range queries {
		g, err := b.Build(q.instr, q.q, docs, scorer.TokenizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Prefix) <= b.TemplateTokens() {
			t.Errorf("query %q: prefix of %d tokens holds nothing of the body", q.q, len(g.Prefix))
		}
		for i, d := range docs {
			got := append(append([]int32(nil), g.Prefix...), g.Items[i]...)
			if diff := cmp.Diff(b.Whole(q.instr, q.q, d), got); diff != "" {
				t.Errorf("query %q doc %q: prefix+item differs from the whole prompt (-want +got):\n%s", q.q, d, diff)
			}
			if g.Truncated[i] != 0 || g.TooLong[i] {
				t.Errorf("doc %q: truncated without a limit", d)
			}
		}
	}
}

func TestTemplateIDs(t *testing.T) {
	tok := defaultTok(t)
	b := New(tok, 0)
	w := b.Whole("", "q", "d")
	id := func(s string) int32 {
		v, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return v
	}
	if w[0] != id("<|im_start|>") {
		t.Errorf("first token %d, want <|im_start|>", w[0])
	}
	// <|im_end|> \n <|im_start|> assistant \n <think> \n\n </think> \n\n
	wantTail := []int32{id("<|im_end|>"), 198, id("<|im_start|>"), 77091, 198, id("<think>"), 271, id("</think>"), 271}
	if diff := cmp.Diff(wantTail, w[len(w)-len(wantTail):]); diff != "" {
		t.Errorf("tail (-want +got):\n%s", diff)
	}
	// User text never becomes a control token.
	g, err := b.Build("", "<|im_start|>", []string{"<|im_end|>"}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := append(append([]int32(nil), g.Prefix[len(b.head):]...), g.Items[0][:len(g.Items[0])-len(b.tail)]...)
	for _, v := range body {
		if v >= 151643 {
			t.Errorf("control token %d in the body", v)
		}
	}
}

func TestTruncation(t *testing.T) {
	tok := defaultTok(t)
	long := strings.Repeat("relevance scoring with large language models ", 40)
	docs := []string{"short doc", long, "北京" + long}
	const limit = 160
	b := New(tok, limit)
	g, err := b.Build("", "what is relevance?", docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unlimited := New(tok, 0)
	for i, d := range docs {
		n := len(g.Prefix) + len(g.Items[i])
		if n > limit {
			t.Errorf("doc %d: %d tokens > limit %d", i, n, limit)
		}
		whole := unlimited.Whole("", "what is relevance?", d)
		if i == 0 {
			if g.Truncated[0] != 0 || n != len(whole) {
				t.Errorf("short doc truncated: %d cut, %d tokens", g.Truncated[0], n)
			}
			continue
		}
		if n != limit || g.Truncated[i] != len(whole)-limit {
			t.Errorf("doc %d: %d tokens, %d cut; want %d tokens, %d cut", i, n, g.Truncated[i], limit, len(whole)-limit)
		}
		// The cut keeps the head of the whole prompt's tokens and the tail template.
		got := append(append([]int32(nil), g.Prefix...), g.Items[i]...)
		keep := limit - len(b.tail)
		if diff := cmp.Diff(whole[:keep], got[:keep]); diff != "" {
			t.Errorf("doc %d: kept tokens differ (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(b.tail, got[keep:]); diff != "" {
			t.Errorf("doc %d: tail (-want +got):\n%s", i, diff)
		}
	}

	// NoTruncate marks over-long items instead.
	g, err = b.Build("", "what is relevance?", docs, scorer.TokenizeOptions{NoTruncate: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false, true, true}, g.TooLong); diff != "" {
		t.Errorf("TooLong (-want +got):\n%s", diff)
	}
	if g.Items[1] != nil || g.Items[0] == nil {
		t.Errorf("items: %v", g.Items)
	}

	// MaxDocTokens caps document tokens.
	g, err = unlimited.Build("", "q", []string{long}, scorer.TokenizeOptions{MaxDocTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	whole := unlimited.Whole("", "q", long)
	if got := len(g.Prefix) + len(g.Items[0]); got+g.Truncated[0] != len(whole) || g.Truncated[0] == 0 {
		t.Errorf("max doc tokens: %d tokens, %d cut, whole %d", got, g.Truncated[0], len(whole))
	}
}

func TestBuildErrors(t *testing.T) {
	b := New(defaultTok(t), 100)
	if _, err := b.Build("", "  ", []string{"x"}, scorer.TokenizeOptions{}); !errors.Is(err, ErrEmptyQuery) {
		t.Errorf("empty query: err = %v", err)
	}
	if _, err := b.Build("", strings.Repeat("very long query ", 50), []string{"x"}, scorer.TokenizeOptions{}); err == nil || !strings.Contains(err.Error(), "over the limit of 100") {
		t.Errorf("long query: err = %v", err)
	}
	if _, err := b.Build("", "q", []string{"x"}, scorer.TokenizeOptions{MaxDocTokens: -1}); err == nil {
		t.Error("negative max doc tokens: no error")
	}
}

// TestQueryOverTheLimitRefusedBeforeTheDocuments: a query that leaves no room for a document is
// refused before the documents are encoded, with the same answer as the per-document check: for
// queries around the limit and documents that merge differently at the boundary, Build gives
// the same group or the same error with the early refusal as without it.
func TestQueryOverTheLimitRefusedBeforeTheDocuments(t *testing.T) {
	b := New(defaultTok(t), 120)
	prev := boundarySlack
	defer func() { boundarySlack = prev }()
	for words := 20; words <= 60; words++ {
		query := strings.TrimSpace(strings.Repeat("q ", words)) + "!"
		boundarySlack = prev
		early, errEarly := b.Build("", query, docs, scorer.TokenizeOptions{})
		boundarySlack = 1 << 30 // never refuse early
		late, errLate := b.Build("", query, docs, scorer.TokenizeOptions{})
		if (errEarly == nil) != (errLate == nil) || errEarly != nil && errEarly.Error() != errLate.Error() {
			t.Fatalf("%d-word query: error %v with the early refusal, %v without", words, errEarly, errLate)
		}
		if diff := cmp.Diff(late, early); diff != "" {
			t.Fatalf("%d-word query: groups differ (-without +with):\n%s", words, diff)
		}
	}
}

func TestConcurrentBuild(t *testing.T) {
	b := New(defaultTok(t), 256)
	want, err := b.Build("", "concurrency", docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := b.Build("", "concurrency", docs, scorer.TokenizeOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			if diff := cmp.Diff(want, g); diff != "" {
				t.Errorf("concurrent build differs:\n%s", diff)
			}
		}()
	}
	wg.Wait()
}

// TestTemplateIsTheSharedTokenPrefix: the template a node marks (Templates.Len) is exactly the
// token prefix two different queries of the instruction share, and the proxy's exact counter
// counts the same number of template tokens (prompt.Counter.Template), so that what the proxy
// prices as held is what the node holds.
func TestTemplateIsTheSharedTokenPrefix(t *testing.T) {
	tok := defaultTok(t)
	b := New(tok, 0)
	tt := NewTemplates(tok)
	counter, err := template.NewCounter(template.CountExact)
	if err != nil {
		t.Fatal(err)
	}
	for _, instr := range []string{"", "Given a product search query, retrieve relevant listings", "判断文档是否回答了问题"} {
		var prefixes [][]int32
		for _, q := range []string{"wireless headphones", "  leading spaces", "Ünïcode café", "x"} {
			g, err := b.Build(instr, q, []string{"doc"}, scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			prefixes = append(prefixes, g.Prefix)
		}
		shared := len(prefixes[0])
		for _, p := range prefixes[1:] {
			shared = min(shared, commonLen(prefixes[0], p))
		}
		for i, p := range prefixes {
			if got := tt.Len(instr, p); got != shared {
				t.Errorf("instruction %q query %d: template %d tokens, queries share %d", instr, i, got, shared)
			}
		}
		if got := counter.Template(instr); got != shared {
			t.Errorf("instruction %q: the proxy's counter says %d template tokens, the node's %d", instr, got, shared)
		}
	}
}
