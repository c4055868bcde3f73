// Package scorer is the node kind for our own scorer node: gRPC relevance.v1.Scorer/ScoreBatch
// (proto/relevance/v1/relevance.proto) over a grpc.ClientConn, health by grpc.health.v1 Check.
//
// The node builds the Qwen3-Reranker prompt itself from query and instruction (template
// "server"; "proxy" is refused) and replies with scores, token counts, BatchStats and NodeLoad,
// which pass through untouched. The adapter checks that the reply has one score per item and
// that every index appears once, and returns the scores in item order. Status errors keep their
// code, with the node's name put before the message, but for the node's refusal of a batch over
// its max_items (INVALID_ARGUMENT with a BatchTooLarge), which is backend.ItemLimitError's
// FailedPrecondition: the node's limit, not the caller's input. No limits by default.
package scorer

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/wire"
)

// Backend is one scorer node, built by New or NewConn (the zero value is not usable). It is
// safe for concurrent use.
type Backend struct {
	node    string
	conn    *grpc.ClientConn
	own     bool // Close closes conn
	client  relevancev1.ScorerClient
	health  healthpb.HealthClient
	limits  backend.Limits
	timeout time.Duration
}

var _ backend.Backend = (*Backend)(nil)

// New dials spec.Addr (plaintext; the connection is made lazily) for spec.Kind "" or "scorer".
func New(spec backend.Spec) (*Backend, error) {
	spec, err := check(spec)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(spec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("addr: %w", err)
	}
	b := NewConn(conn, spec)
	b.own = true
	return b, nil
}

// NewConn uses a connection the caller already holds (and keeps: Close leaves it open).
func NewConn(conn *grpc.ClientConn, spec backend.Spec) *Backend {
	if spec.Kind == "" {
		spec.Kind = backend.KindScorer
	}
	return &Backend{
		node:    spec.Node(),
		conn:    conn,
		client:  relevancev1.NewScorerClient(conn),
		health:  healthpb.NewHealthClient(conn),
		limits:  spec.LimitsOr(backend.Limits{}),
		timeout: spec.TimeoutOr(),
	}
}

func check(spec backend.Spec) (backend.Spec, error) {
	if spec.Kind == "" {
		spec.Kind = backend.KindScorer
	}
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	if spec.Kind != backend.KindScorer {
		return spec, wire.KindError(backend.KindScorer, spec.Kind)
	}
	if spec.Template == backend.TemplateProxy {
		return spec, fmt.Errorf("template: scorer nodes build the prompt themselves; must be %q or empty, got %q", backend.TemplateServer, spec.Template)
	}
	if spec.MaxItemTokens != 0 {
		// It would be ignored: the node cuts documents to its own limit, which its replies report.
		return spec, fmt.Errorf("max_item_tokens: scorer nodes report their own prompt limit; must be 0, got %d", spec.MaxItemTokens)
	}
	if spec.Model != "" {
		// It would be ignored: nothing is sent or checked, a scorer node reports the model it
		// loaded (proxy model.name is the cluster-wide check).
		return spec, fmt.Errorf("model: scorer nodes report the model they loaded and are not checked against one; must be empty, got %q", spec.Model)
	}
	return spec, nil
}

// ScoreBatch implements backend.Backend.
func (b *Backend) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	n := len(req.GetItems())
	if err := wire.CheckItems(b.node, n, b.limits); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.client.ScoreBatch(ctx, req)
	if err != nil {
		s := status.Convert(err)
		if k := backend.ItemLimit(err); k > 0 {
			return nil, backend.ItemLimitError(fmt.Sprintf("node %s: %s", b.node, s.Message()), n, k)
		}
		return nil, wire.Errorf(b.node, s.Code(), "%s", s.Message())
	}
	scores, err := inItemOrder(resp.GetScores(), n)
	if err != nil {
		return nil, wire.Shape(b.node, err)
	}
	resp.Scores = scores
	return resp, nil
}

// inItemOrder checks that scores hold every index 0…n-1 once and returns them in item order.
func inItemOrder(scores []*relevancev1.ItemScore, n int) ([]*relevancev1.ItemScore, error) {
	out := make([]*relevancev1.ItemScore, n)
	from := make([]int, n)
	for i, s := range scores {
		if s == nil {
			return nil, fmt.Errorf("scores[%d]: missing", i)
		}
		idx := int(s.GetIndex())
		if idx >= n {
			return nil, fmt.Errorf("scores[%d].index %d out of range for %d items", i, idx, n)
		}
		if j := from[idx]; j != 0 {
			return nil, fmt.Errorf("scores[%d].index %d repeats scores[%d].index", i, idx, j-1)
		}
		from[idx] = i + 1
		out[idx] = s
	}
	if len(scores) != n {
		for idx, j := range from {
			if j == 0 {
				return nil, fmt.Errorf("scores: %d entries for %d items (index %d missing)", len(scores), n, idx)
			}
		}
	}
	return out, nil
}

// Healthy implements backend.Backend: grpc.health.v1 Check of the whole server ("") answers
// SERVING. A node without the health service counts as healthy, as the cluster's watch has it.
func (b *Backend) Healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) == codes.Unimplemented {
		return true
	}
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// Limits implements backend.Backend.
func (b *Backend) Limits() backend.Limits { return b.limits }

// Close implements backend.Backend (closing the connection only when New opened it).
func (b *Backend) Close() error {
	if b.own {
		return b.conn.Close()
	}
	return nil
}
