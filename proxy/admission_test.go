package proxy

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
)

// replanCase is a proxy over 4 nodes where each batch pays a large overhead, and a request of 32
// items whose economical plan (few batches) finishes later than its urgent plan (more, smaller
// batches): ef and uf seconds.
type replanCase struct {
	p      *Proxy
	reg    *prometheus.Registry
	req    *relevancev1.ScoreRequest
	ef, uf float64
}

func newReplanCase(t *testing.T, fit float64) replanCase {
	t.Helper()
	coeffs := costmodel.Coeffs{A: 1e-4, C: 0.2}
	nodes := startNodes(t, 4, fakenode.Options{Coeffs: coeffs, Parallel: true})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = coeffs
	cfg.Split.MaxBatchItems = 64
	cfg.Admission.MinSamples = 0
	cfg.Admission.MarginQuantile = 0
	cfg.Admission.Replan, cfg.Admission.ReplanFit = true, fit
	c := replanCase{req: &relevancev1.ScoreRequest{Query: "q"}}
	c.p, c.reg = startProxy(t, cfg)
	for range 32 {
		c.req.Items = append(c.req.Items, &relevancev1.Item{Text: strings.Repeat("word ", 60)})
	}
	eco := c.p.planner.Plan(c.req, "x", "")
	eb := len(eco.Batches)
	c.ef = eco.Finish()
	eco.Release()
	urgent := c.p.planner.Urgent(c.req, "y", "")
	ub := len(urgent.Batches)
	c.uf = urgent.Finish()
	urgent.Release()
	if ub <= eb || c.uf >= c.ef {
		t.Fatalf("test shape: economical %d batches finishing %.3fs, urgent %d at %.3fs", eb, c.ef, ub, c.uf)
	}
	return c
}

// TestAdmissionTriesAFasterPlan: a request whose economical plan (few batches, since each pays
// the prefix and a large overhead again) would finish past its budget is not refused while a
// plan of more, smaller batches fits: admission asks the planner for the fastest plan first.
func TestAdmissionTriesAFasterPlan(t *testing.T) {
	c := newReplanCase(t, 1)
	c.req.TimeoutMs = uint32((c.uf + c.ef) / 2 * 1000) // the economical plan misses it, the urgent fits
	resp, err := c.p.Score(context.Background(), c.req)
	if err != nil {
		t.Fatalf("budget %d ms between the plans (%.0f / %.0f ms): %v", c.req.TimeoutMs, c.ef*1e3, c.uf*1e3, err)
	}
	if got := len(resp.GetScores()); got != 32 {
		t.Errorf("%d scores", got)
	}
	if n := counterValue(t, c.reg, "relevance_proxy_rejected_total"); n != 0 {
		t.Errorf("rejected_total %v for an admitted request", n)
	}
	if got := testutil.ToFloat64(c.p.m.replans.WithLabelValues(replanAdmitted)); got != 1 {
		t.Errorf("admission_replans_total{outcome=admitted} %v, want 1", got)
	}
}

// TestAdmissionReplanMustFitWellInsideTheBudget: the faster plan is admitted only when it fits
// within admission.replan_fit of the budget, so that under overload a request whose economical
// plan missed is not let in on a plan that barely makes it.
func TestAdmissionReplanMustFitWellInsideTheBudget(t *testing.T) {
	c := newReplanCase(t, 0.5)
	// The urgent plan fits the budget but not half of it; the economical one misses it.
	budget := min(c.ef*0.95, c.uf*1.5)
	if !(c.uf < budget && c.uf > budget*0.5 && c.ef > budget) {
		t.Fatalf("test shape: economical %.3fs, urgent %.3fs, budget %.3fs", c.ef, c.uf, budget)
	}
	c.req.TimeoutMs = uint32(budget * 1000)
	_, err := c.p.Score(context.Background(), c.req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("budget %.0f ms, urgent plan %.0f ms (over replan_fit 0.5 of it): got %v, want RESOURCE_EXHAUSTED", budget*1e3, c.uf*1e3, err)
	}
	if n := counterValue(t, c.reg, "relevance_proxy_rejected_total"); n != 1 {
		t.Errorf("rejected_total %v, want 1", n)
	}
	// Operators tell a refusal that a faster plan could not save from one it never tried.
	for o, want := range map[string]float64{replanRefused: 1, replanAdmitted: 0, replanNoFiner: 0} {
		if got := testutil.ToFloat64(c.p.m.replans.WithLabelValues(o)); got != want {
			t.Errorf("admission_replans_total{outcome=%s} %v, want %v", o, got, want)
		}
	}
}

// counterValue sums every series of a counter family in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestAdmittedRequestsReportTheirProjectionError: every admitted request whose nodes had learned
// their cost adds its time over the plan's projected finish to the request-level histogram, the
// figure admission's margin has to cover; with a node model that matches the fake nodes' true
// cost, the ratios sit near 1.
func TestAdmittedRequestsReportTheirProjectionError(t *testing.T) {
	coeffs := costmodel.Coeffs{A: 1e-5, C: 0.01}
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: coeffs})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = coeffs
	cfg.Admission.MinSamples = 2
	p, reg := startProxy(t, cfg)
	for i := range 12 {
		if _, err := p.Score(context.Background(), makeRequest(6, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// The margin gauge shows what admission multiplies projections by: learned from the batches
	// now, so not the untrained 1 unless the projections were exactly right.
	margin := gaugeValue(t, reg, "relevance_proxy_admission_margin")
	if want := p.admitter.Margin(); margin != want || !(margin >= 0.5 && margin <= 4) {
		t.Errorf("relevance_proxy_admission_margin %v, admission's margin %v (clamped to [0.5, 4])", margin, want)
	}
	for _, mf := range mfs {
		if mf.GetName() != "relevance_proxy_request_projection_ratio" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() < 8 {
			t.Fatalf("%d requests recorded of 12 (the first few, before the nodes learned, may be left out)", h.GetSampleCount())
		}
		if mean := h.GetSampleSum() / float64(h.GetSampleCount()); mean < 0.5 || mean > 3 {
			t.Errorf("mean ratio %.2f, want near 1", mean)
		}
		return
	}
	t.Fatal("relevance_proxy_request_projection_ratio not exported")
}

// burstCase is a proxy over 2 fake nodes where every batch takes 0.3 s, one batch per node per
// request, and a 1 s budget: three requests fit.
func burstCase(t *testing.T, prime bool, minSamples int) (*Proxy, fakenode.Cluster) {
	coeffs := costmodel.Coeffs{A: 1e-6, C: 0.3}
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: coeffs})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = coeffs
	cfg.Cost.Prime = prime
	cfg.Split.MaxBatchItems = 1
	cfg.Admission.MinSamples = minSamples
	cfg.Admission.MarginQuantile = 0
	cfg.Admission.Replan = false
	p, _ := startProxy(t, cfg)
	return p, nodes
}

// sendBurst sends 8 requests at once and checks that at most the 3 that fit were admitted, the
// rest refused at once, and none failed.
func sendBurst(t *testing.T, p *Proxy) {
	t.Helper()
	const burst = 8
	var admitted, rejected, failed atomic.Int32
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			req := &relevancev1.ScoreRequest{Query: fmt.Sprintf("burst %d", i), TimeoutMs: 1000,
				Items: []*relevancev1.Item{{Text: "first item"}, {Text: "second item"}}}
			_, err := p.Score(context.Background(), req)
			switch status.Code(err) {
			case codes.OK:
				admitted.Add(1)
			case codes.ResourceExhausted:
				rejected.Add(1)
			default:
				failed.Add(1)
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// Three requests fit 1 s on two nodes at 0.3 s a batch (finishing at 0.3, 0.6, 0.9 s).
	if a := admitted.Load(); a > 3 || a < 1 || failed.Load() != 0 {
		t.Errorf("admitted %d, rejected %d, failed %d of %d: want at most the 3 that fit, the rest refused at once", a, rejected.Load(), failed.Load(), burst)
	}
}

// TestBurstIsAdmittedOnlyAsFarAsTheBudgetGoes: requests arriving at the same moment each see the
// others' batches in their projection, so a burst larger than the cluster can serve within the
// budget is cut at admission (429 at once), and every admitted request is answered.
func TestBurstIsAdmittedOnlyAsFarAsTheBudgetGoes(t *testing.T) {
	p, _ := burstCase(t, false, 0)
	sendBurst(t, p)
}

// TestNodesArePrimedWithTheirCostModel: a node that becomes healthy gets one tiny batch whose
// reply seeds the proxy's model of it, so admission trusts projections before any request was
// answered, and a fresh cluster's first burst is cut at admission rather than admitted blind
// (on `make run`, 8 requests of 24 documents to a fresh cluster were all admitted and 2–3 of
// them missed their deadline).
func TestNodesArePrimedWithTheirCostModel(t *testing.T) {
	p, nodes := burstCase(t, true, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		primed := true
		for _, n := range p.cluster.Snapshot() {
			primed = primed && n.Samples() >= 1 && n.Inflight() == 0
		}
		for _, n := range nodes {
			primed = primed && n.Calls() == 1
		}
		if primed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nodes not primed 5 s after start: no node has a sample before the first request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(350 * time.Millisecond) // the priming passes (0.3 s each) have ended on the nodes
	sendBurst(t, p)
}

// TestMergedPassesDoNotWidenTheMargin: a node that merges queued batches into one pass answers
// the first of them later than the plan projected (it waits for the whole pass) — by a delay
// the node reports and takes only where deadlines allow. That delay is no error of the plan's:
// waves of concurrent requests on one merging node leave admission's margin near 1, where
// counting it would stretch every projection several times over and refuse work that fits.
//
// The passes take 0.1 s: scheduling jitter on a loaded -race CI (every package's tests at once on
// two cores) adds to a batch's time what no plan could know, and at 0.05 s it once reached a
// margin of 1.52. A merge delay counted as error grows with the pass, so the bound still tells
// the two apart (2.56 without the fix, measured at 0.05 s).
func TestMergedPassesDoNotWidenTheMargin(t *testing.T) {
	coeffs := costmodel.Coeffs{A: 1e-5, C: 0.1}
	nodes := startNodes(t, 1, fakenode.Options{Coeffs: coeffs})
	cfg := testConfig(nodes.Addrs())
	cfg.Cost.Prior = coeffs
	cfg.Split.MaxBatchItems = 64
	cfg.Admission.MinSamples = 4
	cfg.Hedge.Enabled = false
	p, _ := startProxy(t, cfg)
	for wave := range 6 {
		var wg sync.WaitGroup
		for i := range 6 {
			// A few milliseconds apart, so that the node receives the batches in the order the
			// proxy placed them (the projections' queue order).
			time.Sleep(3 * time.Millisecond)
			wg.Go(func() {
				if _, err := p.Score(context.Background(), makeRequest(3, uint64(100*wave+i))); err != nil {
					t.Errorf("wave %d request %d: %v", wave, i, err)
				}
			})
		}
		wg.Wait()
	}
	merged := nodes[0].Batches() - nodes[0].Passes()
	if merged == 0 {
		t.Fatal("test shape: the node merged no batches (nothing queued behind a running pass)")
	}
	if m := p.admitter.Margin(); m > 1.25 {
		t.Errorf("admission margin %.2f after %d merged passes, want ≤ 1.25 (merge delays counted as projection error)", m, merged)
	}
}

// TestLateAdmittedRequestsTightenAdmission: admission is judged by whether what it admitted was
// answered in time. Requests admitted on a node's learned speed (0.1 s a batch, in a 0.15 s
// budget: a tight plan) that then run past their deadline (the node slowed to 0.4 s) raise the
// quantile admission takes its margin at, in the gauge too; without an on-time target it stays
// where it was configured. (Headroom 2 keeps admission itself out of the way; a slow_min of 1 s
// keeps the node from being counted slow, which would make the lateness a fault's.)
func TestLateAdmittedRequestsTightenAdmission(t *testing.T) {
	for _, target := range []float64{0.99, 0} {
		t.Run(fmt.Sprintf("on_time_target=%v", target), func(t *testing.T) {
			var slow atomic.Bool
			nodes := startNodes(t, 1, fakenode.Options{Latency: func(fakenode.Batch) time.Duration {
				if slow.Load() {
					return 400 * time.Millisecond
				}
				return 100 * time.Millisecond
			}})
			cfg := testConfig(nodes.Addrs())
			cfg.Admission.MinSamples, cfg.Admission.Headroom = 2, 2
			cfg.Admission.MarginQuantile, cfg.Admission.OnTimeTarget = 0.9, target
			cfg.Outlier.SlowMin = time.Second
			p, reg := startProxy(t, cfg)
			for i := range 8 {
				if _, err := p.Score(context.Background(), makeRequest(2, uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			if q := p.admitter.Quantile(); q != 0.9 {
				t.Fatalf("quantile %v with every request on time, want 0.9", q)
			}
			slow.Store(true)
			late := 0
			for i := range 3 {
				req := makeRequest(2, uint64(100+i))
				req.TimeoutMs = 150
				if _, err := p.Score(context.Background(), req); status.Code(err) == codes.DeadlineExceeded {
					late++
				}
			}
			if late != 3 {
				t.Fatalf("%d of 3 requests to the slowed node ran late, want 3 (admitted on its old speed)", late)
			}
			want := 0.9
			if target > 0 {
				want = 1 - 0.1/8
			}
			if q := p.admitter.Quantile(); math.Abs(q-want) > 1e-9 {
				t.Errorf("quantile %v after 3 late requests, want %v", q, want)
			}
			if g := gaugeValue(t, reg, "relevance_proxy_admission_quantile"); math.Abs(g-want) > 1e-9 {
				t.Errorf("relevance_proxy_admission_quantile %v, want %v", g, want)
			}
		})
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}

// TestLatenessJudgesOnlyWhatAMarginCovers: admission's on-time share counts a late request only
// when a margin could have kept it out — its plan was tight (at least half the budget) and no
// node was counted slow for it; a batch lost to a failure says nothing either way.
func TestLatenessJudgesOnlyWhatAMarginCovers(t *testing.T) {
	late := dispatch.Result{Err: status.Error(codes.DeadlineExceeded, "batch cannot finish before its deadline")}
	ok := dispatch.Result{}
	lost := dispatch.Result{Err: status.Error(codes.Unavailable, "node gone")}
	slowOK := dispatch.Result{Slow: true}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	tests := []struct {
		name              string
		ctx               context.Context
		results           []dispatch.Result
		projected         float64
		wantLate, wantJug bool
	}{
		{"answered in time", context.Background(), []dispatch.Result{ok, ok}, 0.4, false, true},
		{"refused by a node as late", context.Background(), []dispatch.Result{ok, late}, 0.4, true, true},
		{"deadline passed", expired, []dispatch.Result{ok, {Err: context.Canceled}}, 0.4, true, true},
		{"late although projected at a fifth of the budget", context.Background(), []dispatch.Result{late}, 0.1, true, false},
		{"late on a node counted slow", context.Background(), []dispatch.Result{{Err: late.Err, Slow: true}}, 0.4, true, false},
		{"in time, rescued from a slow node", context.Background(), []dispatch.Result{slowOK}, 0.4, false, false},
		{"a batch lost to a failure", context.Background(), []dispatch.Result{ok, lost}, 0.4, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, j := lateness(tt.ctx, tt.results, tt.projected, 0.5)
			if l != tt.wantLate || j != tt.wantJug {
				t.Errorf("lateness = (late %v, judged %v), want (%v, %v)", l, j, tt.wantLate, tt.wantJug)
			}
		})
	}
}
