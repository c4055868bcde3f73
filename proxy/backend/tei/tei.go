// Package tei is the node kind for Hugging Face Text Embeddings Inference serving a reranker
// (a sequence-classification model with one label).
//
// Wire format, from huggingface/text-embeddings-inference: router/src/http/types.rs
// (RerankRequest, Rank, RerankResponse), router/src/http/server.rs (rerank, health),
// router/src/lib.rs (ErrorResponse, ErrorType → HTTP status), core/src/queue.rs (te_queue_size):
//
//	POST /rerank {"query": q, "texts": [...], "truncate": false, "raw_scores": true, "return_text": false}
//	200 [{"index": i, "score": s}, ...]      a bare array, sorted by score, best first; every text
//	                                         is scored (TEI has no top_n)
//	4xx/5xx {"error": "…", "error_type": "…"}  Validation 413 ("batch size 33 > maximum allowed batch
//	                                         size 32", or an input over --max-input-length when not
//	                                         truncating), Overloaded 429, Tokenizer 422, Empty 400,
//	                                         Backend 424, Unhealthy 503
//	GET /health → 200 | 503; GET /metrics → te_queue_size (waiting), te_batch_current_size (running)
//	GET /info → {"model_id": m, "model_sha", "model_type": {"reranker": …}, "max_client_batch_size", …}
//
// Model: TEI serves the one model it was started with and takes no model name in requests, so
// a spec's model is only the name replies carry — and the name /info's model_id must have for
// the node to join (backend.ModelChecker): a server started with another --model-id would score
// with other weights.
//
// Scores: raw_scores=true makes TEI return the classifier's logit (yes − no for a
// Qwen3-Reranker converted to sequence classification); the adapter applies the sigmoid, so
// Logit is the server's own value. (With raw_scores=false TEI would send sigmoid(logit).)
//
// Template: proxy by default. TEI has no prompt template: it tokenizes (query, text) as a pair
// with the tokenizer's post-processor and runs a classifier, so a Qwen3-Reranker — served in its
// sequence-classification conversion, e.g. tomaarsen/Qwen3-Reranker-0.6B-seq-cls, where the TEI
// build supports it — needs the prompt built by the proxy. "server" sends query and documents as
// they are, for a classic cross-encoder (BGE and the like), and refuses custom instructions.
// TEI's tokenizer matches added tokens in the text, so added-token text of the Qwen3 tokenizer
// (<|im_end|>, <think>, …) in the query and texts is broken with a zero width space first
// (wire.Client.Rerank) and reaches the model as text, as on our scorer nodes. The special tokens
// of another model's tokenizer ([SEP], </s>) are not known to the proxy and go as they are.
//
// Limits: MaxItems defaults to 32, TEI's --max-client-batch-size default; a larger batch is
// refused before it is sent, as TEI would with 413. MaxItemTokens defaults to none: set it to the
// server's --max-input-length, and the proxy cuts documents to fit (TRUNCATED; TOO_LONG under
// TRUNCATION_NONE) before sending. The adapter sends truncate=false (TEI would cut the pair's end,
// the proxy template's tail): without max_item_tokens an over-long pair is TEI's 413,
// FailedPrecondition here.
package tei

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/wire"
)

// Kind defaults.
const (
	DefaultTemplate = backend.TemplateProxy
	DefaultMaxItems = 32
)

// Backend is one TEI server, built by New (the zero value is not usable). It is safe for
// concurrent use.
type Backend struct {
	c       *wire.Client
	tmpl    string
	limits  backend.Limits
	model   string
	timeout time.Duration // one call's cap (Spec.TimeoutOr)
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Loader       = (*Backend)(nil)
	_ backend.HealthWaiter = (*Backend)(nil)
	_ backend.ModelChecker = (*Backend)(nil)
)

// New connects to the TEI server spec names (spec.Kind "" or "tei").
func New(spec backend.Spec) (*Backend, error) {
	c, spec, err := wire.Open(backend.KindTEI, spec)
	if err != nil {
		return nil, err
	}
	return &Backend{
		c:       c,
		tmpl:    spec.TemplateOr(DefaultTemplate),
		limits:  spec.LimitsOr(backend.Limits{MaxItems: DefaultMaxItems}),
		model:   spec.Model,
		timeout: spec.TimeoutOr(),
	}, nil
}

type rerankRequest struct {
	Query      string   `json:"query"`
	Texts      []string `json:"texts"`
	Truncate   bool     `json:"truncate"`
	RawScores  bool     `json:"raw_scores"`
	ReturnText bool     `json:"return_text"`
}

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return b.c.Rerank(ctx, req, b.limits, wire.Exchange{
		Path: "/rerank", Template: b.tmpl, Instruction: wire.FixedInstruction,
		Body: func(query string, docs []string, _ *relevancev1.ScoreBatchRequest) any {
			return rerankRequest{Query: query, Texts: docs, RawScores: true}
		},
		IndexKey: "index", ScoreKey: "score", Form: wire.Logit,
		Model: b.model,
	})
}

// Healthy implements backend.Backend: GET /health answers 200.
func (b *Backend) Healthy(ctx context.Context) bool { return b.c.Healthy(ctx, "/health") }

// HealthTimeout implements backend.HealthWaiter: TEI answers /health through its backend queue,
// after the batch it is running (Backend::health in backends/src/lib.rs), so a probe may wait as
// long as a call.
func (b *Backend) HealthTimeout() time.Duration { return b.timeout }

// CheckModel implements backend.ModelChecker: GET /info's model_id is the configured model.
func (b *Backend) CheckModel(ctx context.Context) error {
	return advisory(b.c.CheckModel(ctx, b.model, "/info", func(body []byte) ([]string, bool) {
		var info struct {
			ModelID string `json:"model_id"`
		}
		if json.Unmarshal(body, &info) != nil || info.ModelID == "" {
			return nil, false
		}
		return []string{info.ModelID}, true
	}))
}

// advisory marks a model finding advisory: TEI takes no model name and scores with its one
// model, so the configured name is only what replies are labelled with (a friendly name for a
// server started from a local path is usual): a mismatch is warned of, the node not kept out.
func advisory(err error) error {
	if me := (*backend.ModelError)(nil); errors.As(err, &me) {
		me.Advisory = true
	}
	return err
}

// LoadGauge implements backend.Loader: te_queue_size and te_batch_current_size, in pairs.
func (b *Backend) LoadGauge(ctx context.Context) (waiting, running float64, ok bool) {
	return b.c.LoadGauge(ctx, "/metrics", "te_queue_size", "te_batch_current_size")
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend.
func (b *Backend) Close() error {
	b.c.Close()
	return nil
}
