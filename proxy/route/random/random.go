// Package random picks a candidate uniformly at random, ignoring load: the baseline. Safe for
// concurrent use.
package random

import "github.com/relevance-scoring/relevance/proxy/route"

// Type is the strategy's name in configuration.
const Type = "random"

// Picker picks at random.
type Picker struct{ rnd route.Rand }

var _ route.Picker = (*Picker)(nil)

// New returns a random picker drawing from rnd (nil: route.DefaultRand).
func New(rnd route.Rand) *Picker {
	if rnd == nil {
		rnd = route.DefaultRand
	}
	return &Picker{rnd: rnd}
}

// Pick implements route.Picker.
func (p *Picker) Pick(c route.Candidates) int {
	if c.Len() == 0 {
		return -1
	}
	return p.rnd(c.Len())
}
