// Package llamacpp is the node kind for llama.cpp's server started with --reranking (pooling
// rank) on a reranker GGUF, e.g. a Qwen3-Reranker converted by convert_hf_to_gguf.py.
//
// Wire format, from ggml-org/llama.cpp: tools/server/server.cpp (routes), tools/server/
// server-context.cpp (handle_rerank), tools/server/server-common.cpp (format_prompt_rerank,
// format_response_rerank, format_error_response), src/llama-graph.cpp (build_pooling),
// convert_hf_to_gguf.py (Qwen3Model: the rerank template and the yes/no head):
//
//	POST /v1/rerank {"model"?: m, "query": q, "documents": [...], "top_n": n}   (Jina format: the key
//	                                     "documents"; "texts" would switch to TEI's reply format)
//	200 {"model", "object": "list", "usage": {"prompt_tokens", "total_tokens"},
//	     "results": [{"index": i, "relevance_score": p}, ...]}   sorted, best first, cut to top_n
//	4xx/5xx {"error": {"code", "message", "type"}}   400 invalid_request_error, 501
//	                                     not_supported_error (no --reranking), 503 unavailable_error
//	                                     (loading); 500 server_error "input (N tokens) is too large
//	                                     to process. increase the physical batch size (current batch
//	                                     size: B)" for a pair over n_ubatch → FailedPrecondition here
//	GET /health → 200 {"status": "ok"} | 503; GET /metrics (with --metrics) →
//	                                     llamacpp:requests_deferred (waiting),
//	                                     llamacpp:requests_processing (running)
//
// Scores: a probability. convert_hf_to_gguf.py writes the "yes" and "no" rows of the LM head as
// a two-row classifier (yes first) and pooling type RANK; llama.cpp applies a softmax over the two
// for Qwen3, and the score is P(yes) = sigmoid(logit yes − logit no).
//
// Template: server, the only one supported. convert_hf_to_gguf.py stores the Qwen3-Reranker
// prompt, default instruction written in, as the GGUF's "rerank" chat template, and llama-server
// substitutes {query} and {document} into it; requests with another instruction are refused
// (InvalidArgument). A proxy-built prompt cannot work: with the template it would be wrapped
// twice, and without one llama-server tokenizes query and document with special-token parsing
// off, so the prompt's <|im_start|> markers would reach the model as plain text. With the
// template, the rendered prompt is tokenized with parse_special on, so added-token text in the
// query or a document (<|im_end|>, <think>, …) would be read as control tokens: as for every HTTP
// kind, the proxy breaks it with a zero width space before sending (wire.Client.Rerank), and
// here also "{document}" in the query, which llama-server would replace with the document.
//
// Limits: each pair is scored in one physical batch, so MaxItemTokens defaults to 512 tokens per
// pair, template included — llama-server's default n_ubatch (-ub); set max_item_tokens to the
// server's -ub. No limit on documents per request.
package llamacpp

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/wire"
)

// Kind defaults.
const (
	DefaultTemplate      = backend.TemplateServer
	DefaultMaxItemTokens = 512
)

// Backend is one llama.cpp server, built by New (the zero value is not usable). It is safe for
// concurrent use.
type Backend struct {
	c      *wire.Client
	limits backend.Limits
	model  string
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Loader  = (*Backend)(nil)
)

// New connects to the llama.cpp server spec names (spec.Kind "" or "llamacpp").
func New(spec backend.Spec) (*Backend, error) {
	c, spec, err := wire.Open(backend.KindLlamaCpp, spec)
	if err != nil {
		return nil, err
	}
	if spec.Template == backend.TemplateProxy {
		c.Close()
		return nil, fmt.Errorf("template: llamacpp supports only %q (llama-server renders the GGUF's rerank template, and without one it tokenizes the proxy's prompt markers as plain text), got %q",
			backend.TemplateServer, spec.Template)
	}
	return &Backend{c: c, limits: spec.LimitsOr(backend.Limits{MaxItemTokens: DefaultMaxItemTokens}), model: spec.Model}, nil
}

type rerankRequest struct {
	Model     string   `json:"model,omitempty"`
	Query     string   `json:"query"`
	Documents []string `json:"documents"`
	TopN      int      `json:"top_n"`
}

// classify: llama-server answers 500 for a pair over its physical batch (n_ubatch), and 400
// exceed_context_size_error for one over the context.
func classify(httpStatus int, msg string, body []byte) (codes.Code, bool) {
	switch {
	case strings.Contains(msg, "too large to process"):
		return codes.FailedPrecondition, true
	case httpStatus == http.StatusBadRequest && strings.Contains(string(body), "exceed_context_size_error"):
		return codes.FailedPrecondition, true
	}
	return 0, false
}

// documentPlaceholder breaks "{document}" in a query with a zero width space (as wire breaks
// added-token text): llama-server writes the query into its template before replacing
// {document}, so the placeholder typed in a query would become each document's text.
var documentPlaceholder = strings.NewReplacer("{document}", "{\u200bdocument}")

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return b.c.Rerank(ctx, req, b.limits, wire.Exchange{
		Path: "/v1/rerank", Classify: classify, Template: backend.TemplateServer, Instruction: wire.FixedInstruction,
		Body: func(query string, docs []string, _ *relevancev1.ScoreBatchRequest) any {
			return rerankRequest{Model: b.model, Query: documentPlaceholder.Replace(query), Documents: docs, TopN: len(docs)}
		},
		ArrayKey: "results", IndexKey: "index", ScoreKey: "relevance_score", Form: wire.Probability,
		Model: b.model,
	})
}

// Healthy implements backend.Backend: GET /health answers 200 (503 while loading).
func (b *Backend) Healthy(ctx context.Context) bool { return b.c.Healthy(ctx, "/health") }

// LoadGauge implements backend.Loader: llamacpp:requests_deferred and
// llamacpp:requests_processing (the server must run with --metrics).
func (b *Backend) LoadGauge(ctx context.Context) (waiting, running float64, ok bool) {
	return b.c.LoadGauge(ctx, "/metrics", "llamacpp:requests_deferred", "llamacpp:requests_processing")
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend.
func (b *Backend) Close() error {
	b.c.Close()
	return nil
}
