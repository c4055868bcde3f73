package cluster

import (
	"context"
	"math"
	"testing"
	"time"
)

func startCluster(t *testing.T, n int, o OutlierConfig) *Cluster {
	t.Helper()
	c := New(Config{Static: startNodes(t, n), Prior: testPrior, Forgetting: 0.99, Outlier: o,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	t.Cleanup(func() { c.Close() })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, func() bool { return len(c.Eligible(nil)) == n }); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOutlierEjectionBoundedAndGrowing: consecutive slow outcomes eject a node for a growing
// interval; an OK outcome in between resets the count; at most the configured share of nodes is
// ejected at once; back from an ejection a node is on probation, where one slow outcome ejects it
// again, for longer.
func TestOutlierEjectionBoundedAndGrowing(t *testing.T) {
	base := 200 * time.Millisecond
	c := startCluster(t, 2, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: base, MaxEjection: 10 * base, MaxEjectionPercent: 10})
	nodes := c.Snapshot()
	a, b := nodes[0], nodes[1]
	t0 := time.Now()
	c.ReportSlow(a, t0, 3)
	c.ReportSlow(a, t0, 3)
	c.ReportOK(a, t0, t0, 1) // not in a row
	c.ReportSlow(a, t0, 3)
	c.ReportSlow(a, t0, 3)
	if a.Ejected(t0) {
		t.Fatal("ejected after 2 slow outcomes in a row (3 needed)")
	}
	c.ReportSlow(a, t0, 3)
	if !a.Ejected(t0) || a.Ejected(t0.Add(base)) {
		t.Fatalf("after 3 in a row: ejected %v, still at +base %v; want ejected for exactly base", a.Ejected(t0), a.Ejected(t0.Add(base)))
	}
	if got := c.Eligible(nil); len(got) != 1 || got[0] != b {
		t.Errorf("eligible while a is ejected: %d nodes", len(got))
	}
	// 10 % of two nodes rounds to none, but one may always go: b stays, a is already out.
	for range 5 {
		c.ReportSlow(b, t0, 3)
	}
	if b.Ejected(t0) {
		t.Error("both nodes ejected: the ejection share was not enforced")
	}
	for range 10 {
		c.ReportOK(b, t0, t0, 1) // b is fine again, so a stands out
	}
	// Probation: back after base, one slow outcome ejects it again, for 2 × base.
	t1 := t0.Add(base + time.Millisecond)
	c.ReportSlow(a, t1, 3)
	if !a.Ejected(t1) || !a.Ejected(t1.Add(2*base-time.Millisecond)) || a.Ejected(t1.Add(2*base+time.Millisecond)) {
		t.Errorf("on probation, one slow outcome: want re-ejected for 2 × base")
	}
	s := c.Status()
	if !s[0].Ejected || s[0].Ejections != 2 || s[0].Slow != 6 {
		t.Errorf("status %+v, want ejected, 2 ejections, 6 slow", s[0])
	}
	// When the last ejection began, so that a poller can time it (the fault suite).
	if !s[0].LastEjectedAt.Equal(t1) || !s[1].LastEjectedAt.IsZero() {
		t.Errorf("last ejected at %v and %v, want %v (the re-ejection) and never", s[0].LastEjectedAt, s[1].LastEjectedAt, t1)
	}
}

// TestLateNodeLooksBusy: a node whose batch is still out after its projected finish is loaded
// by how late it is, not idle: least-loaded must not pour work into a stalled node.
func TestLateNodeLooksBusy(t *testing.T) {
	n := &Node{}
	t0 := time.Now()
	n.Charge(t0, 0.1)
	if l := n.Load(t0.Add(50 * time.Millisecond)); l < 0.049 || l > 0.051 {
		t.Errorf("halfway: load %v, want 0.05", l)
	}
	if l := n.Load(t0.Add(400 * time.Millisecond)); l < 0.299 || l > 0.301 {
		t.Errorf("0.3 s overdue: load %v, want 0.3", l)
	}
	n.Settle(t0.Add(400*time.Millisecond), 0.1)
	if l := n.Load(t0.Add(500 * time.Millisecond)); l != 0 {
		t.Errorf("answered: load %v, want 0", l)
	}
}

// TestLateNodeStaysBusyWhenCharged: a batch placed on a late node comes after the lateness the
// node is counted busy for, so picking a late node never makes it look less loaded than before.
func TestLateNodeStaysBusyWhenCharged(t *testing.T) {
	n := &Node{}
	t0 := time.Now()
	n.Charge(t0, 0.1)
	late := t0.Add(300 * time.Millisecond) // 0.2 s overdue
	before := n.Load(late)
	n.Charge(late, 0.05)
	if l := n.Load(late); math.Abs(l-(before+0.05)) > 1e-6 {
		t.Errorf("0.2 s overdue, charged 0.05 s: load %v, want %v (the lateness, then the batch)", l, before+0.05)
	}
	// An idle node, and one on schedule, are charged from now and from their finish.
	idle := &Node{}
	idle.Charge(t0, 0.05)
	if l := idle.Load(t0); math.Abs(l-0.05) > 1e-6 {
		t.Errorf("idle node charged 0.05 s: load %v", l)
	}
	idle.Charge(t0.Add(10*time.Millisecond), 0.05)
	if l := idle.Load(t0.Add(10 * time.Millisecond)); math.Abs(l-0.09) > 1e-6 {
		t.Errorf("on schedule, charged another 0.05 s 10 ms in: load %v, want 0.09", l)
	}
}

// TestEquallySlowNodesAreNotEjected: when every node is slow (an overloaded machine, not a
// broken node) none is ejected — that would halve the capacity of a two-node cluster exactly when
// it is short of it; a node slow while the others are fine is.
func TestEquallySlowNodesAreNotEjected(t *testing.T) {
	c := startCluster(t, 2, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: time.Second, MaxEjection: time.Minute, MaxEjectionPercent: 50})
	nodes := c.Snapshot()
	a, b := nodes[0], nodes[1]
	t0 := time.Now()
	for range 10 {
		c.ReportSlow(a, t0, 3)
		c.ReportSlow(b, t0, 3)
	}
	if a.Ejected(t0) || b.Ejected(t0) {
		t.Fatalf("equally slow nodes: a ejected %v, b ejected %v; want neither", a.Ejected(t0), b.Ejected(t0))
	}
	for range 10 {
		c.ReportOK(b, t0, t0, 1) // b recovers; a stays slow
	}
	for range 3 {
		c.ReportSlow(a, t0, 3)
	}
	if !a.Ejected(t0) || b.Ejected(t0) {
		t.Errorf("a slow while b is fine: a ejected %v, b ejected %v; want a only", a.Ejected(t0), b.Ejected(t0))
	}
}

// TestCallsSentBeforeAnEjectionDoNotEndItsProbation: batches already out when a node is ejected
// and answered in time (during the ejection or after it) leave the node on probation: back from
// the ejection it takes probes, and one slow outcome ejects it again. An OK outcome of a call
// sent after the ejection ends the probation.
func TestCallsSentBeforeAnEjectionDoNotEndItsProbation(t *testing.T) {
	base := 200 * time.Millisecond
	c := startCluster(t, 2, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: base, MaxEjection: 10 * base, MaxEjectionPercent: 50})
	a, b := c.Snapshot()[0], c.Snapshot()[1]
	t0 := time.Now()
	for range 5 {
		c.ReportOK(b, t0, t0, 1)
	}
	sentBefore := t0.Add(-50 * time.Millisecond)
	for range 3 {
		c.ReportSlow(a, t0, 3)
	}
	if !a.Ejected(t0) {
		t.Fatal("three slow outcomes did not eject the node")
	}
	c.ReportOK(a, sentBefore, t0.Add(10*time.Millisecond), 1.2)     // during the ejection
	c.ReportOK(a, sentBefore, t0.Add(base+5*time.Millisecond), 1.2) // after it
	back := t0.Add(base + 10*time.Millisecond)
	if !a.probation.Load() {
		t.Fatal("back from its ejection the node is off probation: calls sent before the ejection ended it")
	}
	c.ReportSlow(a, back, 3)
	if !a.Ejected(back) {
		t.Fatal("on probation, one slow outcome did not eject the node again")
	}
	// Back again, a call sent after the ejection that answers in time ends the probation.
	again := back.Add(2*base + 10*time.Millisecond)
	c.ReportOK(a, again, again.Add(10*time.Millisecond), 1)
	if a.probation.Load() {
		t.Error("an in-time answer to a call sent after the ejection left the node on probation")
	}
}

// TestProbationNodeTakesProbesNotBatches: a node back from an ejection is not a candidate for
// requests' batches while another node is; it is handed out once as a probe target until the
// probe ends, and an OK outcome makes it a candidate again. With no other node left it is a
// candidate rather than none.
func TestProbationNodeTakesProbesNotBatches(t *testing.T) {
	base := 50 * time.Millisecond
	c := startCluster(t, 3, OutlierConfig{ConsecutiveSlow: 1, BaseEjection: base, MaxEjection: 10 * base, MaxEjectionPercent: 50})
	nodes := c.Snapshot()
	a := nodes[0]
	for _, n := range nodes[1:] {
		c.ReportOK(n, time.Now(), time.Now(), 1)
	}
	c.ReportSlow(a, time.Now(), 5)
	if !a.Ejected(time.Now()) {
		t.Fatal("not ejected")
	}
	if p := c.TakeProbe(); p != nil {
		t.Fatal("an ejected node was handed out as a probe target")
	}
	time.Sleep(base + 10*time.Millisecond)
	for _, n := range c.Eligible(nil) {
		if n == a {
			t.Fatal("a node on probation is a candidate for batches while others are")
		}
	}
	if p := c.TakeProbe(); p != a {
		t.Fatalf("probe target %v, want the node on probation", p)
	}
	if p := c.TakeProbe(); p != nil {
		t.Fatal("a second probe while the first is in flight")
	}
	a.ProbeEnded()
	if p := c.TakeProbe(); p != a {
		t.Fatal("no probe target after the first probe ended")
	}
	a.ProbeEnded()
	if got := c.Eligible(nodes[1:]); len(got) != 1 || got[0] != a {
		t.Errorf("with every other node excluded, eligible %v, want the node on probation", got)
	}
	c.ReportOK(a, time.Now(), time.Now(), 1)
	if got := c.Eligible(nil); len(got) != 3 {
		t.Errorf("after an OK probe, %d candidates, want 3", len(got))
	}
	if p := c.TakeProbe(); p != nil {
		t.Error("a probe target after the probation ended")
	}
}
