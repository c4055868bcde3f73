// Package route is the contract between the proxy and its routing strategies: a Picker chooses
// one node among the candidates the proxy offers (healthy, breaker not open, not already tried
// for this batch). Each strategy lives in its own sub-package (random, roundrobin, leastloaded)
// with a Type constant; the proxy holds the one registration list.
//
// Pickers never block and must be safe for concurrent use.
package route

import (
	"math"
	"math/rand/v2"
)

// Candidates is the proxy's view of the nodes a batch may go to. Load reads a node's outstanding
// estimated work in seconds (an atomic read: cheap, and possibly stale by the time it returns).
type Candidates interface {
	Len() int
	Load(i int) float64
}

// Picker picks a candidate.
type Picker interface {
	// Pick returns an index in [0, c.Len()), or -1 when c is empty.
	Pick(c Candidates) int
}

// Rand returns a uniform int in [0, n). Strategies take one so tests can make them
// deterministic; it must be safe for concurrent use.
type Rand func(n int) int

// DefaultRand is math/rand/v2's goroutine-safe global source.
func DefaultRand(n int) int { return rand.IntN(n) }

// Slice is a Candidates over a slice of loads (tests, benchmarks).
type Slice []float64

// Len implements Candidates.
func (s Slice) Len() int { return len(s) }

// Load implements Candidates.
func (s Slice) Load(i int) float64 { return s[i] }

// Costed is implemented by Candidates that can price the batch being placed on each candidate:
// Cost(i) is its predicted seconds on candidate i (lower where the node already holds the batch's
// prefix, or is faster); BaseCost(i) the same without the prefix credit (the node's speed alone).
// Strategies that weigh cost against load assert it.
type Costed interface {
	Cost(i int) float64
	BaseCost(i int) float64
}

// Costs is a Candidates over loads and costs (tests, benchmarks).
type Costs struct{ Loads, Costs []float64 }

// Len implements Candidates.
func (c Costs) Len() int { return len(c.Loads) }

// Load implements Candidates.
func (c Costs) Load(i int) float64 { return c.Loads[i] }

// Cost implements Costed.
func (c Costs) Cost(i int) float64 { return c.Costs[i] }

// BaseCost implements Costed (no prefix credit here).
func (c Costs) BaseCost(i int) float64 { return c.Costs[i] }

// ArgMin is the pick of the least-loaded family: the index in [0, n) with the least f, ties
// broken uniformly at random (reservoir sampling over the tied minimum) when n ≤ fullScanMax;
// above, the power of two choices (Mitzenmacher): two distinct random indices, the lesser wins (a
// random one on a tie), which keeps picks O(1) and avoids every proxy herding onto the same node.
// It returns -1 for n = 0.
func ArgMin(n int, raw func(i int) float64, rnd Rand, fullScanMax int) int {
	// A NaN (a node priced by a broken cost model) compares false with everything: first, it
	// would have won every scan. It counts as +Inf, the last choice.
	f := func(i int) float64 {
		if v := raw(i); v == v {
			return v
		}
		return math.Inf(1)
	}
	switch {
	case n == 0:
		return -1
	case n == 1:
		return 0
	case n > fullScanMax:
		i := rnd(n)
		j := rnd(n - 1)
		if j >= i {
			j++
		}
		fi, fj := f(i), f(j)
		if fj < fi || (fj == fi && rnd(2) == 0) {
			return j
		}
		return i
	}
	best, ties := 0, 1
	bestF := f(0)
	for i := 1; i < n; i++ {
		v := f(i)
		switch {
		case v < bestF:
			best, bestF, ties = i, v, 1
		case v == bestF:
			ties++
			if rnd(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
