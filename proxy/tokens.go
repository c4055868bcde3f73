package proxy

import (
	"fmt"

	"github.com/relevance-scoring/relevance/tokenizer"
)

// The Qwen3-Reranker prompt (DESIGN.md; the text itself belongs to scorer/prompt). The proxy needs
// only token counts: the prefix is head + user segment up to "<Document>:", an item is
// " "+document (the space joins the document's first word) + tail.
const (
	promptHead = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>"
	promptTail = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	// DefaultInstruction is the model's instruction when a request has none.
	DefaultInstruction = "Given a web search query, retrieve relevant passages that answer the query"
)

func userSegment(instruction, query string) string {
	if instruction == "" {
		instruction = DefaultInstruction
	}
	return "user\n<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>:"
}

// tokenCounter counts prompt tokens the way a node will (exact) or close to it (estimate).
// Immutable after construction; safe for concurrent use.
type tokenCounter struct {
	head, tail int
	plain      func(string) int
}

func newTokenCounter(kind string) (*tokenCounter, error) {
	tok, err := tokenizer.Default()
	if err != nil {
		return nil, fmt.Errorf("token counter: %w", err)
	}
	// The template's fixed parts are counted exactly once either way: they hold control tokens
	// that an estimator would get wrong.
	tc := &tokenCounter{head: len(tok.Encode(promptHead)), tail: len(tok.Encode(promptTail))}
	switch kind {
	case TokensExact:
		tc.plain = func(s string) int { return len(tok.EncodePlain(s)) }
	default:
		tc.plain = tokenizer.EstimateTokens
	}
	return tc, nil
}

// prefix is the shared prefix's tokens for (instruction, query).
func (tc *tokenCounter) prefix(instruction, query string) int {
	return tc.head + tc.plain(userSegment(instruction, query))
}

// item is one item's own tokens (document and tail).
func (tc *tokenCounter) item(text string) int {
	return tc.plain(" "+text) + tc.tail
}
