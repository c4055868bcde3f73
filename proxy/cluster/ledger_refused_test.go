package cluster

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
)

// TestRefusedPlanOfTwoBatchesOnALateNodeKeepsItLate: a node 1 s behind its projection (one batch
// out) gets two batches of one plan, and admission refuses the plan: both leases are given back
// (in either order). The node must read as it did before: late by 1 s, and later the longer it
// stays late — not 1 s of work that drains (the doubled lateness left in its finish).
func TestRefusedPlanOfTwoBatchesOnALateNodeKeepsItLate(t *testing.T) {
	for _, lifo := range []bool{true, false} {
		n := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
		t0 := time.Now()
		at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
		n.Charge(t0, 1) // a batch out, projected done at 1 s
		before := n.Load(at(2))
		a := n.Charge(at(2), 0.5)
		b := n.Charge(at(2), 0.5)
		if lifo {
			n.Uncharge(b)
			n.Uncharge(a)
		} else {
			n.Uncharge(a)
			n.Uncharge(b)
		}
		if got := n.Load(at(3)); got < 2-1e-6 {
			t.Errorf("lifo=%v: load at 3 s %.3f (was %.3f at 2 s), want 2 (1 s late at 2 s, 2 s late at 3 s)", lifo, got, before)
		}
	}
}
