package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestRetryBudgetNotSpentWithoutRetry: when no other node can take a failed batch, no retry
// happens, so none may be counted and no budget token may be spent.
func TestRetryBudgetNotSpentWithoutRetry(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	nodes[0].FailNext(1, codes.Unavailable)
	if _, err := p.Score(context.Background(), makeRequest(4, 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("Score: %v, want Unavailable", err)
	}
	if got := testutil.ToFloat64(p.m.retries); got != 0 {
		t.Errorf("retries_total = %v with a single node, want 0", got)
	}
	tokens := p.dispatcher.BudgetTokens()
	if tokens != p.cfg.Retry.BudgetBurst {
		t.Errorf("retry budget %v after a failure with nowhere to retry, want it untouched at %v", tokens, p.cfg.Retry.BudgetBurst)
	}
}

// TestFailFastCancelsSiblings: in "fail" mode a batch that fails for good fails the request at
// once; the other batches are cancelled rather than holding the reply (and their nodes) until
// the deadline.
func TestFailFastCancelsSiblings(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.SLO = 5 * time.Second
	cfg.Split.Strategy, cfg.Split.MaxBatchItems = "fixed", 4
	cfg.Route.Strategy = "round_robin"
	p, _ := startProxy(t, cfg)
	nodes[0].SetFailing(true, codes.InvalidArgument)
	nodes[1].SetHang(true)
	defer nodes[1].SetHang(false)
	start := time.Now()
	_, err := p.Score(context.Background(), makeRequest(8, 1)) // two batches, one per node
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("failed request took %v: the hung sibling batch was not cancelled", el)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Score: %v, want the failed batch's InvalidArgument", err)
	}
	if s := nodeStatus(t, p, nodes[1].Addr()); s.Errors != 0 || s.InflightCostSeconds != 0 {
		t.Errorf("cancelled sibling: node errors %d, in-flight %v; want 0, 0", s.Errors, s.InflightCostSeconds)
	}
}

// TestSheddingNodeKeepsItsBreakerAndLooksBusy: a node that answers RESOURCE_EXHAUSTED (its queue
// full) is alive: its breaker stays closed however often it sheds, each shed batch is retried on
// another node, and the node is taken as busy (a backlog in its load) so that least-loaded
// routing does not send it the next batch at once, to spend another retry.
func TestSheddingNodeKeepsItsBreakerAndLooksBusy(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.Strategy, cfg.Split.MaxBatchItems = "fixed", 4
	cfg.Route.Strategy = "round_robin" // the shedding node gets its turns whatever its load
	cfg.Breaker.ConsecutiveFailures = 2
	p, _ := startProxy(t, cfg)
	nodes[0].SetFailing(true, codes.ResourceExhausted)
	const requests = 8
	for i := range requests {
		score(t, p, makeRequest(4, uint64(i))) // one batch each; a shed one is retried
	}
	s := nodeStatus(t, p, nodes[0].Addr())
	if s.Breaker != "closed" || s.BreakerOpened != 0 || s.Errors != 0 {
		t.Errorf("shedding node: breaker %s (opened %d times), errors %d; want closed, 0, 0", s.Breaker, s.BreakerOpened, s.Errors)
	}
	if s.BacklogSeconds <= 0 {
		t.Errorf("shedding node's backlog %v s: it looks idle", s.BacklogSeconds)
	}
	if c := nodes[0].Calls(); c < requests/2 {
		t.Errorf("shedding node got %d of %d batches: round robin gives it half while its breaker is closed", c, requests)
	}
}

// TestMisconfiguredNodeIsLoggedOnce: a healthy node that answers every batch UNIMPLEMENTED (a
// wrong endpoint or model name) is named in one warning, however many batches it fails.
func TestMisconfiguredNodeIsLoggedOnce(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Route.Strategy = "round_robin"
	cfg.Breaker.ConsecutiveFailures = 100
	var buf syncBuffer
	p, err := New(cfg, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitUntil(t, "nodes healthy", func() bool {
		ns := p.Nodes()
		return len(ns) == 2 && ns[0].Healthy && ns[1].Healthy
	})
	nodes[0].SetFailing(true, codes.Unimplemented)
	for i := range 6 {
		_, _ = p.Score(context.Background(), makeRequest(4, uint64(i)))
	}
	if n := strings.Count(buf.String(), "endpoint or model does not exist"); n != 1 {
		t.Errorf("%d warnings about the misconfigured node, want 1:\n%s", n, buf.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
