// Package infinity is the node kind for Infinity (infinity_emb v2) serving a cross-encoder
// reranker.
//
// Wire format, from michaelfeil/infinity: libs/infinity_emb/infinity_emb/fastapi_schemas/
// pymodels.py (RerankInput, ReRankResult), libs/infinity_emb/infinity_emb/fastapi_schemas/
// pydantic_v2.py (ITEMS_LIMIT), libs/infinity_emb/infinity_emb/inference/batch_handler.py
// (rerank: sigmoid unless raw_scores, sorting, top_n), libs/infinity_emb/infinity_emb/
// infinity_server.py (routes, /models stats, overload), fastapi_schemas/errors.py:
//
//	POST /rerank {"model"?: m, "query": q, "documents": [...], "return_documents": false,
//	              "raw_scores": true, "top_n": n}      (under the server's --url-prefix: put it in addr)
//	200 {"object": "rerank", "results": [{"relevance_score": s, "index": i}, ...], "model",
//	     "usage": {"prompt_tokens", "total_tokens"}, "id", "created"}   sorted, best first
//	422 {"detail": [{"type", "loc": ["body", "documents"], "msg", …}]}   a body that fails the
//	                                     schema; "too_long" on documents (over 2048) →
//	                                     FailedPrecondition here
//	4xx/5xx {"error": {"message", "type", "param", "code"}}   429 "model overloaded"
//	GET /health → 200 {"unix": t}; GET /models → data[].stats {queue_absolute, results_pending, …}
//	400 "Invalid model: Engine for model name `m` not found. …"   a model the server does not
//	                                     serve, when it serves several → backend.ErrModelNotServed
//
// Model: when the spec names one, it is sent, and the node joins only once GET /models lists it
// among data[].id (backend.ModelChecker). A server of one model scores any name with it, so the
// check is where a wrong one shows.
//
// Scores: raw_scores=true returns the cross-encoder's logit (yes − no for a Qwen3-Reranker in its
// sequence-classification conversion); the adapter applies the sigmoid, so Logit is the server's
// own value. (With raw_scores=false Infinity would send sigmoid(logit).)
//
// Template: proxy by default. Infinity runs a sentence-transformers-style CrossEncoder, which
// tokenizes (query, document) as a pair and has no prompt template, so a Qwen3-Reranker needs the
// prompt built by the proxy. "server" sends query and documents as they are, for a classic
// cross-encoder, and refuses custom instructions. Infinity's tokenizer matches added tokens in
// the text, so added-token text of the Qwen3 tokenizer (<|im_end|>, <think>, …) in the query and
// documents is broken with a zero width space first (wire.Client.Rerank) and reaches the model
// as text, as on our scorer nodes; another model's special tokens ([SEP], </s>) go as they are.
//
// Load: Infinity's /metrics carries only HTTP counters; its queue is in the JSON of GET /models:
// stats.queue_absolute (waiting) and stats.results_pending (running), of the spec's model or
// summed over all models when none is named.
//
// Limits: MaxItems defaults to 2048, the schema's limit on documents; a larger batch is refused
// before it is sent. Infinity truncates long pairs silently to the model's length, so
// MaxItemTokens has no default.
package infinity

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/wire"
)

// Kind defaults.
const (
	DefaultTemplate = backend.TemplateProxy
	DefaultMaxItems = 2048
)

// Backend is one Infinity server, built by New (the zero value is not usable). It is safe for
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

// New connects to the Infinity server spec names (spec.Kind "" or "infinity").
func New(spec backend.Spec) (*Backend, error) {
	c, spec, err := wire.Open(backend.KindInfinity, spec)
	if err != nil {
		return nil, err
	}
	return &Backend{
		c:      c,
		tmpl:   spec.TemplateOr(DefaultTemplate),
		limits: spec.LimitsOr(backend.Limits{MaxItems: DefaultMaxItems}),
		model:  spec.Model,
	}, nil
}

type rerankRequest struct {
	Model           string   `json:"model,omitempty"`
	Query           string   `json:"query"`
	Documents       []string `json:"documents"`
	ReturnDocuments bool     `json:"return_documents"`
	RawScores       bool     `json:"raw_scores"`
	TopN            int      `json:"top_n"`
}

// classify: more documents than the schema allows is FastAPI's 422 "too_long" on body.documents.
func classify(httpStatus int, _ string, body []byte) (codes.Code, bool) {
	if httpStatus != http.StatusUnprocessableEntity {
		return 0, false
	}
	for _, d := range wire.ValidationDetails(body) {
		if d.Type == "too_long" && d.Field() == "body.documents" {
			return codes.FailedPrecondition, true
		}
	}
	return 0, false
}

// unknownModel: a model name the server does not serve (of several) is a 400 "Invalid model: …"
// (infinity_server.py, _resolve_engine).
func unknownModel(httpStatus int, msg string) bool {
	return httpStatus == http.StatusBadRequest && strings.HasPrefix(msg, "Invalid model")
}

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return b.c.Rerank(ctx, req, b.limits, wire.Exchange{
		Path: "/rerank", Classify: classify, UnknownModel: unknownModel, Template: b.tmpl, Instruction: wire.FixedInstruction,
		Body: func(query string, docs []string, _ *relevancev1.ScoreBatchRequest) any {
			return rerankRequest{Model: b.model, Query: query, Documents: docs, RawScores: true, TopN: len(docs)}
		},
		ArrayKey: "results", IndexKey: "index", ScoreKey: "relevance_score", Form: wire.Logit,
		Model: b.model, ReplyModel: true,
	})
}

// Healthy implements backend.Backend: GET /health answers 200.
func (b *Backend) Healthy(ctx context.Context) bool { return b.c.Healthy(ctx, "/health") }

// CheckModel implements backend.ModelChecker: GET /models lists the configured model.
func (b *Backend) CheckModel(ctx context.Context) error {
	err := b.c.CheckModel(ctx, b.model, "/models", wire.ModelIDs)
	if me := (*backend.ModelError)(nil); errors.As(err, &me) && len(me.Served) == 1 {
		// One model served answers whatever name a request gives: the configured name is only
		// the label on replies. Several: a name not among them is refused ("Invalid model").
		me.Advisory = true
	}
	return err
}

// LoadGauge implements backend.Loader from GET /models: stats.queue_absolute (waiting) and
// stats.results_pending (running).
func (b *Backend) LoadGauge(ctx context.Context) (waiting, running float64, ok bool) {
	body, answered := b.c.GetOK(ctx, "/models")
	if !answered {
		return 0, 0, false
	}
	var models struct {
		Data []struct {
			ID    string `json:"id"`
			Stats struct {
				QueueAbsolute  *float64 `json:"queue_absolute"`
				ResultsPending *float64 `json:"results_pending"`
			} `json:"stats"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &models) != nil {
		return 0, 0, false
	}
	for _, m := range models.Data {
		if (b.model != "" && m.ID != b.model) || m.Stats.QueueAbsolute == nil || m.Stats.ResultsPending == nil {
			continue
		}
		waiting += *m.Stats.QueueAbsolute
		running += *m.Stats.ResultsPending
		ok = true
	}
	return waiting, running, ok
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend.
func (b *Backend) Close() error {
	b.c.Close()
	return nil
}
