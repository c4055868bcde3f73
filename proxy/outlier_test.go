package proxy

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/proxy/cluster"
)

// outlierConfig is a cluster whose prior matches the fake nodes' true cost (~10 ms a batch).
func outlierConfig(addrs []string, cost costmodel.Coeffs) Config {
	cfg := testConfig(addrs)
	cfg.Cost.Prior = cost
	cfg.SLO = 2 * time.Second
	cfg.Split.MaxBatchItems = 4
	cfg.Outlier.SlowMin = 20 * time.Millisecond
	cfg.Outlier.BaseEjection = 5 * time.Second // stays out for the rest of the test
	return cfg
}

var fastCost = costmodel.Coeffs{A: 2e-5, C: 2e-3}

// TestNodeRefusingDeadlinesIsEjected: a node that answers every batch with a fast
// DEADLINE_EXCEEDED (its own estimate says it cannot make the deadline: a node far slower than
// the proxy thinks) was a black hole — the breaker did not count it, the reply settled its load
// to idle, and least-loaded picked it first again, until the retry budget ran dry and requests
// failed. Now its refusals are slow outcomes: it is ejected, and no request fails.
func TestNodeRefusingDeadlinesIsEjected(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost})
	bad := nodes[1]
	bad.SetFailing(true, codes.DeadlineExceeded)
	p, _ := startProxy(t, outlierConfig(nodes.Addrs(), fastCost))
	for i := range 60 {
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if s := nodeStatus(t, p, bad.Addr()); !s.Ejected || s.Ejections < 1 {
		t.Errorf("refusing node: %+v, want ejected", s)
	}
	if c := bad.Calls(); c > 10 {
		t.Errorf("refusing node got %d calls in 60 requests, want it ejected after a few", c)
	}
}

// stalledPair is a proxy (hedging off, config changed by tune) over two nodes, the second of which
// never answers until the test ends.
func stalledPair(t *testing.T, tune func(*Config)) (*Proxy, *fakenode.Node) {
	t.Helper()
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost})
	stalled := nodes[1]
	stalled.SetHang(true)
	cfg := outlierConfig(nodes.Addrs(), fastCost)
	cfg.Hedge.Enabled = false
	tune(&cfg)
	p, _ := startProxy(t, cfg)
	// Registered last, so it runs first: the node answers again before the proxy closes.
	t.Cleanup(func() { stalled.SetHang(false) })
	return p, stalled
}

// TestStalledBatchIsRescued: a batch stuck on a stalled node is counted slow once it runs well
// past its projected finish and is re-sent to another node while the deadline allows, so the
// request is answered long before its deadline even with hedging off.
func TestStalledBatchIsRescued(t *testing.T) {
	p, stalled := stalledPair(t, func(*Config) {})
	for i := range 5 {
		start := time.Now()
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("request %d took %v with a 2 s deadline: the stuck batch waited instead of being rescued", i, el)
		}
	}
	if s := nodeStatus(t, p, stalled.Addr()); s.Slow == 0 {
		t.Errorf("stalled node: %+v, want slow outcomes counted", s)
	}
}

// TestOverdueBatchIsRescuedBeforeTheDeadline: a batch well past its projected finish is sent to a
// second node while the deadline still leaves time for it, without waiting for the slow mark
// (here 100× the projection: past the deadline). Without the rescue every request loses its
// stalled batch to the 400 ms deadline.
func TestOverdueBatchIsRescuedBeforeTheDeadline(t *testing.T) {
	p, stalled := stalledPair(t, func(cfg *Config) {
		cfg.SLO = 400 * time.Millisecond
		cfg.Outlier.SlowFactor = 100
		cfg.Outlier.SlowMin = time.Second
	})
	for i := range 5 {
		start := time.Now()
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if el := time.Since(start); el > 250*time.Millisecond {
			t.Errorf("request %d took %v: the overdue batch was not rescued early", i, el)
		}
	}
	if c := stalled.Calls(); c < 3 {
		t.Fatalf("stalled node got %d calls: the rescue path was not exercised", c)
	}
	if s := nodeStatus(t, p, stalled.Addr()); s.Slow != 0 {
		t.Errorf("stalled node: %+v; a rescue alone must not count as slow", s)
	}
}

// TestNodeOnProbationIsProbedBesideTheRequest: a node back from an ejection gets a copy of a
// batch (a probe) that another node also runs; the request is answered by the others without
// waiting for it. A probe that runs slow ejects the node again.
func TestNodeOnProbationIsProbedBesideTheRequest(t *testing.T) {
	nodes := startNodes(t, 3, fakenode.Options{Coeffs: fastCost})
	slow := nodes[2]
	slow.SetLatency(func(fakenode.Batch) time.Duration { return 400 * time.Millisecond })
	cfg := outlierConfig(nodes.Addrs(), fastCost)
	cfg.Hedge.Enabled = false
	cfg.Outlier.BaseEjection = 100 * time.Millisecond
	cfg.Outlier.MaxEjectionPercent = 50
	cfg.Outlier.SlowFactor = 10 // no rescue before ~100 ms: a batch placed on the slow node would show
	p, _ := startProxy(t, cfg)
	for i := range 3 { // every node learned and OK
		if _, err := p.Score(context.Background(), makeRequest(2, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	var sn *cluster.Node
	for _, n := range p.cluster.Snapshot() {
		if n.Addr() == slow.Addr() {
			sn = n
		}
	}
	for !sn.Ejected(time.Now()) {
		p.cluster.ReportSlow(sn, time.Now(), 10)
	}
	time.Sleep(120 * time.Millisecond) // ejection over: on probation
	before := slow.Calls()
	start := time.Now()
	if _, err := p.Score(context.Background(), makeRequest(12, 99)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 200*time.Millisecond {
		t.Errorf("request took %v: it waited for the node on probation (400 ms a batch)", el)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !sn.Ejected(time.Now()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !sn.Ejected(time.Now()) {
		t.Error("the slow probe did not eject the node again")
	}
	if got := slow.Calls() - before; got != 1 {
		t.Errorf("node on probation got %d calls for one request, want 1 probe", got)
	}
}
