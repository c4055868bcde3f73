package dispatch

import (
	"math"
	"sync"
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
