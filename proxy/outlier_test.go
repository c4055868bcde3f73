package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
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

// TestNodeLosingEveryRaceToItsRescuesIsEjected: a node that has slowed down 20× has each of its
// batches rescued on the other node, and the rescue answers before the slow batch reaches its
// slow mark. Cancelled then, the slow call was no evidence: the node was never counted slow,
// each cancelled call settled it idle, and least-loaded gave it a batch of every request, each
// one rescued again (a black hole that a burst turns into missed deadlines). The losing call is
// now left to run to its slow mark, detached from the request: the node is counted slow and
// ejected, and no request waits for it.
func TestNodeLosingEveryRaceToItsRescuesIsEjected(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost})
	slow := nodes[1]
	cfg := outlierConfig(nodes.Addrs(), fastCost)
	cfg.Hedge.Enabled = false
	cfg.Outlier.SlowFactor = 6 // the rescue answers (~45 ms) past 3.5× and before the slow mark (60 ms)
	cfg.Outlier.SlowMin = 60 * time.Millisecond
	cfg.Retry.BudgetBurst = 50 // every rescue is affordable: the test is about evidence, not budget
	p, reg := startProxy(t, cfg)
	for i := range 3 { // every node learned and OK
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	slow.SetLatency(func(fakenode.Batch) time.Duration { return 300 * time.Millisecond })
	defer waitUntil(t, "relevance_proxy_lost_calls_kept_total to count the losing calls", func() bool {
		return counterValue(t, reg, "relevance_proxy_lost_calls_kept_total") >= 1
	})
	for i := range 20 {
		start := time.Now()
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(100+i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if el := time.Since(start); el > 250*time.Millisecond {
			t.Errorf("request %d took %v: it waited for the slow node (300 ms a batch) instead of its rescue", i, el)
		}
		if s := nodeStatus(t, p, slow.Addr()); s.Ejected {
			return
		}
		time.Sleep(100 * time.Millisecond) // the losing calls reach their slow marks
	}
	t.Errorf("slow node after 20 requests: %+v, want it counted slow and ejected", nodeStatus(t, p, slow.Addr()))
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

// mergedLateBatch runs a batch that is late only because its node merged it with a later one:
// a medium batch runs on one node, a short one queues behind it, then a large one, and the node
// merges the short and the large into its next pass, so the short one answers with the large one,
// several times its projected finish. The other node reports otherBacklog seconds of other
// proxies' work, so least_loaded puts all three on the first node; a rescue copy (10 s deadline)
// still fits on the other. The large batch has 8 items of largeWords words. It returns the calls
// the other node got during the three requests and the short request's latency.
func mergedLateBatch(t *testing.T, otherBacklog float64, largeWords int) (*Proxy, int64, time.Duration) {
	cost := costmodel.Coeffs{A: 1e-4, C: 0.02}
	// The node merges whatever fits (by the cost model a merge of these would not pay: the
	// proxy must still handle a node that merges).
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: cost, MergeFill: true})
	first, other := nodes[0], nodes[1]
	other.SetReportedLoad(otherBacklog)
	cfg := outlierConfig(nodes.Addrs(), cost)
	cfg.SLO = 10 * time.Second
	cfg.Hedge.Enabled = false
	cfg.Split.MaxBatchItems = 8
	cfg.Split.Strategy = "fixed"      // each request one batch, however large
	cfg.Outlier.SlowFactor = 10       // the slow mark stays out of it
	cfg.Cost.LearnTokenCounts = false // the sizes above are set in the proxy's own token counts
	p, _ := startProxy(t, cfg)
	// Both nodes answer once (two batches a request: the second goes beside the first), so the
	// other's backlog is known.
	for i := range 2 {
		score(t, p, makeRequest(16, uint64(i)))
	}
	if s := nodeStatus(t, p, other.Addr()); s.Batches == 0 || s.BacklogSeconds < otherBacklog/3 {
		t.Fatalf("other node: %+v; want answered, with its reported backlog", s)
	}
	request := func(name string, items, words int) *relevancev1.ScoreRequest {
		req := &relevancev1.ScoreRequest{Query: name}
		for i := range items {
			req.Items = append(req.Items, &relevancev1.Item{Text: strings.Repeat(fmt.Sprintf("%s%d ", name, i), words)})
		}
		return req
	}
	otherCalls, firstCalls := other.Calls(), first.Calls()
	var wg sync.WaitGroup
	var short time.Duration
	for i, req := range []*relevancev1.ScoreRequest{request("medium", 4, 40), request("short", 1, 3), request("large", 8, largeWords)} {
		wg.Go(func() {
			st := time.Now()
			if _, err := p.Score(context.Background(), req); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			if i == 1 {
				short = time.Since(st)
			}
		})
		time.Sleep(10 * time.Millisecond) // in this order on the first node's queue
	}
	wg.Wait()
	if c := first.Calls() - firstCalls; c < 3 {
		t.Fatalf("the first node got %d calls, want the 3 requests' batches (setup)", c)
	}
	return p, other.Calls() - otherCalls, short
}

// TestBatchLateOnlyByMergingIsNotRescued: a batch late only by its node's merging, on time
// against the node's schedule of everything charged to it, is not copied to a node that would
// finish it no sooner: the copy would only double its work (rescues were ~10 % of all batches on
// real nodes, most of them this). A stalled node is still rescued
// (TestOverdueBatchIsRescuedBeforeTheDeadline).
func TestBatchLateOnlyByMergingIsNotRescued(t *testing.T) {
	p, otherCalls, _ := mergedLateBatch(t, 3, 400)
	if otherCalls != 0 {
		t.Errorf("the busy node got %d calls: a batch late only by the other node's merging was copied there", otherCalls)
	}
	if got := testutil.ToFloat64(p.m.rescues); got != 0 {
		t.Errorf("rescues_total = %v, want 0", got)
	}
	if got := testutil.ToFloat64(p.m.rescuesDeferred); got < 1 {
		t.Errorf("rescues_deferred_total = %v, want ≥ 1 (the short batch's rescue waited)", got)
	}
	// Why no copy went out is counted by reason: the other node would not finish it sooner.
	if got := testutil.ToFloat64(p.m.copiesRefused.WithLabelValues("rescue", "not_sooner")); got < 1 {
		t.Errorf(`copies_refused_total{kind="rescue",reason="not_sooner"} = %v, want ≥ 1`, got)
	}
}

// TestBatchLateByMergingIsCopiedWhereItFinishesFirst: the same batch is copied when another node
// is projected to finish it before its own node's schedule ends (here the large batch behind it
// is projected at ~0.8 s, the other node's backlog at ~0.4 s), and answers from there.
func TestBatchLateByMergingIsCopiedWhereItFinishesFirst(t *testing.T) {
	p, otherCalls, short := mergedLateBatch(t, 0.6, 450)
	if otherCalls < 1 || testutil.ToFloat64(p.m.rescues) < 1 {
		t.Errorf("the other node got %d calls, rescues_total %v; want the short batch copied there", otherCalls, testutil.ToFloat64(p.m.rescues))
	}
	if short > 450*time.Millisecond {
		t.Errorf("the short request took %v: it waited for the merged pass (~0.7 s)", short)
	}
}
