package cluster

import (
	"context"
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
	c.ReportOK(a, t0, 1) // not in a row
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
		c.ReportOK(b, t0, 1) // b is fine again, so a stands out
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
		c.ReportOK(b, t0, 1) // b recovers; a stays slow
	}
	for range 3 {
		c.ReportSlow(a, t0, 3)
	}
	if !a.Ejected(t0) || b.Ejected(t0) {
		t.Errorf("a slow while b is fine: a ejected %v, b ejected %v; want a only", a.Ejected(t0), b.Ejected(t0))
	}
}
