// Package roundrobin picks candidates in turn: pick k goes to candidate k mod n. The counter is
// shared by all requests (an atomic add), so concurrent requests interleave; when the candidate
// set changes size the rotation simply continues modulo the new size. Safe for concurrent use.
package roundrobin

import (
	"sync/atomic"

	"github.com/relevance-scoring/relevance/proxy/route"
)

// Type is the strategy's name in configuration.
const Type = "round_robin"

// Picker rotates.
type Picker struct{ next atomic.Uint64 }

var _ route.Picker = (*Picker)(nil)

// New returns a round-robin picker starting at offset start (e.g. random, so that many proxies
// do not all begin with the same node).
func New(start uint64) *Picker {
	p := &Picker{}
	p.next.Store(start)
	return p
}

// Pick implements route.Picker.
func (p *Picker) Pick(c route.Candidates) int {
	n := c.Len()
	if n == 0 {
		return -1
	}
	return int((p.next.Add(1) - 1) % uint64(n))
}
