package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestNodeLoadIsRemainingWork: the load least_loaded compares is the work left on the node, not
// the sum of its batches' charges. It falls while the node works, a reply settles the projection
// to "now + the charges still out" (early or late), and a reply whose NodeLoad says ~0 (stale,
// and blind to batches still on the wire) does not erase this proxy's other charges.
func TestNodeLoadIsRemainingWork(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
	t0 := time.Now()
	at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: load %.4f, want %.4f", what, got, want)
		}
	}
	n.Charge(t0, 0.2)
	n.Charge(t0, 0.2)
	near("two charged", n.Load(t0), 0.4)
	near("0.15s into the first", n.Load(at(0.15)), 0.25) // the sum of charges would still say 0.4
	// The first replies early, at 0.15 s, reporting an idle node (its snapshot was taken as the
	// batch finished; the second batch is still on the wire).
	n.Settle(at(0.15), 0.2)
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{}}, at(0.15))
	near("after an early reply", n.Load(at(0.15)), 0.2)
	near("0.1s later", n.Load(at(0.25)), 0.1)
	// Another batch, and a late reply of the second at 0.5 s: the projection restarts from there.
	n.Charge(at(0.3), 0.2)
	near("charged behind the second", n.Load(at(0.3)), 0.2+0.05)
	n.Settle(at(0.5), 0.2)
	near("after a late reply", n.Load(at(0.5)), 0.2)
	// A reply reporting more backlog than ours (another proxy's work) adds the excess.
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{QueuedCostSeconds: 0.5}}, at(0.5))
	near("with foreign backlog", n.Load(at(0.5)), 0.5)
	n.Settle(at(0.6), 0.2)
	near("all settled", n.Inflight(), 0)
	// An unsent lease gives its charge back.
	n.Uncharge(n.Charge(at(0.6), 0.3))
	near("uncharged (the foreign 0.3 s less 0.1 s drained)", n.Load(at(0.6)), 0.2)
}

// TestUnsentLeaseOnALateNodeLeavesItsLoad: a batch placed on a late node and given back
// (admission refused the plan; a copy or retry refused after placement) leaves the node's load as
// it was: still late, and growing. Taking back the predicted cost alone left the lateness that
// Charge began to count in the projected finish, which then lay in the future: the late node
// looked as if it were draining.
func TestUnsentLeaseOnALateNodeLeavesItsLoad(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
	t0 := time.Now()
	at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
	n.Charge(t0, 0.1) // due at 0.1 s and still out at 0.5 s: late by 0.4 s
	before, ahead := n.Load(at(0.7)), n.Ahead(at(0.7))
	n.Uncharge(n.Charge(at(0.5), 0.2))
	if got := n.Load(at(0.7)); math.Abs(got-before) > 1e-9 {
		t.Errorf("load at 0.7 s %.3f after a lease was placed and given back, want %.3f as before", got, before)
	}
	if got := n.Ahead(at(0.7)); math.Abs(got-ahead) > 1e-9 || got > 0 {
		t.Errorf("Ahead at 0.7 s %.3f, want %.3f (behind its projection, as before)", got, ahead)
	}
	// Idle, the same: the finish goes back to where it was.
	idle := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
	idle.Uncharge(idle.Charge(at(0.5), 0.3))
	if got := idle.Load(at(0.6)); got != 0 {
		t.Errorf("an idle node's load %.3f after a lease was given back, want 0", got)
	}
}

// TestUnsentLeaseAfterASettleLeavesTheSettledLoad: a lease placed on a late node and given back
// after another of the node's batches was answered: the answer rebuilt the projected finish from
// the work still out, so giving the lease back takes its cost off and not the lateness its
// charge counted (taken off that rebuilt finish, the node looked late by twice that lateness).
func TestUnsentLeaseAfterASettleLeavesTheSettledLoad(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
	t0 := time.Now()
	at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
	n.Charge(t0, 0.1) // batch A, due at 0.1 s
	n.Charge(t0, 0.5) // batch B, due at 0.6 s; both still out at 2.0 s: late by 1.4 s
	lease := n.Charge(at(2.0), 0.2)
	n.Settle(at(2.0), 0.1) // A answers
	n.Uncharge(lease)      // the lease's plan is refused
	if got := n.Load(at(2.0)); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("load %.3f s just after A's answer and the lease given back, want B's 0.5", got)
	}
}

// TestNodeModelSeedsTheLearner: the first reply that carries the node's own cost model replaces
// the configured prior (a guess) with it; later models do not reset what was learned since.
func TestNodeModelSeedsTheLearner(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99), forgetting: 0.99}
	c := n.learn.Coeffs()
	n.coeffs.Store(&c)
	own := &relevancev1.CostModel{A: 2e-4, B: 1e-7, C: 0.02, Source: "calibrated"}
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: own}}, time.Now())
	if got := n.Coeffs(); got != (costmodel.Coeffs{A: 2e-4, B: 1e-7, C: 0.02}) {
		t.Fatalf("after the node's model: %+v, want it", got)
	}
	other := &relevancev1.CostModel{A: 9e-4, B: 9e-7, C: 0.9}
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: other}}, time.Now())
	if got := n.Coeffs(); got.C != 0.02 {
		t.Errorf("a second model reset the learner: %+v", got)
	}
	bad := &Node{learn: costmodel.NewLearner(testPrior, 0.99), forgetting: 0.99}
	if got := n.Samples(); got != 0 {
		t.Errorf("samples %d after a model measured on no passes, want 0", got)
	}
	bc := bad.learn.Coeffs()
	bad.coeffs.Store(&bc)
	bad.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: &relevancev1.CostModel{A: -1}}}, time.Now())
	if got := bad.Coeffs(); got != testPrior {
		t.Errorf("a negative model was taken: %+v", got)
	}
}

// TestNodeModelMeasuredPassesCountAsSamples: a node whose model was measured on 11 passes
// (its start-up calibration) is trusted as if the proxy had learned from 11 replies, so that
// admission projects on a freshly started cluster; a later, smaller count does not lower it.
func TestNodeModelMeasuredPassesCountAsSamples(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99), forgetting: 0.99}
	c := n.learn.Coeffs()
	n.coeffs.Store(&c)
	own := &relevancev1.CostModel{A: 2e-4, B: 1e-7, C: 0.02, Samples: 11, Source: "calibrated"}
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: own}}, time.Now())
	if got := n.Samples(); got != 11 {
		t.Fatalf("samples %d after a model measured on 11 passes, want 11", got)
	}
	n.seeded = false // a reconnect to a restarted node seeds again
	own.Samples = 2
	n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: own}}, time.Now())
	if got := n.Samples(); got != 11 {
		t.Errorf("samples %d after a model of 2 passes, want 11 kept", got)
	}
}

// TestNodeLearnsTheTemplateItKeeps: a reply whose usage shows the node computed only the tail of
// a prefix (it kept the instruction's template) marks the node as keeping templates, and one that
// computed a whole prefix clears the mark; a prefix wholly from the cache says nothing either way.
func TestNodeLearnsTheTemplateItKeeps(t *testing.T) {
	n := &Node{learn: costmodel.NewLearner(testPrior, 0.99)}
	reply := func(prefix, computed uint32, cached bool) *relevancev1.ScoreBatchResponse {
		return &relevancev1.ScoreBatchResponse{
			Scores: []*relevancev1.ItemScore{{Index: 0, Tokens: 20}},
			Usage:  &relevancev1.Usage{PrefixTokens: uint64(computed)},
			Stats:  &relevancev1.BatchStats{ComputeSeconds: 0.05, PrefixTokens: prefix, PrefixCached: cached},
		}
	}
	if n.KeepsTemplates() {
		t.Fatal("a node no reply has shown keeping templates is believed to")
	}
	n.Observe(reply(70, 12, false), time.Now())
	if !n.KeepsTemplates() {
		t.Error("computed 12 of 70 prefix tokens: not marked as keeping templates")
	}
	n.Observe(reply(70, 0, true), time.Now())
	if !n.KeepsTemplates() {
		t.Error("a cached prefix cleared the mark")
	}
	n.Observe(reply(70, 70, false), time.Now())
	if n.KeepsTemplates() {
		t.Error("computed a whole prefix: still marked as keeping templates")
	}
}
