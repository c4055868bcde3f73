package cluster

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// passReply is a reply to a batch of items that ran in a pass of merged batches taking forward
// seconds (merged ≤ 1: a pass of its own, or a node that does not say), slowdown× the truth.
func passReply(truth costmodel.Coeffs, items []int, slowdown float64, merged uint32, forward float64) *relevancev1.ScoreBatchResponse {
	r := &relevancev1.ScoreBatchResponse{Stats: &relevancev1.BatchStats{PrefixTokens: 60,
		MergedBatches: merged, ForwardSeconds: forward}}
	for i, l := range items {
		r.Scores = append(r.Scores, &relevancev1.ItemScore{Index: uint32(i), Tokens: uint32(l)})
	}
	r.Stats.ComputeSeconds = slowdown * truth.Seconds(costmodel.BatchFeatures(60, items, false))
	return r
}

// TestOneStalledMergedPassIsOneOutlier: a node just primed (its calibrated model seeded the
// learner, so it is fresh) runs one merged pass of three batches that stalls 20× (the node was
// paused). Its three replies name the same pass (merged_batches and the pass's forward time):
// one piece of evidence, which moves the node's price as one slow batch would, and no level
// shift. Three stalled passes are a shift, and so are three slow replies from a node that names
// no pass.
func TestOneStalledMergedPassIsOneOutlier(t *testing.T) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99}
	truth := testPrior
	prime := func() *Node {
		n := reviewNode(cfg, "a:1")
		n.Observe(&relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: &relevancev1.CostModel{
			A: truth.A, B: truth.B, C: truth.C, Samples: 48}}}, time.Now())
		return n
	}
	f := costmodel.BatchFeatures(60, []int{100, 120}, false)
	ref := func(n *Node) float64 { return n.Coeffs().Seconds(f) / truth.Seconds(f) }
	batches := [][]int{{100, 120}, {80, 90, 200}, {150}}

	alone := prime()
	alone.Observe(passReply(truth, batches[0], 20, 1, 0), time.Now())
	n := prime()
	for _, b := range batches {
		n.Observe(passReply(truth, b, 20, 3, 2.5), time.Now())
	}
	if g, g1 := ref(n), ref(alone); g > 2 || g > 1.01*g1 {
		t.Errorf("one stalled pass of three batches priced the node %.2f× its speed; one stalled batch %.2f×", g, g1)
	}
	for i, b := range batches {
		n.Observe(passReply(truth, b, 20, 2, 2.5+float64(i+1)*1e-3), time.Now())
	}
	if g := ref(n); g < 5 {
		t.Errorf("after three stalled passes the node is priced %.1f× its speed; want the level shift (≥ 5×)", g)
	}

	old := prime() // a node that names no pass: each reply is its own evidence
	for _, b := range batches {
		old.Observe(passReply(truth, b, 20, 0, 0), time.Now())
	}
	if g := ref(old); g < 5 {
		t.Errorf("three slow replies naming no pass left the node priced %.1f× its speed; want the level shift", g)
	}
}
