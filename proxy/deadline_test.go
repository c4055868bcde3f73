package proxy

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestCallerDeadlineOverridesSLO: the SLO is the budget of a request that brings no deadline; a
// caller's longer deadline (a gRPC client's) is its own budget and is not cut to the SLO.
func TestCallerDeadlineOverridesSLO(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{Latency: func(fakenode.Batch) time.Duration { return 300 * time.Millisecond }})
	cfg := testConfig(nodes.Addrs())
	cfg.SLO = 100 * time.Millisecond
	p, _ := startProxy(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Score(ctx, makeRequest(2, 1)); err != nil {
		t.Errorf("5s caller deadline, 300ms node, 100ms SLO: %v", err)
	}
	// Without a deadline the SLO applies.
	if _, err := p.Score(context.Background(), makeRequest(2, 2)); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("no caller deadline: %v, want DeadlineExceeded after the SLO", err)
	}
}
