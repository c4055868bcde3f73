// Package sglang is the node kind for SGLang serving a reranker through /v1/rerank.
//
// Wire format, from sgl-project/sglang: python/sglang/srt/entrypoints/openai/protocol.py
// (V1RerankReqInput, RerankResponse), python/sglang/srt/entrypoints/openai/serving_rerank.py
// (validation, the Qwen3 decoder path, sorting), python/sglang/srt/entrypoints/openai/
// serving_base.py (ErrorResponse), examples/chat_template/qwen3_reranker.jinja:
//
//	POST /v1/rerank {"query": q, "documents": [...], "instruct"?: i, "top_n": n, "return_documents": false}
//	200 [{"score": p, "index": i}, ...]   a bare array, sorted by score, best first, cut to top_n
//	                                     (top_n must be ≥ 1; the adapter sends n)
//	400 {"object": "error", "message", "type": "BadRequest", "param", "code": 400}  ("Query cannot
//	                                     be empty", "Each document must be a non-empty string", …)
//	GET /health → 200 | 503; GET /metrics (with --enable-metrics) → sglang:num_queue_reqs,
//	                                     sglang:num_running_reqs
//
// Scores: a probability. When the server's chat template is the Qwen3 reranker template, SGLang
// scores each rendered prompt by the next-token probabilities of "yes" and "no" and answers
// p(yes) / (p(yes) + p(no)) = sigmoid(logit yes − logit no). A score outside [0, 1] (a
// cross-encoder configured to return raw logits) is a reply in the wrong shape.
//
// Template: server by default, because SGLang picks its Qwen3-Reranker path only from the chat
// template: the documented launch is `--chat-template examples/chat_template/qwen3_reranker.jinja`
// (without --is-embedding), and SGLang then renders query, document and `instruct` itself. The
// adapter always sends instruct — the request's instruction, or prompt.DefaultInstruction —
// because SGLang's template defaults to a slightly different text (with a final period). Its
// template also opens the assistant turn without the empty think block of our prompt, so scores
// differ a little from our scorer's; for identical prompts run the model as a cross-encoder
// (sequence-classification conversion, no reranker chat template), where SGLang concatenates
// query and document, and configure template: proxy. Both ways SGLang's tokenizer matches added
// tokens in the rendered text, so added-token text in query, documents and instruct is broken
// with a zero width space first (wire.Client.Rerank) and reaches the model as text, as on our
// scorer nodes.
//
// Limits: none by default (set max_item_tokens to the server's --context-length).
package sglang

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/wire"
)

// DefaultTemplate is the kind's default template.
const DefaultTemplate = backend.TemplateServer

// Backend is one SGLang server, built by New (the zero value is not usable). It is safe for
// concurrent use.
type Backend struct {
	c      *wire.Client
	tmpl   string
	limits backend.Limits
	model  string
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Loader  = (*Backend)(nil)
)

// New connects to the SGLang server spec names (spec.Kind "" or "sglang").
func New(spec backend.Spec) (*Backend, error) {
	c, spec, err := wire.Open(backend.KindSGLang, spec)
	if err != nil {
		return nil, err
	}
	return &Backend{c: c, tmpl: spec.TemplateOr(DefaultTemplate), limits: spec.LimitsOr(backend.Limits{}), model: spec.Model}, nil
}

type rerankRequest struct {
	Query           string   `json:"query"`
	Documents       []string `json:"documents"`
	Instruct        string   `json:"instruct,omitempty"`
	TopN            int      `json:"top_n"`
	ReturnDocuments bool     `json:"return_documents"`
}

// classify: a pair over the context length is a 400 that says so.
func classify(httpStatus int, msg string, _ []byte) (codes.Code, bool) {
	if httpStatus == http.StatusBadRequest && strings.Contains(msg, "context length") {
		return codes.FailedPrecondition, true
	}
	return 0, false
}

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return b.c.Rerank(ctx, req, b.limits, wire.Exchange{
		Path: "/v1/rerank", Classify: classify, Template: b.tmpl, Instruction: wire.SentInstruction,
		Body: func(query string, docs []string, req *relevancev1.ScoreBatchRequest) any {
			body := rerankRequest{Query: query, Documents: docs, TopN: len(docs)}
			if b.tmpl == backend.TemplateServer {
				body.Instruct = wire.InstructionOrDefault(req)
			}
			return body
		},
		IndexKey: "index", ScoreKey: "score", Form: wire.Probability,
		Model: b.model,
	})
}

// Healthy implements backend.Backend: GET /health answers 200.
func (b *Backend) Healthy(ctx context.Context) bool { return b.c.Healthy(ctx, "/health") }

// LoadGauge implements backend.Loader: sglang:num_queue_reqs and sglang:num_running_reqs
// (the server must run with --enable-metrics).
func (b *Backend) LoadGauge(ctx context.Context) (waiting, running float64, ok bool) {
	return b.c.LoadGauge(ctx, "/metrics", "sglang:num_queue_reqs", "sglang:num_running_reqs")
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend.
func (b *Backend) Close() error {
	b.c.Close()
	return nil
}
