package proxy

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestNonFiniteReportedLoad: a node whose replies carry a NaN or infinite backlog must not
// poison routing, splitting or admission: requests keep succeeding on the whole cluster.
func TestNonFiniteReportedLoad(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		nodes := startNodes(t, 2, fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}})
		nodes[0].SetReportedLoad(bad)
		cfg := testConfig(nodes.Addrs())
		cfg.SLO = 2 * time.Second
		cfg.Admission.MinSamples = 1
		p, _ := startProxy(t, cfg)
		for i := range 30 {
			if _, err := p.Score(context.Background(), makeRequest(20, uint64(i))); err != nil {
				t.Fatalf("reported load %v: request %d: %v", bad, i, err)
			}
		}
		for _, s := range p.Nodes() {
			if math.IsNaN(s.BacklogSeconds) || math.IsInf(s.BacklogSeconds, 0) {
				t.Errorf("reported load %v: node %s backlog %v", bad, s.Addr, s.BacklogSeconds)
			}
		}
	}
}

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

// TestHalfOpenProbeDoesNotBlockFallback: when every node's breaker refuses (open, or half-open
// with its probe already out), requests still go to the least recently failed node instead of
// failing UNAVAILABLE until the probe returns.
func TestHalfOpenProbeDoesNotBlockFallback(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Breaker.ConsecutiveFailures = 1
	cfg.Breaker.OpenTimeout = 20 * time.Millisecond
	p, _ := startProxy(t, cfg)
	var probes []func(error)
	for _, n := range p.cluster.Snapshot() {
		done, err := n.Breaker().Allow()
		if err != nil {
			t.Fatal(err)
		}
		done(status.Error(codes.Unavailable, "trip")) // open
	}
	waitUntil(t, "breakers half-open", func() bool {
		for _, s := range p.Nodes() {
			if s.Breaker != "half-open" {
				return false
			}
		}
		return true
	})
	for _, n := range p.cluster.Snapshot() {
		done, err := n.Breaker().Allow() // the probe, held out
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, done)
	}
	defer func() {
		for _, done := range probes {
			done(nil)
		}
	}()
	score(t, p, makeRequest(4, 1))
}

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
