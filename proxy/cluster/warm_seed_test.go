package cluster

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

func reviewNode(cfg Config, addr string) *Node {
	n := &Node{addr: addr, kind: "scorer", learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting}
	n.init(cfg, nil)
	n.healthy.Store(true)
	return n
}

// A node rejoining is priced at its "trusted peers'" mean, but that mean includes peers that
// are ejected as outliers (or unhealthy): one 20×-slow ejected node makes the rejoining node
// look ~7× dearer than every node that can actually take traffic, so it gets none and never
// warms up.
func TestWarmingPriceIgnoresEjectedAndUnhealthyPeers(t *testing.T) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99, WarmSamples: 10}
	a, b, slow, back := reviewNode(cfg, "a:1"), reviewNode(cfg, "b:1"), reviewNode(cfg, "c:1"), reviewNode(cfg, "d:1")
	for _, n := range []*Node{a, b, slow} {
		n.samples.Store(100)
		n.rejoin()
		n.samples.Store(200) // warmed up
	}
	s := costmodel.Coeffs{A: 20 * testPrior.A, B: 20 * testPrior.B, C: 20 * testPrior.C}
	slow.coeffs.Store(&s)
	slow.ejectedUntil.Store(time.Now().Add(time.Hour).UnixNano())
	c := &Cluster{cfg: cfg}
	nodes := []*Node{a, b, slow, back}
	c.members.Store(&nodes)
	c.Eligible(nil)
	ref := func(k costmodel.Coeffs) float64 { return k.Seconds(costmodel.RefFeatures) }
	if g := ref(back.Coeffs()) / ref(a.Coeffs()); g > 1.5 {
		t.Errorf("rejoining node priced %.1f× its eligible peers (the ejected node is in the mean)", g)
	}
}

// TestSeedFromAbsurdReportedModelIsCorrectedOrRejected: a misbehaving node reports a cost model
// 10⁴× too cheap with a large sample count; it is trusted at once, but its replies correct it
// (the learner's basis moves past 1e3): it was stuck at a tenth of its time.
func TestSeedFromAbsurdReportedModelIsCorrectedOrRejected(t *testing.T) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99, WarmSamples: 10}
	n := reviewNode(cfg, "a:1")
	truth := testPrior
	lie := &relevancev1.CostModel{A: truth.A * 1e-4, B: truth.B * 1e-4, C: truth.C * 1e-4, Samples: 1 << 30}
	for i := range 300 {
		toks := []int{40 + i%200, 80}
		r := &relevancev1.ScoreBatchResponse{Stats: &relevancev1.BatchStats{PrefixTokens: 60},
			Load: &relevancev1.NodeLoad{CostModel: lie}}
		for j, l := range toks {
			r.Scores = append(r.Scores, &relevancev1.ItemScore{Index: uint32(j), Tokens: uint32(l)})
		}
		r.Stats.ComputeSeconds = truth.Seconds(costmodel.BatchFeatures(60, toks, false))
		n.Observe(r, time.Now())
	}
	if g := n.Coeffs().Seconds(costmodel.RefFeatures) / truth.Seconds(costmodel.RefFeatures); g < 0.5 {
		t.Errorf("after 300 true replies the node is priced at %.2g× its time (samples %d)", g, n.Samples())
	}
}
