package cluster

import (
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/relevance-scoring/relevance/costmodel"
)

// Warm-up pricing. The route strategies price a batch on each node by the node's learned cost
// model and send it where it finishes first, so a node whose model says it is slow gets no
// batches while its peers keep up, and so never the replies that would correct the model. A
// node's first replies after a fault are the likeliest to be slow (a restarted process, cold
// caches, a machine still loaded), and a model that has learned from one or two of them can be
// several times too dear: a recovered node then idled for good beside busy peers (seen under
// CPU contention: 2 samples put it 3.6× dearer than the prior, its peers learned 0.7–3.7×
// cheaper). So a node that joins or comes back to traffic is priced, until it has learned from
// WarmSamples replies, at its trusted peers' mean model blended with its own by the share of
// those replies it has had: optimism where the node's own evidence is thin, the way a bandit
// explores an arm it knows little about. A node that is really slow shows it within those
// replies (outlier detection ejects it meanwhile if it is far off), at the cost of a few
// batches placed as if it were average. A node that reports its own calibrated model (seed)
// brings that many samples with it and is priced by its own model at once, unless that model is
// far from its trusted peers' (seedTrust): it is then ignored and the node warms up.

// trustedPeer reports whether the node's own model may price its peers (here) or bound the model
// a peer reports (Node.seed): it has warmed up, on replies or a seed, and is taking traffic. A
// node that is not is no peer's price.
func (n *Node) trustedPeer(now time.Time) bool {
	return n.toWarm() == 0 && n.samples.Load() > 0 && n.healthy.Load() && !n.Ejected(now) &&
		!n.stalled.Load() && n.breaker.State() != gobreaker.StateOpen
}

// rejoin starts the node's warm-up: its next WarmSamples replies are blended with its peers'.
func (n *Node) rejoin() {
	n.warmFrom.Store(n.samples.Load())
}

// toWarm is how many more replies the node learns from before its own model prices it alone
// (0: warm-up off or over).
func (n *Node) toWarm() int64 {
	if n.warm <= 0 {
		return 0
	}
	return min(n.warm, max(0, n.warm-(n.samples.Load()-n.warmFrom.Load())))
}

// warmingLeft is how many more replies the node is priced with its peers' model blended in
// (0: its own model alone, also when no peer is warmed up).
func (n *Node) warmingLeft() int64 {
	if n.peer.Load() == nil {
		return 0
	}
	return n.toWarm()
}

// Coeffs is the cost model the node is priced by: its learned model, blended with its trusted
// peers' mean while it warms up (see above). Coefficients in /v1/nodes are its own.
func (n *Node) Coeffs() costmodel.Coeffs {
	own := *n.coeffs.Load()
	p, left := n.peer.Load(), n.toWarm()
	if p == nil || left == 0 {
		return own
	}
	w := 1 - float64(left)/float64(n.warm)
	return costmodel.Coeffs{A: w*own.A + (1-w)*p.A, B: w*own.B + (1-w)*p.B, C: w*own.C + (1-w)*p.C}
}

// priceWarming gives every warming node the mean model of the warmed-up ones (nil when none is:
// a fresh cluster learns each node's own model from its replies). Called where placement reads
// the nodes (Eligible), so peers' latest models are used: a pass of two atomic loads a member,
// and the mean only while some node warms up.
func (c *Cluster) priceWarming() {
	if c.cfg.WarmSamples <= 0 {
		return
	}
	var trusted, warming []*Node
	now := time.Now()
	for _, n := range c.Snapshot() {
		switch {
		case n.toWarm() > 0:
			warming = append(warming, n)
		case n.trustedPeer(now):
			trusted = append(trusted, n)
		}
	}
	if len(warming) == 0 {
		return
	}
	var mean *costmodel.Coeffs
	if len(trusted) > 0 {
		m := MeanCoeffs(trusted)
		mean = &m
	}
	for _, n := range warming {
		n.peer.Store(mean)
	}
}
