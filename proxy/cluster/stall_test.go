package cluster

import (
	"context"
	"testing"
	"time"
)

// TestStalledNodeIsLastResort: a stalled node leaves the candidates while another node can take
// a batch, is still offered when none can (a paused machine stalls every node; refusing all of
// them would fail every request at once), tells waiting calls through its stall signal, and is
// back with a fresh signal once it answers.
func TestStalledNodeIsLastResort(t *testing.T) {
	c := startCluster(t, 2, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: time.Second, MaxEjection: time.Second, MaxEjectionPercent: 50})
	nodes := c.Snapshot()
	a, b := nodes[0], nodes[1]
	sig := a.StallSignal()
	c.stall(a, time.Now())
	select {
	case <-sig:
	default:
		t.Fatal("stall signal not closed when the node was found stalled")
	}
	if got := c.Eligible(nil); len(got) != 1 || got[0] != b {
		t.Errorf("eligible %v, want only the node that answers", got)
	}
	if got := c.Eligible([]*Node{b}); len(got) != 1 || got[0] != a {
		t.Errorf("with the other node excluded, eligible %v, want the stalled node as last resort", got)
	}
	c.Answered(a, time.Now())
	if a.Stalled() || len(c.Eligible(nil)) != 2 {
		t.Fatalf("after an answer: stalled %v, %d eligible", a.Stalled(), len(c.Eligible(nil)))
	}
	select {
	case <-a.StallSignal():
		t.Fatal("a node that answered again hands out a closed stall signal")
	default:
	}
	// An answer that lands while a check is deciding keeps the node in.
	c.stall(b, time.Now().Add(-time.Second))
	if !b.Stalled() {
		t.Fatal("not stalled")
	}
	c.Answered(b, time.Now())
	c.stall(b, time.Now().Add(-time.Second))
	if b.Stalled() {
		t.Error("marked stalled although it answered after the check began")
	}
}

// TestLiveNodeIsNotStalled: a suspicion against a node whose server answers its health check
// ends in nothing (the node answered), whatever its batches are doing.
func TestLiveNodeIsNotStalled(t *testing.T) {
	c := startCluster(t, 1, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: time.Second, MaxEjection: time.Second})
	c.cfg.StallTimeout = time.Second // generous under -race: only a silent node may fail it
	n := c.Snapshot()[0]
	c.SuspectStall(n, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for n.checking.Load() && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if n.Stalled() || n.stalls.Load() != 0 {
		t.Error("a node that answers its health check was marked stalled")
	}
	if n.lastAnswer.Load() == 0 {
		t.Error("the check's answer was not recorded")
	}
}
