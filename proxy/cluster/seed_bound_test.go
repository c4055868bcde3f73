package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// seedCluster is three peers warmed up at truth (learned from replies) and a fresh node d.
func seedCluster(truth costmodel.Coeffs) (*Cluster, []*Node, *Node) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99, WarmSamples: 10}
	c := &Cluster{cfg: cfg}
	peers := []*Node{reviewNode(cfg, "a:1"), reviewNode(cfg, "b:1"), reviewNode(cfg, "c:1")}
	d := reviewNode(cfg, "d:1")
	nodes := append(append([]*Node{}, peers...), d)
	c.members.Store(&nodes)
	for _, n := range nodes {
		n.peers = c.Snapshot
	}
	for i, p := range peers {
		for j := range 20 {
			p.Observe(passReply(truth, []int{40 + 10*j, 80 + 20*i}, 1, 1, 0), time.Now())
		}
	}
	return c, peers, d
}

// seedReply is a reply that carries only the node's reported model (a seed): no stats to learn from.
func seedReply(k costmodel.Coeffs, samples uint64) *relevancev1.ScoreBatchResponse {
	return &relevancev1.ScoreBatchResponse{Load: &relevancev1.NodeLoad{CostModel: &relevancev1.CostModel{
		A: k.A, B: k.B, C: k.C, Samples: samples}}}
}

func scaled(k costmodel.Coeffs, g float64) costmodel.Coeffs {
	return costmodel.Coeffs{A: g * k.A, B: g * k.B, C: g * k.C}
}

// TestSeedFarFromPeersIsNotTrusted: a node reports a model 100× off what its three peers have
// learned (either way) and 2³⁰ samples. Trusted, it skipped warm-up (priced 100× off at once:
// too dear it gets no batch, so no reply ever corrects it; too cheap it is flooded) and admission
// trusted its projections. It is ignored: the node warms up at its peers' price like a node that
// reports no model, and learns its speed from its replies.
func TestSeedFarFromPeersIsNotTrusted(t *testing.T) {
	truth := costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1}
	ref := func(k costmodel.Coeffs) float64 { return k.Seconds(costmodel.RefFeatures) }
	for _, off := range []float64{100, 0.01} {
		c, peers, d := seedCluster(truth)
		d.Observe(seedReply(scaled(truth, off), 1<<30), time.Now())
		c.Eligible(nil)
		if s := d.Samples(); s > 10 {
			t.Errorf("seed %g× its peers: the node counts %d samples, skipping warm-up and admission's MinSamples", off, s)
		}
		if g := ref(d.Coeffs()) / ref(peers[0].Coeffs()); g < 0.5 || g > 2 {
			t.Errorf("seed %g× its peers: the node is priced %.3g× its peers", off, g)
		}
		for j := range 10 {
			d.Observe(passReply(truth, []int{50 + 15*j, 100}, 1, 1, 0), time.Now())
		}
		if g := ref(*d.coeffs.Load()) / ref(truth); g < 0.5 || g > 2 {
			t.Errorf("seed %g× its peers: after 10 true replies the node's own model is %.3g× its speed", off, g)
		}
	}
}

// TestSeedNearPeersIsTrusted: a seed within seedTrust of the peers' median is used as before —
// the node is priced by it at once with its samples — and so is any seed on a node without
// trusted peers (a single-node cluster, or the first node of a fresh one to answer).
func TestSeedNearPeersIsTrusted(t *testing.T) {
	truth := costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1}
	for _, off := range []float64{2.5, 0.4} {
		c, _, d := seedCluster(truth)
		seed := scaled(truth, off)
		d.Observe(seedReply(seed, 1<<30), time.Now())
		c.Eligible(nil)
		if s := d.Samples(); s != 1<<30 {
			t.Errorf("seed %g× its peers: %d samples, want the seed's %d", off, s, 1<<30)
		}
		if got := d.Coeffs(); got != seed {
			t.Errorf("seed %g× its peers: the node is priced by %+v, want the seed %+v", off, got, seed)
		}
	}

	cfg := Config{Prior: testPrior, Forgetting: 0.99, WarmSamples: 10}
	c := &Cluster{cfg: cfg}
	alone := reviewNode(cfg, "a:1")
	nodes := []*Node{alone}
	c.members.Store(&nodes)
	alone.peers = c.Snapshot
	seed := scaled(testPrior, 100)
	alone.Observe(seedReply(seed, 1<<30), time.Now())
	c.Eligible(nil)
	if s, got := alone.Samples(), alone.Coeffs(); s != 1<<30 || math.Abs(got.C/seed.C-1) > 1e-12 {
		t.Errorf("single node: %d samples, priced by %+v; want the seed %+v and its samples", s, got, seed)
	}
}
