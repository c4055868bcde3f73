// Package route is the contract between the proxy and its routing strategies: a Picker chooses
// one node among the candidates the proxy offers (healthy, breaker not open, not already tried
// for this batch). Each strategy lives in its own sub-package (random, roundrobin, leastloaded)
// with a Type constant; the proxy holds the one registration list.
//
// Pickers never block and must be safe for concurrent use.
package route

import "math/rand/v2"

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
// prefix, or is faster). Strategies that weigh cost against load assert it.
type Costed interface {
	Cost(i int) float64
}

// Costs is a Candidates over loads and costs (tests, benchmarks).
type Costs struct{ Loads, Costs []float64 }

// Len implements Candidates.
func (c Costs) Len() int { return len(c.Loads) }

// Load implements Candidates.
func (c Costs) Load(i int) float64 { return c.Loads[i] }

// Cost implements Costed.
func (c Costs) Cost(i int) float64 { return c.Costs[i] }
