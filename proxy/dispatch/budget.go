package dispatch

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

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
