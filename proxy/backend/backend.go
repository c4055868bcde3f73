// Package backend is the contract between the proxy and a scoring server of some kind: our own
// scorer node (gRPC Scorer.ScoreBatch) or a rerank server a team already runs (vLLM, SGLang,
// llama.cpp, Hugging Face TEI, Infinity), each spoken in its own wire format by a sub-package.
//
// Every kind answers one ScoreBatch in our terms: one score per item, in the batch's item order,
// with Index = position in the batch. Kinds that report no compute time or load leave Stats and
// Load nil; the proxy then learns the node's speed from observed latency.
//
// Implementations must be safe for concurrent use.
package backend

import (
	"context"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Kinds of node, as named in configuration.
const (
	KindScorer   = "scorer"
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindLlamaCpp = "llamacpp"
	KindTEI      = "tei"
	KindInfinity = "infinity"
)

// Backend is one scoring server.
type Backend interface {
	// ScoreBatch scores every item of req against its query. Errors are gRPC status errors
	// (codes.InvalidArgument for input the server refused as bad, codes.Unavailable for a server
	// that cannot be reached or answered 5xx, codes.DeadlineExceeded, codes.Internal for a reply
	// in the wrong shape — its message names the node and the field).
	ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error)
	// Healthy reports whether the server answers its health endpoint as ready.
	Healthy(ctx context.Context) bool
	// Limits are the server's per-request limits, for the planner.
	Limits() Limits
	// Close releases connections.
	Close() error
}

// Limits bound one request to a server.
type Limits struct {
	// MaxItems is the most documents one request may carry (0: no limit).
	MaxItems int
}
