package admit

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/plan"
)

// planOf builds a plan whose batches sit on the given nodes with the given (start, predicted).
func planOf(minSamples int64, batches ...struct {
	node             *cluster.Node
	start, predicted float64
}) *plan.Plan {
	p := &plan.Plan{MinSamples: minSamples}
	for i, b := range batches {
		p.Batches = append(p.Batches, &plan.Batch{Index: i, Lease: &plan.Lease{Node: b.node, Start: b.start, Predicted: b.predicted, Finish: b.start + b.predicted}})
	}
	return p
}

type bt = struct {
	node             *cluster.Node
	start, predicted float64
}

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("%v: no RetryInfo", err)
	return 0
}

// TestAdmitReadsThePlansFinish: admission compares the plan's projected finish (the latest
// batch's node backlog plus its cost there) with headroom × budget; it places nothing itself.
func TestAdmitReadsThePlansFinish(t *testing.T) {
	a, b := new(cluster.Node), new(cluster.Node)
	tests := []struct {
		name       string
		plan       *plan.Plan
		budget     time.Duration
		headroom   float64
		wantReason string // "" admitted
		wantRetry  time.Duration
	}{
		{"fits", planOf(10, bt{a, 0.1, 0.2}, bt{b, 0, 0.25}), 500 * time.Millisecond, 1, "", 0},
		{"backlog makes it late", planOf(10, bt{a, 0.4, 0.2}, bt{b, 0, 0.25}), 500 * time.Millisecond, 1, ReasonOverload, 100 * time.Millisecond},
		{"headroom tightens", planOf(10, bt{a, 0.1, 0.2}, bt{b, 0, 0.25}), 500 * time.Millisecond, 0.5, ReasonOverload, 50 * time.Millisecond},
		// Two batches on one node: 0.3 + 0.3 of its own work cannot fit 0.5 s even when idle.
		{"idle nodes too slow", planOf(10, bt{a, 0, 0.3}, bt{a, 0.3, 0.3}), 500 * time.Millisecond, 1, ReasonDeadline, 600 * time.Millisecond},
		{"untrained projections admitted", planOf(3, bt{a, 5, 0.2}), 500 * time.Millisecond, 1, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rej := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected_total", Help: "x"}, []string{"reason"})
			a := New(Config{Headroom: tt.headroom, MinSamples: 10}, nil, rej)
			err := a.Admit(tt.plan, tt.budget)
			if got := testutil.ToFloat64(rej.WithLabelValues(tt.wantReason)); tt.wantReason != "" && got != 0 {
				t.Errorf("rejection counted before Count: %v", got)
			}
			a.Count(err)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("Admit: %v, want admitted", err)
				}
				return
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("Admit: %v, want RESOURCE_EXHAUSTED", err)
			}
			if got := testutil.ToFloat64(rej.WithLabelValues(tt.wantReason)); got != 1 {
				t.Errorf("rejected{reason=%s} = %v, want 1 (err %v)", tt.wantReason, got, err)
			}
			if d := retryDelay(t, err); math.Abs(d.Seconds()-tt.wantRetry.Seconds()) > 1e-3 {
				t.Errorf("RetryInfo %v, want %v", d, tt.wantRetry)
			}
			// A request no wait can save says what it needs instead of "try later".
			if msg := status.Convert(err).Message(); (tt.wantReason == ReasonDeadline) != strings.Contains(msg, "send a longer deadline") {
				t.Errorf("message %q for reason %s", msg, tt.wantReason)
			}
		})
	}
}

func TestAdmitDisabled(t *testing.T) {
	p := planOf(100, bt{new(cluster.Node), 10, 10})
	if err := New(Config{Disabled: true, Headroom: 1}, nil, nil).Admit(p, time.Millisecond); err != nil {
		t.Errorf("disabled admission rejected: %v", err)
	}
}

// TestAdmitMarginFromMeasuredError: when batches have been answered later than projected, the
// plan's finish is stretched by that measured error before it is compared with the budget.
func TestAdmitMarginFromMeasuredError(t *testing.T) {
	var acc plan.Accuracy
	for range 32 {
		acc.Add(1.5) // answered 1.5× later than projected
	}
	p := planOf(10, bt{new(cluster.Node), 0, 0.4})
	if err := New(Config{Headroom: 1, MinSamples: 10}, &acc, nil).Admit(p, 500*time.Millisecond); err != nil {
		t.Errorf("no margin configured: %v", err)
	}
	a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9}, &acc, nil)
	if m := a.Margin(); m != 1.5 {
		t.Errorf("margin %v, want 1.5", m)
	}
	if err := a.Admit(p, 500*time.Millisecond); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("0.4 s projected × 1.5 measured error in a 0.5 s budget: %v, want rejected", err)
	}
	if err := a.Admit(p, 700*time.Millisecond); err != nil {
		t.Errorf("0.6 s in 0.7 s: %v", err)
	}
}

// TestMarginGrowsWithTheBatchesThatMustAllBeOnTime: a request is on time only when every batch
// is, so a plan of k batches is stretched by the MarginQuantile^(1/k) quantile of the batches'
// error: with 90 % of batches on time at 1.0× and 10 % at 1.5×, one batch needs no stretch past
// 1.0 at p90, but four batches (each on time 97.4 % of the time) need 1.5.
func TestMarginGrowsWithTheBatchesThatMustAllBeOnTime(t *testing.T) {
	var acc plan.Accuracy
	for i := range 160 {
		r := 1.0
		if i%10 == 0 {
			r = 1.5
		}
		acc.Add(r)
	}
	a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9}, &acc, nil)
	if m := a.MarginFor(1); m != 1 {
		t.Errorf("one batch: margin %v, want 1", m)
	}
	if m := a.MarginFor(4); m != 1.5 {
		t.Errorf("four batches: margin %v, want 1.5", m)
	}
	n := new(cluster.Node)
	one := planOf(10, bt{n, 0, 0.4})
	four := planOf(10, bt{n, 0, 0.4}, bt{n, 0, 0.4}, bt{n, 0, 0.4}, bt{n, 0, 0.4})
	if err := a.Admit(one, 500*time.Millisecond); err != nil {
		t.Errorf("one batch of 0.4 s in 0.5 s: %v", err)
	}
	if err := a.Admit(four, 500*time.Millisecond); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("four batches of 0.4 s (× 1.5) in 0.5 s: %v, want rejected", err)
	}
}

// TestMarginTightensWhileAdmittedRequestsRunLate: with an on-time target the margin's quantile
// starts at MarginQuantile, rises while admitted requests run late (each halves its tail), and
// returns to MarginQuantile while they are on time; without a target outcomes change nothing.
func TestMarginTightensWhileAdmittedRequestsRunLate(t *testing.T) {
	var acc plan.Accuracy
	for i := range 256 {
		acc.Add(1 + float64(i)/256) // errors spread evenly over [1, 2)
	}
	a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9, OnTimeTarget: 0.99}, &acc, nil)
	if q := a.Quantile(); q != 0.9 {
		t.Fatalf("quantile %v before any outcome, want margin_quantile 0.9", q)
	}
	loose := a.Margin()
	for range 3 {
		a.Outcome(true)
	}
	if q := a.Quantile(); math.Abs(q-(1-0.1/8)) > 1e-12 {
		t.Errorf("quantile %v after 3 late requests, want 1 − 0.1/8", q)
	}
	if m := a.Margin(); !(m > loose+0.05) {
		t.Errorf("margin %v after late requests, want well above %v", m, loose)
	}
	for range 20 {
		a.Outcome(true)
	}
	if q := a.Quantile(); math.Abs(q-0.999) > 1e-12 {
		t.Errorf("quantile %v after many late requests, want its ceiling 1 − (1 − 0.99)/10", q)
	}
	for range 5000 {
		a.Outcome(false)
	}
	if q := a.Quantile(); q != 0.9 {
		t.Errorf("quantile %v after a long run on time, want back at 0.9", q)
	}

	fixed := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9}, &acc, nil)
	for range 10 {
		fixed.Outcome(true)
	}
	if q := fixed.Quantile(); q != 0.9 {
		t.Errorf("no on-time target: quantile %v after late requests, want 0.9 fixed", q)
	}
}

// TestAdmittedRequestsAreOnTimeAtTheTargetShare: under overload every admitted plan sits at the
// edge of its budget, so a request admitted with the margin's quantile q is late with
// probability 1 − q. A fixed q of 0.9 then breaks a 99 % promise ten times over; the adapted
// quantile keeps the late share at the target.
func TestAdmittedRequestsAreOnTimeAtTheTargetShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		target float64
		lo, hi float64 // accepted late share
	}{
		{0.99, 0.007, 0.013},
		{0.95, 0.04, 0.06},
		{0, 0.09, 0.11}, // fixed margin_quantile 0.9
	} {
		a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9, OnTimeTarget: tc.target}, nil, nil)
		late, n := 0, 200000
		for range n {
			l := rng.Float64() > a.Quantile()
			if l {
				late++
			}
			a.Outcome(l)
		}
		if share := float64(late) / float64(n); share < tc.lo || share > tc.hi {
			t.Errorf("target %v: %.4f of admitted requests late, want in [%v, %v]", tc.target, share, tc.lo, tc.hi)
		}
	}
}

// TestYoungWindowNeverShrinksTheProjection: a margin below 1 (the projections ran long) admits
// plans projected past the budget, so it waits for a window's worth of batches; the cluster's
// first batches, answered before any queue formed, are not that evidence.
func TestYoungWindowNeverShrinksTheProjection(t *testing.T) {
	var acc plan.Accuracy
	a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9}, &acc, nil)
	for range 32 {
		acc.Add(0.8)
	}
	if m := a.Margin(); m != 1 {
		t.Errorf("32 batches answered at 0.8× their projection: margin %v, want 1", m)
	}
	for range youngWindow {
		acc.Add(0.8)
	}
	if m := a.Margin(); m != 0.8 {
		t.Errorf("%d batches at 0.8×: margin %v, want 0.8", 32+youngWindow, m)
	}
}
