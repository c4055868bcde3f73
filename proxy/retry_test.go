package proxy

import (
	"context"
	"testing"
	"time"

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
