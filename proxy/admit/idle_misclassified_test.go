package admit

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/plan"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
)

// TestBusyPeerIsOverloadNotDeadline: two nodes, one idle and one 10 s behind. A two-batch
// request (one item a batch) is planned with both batches queued on the idle node, so its plan
// finishes after 2 batches' time; its budget holds 1.5. On the nodes idle it would run one batch
// on each and fit: the same request with the same budget is admitted once the backlog drains. So
// it is an overload refusal (wait for the backlog), not "deadline" ("even on idle nodes": send a
// longer deadline, a retry with the same budget would be refused again).
func TestBusyPeerIsOverloadNotDeadline(t *testing.T) {
	c, pl := twoNodePlanner(t, plan.Config{MaxBatchItems: 1})
	req := &relevancev1.ScoreRequest{Query: "usb-c charger"}
	for i := range 2 {
		req.Items = append(req.Items, &relevancev1.Item{Text: fmt.Sprintf("item %d: a 65 W GaN charger", i)})
	}
	a := New(Config{Headroom: 1, MinSamples: 0}, nil, nil)

	busy := c.Snapshot()[1]
	backlog := plan.NewPlacer(c, nil).PlaceOn(plan.Work{Features: costmodel.Features{Batches: 1000}}, busy) // 10 s
	if backlog == nil {
		t.Fatal("no lease on the busy node")
	}
	p := pl.Plan(req, "r", "")
	if len(p.Batches) != 2 || p.Batches[0].Lease.Node != p.Batches[1].Lease.Node {
		t.Fatalf("want both batches on the idle node, got %d batches", len(p.Batches))
	}
	one := p.Batches[0].Lease.Predicted
	budget := time.Duration(1.5 * one * float64(time.Second))
	refused := a.Admit(p, budget)
	p.Release()
	backlog.Release()
	if refused == nil {
		t.Fatalf("2 × %.3fs queued on one node admitted in %v", one, budget)
	}

	// The backlog drained: the same request, the same budget.
	p2 := pl.Plan(req, "r", "")
	defer p2.Release()
	if err := a.Admit(p2, budget); err != nil {
		t.Fatalf("after the backlog drained: %v", err)
	}
	if r := refused.(*Rejection); r.reason != ReasonOverload {
		t.Errorf("refused as %q (%v), but the same request with the same budget is admitted once the other node's backlog drains", r.reason, refused)
	}
}

// TestBusyPeerIsOverloadWhateverTheSplit: TestBusyPeerIsOverloadNotDeadline with the planner's
// default batch cap (none) and a request that an idle cluster splits over both nodes. Behind a
// busy peer the cost splitter picks fewer batches, all on the idle node; a bound that only
// re-spread the plan's own batches still saw one node's worth of work and called "deadline" a
// request that the same budget fits once the peer drains.
func TestBusyPeerIsOverloadWhateverTheSplit(t *testing.T) {
	c, pl := twoNodePlanner(t, plan.Config{})
	req := &relevancev1.ScoreRequest{Query: "usb-c charger"}
	for i := range 64 {
		req.Items = append(req.Items, &relevancev1.Item{Text: fmt.Sprintf("item %d: %s", i, strings.Repeat("a 65 W GaN charger ", 20))})
	}
	a := New(Config{Headroom: 1, MinSamples: 0}, nil, nil)

	idle := pl.Plan(req, "r", "")
	idleFinish, idleBatches := idle.Finish(), len(idle.Batches)
	idle.Release()

	busy := c.Snapshot()[1]
	backlog := plan.NewPlacer(c, nil).PlaceOn(plan.Work{Features: costmodel.Features{Batches: 1000}}, busy) // 10 s
	p := pl.Plan(req, "r", "")
	busyFinish, busyBatches, bound := p.Finish(), len(p.Batches), idleBound(p)
	t.Logf("idle cluster: %d batches, finish %.3fs; busy peer: %d batches, finish %.3fs, idleBound %.3fs, candidates %d",
		idleBatches, idleFinish, busyBatches, busyFinish, bound, p.Candidates)
	budget := time.Duration((idleFinish + busyFinish) / 2 * float64(time.Second))
	refused := a.Admit(p, budget)
	p.Release()
	backlog.Release()
	if refused == nil {
		t.Fatalf("admitted in %v behind a 10 s backlog: the test needs a refusal", budget)
	}
	p2 := pl.Plan(req, "r", "")
	defer p2.Release()
	if err := a.Admit(p2, budget); err != nil {
		t.Fatalf("not admitted on the idle cluster either: %v", err)
	}
	if r := refused.(*Rejection); r.reason != ReasonOverload {
		t.Errorf("refused as %q (%v) though the same request with the same budget %v is admitted once the peer's backlog drains", r.reason, refused, budget)
	}
	// The request fits once the busy peer has drained enough of its 10 s to take the part the
	// idle node cannot (~5 s here). Its own plan's overrun, busyFinish − budget (~2.5 s), was
	// the delay, and a retry then was refused again.
	if d, own := retryDelay(t, refused), time.Duration((busyFinish-budget.Seconds())*float64(time.Second)); d < own+time.Second || d > 10*time.Second {
		t.Errorf("RetryInfo %v behind a peer with 10 s queued (its own plan's overrun %v), want the time until enough of the peer's backlog has drained", d, own)
	}
}

// TestDrainDelayIsWhenTheWorkFitsOnTheDrainingNodes pins drainDelay's arithmetic: the least
// delay after which the work, spread over nodes whose backlogs drain a second per second, fits
// within the time allowed.
func TestDrainDelayIsWhenTheWorkFitsOnTheDrainingNodes(t *testing.T) {
	for _, c := range []struct {
		backlogs           []float64
		work, within, want float64
	}{
		{[]float64{0, 10}, 2, 1.5, 9},    // the idle node takes 1.5; the busy one 0.5 once at 1.0 left
		{[]float64{2, 2}, 1, 1, 1.5},     // each takes 0.5 once at 0.5 left
		{[]float64{0, 10}, 1, 1.5, 0},    // fits on the idle node now
		{[]float64{3, 1, 0}, 3, 1, 3},    // needs every node idle
		{[]float64{0.8, 0.8}, 1, 1, 0.3}, // each takes 0.5 once at 0.3 left
	} {
		if got := drainDelay(c.backlogs, c.work, c.within); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("drainDelay(%v, work %v, within %v) = %v, want %v", c.backlogs, c.work, c.within, got, c.want)
		}
	}
}

// twoNodePlanner starts two fake scorer nodes, a cluster of them (both eligible) and a cost
// planner placing least-loaded on it, all closed when the test ends.
func twoNodePlanner(t *testing.T, cfg plan.Config) (*cluster.Cluster, *plan.Planner) {
	t.Helper()
	nodes, err := fakenode.StartCluster(2, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodes.Close)
	c := cluster.New(cluster.Config{Static: nodes.Addrs(), Prior: costmodel.Coeffs{A: 1e-3, B: 1e-7, C: 0.01}, Forgetting: 0.99,
		Breaker: cluster.BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	t.Cleanup(func() { c.Close() })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, func() bool { return len(c.Eligible(nil)) == 2 }); err != nil {
		t.Fatal(err)
	}
	counter, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	return c, plan.NewPlanner(cfg, counter, cost.New(), c, plan.NewPlacer(c, leastloaded.New(0, route.DefaultRand)))
}

// TestUnsplittableRequestOnIdleClusterIsDeadline: on an idle two-node cluster a one-item request
// (one batch, one node used: it cannot be split) with a budget under what it needs is refused as
// "deadline" (a retry with the same budget is refused again), not "overload": a candidate left
// unused on an idle cluster is no sign of backlog.
func TestUnsplittableRequestOnIdleClusterIsDeadline(t *testing.T) {
	_, pl := twoNodePlanner(t, plan.Config{})
	req := &relevancev1.ScoreRequest{Query: "usb-c charger", Items: []*relevancev1.Item{{Text: strings.Repeat("a 65 W GaN charger ", 200)}}}
	a := New(Config{Headroom: 1, MinSamples: 0}, nil, nil)
	p := pl.Plan(req, "r", "")
	defer p.Release()
	budget := time.Duration(0.75 * p.Finish() * float64(time.Second))
	err := a.Admit(p, budget)
	if err == nil {
		t.Fatalf("admitted in %v, 0.75× its only plan's %.3fs", budget, p.Finish())
	}
	if r := err.(*Rejection); r.reason != ReasonDeadline {
		t.Errorf("refused as %q (%v): a retry after its delay is refused again", r.reason, err)
	}
}
