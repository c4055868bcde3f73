package proxy

import (
	"fmt"

	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// DefaultInstruction is the model's instruction when a request has none.
const DefaultInstruction = prompt.DefaultInstruction

// bodyPrefix is the prompt body up to the document (as scorer/prompt builds it): the shared
// prefix is the template head plus these tokens; a document's own tokens are those of
// " "+document (the space joins its first word) plus the template tail.
func bodyPrefix(instruction, query string) string {
	if instruction == "" {
		instruction = DefaultInstruction
	}
	return "<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>:"
}

// TokenCounter counts prompt tokens as the proxy plans with them: exactly as a node will (the
// shipped Qwen3 tokenizer) or with the fast estimator. Immutable; safe for concurrent use.
type TokenCounter struct {
	head, tail int
	plain      func(string) int
	exact      bool
}

// NewTokenCounter returns the TokensExact or TokensEstimate counter.
func NewTokenCounter(kind string) (*TokenCounter, error) {
	if kind != TokensExact && kind != TokensEstimate {
		return nil, fmt.Errorf("token counter: unknown kind %q", kind)
	}
	tok, err := tokenizer.Default()
	if err != nil {
		return nil, fmt.Errorf("token counter: %w", err)
	}
	// The template's fixed parts are counted exactly either way: they hold control tokens that
	// an estimator would get wrong, and they are counted once.
	tc := &TokenCounter{head: len(tok.Encode(prompt.HeadText)), tail: len(tok.Encode(prompt.TailText))}
	if kind == TokensExact {
		tc.plain = func(s string) int { return len(tok.EncodePlain(s)) }
		tc.exact = true
	} else {
		tc.plain = tokenizer.EstimateTokens
	}
	return tc, nil
}

// Prefix is the shared prefix's tokens for (instruction, query); "" means the default
// instruction.
func (tc *TokenCounter) Prefix(instruction, query string) int {
	return tc.head + tc.plain(bodyPrefix(instruction, query))
}

// Item is one item's own tokens: the document and the template tail.
func (tc *TokenCounter) Item(text string) int {
	if !tc.exact {
		// The leading space joins the first word and adds no token; skip copying the text.
		return tc.plain(text) + tc.tail
	}
	return tc.plain(" "+text) + tc.tail
}
