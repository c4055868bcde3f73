package admit

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/plan"
)

// TestOverloadRetryDelayIsTheBacklogThatMustDrain: an overloaded request's RetryInfo delay is
// how long the backlog ahead of it must drain before the same plan fits — with a margin m the
// plan fits once m·(T − d) ≤ headroom·B, so d = T − headroom·B/m. A retry sent after the delay
// must be admitted (a margin below 1 gave half the wait, so the retry was refused again), and
// the delay must not be longer than needed (a margin of 2 made the client wait twice as long).
func TestOverloadRetryDelayIsTheBacklogThatMustDrain(t *testing.T) {
	n := new(cluster.Node)
	for _, tc := range []struct {
		ratio            float64 // every batch answered at this multiple of its projection
		start, predicted float64
	}{
		{0.5, 1.5, 0.5}, // margin 0.5: T = 2 s, 1 s in a 0.5 s budget
		{2, 0.75, 0.25}, // margin 2: T = 1 s, 2 s in a 0.5 s budget
	} {
		var acc plan.Accuracy
		for range 256 {
			acc.Add(tc.ratio)
		}
		a := New(Config{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9}, &acc, nil)
		if m := a.MarginFor(1); m != tc.ratio {
			t.Fatalf("margin %v, want %v", m, tc.ratio)
		}
		budget := 500 * time.Millisecond
		err := a.Admit(planOf(10, bt{n, tc.start, tc.predicted}), budget)
		if err == nil {
			t.Fatalf("margin %v: %v s projected in %v admitted", tc.ratio, tc.start+tc.predicted, budget)
		}
		if r := err.(*Rejection); r.reason != ReasonOverload {
			t.Fatalf("margin %v: reason %s, want overload", tc.ratio, r.reason)
		}
		d := retryDelay(t, err).Seconds()
		// The same request after waiting d: the backlog ahead of it has drained by d.
		after := func(wait float64) error {
			return a.Admit(planOf(10, bt{n, max(0, tc.start-wait), tc.predicted}), budget)
		}
		if err := after(d); err != nil {
			t.Errorf("margin %v: RetryInfo %.3fs, but the retry after it is refused again: %v", tc.ratio, d, err)
		}
		if err := after(d - 0.02); err == nil {
			t.Errorf("margin %v: RetryInfo %.3fs, but a retry 20 ms sooner is already admitted (the delay overstates the backlog)", tc.ratio, d)
		}
	}
}

// TestDeadlineRetryDelayIsTheBudgetThatFits: a request refused as "deadline" gets, as its
// RetryInfo delay, the budget it needs (package doc); resent with that budget it must be
// admitted. With headroom h the plan fits a budget B when m·idle ≤ h·B, so the budget is idle/h,
// not idle.
func TestDeadlineRetryDelayIsTheBudgetThatFits(t *testing.T) {
	n := new(cluster.Node)
	p := planOf(10, bt{n, 0, 0.4}, bt{n, 0.4, 0.4}) // 0.8 s of its own work on one node
	a := New(Config{Headroom: 0.5, MinSamples: 10}, nil, nil)
	err := a.Admit(p, time.Second)
	if err == nil {
		t.Fatal("0.8 s of work in 0.5 × 1 s admitted")
	}
	if r := err.(*Rejection); r.reason != ReasonDeadline {
		t.Fatalf("reason %s, want deadline", r.reason)
	}
	need := retryDelay(t, err)
	if err := a.Admit(p, need); err != nil {
		t.Errorf("RetryInfo says the request needs a %v budget, but with it it is refused again: %v", need, err)
	}
}

// TestIdleClusterTooSmallIsDeadline: three equal batches on two idle nodes cannot finish before
// two batches' time however long the client waits: that is a deadline refusal, whatever share
// of the cluster the work would take.
func TestIdleClusterTooSmallIsDeadline(t *testing.T) {
	a, b := new(cluster.Node), new(cluster.Node)
	p := planOf(10, bt{a, 0, 0.3}, bt{b, 0, 0.3}, bt{a, 0.3, 0.3})
	p.Candidates = 2
	err := New(Config{Headroom: 1, MinSamples: 10}, nil, nil).Admit(p, 500*time.Millisecond)
	if r, ok := err.(*Rejection); !ok || r.reason != ReasonDeadline {
		t.Fatalf("3 × 0.3 s on 2 idle nodes in 0.5 s: %v, want a deadline refusal", err)
	}
	if d := retryDelay(t, err); d != 600*time.Millisecond {
		t.Errorf("RetryInfo %v, want the 600ms budget it needs", d)
	}
}
