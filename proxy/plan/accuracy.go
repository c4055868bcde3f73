package plan

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Accuracy keeps the last 256 ratios of a batch's observed latency to its projected finish
// (Lease.Finish) — how far the plan's projections are off — and serves their quantiles: hedging
// waits for a high quantile of them before duplicating a batch, admission multiplies a plan's
// finish by one as its margin. The sorted window is rebuilt every 16 samples so that reads are
// one atomic load. Safe for concurrent use.
type Accuracy struct {
	mu     sync.Mutex
	ring   [256]float64
	next   int
	count  int
	sorted atomic.Pointer[[]float64]
	n      atomic.Int64
}

// Add records one batch's latency ÷ projected finish; non-finite or negative ratios are ignored.
func (a *Accuracy) Add(ratio float64) {
	if !(ratio >= 0) || math.IsInf(ratio, 0) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ring[a.next] = ratio
	a.next = (a.next + 1) % len(a.ring)
	a.count++
	if a.count%16 != 0 && a.count > 16 {
		return
	}
	k := min(a.count, len(a.ring))
	s := slices.Clone(a.ring[:k])
	slices.Sort(s)
	a.sorted.Store(&s)
	a.n.Store(int64(a.count))
}

// Quantile returns the q-quantile of the window (nearest rank) and how many samples were seen;
// (0, 0) before any.
func (a *Accuracy) Quantile(q float64) (float64, int) {
	p := a.sorted.Load()
	if p == nil || len(*p) == 0 {
		return 0, 0
	}
	s := *p
	return s[max(0, min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1))], int(a.n.Load())
}
