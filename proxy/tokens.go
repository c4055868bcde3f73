package proxy

import (
	"fmt"
	"strings"

	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// DefaultInstruction is the model's instruction when a request has none.
const DefaultInstruction = prompt.DefaultInstruction

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
	if kind == TokensEstimate {
		// No BPE at all: loading the shipped tokenizer would cost start-up time for nothing.
		return &TokenCounter{head: estimateTemplate(prompt.HeadText), tail: estimateTemplate(prompt.TailText), plain: tokenizer.EstimateTokens}, nil
	}
	tok, err := loadTokenizer()
	if err != nil {
		return nil, fmt.Errorf("token counter: %w", err)
	}
	return &TokenCounter{
		head:  len(tok.Encode(prompt.HeadText)),
		tail:  len(tok.Encode(prompt.TailText)),
		plain: func(s string) int { return len(tok.EncodePlain(s)) },
		exact: true,
	}, nil
}

// loadTokenizer loads the exact tokenizer (a variable so that tests can tell whether it ran).
var loadTokenizer = tokenizer.Default

// templateMarkers are the chat template's added tokens (one token each); the estimator alone
// would read "<|im_start|>" as several punctuation and word tokens.
var templateMarkers = []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>"}

// estimateTemplate estimates a template part: one token per marker, the text between them
// estimated.
func estimateTemplate(s string) int {
	n := 0
	for s != "" {
		at, marker := -1, ""
		for _, m := range templateMarkers {
			if i := strings.Index(s, m); i >= 0 && (at < 0 || i < at) {
				at, marker = i, m
			}
		}
		if at < 0 {
			return n + tokenizer.EstimateTokens(s)
		}
		n += tokenizer.EstimateTokens(s[:at]) + 1
		s = s[at+len(marker):]
	}
	return n
}

// Prefix is the shared prefix's tokens for (instruction, query); "" means the default
// instruction.
func (tc *TokenCounter) Prefix(instruction, query string) int {
	return tc.head + tc.plain(prompt.BodyPrefix(instruction, query))
}

// Item is one item's own tokens: the document and the template tail.
func (tc *TokenCounter) Item(text string) int {
	if !tc.exact {
		// The leading space joins the first word and adds no token; skip copying the text.
		return tc.plain(text) + tc.tail
	}
	return tc.plain(" "+text) + tc.tail
}
