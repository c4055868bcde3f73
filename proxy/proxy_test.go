package proxy

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait in these tests.
const testTimeout = 20 * time.Second

func startNodes(t testing.TB, n int, opts fakenode.Options) fakenode.Cluster {
	t.Helper()
	c, err := fakenode.StartCluster(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testConfig(addrs []string) Config {
	cfg := DefaultConfig()
	cfg.Nodes.Static = addrs
	cfg.SLO = 10 * time.Second
	cfg.Split.MaxBatchItems = 8
	cfg.Breaker.ConsecutiveFailures = 3
	// The fake nodes are fast (tens of microseconds per token, about a millisecond per batch):
	// start near them, not at the default small model's calibrated CPU cost.
	cfg.Cost.Prior = costmodel.Coeffs{A: 2e-5, B: 2e-9, C: 1e-3}
	// No priming batch: tests count the nodes' calls and script their timing from the first
	// call (TestNodesArePrimedWithTheirCostModel turns it on).
	cfg.Cost.Prime = false
	return cfg
}

func startProxy(t testing.TB, cfg Config) (*Proxy, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// Every configured node healthy, so tests see a settled cluster.
	if err := p.cluster.WaitFor(ctx, func() bool {
		for _, n := range p.Nodes() {
			if !n.Healthy {
				return false
			}
		}
		return len(p.Nodes()) > 0
	}); err != nil {
		t.Fatalf("proxy not ready: %v", err)
	}
	return p, reg
}

// waitUntil polls cond (for time-driven state such as a breaker's open timeout) within testTimeout.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func makeRequest(n int, seed uint64) *relevancev1.ScoreRequest {
	r := rand.New(rand.NewPCG(seed, 99))
	req := &relevancev1.ScoreRequest{Query: fmt.Sprintf("query %d", seed)}
	for i := range n {
		words := 5 + r.IntN(60)
		if r.IntN(10) == 0 {
			words *= 8 // heavy tail
		}
		req.Items = append(req.Items, &relevancev1.Item{Id: fmt.Sprintf("id%d", i), Text: strings.Repeat(fmt.Sprintf("w%d ", i), words)})
	}
	return req
}

func score(t testing.TB, p *Proxy, req *relevancev1.ScoreRequest) *relevancev1.ScoreResponse {
	t.Helper()
	resp, err := p.Score(context.Background(), req)
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	checkScores(t, req, resp)
	return resp
}

// checkScores checks every item came back in input order with the fake nodes' score.
func checkScores(t testing.TB, req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) {
	t.Helper()
	if len(resp.GetScores()) != len(req.GetItems()) {
		t.Fatalf("%d scores for %d items", len(resp.GetScores()), len(req.GetItems()))
	}
	for i, s := range resp.GetScores() {
		if s.GetStatus() == relevancev1.ItemStatus_ITEM_STATUS_FAILED {
			continue
		}
		want := fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText())
		if s.GetIndex() != uint32(i) || s.GetId() != req.GetItems()[i].GetId() || s.GetScore() != want {
			t.Fatalf("scores[%d] = {index %d, id %q, score %v}, want {%d, %q, %v}", i, s.GetIndex(), s.GetId(), s.GetScore(), i, req.GetItems()[i].GetId(), want)
		}
	}
	rk := resp.GetRanking()
	for k := 1; k < len(rk); k++ {
		if resp.GetScores()[rk[k-1]].GetScore() < resp.GetScores()[rk[k]].GetScore() {
			t.Fatalf("ranking not sorted by score at %d: %v", k, rk)
		}
	}
}

func nodeStatus(t testing.TB, p *Proxy, addr string) NodeStatus {
	t.Helper()
	for _, s := range p.Nodes() {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("node %s not in %v", addr, p.Nodes())
	return NodeStatus{}
}

func TestScoreEndToEnd(t *testing.T) {
	nodes := startNodes(t, 3, fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}})
	for _, sp := range []string{"fixed", "cost"} {
		for _, rt := range []string{"random", "round_robin", "least_loaded"} {
			t.Run(sp+"+"+rt, func(t *testing.T) {
				cfg := testConfig(nodes.Addrs())
				cfg.Split.Strategy, cfg.Route.Strategy = sp, rt
				p, reg := startProxy(t, cfg)
				calls := func() (n int64) {
					for _, nd := range nodes {
						n += nd.Calls()
					}
					return n
				}
				before := calls()
				req := makeRequest(50, 1)
				req.TopN = 5
				req.Options = &relevancev1.ScoreOptions{ReturnTimings: true}
				resp := score(t, p, req)
				if len(resp.GetRanking()) != 5 {
					t.Errorf("ranking has %d entries, want top_n 5", len(resp.GetRanking()))
				}
				if resp.GetRequestId() == "" {
					t.Error("no request id generated")
				}
				// A batch late on a loaded machine may be rescued or hedged: a second call, not a
				// second batch (relevance_proxy_hedges_total counts both kinds of copy).
				copies := int64(counterValue(t, reg, "relevance_proxy_hedges_total"))
				if got, want := int64(resp.GetTimings().GetBatches()), calls()-before-copies; got != want {
					t.Errorf("timings.batches = %d, nodes saw %d calls (%d of them copies)", got, want+copies, copies)
				}
				var prompt uint64
				for _, s := range resp.GetScores() {
					prompt += uint64(s.GetTokens())
				}
				if u := resp.GetUsage(); u.GetItemTokens() != prompt || u.GetPromptTokens() <= prompt {
					t.Errorf("usage %v: item tokens want %d, prompt tokens more than that", u, prompt)
				}
				req.RequestId = "mine"
				if resp := score(t, p, req); resp.GetRequestId() != "mine" {
					t.Errorf("request id %q, want the caller's", resp.GetRequestId())
				}
			})
		}
	}
}

func TestValidation(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	item := func(s string) []*relevancev1.Item { return []*relevancev1.Item{{Text: "ok"}, {Text: s}} }
	many := make([]*relevancev1.Item, 1001)
	for i := range many {
		many[i] = &relevancev1.Item{Text: "x"}
	}
	tests := []struct {
		name string
		req  *relevancev1.ScoreRequest
		want string
	}{
		{"nil", nil, "request: missing"},
		{"empty query", &relevancev1.ScoreRequest{Items: item("a")}, "query: empty"},
		{"bad query", &relevancev1.ScoreRequest{Query: "\xff", Items: item("a")}, "query: invalid UTF-8"},
		{"long query", &relevancev1.ScoreRequest{Query: strings.Repeat("q", 9000), Items: item("a")}, "query: 9000 bytes, limit 8192"},
		{"bad instruction", &relevancev1.ScoreRequest{Query: "q", Instruction: "\xc3", Items: item("a")}, "instruction: invalid UTF-8"},
		{"no items", &relevancev1.ScoreRequest{Query: "q"}, "items: empty"},
		{"too many", &relevancev1.ScoreRequest{Query: "q", Items: many}, "items: 1001 items, limit 1000"},
		{"bad text", &relevancev1.ScoreRequest{Query: "q", Items: item("a\xffb")}, "items[1].text: invalid UTF-8"},
		{"long text", &relevancev1.ScoreRequest{Query: "q", Items: item(strings.Repeat("x", 70000))}, "items[1].text: 70000 bytes, limit 65536"},
		{"nil item", &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{nil}}, "items[0]: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Score(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || st.Message() != tt.want {
				t.Errorf("got %v %q, want InvalidArgument %q", st.Code(), st.Message(), tt.want)
			}
		})
	}
	if nodes[0].Calls() != 0 {
		t.Errorf("invalid requests reached a node (%d calls)", nodes[0].Calls())
	}
}

// cheapCost is a fake node's cost for tests where the proxy must price a node it has never
// heard from (by its prior) like the nodes it has (by their replies): the nodes cost it and
// the proxy's prior says it. (A zero-cost node still reports its passes' measured time.)
var cheapCost = costmodel.Coeffs{A: 2e-6, B: 2e-10, C: 1e-4}

func TestFailingNodeBreakerOpensAndRecovers(t *testing.T) {
	// The nodes cost what the proxy's prior says: the failing node never answers, so the proxy
	// knows it by the prior alone, and by the nodes' own reports the others.
	nodes := startNodes(t, 3, fakenode.Options{Coeffs: cheapCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = cheapCost
	cfg.Retry.BudgetBurst = 1000
	cfg.Breaker.OpenTimeout = 300 * time.Millisecond
	p, reg := startProxy(t, cfg)
	bad := nodes[0]
	bad.SetFailing(true, codes.Unavailable)
	for i := range 20 {
		score(t, p, makeRequest(24, uint64(i))) // retries hide the failures
	}
	if s := nodeStatus(t, p, bad.Addr()); s.Breaker != "open" || s.Errors < 3 {
		t.Fatalf("failing node: breaker %s after %d errors, want open after ≥ 3", s.Breaker, s.Errors)
	}
	// Every request was answered: its batches lost on the failing node were retried elsewhere
	// (or, under CPU contention, some of the failed calls were hedges or rescues, whose batch
	// the other copy answered with no retry).
	if got := testutil.ToFloat64(p.m.retries); got < 1 {
		t.Errorf("retries_total = %v, want ≥ 1", got)
	}
	// While open, no traffic goes to it. (Requests slower than the open timeout, as under CPU
	// contention, may see it half-open and let a probe through: then the check is over.)
	calls, halfOpened := bad.Calls(), nodeStatus(t, p, bad.Addr()).BreakerHalfOpened
	for i := range 10 {
		score(t, p, makeRequest(24, uint64(100+i)))
		if s := nodeStatus(t, p, bad.Addr()); s.Breaker != "open" || s.BreakerHalfOpened != halfOpened {
			break
		}
		if bad.Calls() != calls {
			t.Fatalf("open breaker let a call through")
		}
	}
	// Recovery: the breaker half-opens after its timeout, a probe succeeds, traffic returns.
	bad.SetFailing(false, codes.OK)
	waitUntil(t, "breaker to close again", func() bool {
		score(t, p, makeRequest(24, 7))
		return nodeStatus(t, p, bad.Addr()).Breaker == "closed"
	})
	if s := nodeStatus(t, p, bad.Addr()); s.BreakerOpened < 1 || s.BreakerHalfOpened < 1 {
		t.Errorf("breaker transitions: opened %d, half-opened %d; want each ≥ 1", s.BreakerOpened, s.BreakerHalfOpened)
	}
	before := bad.Batches()
	for i := range 10 {
		score(t, p, makeRequest(24, uint64(200+i)))
	}
	if bad.Batches() == before {
		t.Errorf("recovered node gets no traffic: %+v", nodeStatus(t, p, bad.Addr()))
		for _, n := range nodes[1:] {
			t.Logf("peer: %+v", nodeStatus(t, p, n.Addr()))
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP relevance_proxy_breaker_state Circuit breaker state: 0 closed, 1 half-open, 2 open.
# TYPE relevance_proxy_breaker_state gauge
relevance_proxy_breaker_state{node=%q} 0
relevance_proxy_breaker_state{node=%q} 0
relevance_proxy_breaker_state{node=%q} 0
`, nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr())), "relevance_proxy_breaker_state"); err != nil {
		t.Error(err)
	}
}

func TestBreakersNeverRemoveEveryNode(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Breaker.ConsecutiveFailures = 1
	cfg.Breaker.OpenTimeout = time.Hour
	p, _ := startProxy(t, cfg)
	nodes[0].SetFailing(true, codes.Internal)
	if _, err := p.Score(context.Background(), makeRequest(4, 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing only node: %v, want Unavailable", err)
	}
	if s := nodeStatus(t, p, nodes[0].Addr()); s.Breaker != "open" {
		t.Fatalf("breaker %s, want open", s.Breaker)
	}
	nodes[0].SetFailing(false, codes.OK)
	score(t, p, makeRequest(4, 2)) // sent through the open breaker: it is the last node
}

func TestAllNodesDown(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	for _, n := range nodes {
		n.SetServing(false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.cluster.WaitFor(ctx, func() bool { return !p.Ready() }); err != nil {
		t.Fatal(err)
	}
	_, err := p.Score(context.Background(), makeRequest(10, 1))
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "no healthy") {
		t.Fatalf("all not serving: %v, want Unavailable", err)
	}
	for _, n := range nodes {
		n.SetServing(true)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	score(t, p, makeRequest(10, 2))
	nodes.Close() // processes gone: calls fail and health watches break
	if _, err := p.Score(context.Background(), makeRequest(10, 3)); status.Code(err) != codes.Unavailable {
		t.Fatalf("all closed: %v, want Unavailable", err)
	}
}

func TestUnhealthyNodeSkippedThenBack(t *testing.T) {
	// The nodes cost what the proxy's prior says: node 0 is unhealthy before it is ever called, so
	// the proxy knows it by the prior alone, and by the node's own reports the other.
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: cheapCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = cheapCost
	p, _ := startProxy(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	nodes[0].SetServing(false)
	if err := p.cluster.WaitFor(ctx, func() bool { return !nodeStatus(t, p, nodes[0].Addr()).Healthy }); err != nil {
		t.Fatal(err)
	}
	before := nodes[0].Calls()
	for i := range 5 {
		score(t, p, makeRequest(32, uint64(i)))
	}
	if nodes[0].Calls() != before {
		t.Errorf("unhealthy node got %d calls", nodes[0].Calls()-before)
	}
	nodes[0].SetServing(true)
	if err := p.cluster.WaitFor(ctx, func() bool { return nodeStatus(t, p, nodes[0].Addr()).Healthy }); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		score(t, p, makeRequest(32, uint64(i)))
	}
	if nodes[0].Calls() == before {
		t.Error("node back to SERVING gets no calls")
	}
}

func TestDeadlineExceeded(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	for _, n := range nodes {
		n.SetHang(true)
	}
	req := makeRequest(20, 1)
	req.TimeoutMs = 100
	start := time.Now()
	_, err := p.Score(context.Background(), req)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("hung nodes: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v for a 100ms budget", el)
	}
	// The caller's own deadline flows through too, and a caller's cancel is CANCELED.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Score(ctx, makeRequest(5, 2)); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("client deadline: %v, want DeadlineExceeded", err)
	}
	errs := func() (n int64) {
		for _, s := range p.Nodes() {
			n += s.Errors
		}
		return n
	}
	if errs() == 0 {
		t.Error("hung nodes (far past their expected time) never counted as failing")
	}
	before := errs()
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, ccancel)
	if _, err := p.Score(cctx, makeRequest(5, 3)); status.Code(err) != codes.Canceled {
		t.Errorf("client cancel: %v, want Canceled", err)
	}
	if errs() != before {
		t.Errorf("a client's cancel counted as %d node errors", errs()-before)
	}
}

// A call still running when the request's deadline passes ends DeadlineExceeded, never Canceled,
// whichever of the request's and the call's timers fires first, and also when the caller's
// deadline arrives as a cancel (a gRPC client's RST_STREAM at its deadline): taken for a caller's
// cancel, a node hung far past its expected time would go uncounted.
func TestEveryDeadlinePassedOnAHungNodeCountsAgainstIt(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Breaker.ConsecutiveFailures = 1000
	cfg.Admission.Disabled = true
	p, _ := startProxy(t, cfg)
	score(t, p, makeRequest(1, 1))
	nodes[0].SetHang(true)
	const requests = 12
	for i := range requests {
		req := makeRequest(1, uint64(i+2))
		req.TimeoutMs = 60
		if _, err := p.Score(context.Background(), req); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("request %d on a hung node: %v, want DeadlineExceeded", i, err)
		}
		if s := nodeStatus(t, p, nodes[0].Addr()); s.Errors != int64(i+1) {
			t.Fatalf("after %d requests past their deadline on a hung node, %d node errors", i+1, s.Errors)
		}
	}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		time.AfterFunc(59*time.Millisecond, cancel) // the client's cancel, just before its deadline
		_, err := p.Score(ctx, makeRequest(1, uint64(100+i)))
		cancel()
		if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Canceled {
			t.Fatalf("request %d cancelled at its deadline: %v", i, err)
		}
		if s := nodeStatus(t, p, nodes[0].Addr()); s.Errors != int64(requests+i+1) {
			t.Fatalf("after %d requests cancelled at their deadline on a hung node, %d node errors; want %d", i+1, s.Errors, requests+i+1)
		}
	}
}

func TestCallerDeadlineOnSlowNodeNotCounted(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{Latency: func(fakenode.Batch) time.Duration { return 60 * time.Millisecond }})
	cfg := testConfig(nodes.Addrs())
	cfg.Admission.Disabled = true
	p, _ := startProxy(t, cfg)
	for range 5 {
		score(t, p, makeRequest(4, 1)) // learns that this batch takes ~60ms
	}
	req := makeRequest(4, 1)
	req.TimeoutMs = 20
	if _, err := p.Score(context.Background(), req); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("20ms budget for 60ms of work: %v, want DeadlineExceeded", err)
	}
	if s := nodeStatus(t, p, nodes[0].Addr()); s.Errors != 0 {
		t.Errorf("a too-short caller deadline counted as %d node errors", s.Errors)
	}
}

func TestAdmission(t *testing.T) {
	// Each item of ~100 tokens costs ~5ms on these nodes.
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: costmodel.Coeffs{A: 5e-5, B: 1e-9, C: 1e-3}})
	cfg := testConfig(nodes.Addrs())
	cfg.Admission.MinSamples = 3
	p, reg := startProxy(t, cfg)
	for i := range 6 {
		score(t, p, makeRequest(8, uint64(i)))
	}
	req := makeRequest(200, 9)
	req.TimeoutMs = 20
	_, err := p.Score(context.Background(), req)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("200 items in 20ms: %v, want ResourceExhausted", err)
	}
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 {
		t.Errorf("no RetryInfo with a positive delay in %v", st.Details())
	}
	// Overload: the nodes report a big backlog from elsewhere.
	for _, n := range nodes {
		n.SetReportedLoad(30)
	}
	// The backlog is learned from replies: requests pass until both nodes have answered once.
	rejected := false
	for i := 0; i < 20 && !rejected; i++ {
		req = makeRequest(8, uint64(i))
		req.TimeoutMs = 2000
		_, err := p.Score(context.Background(), req)
		switch status.Code(err) {
		case codes.ResourceExhausted:
			rejected = true
		case codes.OK:
		default:
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if !rejected {
		t.Fatal("30s reported backlog, 2s budget: never rejected")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP relevance_proxy_rejected_total Requests rejected at admission, by reason (overload: the backlog makes the deadline unreachable; deadline: even idle nodes could not make it).
# TYPE relevance_proxy_rejected_total counter
relevance_proxy_rejected_total{reason="deadline"} 1
relevance_proxy_rejected_total{reason="overload"} 1
`), "relevance_proxy_rejected_total"); err != nil {
		t.Error(err)
	}
}

func TestRetryOnAnotherNode(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.Strategy, cfg.Split.MaxBatchItems = "fixed", 100 // one batch per request
	cfg.Route.Strategy = "random"
	p, _ := startProxy(t, cfg)
	nodes[0].FailNext(1, codes.Unavailable)
	var retried *relevancev1.ScoreResponse
	for i := 0; i < 200 && nodes[0].Calls() == 0; i++ {
		req := makeRequest(10, uint64(i))
		req.Options = &relevancev1.ScoreOptions{ReturnTimings: true}
		retried = score(t, p, req)
	}
	if nodes[0].Calls() != 1 || retried.GetTimings().GetRetries() != 1 || nodes[1].Batches() == 0 {
		t.Errorf("node0 calls %d, last request retries %d: want the failed batch retried once on node1", nodes[0].Calls(), retried.GetTimings().GetRetries())
	}

	// No budget: the failure surfaces.
	cfg.Retry.BudgetBurst, cfg.Retry.BudgetRatio = 0, 0
	p2, _ := startProxy(t, cfg)
	for _, n := range nodes {
		n.FailNext(1, codes.Unavailable)
	}
	if _, err := p2.Score(context.Background(), makeRequest(10, 1)); status.Code(err) != codes.Unavailable {
		t.Errorf("no retry budget: %v, want Unavailable", err)
	}
}

func TestHedgingBeatsStraggler(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Latency: func(fakenode.Batch) time.Duration { return 2 * time.Millisecond }})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.Strategy, cfg.Split.MaxBatchItems = "fixed", 100
	cfg.Route.Strategy = "round_robin"
	cfg.Hedge = HedgeConfig{Enabled: true, Quantile: 0.9, MinDelay: 5 * time.Millisecond, MinSamples: 5}
	p, reg := startProxy(t, cfg)
	for i := range 10 {
		score(t, p, makeRequest(4, uint64(i)))
	}
	nodes[0].SetHang(true)
	defer nodes[0].SetHang(false)
	hedged := 0
	for i := range 6 {
		req := makeRequest(4, uint64(i))
		req.Options = &relevancev1.ScoreOptions{ReturnTimings: true}
		start := time.Now()
		resp := score(t, p, req)
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("request %d took %v behind a hung node", i, el)
		}
		hedged += int(resp.GetTimings().GetHedges())
	}
	if hedged == 0 || testutil.ToFloat64(p.m.hedgeWins) == 0 {
		t.Fatalf("no hedge won over the hung node (hedges %d)", hedged)
	}
	if n, err := testutil.GatherAndCount(reg, "relevance_proxy_hedges_total"); err != nil || n != 1 {
		t.Errorf("hedges_total series: %d, %v", n, err)
	}
	if s := nodeStatus(t, p, nodes[0].Addr()); s.Errors != 0 {
		t.Errorf("cancelled hedge losers counted as %d errors", s.Errors)
	}
}

func TestPartialFailure(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	nodes[0].SetFailing(true, codes.Internal)
	cfg := testConfig(nodes.Addrs())
	cfg.Split.Strategy, cfg.Split.MaxBatchItems = "fixed", 4
	cfg.Route.Strategy = "round_robin"
	cfg.Retry.Disabled = true
	cfg.Breaker.ConsecutiveFailures = 1000
	tests := []struct {
		name         string
		mode         string
		allowPartial bool
		wantCode     codes.Code
	}{
		{"fail", PartialFail, false, codes.Unavailable},
		{"partial", PartialPartial, false, codes.OK},
		{"request allows partial", PartialFail, true, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.OnPartialFailure = tt.mode
			p, _ := startProxy(t, c)
			req := makeRequest(16, 1)
			req.Options = &relevancev1.ScoreOptions{AllowPartial: tt.allowPartial}
			resp, err := p.Score(context.Background(), req)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("got %v, want %v", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			checkScores(t, req, resp)
			var failed, ok int
			for _, s := range resp.GetScores() {
				switch s.GetStatus() {
				case relevancev1.ItemStatus_ITEM_STATUS_FAILED:
					failed++
					if !strings.Contains(s.GetError(), "injected failure") {
						t.Errorf("failed item error %q does not say why", s.GetError())
					}
				case relevancev1.ItemStatus_ITEM_STATUS_OK:
					ok++
				}
			}
			if d := cmp.Diff([]int{8, 8, 8}, []int{failed, ok, len(resp.GetRanking())}); d != "" {
				t.Errorf("failed, ok, ranked (-want +got):\n%s", d)
			}
		})
	}
}

func TestDNSMembership(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	_, port, _ := strings.Cut(nodes[0].Addr(), ":")
	var answer atomic.Pointer[[]string]
	set := func(ips ...string) { answer.Store(&ips) }
	set("127.0.0.1")
	cfg := testConfig(nil)
	cfg.Nodes.DNS = "scorer.test:" + port
	cfg.Nodes.DNSInterval = 10 * time.Millisecond
	p, err := New(cfg, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int64
	p.cluster.Lookup = func(_ context.Context, host string) ([]string, error) {
		lookups.Add(1)
		if host != "scorer.test" {
			return nil, fmt.Errorf("unexpected host %q", host)
		}
		a := answer.Load()
		if a == nil {
			return nil, fmt.Errorf("lookup %s: server misbehaving", host)
		}
		return *a, nil
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	score(t, p, makeRequest(5, 1))

	set() // the service scaled to zero
	if err := p.cluster.WaitFor(ctx, func() bool { return len(p.Nodes()) == 0 }); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Score(context.Background(), makeRequest(5, 2)); status.Code(err) != codes.Unavailable {
		t.Errorf("no members: %v, want Unavailable", err)
	}
	set("127.0.0.1")
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	answer.Store(nil) // resolver failures keep the last answer
	n := lookups.Load()
	waitUntil(t, "two more lookups", func() bool { return lookups.Load() >= n+2 })
	if got := len(p.Nodes()); got != 1 {
		t.Errorf("%d nodes after failed lookups, want the last answer kept", got)
	}
	score(t, p, makeRequest(5, 3))
}

func TestSlowNodeGetsLessWork(t *testing.T) {
	fast := costmodel.Coeffs{A: 2e-5, B: 1e-9, C: 5e-4}
	nodes := startNodes(t, 3, fakenode.Options{Coeffs: fast})
	nodes[0].SetCost(costmodel.Coeffs{A: 4 * fast.A, B: 4 * fast.B, C: 4 * fast.C})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.MaxBatchItems = 64
	p, _ := startProxy(t, cfg)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := range 15 {
				score(t, p, makeRequest(48, uint64(w*100+i)))
			}
		})
	}
	wg.Wait()
	slow, f1 := nodeStatus(t, p, nodes[0].Addr()), nodeStatus(t, p, nodes[1].Addr())
	t.Logf("speed ratio: slow %.2f, fast %.2f; items: slow %d, fast %d, %d", slow.SpeedRatio, f1.SpeedRatio, nodes[0].Items(), nodes[1].Items(), nodes[2].Items())
	if !(slow.SpeedRatio < 0.5*f1.SpeedRatio) {
		t.Errorf("learned speed: slow node %.2f vs fast %.2f, want under half", slow.SpeedRatio, f1.SpeedRatio)
	}
	if nodes[0].Items() >= nodes[1].Items() || nodes[0].Items() >= nodes[2].Items() {
		t.Errorf("slow node scored %d items, fast ones %d and %d: want fewer", nodes[0].Items(), nodes[1].Items(), nodes[2].Items())
	}
}

func TestMetricsLint(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	p, reg := startProxy(t, testConfig(nodes.Addrs()))
	score(t, p, makeRequest(20, 1))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("metric %s: %s", pr.Metric, pr.Text)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; empty: valid
	}{
		{"default with nodes", func(c *Config) {}, ""},
		{"no nodes", func(c *Config) { c.Nodes.Static = nil }, "proxy.nodes: need"},
		{"bad addr", func(c *Config) { c.Nodes.Static = []string{"nope"} }, `proxy.nodes.static[0]: must be host:port`},
		{"bad port", func(c *Config) { c.Nodes.Static = []string{"h:0"} }, `proxy.nodes.static[0]`},
		{"split", func(c *Config) { c.Split.Strategy = "magic" }, `proxy.split.strategy: must be one of cost, fixed, got "magic"`},
		{"route", func(c *Config) { c.Route.Strategy = "x" }, `proxy.route.strategy`},
		{"max batch", func(c *Config) { c.Split.MaxBatchItems = -3 }, "proxy.split.max_batch_items: must be > 0, got -3"},
		{"slo", func(c *Config) { c.SLO = 0 }, "proxy.slo: must be > 0, got 0s"},
		// A non-negative least-squares fit may return a zero coefficient (the wall-clock profile
		// has b = 0): valid. All zero, negative or NaN is not.
		{"prior zero b", func(c *Config) { c.Cost.Prior.B = 0 }, ""},
		{"prior all zero", func(c *Config) { c.Cost.Prior = costmodel.Coeffs{} }, "proxy.cost.prior: coefficients must not all be 0"},
		{"prior negative", func(c *Config) { c.Cost.Prior.A = -1 }, "proxy.cost.prior: cost coefficient a"},
		{"prior NaN", func(c *Config) { c.Cost.Prior.C = math.NaN() }, "proxy.cost.prior: cost coefficient c"},
		{"counter", func(c *Config) { c.Cost.TokenCounter = "bpe" }, "proxy.cost.token_counter"},
		{"partial", func(c *Config) { c.OnPartialFailure = "maybe" }, "proxy.on_partial_failure"},
		{"budget", func(c *Config) { c.Retry.BudgetRatio = 2 }, "proxy.retry.budget_ratio: must be in [0, 1], got 2"},
		{"hedge q", func(c *Config) { c.Hedge.Quantile = 1 }, "proxy.hedge.quantile"},
		// A bucket smaller than one token never holds a whole retry: retries silently off.
		{"burst below one", func(c *Config) { c.Retry.BudgetBurst = 0.5 }, "proxy.retry.budget_burst: must be 0 (no retries) or ≥ 1, got 0.5"},
		{"burst zero", func(c *Config) { c.Retry.BudgetBurst = 0 }, ""},
		// The target adapts margin_quantile; with the margin off it moved a gauge and nothing else.
		{"on-time target without a margin", func(c *Config) { c.Admission.OnTimeTarget, c.Admission.MarginQuantile = 0.99, 0 },
			"proxy.admission.on_time_target: needs admission.margin_quantile > 0"},
		{"on-time target with a margin", func(c *Config) { c.Admission.OnTimeTarget = 0.99 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Nodes.Static = []string{"127.0.0.1:7000"}
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
