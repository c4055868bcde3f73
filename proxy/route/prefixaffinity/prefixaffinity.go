// Package prefixaffinity picks the candidate where a batch is projected to finish first: the
// least Load(i) + Cost(i), where Cost is the batch's predicted cost on candidate i and is lower —
// by the cost of computing the shared query prefix — on a node that already holds that prefix in
// its cache (route.Costed; the proxy learns what each node holds from its own routing and the
// nodes' replies). So a repeated query's batches go back to the node that has its prefix, but
// only while the time saved there is worth more than the extra queue: affinity is weighed against
// load in seconds, never piling work on one node (as llm-d's weighted prefix/load scoring, with
// the weight set by the cost model instead of by hand). Without Costed candidates it is
// least-loaded. Ties break uniformly at random; above FullScanMax candidates it compares two random
// ones (power of two choices).
//
// Safe for concurrent use.
package prefixaffinity

import "github.com/relevance-scoring/relevance/proxy/route"

// Type is the strategy's name in configuration.
const Type = "prefix_affinity"

// Picker picks the earliest projected finish.
type Picker struct {
	rnd         route.Rand
	fullScanMax int
}

var _ route.Picker = (*Picker)(nil)

// New returns the picker: full scan up to fullScanMax candidates (≤ 0: 64), two random choices
// above; rnd nil means route.DefaultRand.
func New(fullScanMax int, rnd route.Rand) *Picker {
	if fullScanMax <= 0 {
		fullScanMax = 64
	}
	if rnd == nil {
		rnd = route.DefaultRand
	}
	return &Picker{rnd: rnd, fullScanMax: fullScanMax}
}

// Pick implements route.Picker.
func (p *Picker) Pick(c route.Candidates) int {
	finish := c.Load
	if cc, ok := c.(route.Costed); ok {
		finish = func(i int) float64 { return c.Load(i) + cc.Cost(i) }
	}
	return route.ArgMin(c.Len(), finish, p.rnd, p.fullScanMax)
}
