package cluster

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestRecoveredNodeIsPricedAtItsPeersWhileItWarmsUp: a node whose breaker opened and closed
// again after two slow replies has learned a model several times dearer than its peers', on
// which cost-aware routing would never pick it while they keep up (so it would never learn
// otherwise: the proxy test of a recovered node saw exactly that under CPU contention). While it
// warms up it is priced at its peers' mean model, blended into its own reply by reply, and by its
// own alone after WarmSamples replies. /v1/nodes keeps showing its own coefficients.
func TestRecoveredNodeIsPricedAtItsPeersWhileItWarmsUp(t *testing.T) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99, WarmSamples: 10,
		Breaker: BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Millisecond, HalfOpenProbes: 1}}
	mk := func(addr string) *Node {
		n := &Node{addr: addr, kind: "scorer", learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting}
		n.init(cfg, nil)
		n.healthy.Store(true)
		return n
	}
	a, b, bad := mk("a:1"), mk("b:1"), mk("c:1")
	c := &Cluster{cfg: cfg}
	nodes := []*Node{a, b, bad}
	c.members.Store(&nodes)

	truth := costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1}
	reply := func(items int, slowdown float64) *relevancev1.ScoreBatchResponse {
		r := &relevancev1.ScoreBatchResponse{Stats: &relevancev1.BatchStats{PrefixTokens: 60}}
		toks := make([]int, items)
		for i := range toks {
			toks[i] = 40 + 20*i
			r.Scores = append(r.Scores, &relevancev1.ItemScore{Index: uint32(i), Tokens: uint32(toks[i])})
		}
		r.Stats.ComputeSeconds = slowdown * truth.Seconds(costmodel.BatchFeatures(60, toks, false))
		return r
	}
	ref := func(k costmodel.Coeffs) float64 { return k.Seconds(costmodel.RefFeatures) }

	// Before any node has learned enough, nobody is priced at anybody else's model.
	c.Eligible(nil)
	if got, own := ref(bad.Coeffs()), ref(*bad.coeffs.Load()); got != own {
		t.Fatalf("fresh cluster: node priced at %.4g s, its own model says %.4g s", got, own)
	}
	for i := range 40 {
		a.Observe(reply(1+i%8, 1), time.Now())
		b.Observe(reply(1+(i+3)%8, 1), time.Now())
	}

	// bad fails (breaker opens), half-opens, and its probe and one more reply are 4× slow.
	done, err := bad.breaker.Allow()
	if err != nil {
		t.Fatal(err)
	}
	done(errors.New("unavailable"))
	time.Sleep(5 * time.Millisecond)
	done, err = bad.breaker.Allow()
	if err != nil {
		t.Fatalf("breaker did not half-open: %v", err)
	}
	bad.Observe(reply(6, 4), time.Now())
	bad.Observe(reply(3, 4), time.Now())
	done(nil)
	if s := bad.breaker.State().String(); s != "closed" {
		t.Fatalf("breaker %s after a good probe, want closed", s)
	}

	c.Eligible(nil)
	peers := ref(MeanCoeffs([]*Node{a, b}))
	own := ref(*bad.coeffs.Load())
	if own < 1.5*peers {
		t.Fatalf("setup: the slow replies left the node's own model at %.4g s, peers %.4g s; want ≥ 1.5× dearer", own, peers)
	}
	if got := ref(bad.Coeffs()); math.Abs(got/peers-1) > 1e-9 {
		t.Errorf("just back: priced at %.4g s on the reference batch, want its peers' %.4g s (own %.4g s)", got, peers, own)
	}
	if got := ref(bad.Coeffs()); got >= ref(a.Coeffs())*1.5 {
		t.Errorf("just back: priced at %.4g s, dearer than a peer's %.4g s", got, ref(a.Coeffs()))
	}
	st := c.Status()
	if st[2].WarmingSamples != 10 || st[2].Coefficients != *bad.coeffs.Load() {
		t.Errorf("status: warming %d with %+v, want 10 and the node's own %+v", st[2].WarmingSamples, st[2].Coefficients, *bad.coeffs.Load())
	}

	// Replies at its true speed blend its own model in, then price it alone.
	prev := ref(bad.Coeffs())
	for i := range 10 {
		bad.Observe(reply(1+i%8, 1), time.Now())
		c.Eligible(nil)
		got := ref(bad.Coeffs())
		if i < 9 && bad.toWarm() == 0 {
			t.Fatalf("warmed after %d replies, want 10", i+1)
		}
		if i < 9 && (got < math.Min(peers, ref(*bad.coeffs.Load()))*0.999 || got > math.Max(peers, ref(*bad.coeffs.Load()))*1.001) {
			t.Errorf("reply %d: priced at %.4g s, outside its peers' %.4g s and its own %.4g s", i+1, got, peers, ref(*bad.coeffs.Load()))
		}
		prev = got
	}
	if bad.toWarm() != 0 || prev != ref(*bad.coeffs.Load()) {
		t.Errorf("after 10 replies: warmed %v, priced at %.4g s, own %.4g s", bad.toWarm() == 0, prev, ref(*bad.coeffs.Load()))
	}
	if st := c.Status(); st[2].WarmingSamples != 0 {
		t.Errorf("status after warm-up: warming %d, want 0", st[2].WarmingSamples)
	}
}

// TestWarmUpOff: WarmSamples 0 prices every node by its own model from its first reply.
func TestWarmUpOff(t *testing.T) {
	cfg := Config{Prior: testPrior, Forgetting: 0.99,
		Breaker: BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Millisecond, HalfOpenProbes: 1}}
	n := &Node{addr: "a:1", learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting}
	n.init(cfg, nil)
	peer := &Node{addr: "b:1", learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting}
	peer.init(cfg, nil)
	other := costmodel.Coeffs{A: 1, B: 1, C: 1}
	peer.coeffs.Store(&other)
	peer.samples.Store(100)
	c := &Cluster{cfg: cfg}
	nodes := []*Node{n, peer}
	c.members.Store(&nodes)
	n.rejoin()
	c.Eligible(nil)
	if n.Coeffs() != *n.coeffs.Load() {
		t.Errorf("warm-up off: priced at %+v, want its own %+v", n.Coeffs(), *n.coeffs.Load())
	}
}
