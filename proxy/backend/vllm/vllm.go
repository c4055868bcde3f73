// Package vllm is the node kind for vLLM serving a reranker through its score API
// (e.g. vllm serve Qwen/Qwen3-Reranker-0.6B --hf_overrides '{"architectures":
// ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
// "is_original_qwen3_reranker": true}').
//
// Wire format, from vllm-project/vllm: vllm/entrypoints/pooling/scoring/api_router.py (routes),
// vllm/entrypoints/pooling/scoring/protocol.py (RerankRequest, RerankResponse),
// vllm/entrypoints/pooling/scoring/serving.py (_request_output_to_rerank_response),
// vllm/entrypoints/pooling/base/protocol.py (use_activation), vllm/entrypoints/openai/engine/
// protocol.py (ErrorResponse):
//
//	POST /rerank {"model"?: m, "query": q, "documents": [...], "top_n": n}
//	200 {"id", "model", "usage": {"prompt_tokens", "total_tokens"},
//	     "results": [{"index": i, "document": {"text": …}, "relevance_score": p}, ...]}
//	                                     sorted by relevance_score, best first, cut to top_n
//	                                     (0 = all; the adapter sends n); the document is always
//	                                     echoed, so the reply-size cap grows with the request
//	4xx/5xx {"error": {"message", "type", "param", "code"}}   400 BadRequestError (validation,
//	                                     "This model's maximum context length is … tokens" →
//	                                     FailedPrecondition here), 404 "The model `m` does not
//	                                     exist." for an unknown model name (openai/models/
//	                                     serving.py, check_model) → backend.ErrModelNotServed
//	GET /health → 200; GET /metrics → vllm:num_requests_waiting, vllm:num_requests_running
//	                                     (one per pair: vLLM schedules each pair as a request)
//	GET /v1/models → {"object": "list", "data": [{"id": served name, "root": path, …}, …]}
//	                                     (the served model names, then LoRA adapters loaded)
//
// Model: when the spec names one, it is sent, and the node joins only once /v1/models lists it
// (backend.ModelChecker): a server started on other weights, or with another
// --served-model-name, answers every batch 404.
//
// Scores: relevance_score is a probability. With the overrides above vLLM folds the "yes" and
// "no" rows of the LM head into one classifier row (vllm/model_executor/models/adapters.py,
// load_weights_using_from_2_way_softmax), and the pooler's default activation (request field
// use_activation, default true; older servers: activation/softmax) makes the score
// sigmoid(logit yes − logit no). The adapter does not send use_activation (an older server would
// ignore it and the adapter would misread probabilities as logits); a score outside [0, 1] is a
// reply in the wrong shape.
//
// Template: proxy by default. vLLM applies a score template only when started with
// --chat-template (examples/pooling/score/template/qwen3_reranker.jinja); otherwise an "LLM as
// reranker" model reads query + document with nothing between them
// (scoring/io_processor.py, CrossEncoderIOProcessor.get_score_prompt), and vLLM's own Qwen3
// example formats the prompt on the client. The proxy's prompt makes the model read exactly what
// our scorer's model reads, and vLLM's prefix cache sees one prefix per query. Use "server" for a
// node started with --chat-template: its template has the default instruction written in, so
// requests with another instruction are refused. Either way vLLM's tokenizer matches added
// tokens in the text, so added-token text in the query and documents is broken with a zero
// width space first (wire.Client.Rerank) and reaches the model as text, as on our scorer nodes.
//
// Limits: none by default (vLLM takes any number of documents; set max_item_tokens to its
// --max-model-len for the planner).
package vllm

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
const DefaultTemplate = backend.TemplateProxy

// Backend is one vLLM server, built by New (the zero value is not usable). It is safe for
// concurrent use.
type Backend struct {
	c      *wire.Client
	tmpl   string
	limits backend.Limits
	model  string
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Loader       = (*Backend)(nil)
	_ backend.ModelChecker = (*Backend)(nil)
)

// New connects to the vLLM server spec names (spec.Kind "" or "vllm").
func New(spec backend.Spec) (*Backend, error) {
	c, spec, err := wire.Open(backend.KindVLLM, spec)
	if err != nil {
		return nil, err
	}
	return &Backend{c: c, tmpl: spec.TemplateOr(DefaultTemplate), limits: spec.LimitsOr(backend.Limits{}), model: spec.Model}, nil
}

type rerankRequest struct {
	Model     string   `json:"model,omitempty"`
	Query     string   `json:"query"`
	Documents []string `json:"documents"`
	TopN      int      `json:"top_n"`
}

// classify: a pair over --max-model-len is a 400 that says "maximum context length".
func classify(httpStatus int, msg string, _ []byte) (codes.Code, bool) {
	if httpStatus == http.StatusBadRequest && strings.Contains(msg, "maximum context length") {
		return codes.FailedPrecondition, true
	}
	return 0, false
}

// unknownModel: a model name the server does not serve is a 404 "The model `m` does not exist."
// (a 400 saying so is taken alike).
func unknownModel(httpStatus int, msg string) bool {
	return (httpStatus == http.StatusNotFound || httpStatus == http.StatusBadRequest) &&
		strings.Contains(msg, "model") && strings.Contains(msg, "does not exist")
}

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return b.c.Rerank(ctx, req, b.limits, wire.Exchange{
		Path: "/rerank", Classify: classify, UnknownModel: unknownModel, Template: b.tmpl, Instruction: wire.FixedInstruction,
		Body: func(query string, docs []string, _ *relevancev1.ScoreBatchRequest) any {
			return rerankRequest{Model: b.model, Query: query, Documents: docs, TopN: len(docs)}
		},
		ArrayKey: "results", IndexKey: "index", ScoreKey: "relevance_score", Form: wire.Probability,
		Model: b.model, ReplyModel: true,
	})
}

// Healthy implements backend.Backend: GET /health answers 200.
func (b *Backend) Healthy(ctx context.Context) bool { return b.c.Healthy(ctx, "/health") }

// CheckModel implements backend.ModelChecker: GET /v1/models lists the configured model.
func (b *Backend) CheckModel(ctx context.Context) error {
	return b.c.CheckModel(ctx, b.model, "/v1/models", wire.ModelIDs)
}

// LoadGauge implements backend.Loader: vllm:num_requests_waiting and vllm:num_requests_running,
// summed over engines.
func (b *Backend) LoadGauge(ctx context.Context) (waiting, running float64, ok bool) {
	return b.c.LoadGauge(ctx, "/metrics", "vllm:num_requests_waiting", "vllm:num_requests_running")
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend.
func (b *Backend) Close() error {
	b.c.Close()
	return nil
}
