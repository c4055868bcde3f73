package proxy

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/relevance-scoring/relevance/costmodel"
)

// candList adapts nodes to route.Candidates; loads are read at pick time.
type candList struct {
	nodes []*node
	now   time.Time
}

func (c candList) Len() int           { return len(c.nodes) }
func (c candList) Load(i int) float64 { return c.nodes[i].load(c.now) }

// eligible lists the nodes a batch may go to: healthy, breaker not open, not in exclude.
func (p *Proxy) eligible(exclude []*node) []*node {
	var out []*node
	for _, n := range p.snapshot() {
		if n.healthy.Load() && n.breaker.State() != gobreaker.StateOpen && !slices.Contains(exclude, n) {
			out = append(out, n)
		}
	}
	return out
}

// fallback is what keeps breakers from removing every node: when no healthy node has a closed
// breaker (each is open, or half-open with its probes possibly all out, so that none may take
// the batch), it returns the healthy node (not in exclude) whose last failure is oldest — the
// one most likely to have recovered. Otherwise (some breaker is closed) it returns nothing.
func (p *Proxy) fallback(exclude []*node) []*node {
	var best *node
	for _, n := range p.snapshot() {
		if !n.healthy.Load() {
			continue
		}
		if n.breaker.State() == gobreaker.StateClosed {
			return nil // that breaker lets traffic through
		}
		if slices.Contains(exclude, n) {
			continue
		}
		if best == nil || n.lastFailure.Load() < best.lastFailure.Load() {
			best = n
		}
	}
	if best == nil {
		return nil
	}
	return []*node{best}
}

// lease is a batch's claim on a node: a breaker permit (done reports the outcome; nil when the
// fallback bypasses the breaker) and the batch's predicted cost, charged to the node's in-flight
// cost at pick time and released by call.
type lease struct {
	n         *node
	done      func(error)
	coeffs    costmodel.Coeffs
	predicted float64 // seconds of compute on this node
	expected  float64 // seconds until it should be done: backlog at pick time + predicted
}

func newLease(n *node, done func(error), pl *batchPlan) *lease {
	c := *n.coeffs.Load()
	now := time.Now()
	l := &lease{n: n, done: done, coeffs: c, predicted: c.Seconds(pl.feats)}
	l.expected = n.load(now) + l.predicted
	n.charge(now, l.predicted)
	n.calls.Add(1)
	return l
}

// release gives back a lease that will not be used: its charge, its call count and its
// breaker permit (uncounted).
func (l *lease) release() {
	n := l.n
	n.uncharge(l.predicted)
	if l.done != nil {
		l.done(errExcluded)
	}
	if n.calls.Add(-1) == 0 && n.removed.Load() {
		n.closeIdle()
	}
}

// lease picks a node for a batch among the eligible ones not in exclude, takes a breaker permit
// and charges the batch to it. It returns nil when no node can take it.
func (p *Proxy) lease(exclude []*node, pl *batchPlan) *lease {
	cands := p.eligible(exclude)
	for len(cands) > 0 {
		i := p.picker.Pick(candList{cands, time.Now()})
		n := cands[i]
		done, err := n.breaker.Allow()
		if err == nil {
			return newLease(n, done, pl)
		}
		// Open, or half-open with its probes taken: try the others.
		cands = slices.Delete(cands, i, i+1)
	}
	if fb := p.fallback(exclude); len(fb) > 0 {
		return newLease(fb[0], nil, pl)
	}
	return nil
}

// leaseIdle leases the least loaded eligible node not in exclude for a hedge, if it could finish
// before the straggler is expected to (its load is below expected) and the retry budget allows.
func (p *Proxy) leaseIdle(exclude []*node, pl *batchPlan, expected float64) *lease {
	now := time.Now()
	var best *node
	bestLoad := math.Inf(1)
	for _, n := range p.eligible(exclude) {
		if l := n.load(now); l < bestLoad {
			best, bestLoad = n, l
		}
	}
	if best == nil || bestLoad >= expected {
		return nil
	}
	done, err := best.breaker.Allow()
	if err != nil {
		return nil
	}
	if !p.budget.take() {
		done(errExcluded)
		return nil
	}
	return newLease(best, done, pl)
}

// meanCoeffs is the reference cost model of a set of nodes (the prior of the first when empty).
func meanCoeffs(nodes []*node) costmodel.Coeffs {
	var c costmodel.Coeffs
	if len(nodes) == 0 {
		return c
	}
	for _, n := range nodes {
		k := n.coeffs.Load()
		c.A += k.A
		c.B += k.B
		c.C += k.C
	}
	f := float64(len(nodes))
	return costmodel.Coeffs{A: c.A / f, B: c.B / f, C: c.C / f}
}

// retryBudget is a token bucket: every batch deposits ratio tokens (up to burst), a retry or
// hedge takes one whole token. So retries stay under about ratio of traffic in steady state,
// and a failing cluster cannot double its own load. Safe for concurrent use.
type retryBudget struct {
	mu            sync.Mutex
	tokens, ratio float64
	burst         float64
}

func newRetryBudget(ratio, burst float64) *retryBudget {
	return &retryBudget{tokens: burst, ratio: ratio, burst: burst}
}

func (b *retryBudget) deposit() {
	b.mu.Lock()
	b.tokens = math.Min(b.burst, b.tokens+b.ratio)
	b.mu.Unlock()
}

func (b *retryBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1-1e-9 { // ten deposits of 0.1 make one token despite rounding
		return false
	}
	b.tokens--
	return true
}

// latencyTracker keeps the last 256 (batch latency ÷ expected completion) ratios and their
// quantile q, recomputed every 16 samples so that reads are one atomic load.
type latencyTracker struct {
	q     float64
	mu    sync.Mutex
	ring  [256]float64
	next  int
	count int
	cur   atomic.Uint64 // float64 bits of the current quantile
	n     atomic.Int64
}

func newLatencyTracker(q float64) *latencyTracker { return &latencyTracker{q: q} }

func (t *latencyTracker) add(ratio float64) {
	if !(ratio >= 0) || math.IsInf(ratio, 0) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring[t.next] = ratio
	t.next = (t.next + 1) % len(t.ring)
	t.count++
	if t.count%16 != 0 && t.count > 16 {
		return
	}
	k := min(t.count, len(t.ring))
	s := slices.Clone(t.ring[:k])
	slices.Sort(s)
	t.cur.Store(math.Float64bits(s[max(0, int(math.Ceil(t.q*float64(k)))-1)])) // nearest rank
	t.n.Store(int64(t.count))
}

// quantile returns the current quantile and how many samples were seen.
func (t *latencyTracker) quantile() (float64, int) {
	return math.Float64frombits(t.cur.Load()), int(t.n.Load())
}
