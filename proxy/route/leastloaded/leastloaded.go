// Package leastloaded picks the candidate with the least outstanding estimated work (seconds),
// as Candidates.Load reports it, plus the batch's own cost there when the proxy prices it per node
// (route.Costed): the earliest finish. Up to FullScanMax candidates it scans them all and breaks ties
// uniformly at random (reservoir sampling over the tied minimum); above that it uses the power of
// two choices (Mitzenmacher): two distinct random candidates, the less loaded wins (a random one
// on a tie), which keeps O(1) picks and avoids every proxy herding onto the same node.
//
// The proxy charges a batch's estimated cost to the node right after the pick and releases it on
// reply, so concurrent picks see each other. Safe for concurrent use.
package leastloaded

import "github.com/relevance-scoring/relevance/proxy/route"

// Type is the strategy's name in configuration.
const Type = "least_loaded"

// DefaultFullScanMax is the largest candidate count scanned in full.
const DefaultFullScanMax = 64

// Picker picks the least loaded.
type Picker struct {
	rnd         route.Rand
	fullScanMax int
}

var _ route.Picker = (*Picker)(nil)

// New returns a least-loaded picker: full scan up to fullScanMax candidates (≤ 0:
// DefaultFullScanMax), power of two choices above; rnd nil means route.DefaultRand.
func New(fullScanMax int, rnd route.Rand) *Picker {
	if fullScanMax <= 0 {
		fullScanMax = DefaultFullScanMax
	}
	if rnd == nil {
		rnd = route.DefaultRand
	}
	return &Picker{rnd: rnd, fullScanMax: fullScanMax}
}

// Pick implements route.Picker: the least Load(i), plus the batch's cost on candidate i when the
// candidates are route.Costed (BaseCost: its speed, no prefix credit) — the node that finishes the
// batch first. On equal nodes that is the least loaded; a node learned to be 3× slower gets a batch
// only where it still finishes first, instead of every batch while it looks idle (whose projected
// finish then made admission refuse the whole request).
func (p *Picker) Pick(c route.Candidates) int {
	finish := c.Load
	if cc, ok := c.(route.Costed); ok {
		finish = func(i int) float64 { return c.Load(i) + cc.BaseCost(i) }
	}
	return route.ArgMin(c.Len(), finish, p.rnd, p.fullScanMax)
}
