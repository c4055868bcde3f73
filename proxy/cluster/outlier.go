package cluster

import (
	"math"
	"slices"
	"time"
)

// OutlierConfig configures outlier detection; see proxy.OutlierConfig for each field's meaning.
type OutlierConfig struct {
	Disabled           bool
	ConsecutiveSlow    int
	BaseEjection       time.Duration
	MaxEjection        time.Duration
	MaxEjectionPercent int
}

// Outlier detection. A node's calls end OK, slow (a batch far beyond its projected finish, or a
// deadline the node could not meet), or failed (the breaker's business); each outcome also moves
// the node's slowness, an average of its recent latency ÷ projected finish. ConsecutiveSlow slow
// outcomes in a row eject the node — if it is an outlier: its slowness at least outlierFactor ×
// the median of the other nodes' (as Envoy's detectors compare a host with the rest of the
// cluster). When every node is slow — the machine is overloaded, not one node broken — nobody is
// ejected, since removing capacity then makes everything worse. An ejected node leaves Eligible
// for n × BaseEjection (n its ejection count, capped at MaxEjection), then comes back on
// probation: it takes probes (copies of batches other nodes also run; TakeProbe) rather than
// requests' own batches, one slow outcome ejects it again and one OK outcome ends the probation. At most
// MaxEjectionPercent of the nodes are ejected or on probation at once (at least one when there are
// two or more), so detection never empties the cluster.

// outlierFactor is how much slower than the median of the others a node must be to be ejected.
const outlierFactor = 2.0

// observeSlowness folds one outcome's latency ÷ projected finish into the node's average.
func (n *Node) observeSlowness(ratio float64) {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return
	}
	if old := n.slowness.Load(); old > 0 {
		ratio = 0.7*old + 0.3*ratio
	}
	n.slowness.Store(ratio)
}

// ReportOK records a call sent at sent that ended in time at now, ratio its latency ÷ projected
// finish, and forgives the node's past ejections once it has served well for MaxEjection since
// the last one ended. Only a call sent after the node's last ejection ends its probation: one already out
// when the node was ejected (a small batch queued behind the slow ones, answered in time) says
// nothing of whether the node has recovered, and ending the probation on it sent the node back
// to full traffic without a probe, to be ejected again only after ConsecutiveSlow more misses.
func (c *Cluster) ReportOK(n *Node, sent, now time.Time, ratio float64) {
	n.observeSlowness(ratio)
	n.slowRun.Store(0)
	if sent.UnixNano() < n.ejectedAt.Load() {
		return
	}
	n.probation.Store(false)
	// A node that has served well for longer than MaxEjection since its last ejection ended
	// starts again from BaseEjection. (Checked on every OK outcome, not only the one that ends
	// the probation: under traffic that one follows the ejection at once, so the count was never
	// forgiven and every later slow spell, however rare, cost the node MaxEjection.) Under
	// ejectMu, so that an ejection being made does not lose its count.
	if n.ejections.Load() > 0 && c.quietSince(n, now) {
		c.ejectMu.Lock()
		if c.quietSince(n, now) {
			n.ejections.Store(0)
		}
		c.ejectMu.Unlock()
	}
}

// quietSince reports whether n's last ejection ended more than MaxEjection before now.
func (c *Cluster) quietSince(n *Node, now time.Time) bool {
	return now.Sub(time.Unix(0, n.ejectedUntil.Load())) > c.cfg.Outlier.MaxEjection
}

// ReportSlow records a slow outcome (counted once per call; ratio its latency ÷ projected finish
// so far) and ejects the node when it is the last straw.
func (c *Cluster) ReportSlow(n *Node, now time.Time, ratio float64) {
	n.observeSlowness(ratio)
	n.slowTotal.Add(1)
	if c.cfg.Outlier.Disabled {
		return
	}
	run := n.slowRun.Add(1)
	if !n.probation.Load() && int(run) < c.cfg.Outlier.ConsecutiveSlow {
		return
	}
	c.ejectMu.Lock()
	defer c.ejectMu.Unlock()
	if n.Ejected(now) {
		return
	}
	members := c.Snapshot()
	if !c.outlier(n, members, now) {
		return // as slow as the rest: an overloaded machine, not a broken node
	}
	limit := len(members) * c.cfg.Outlier.MaxEjectionPercent / 100
	if len(members) >= 2 {
		limit = max(limit, 1)
	}
	// A node on probation counts as out: it takes probes, not requests' batches, while another
	// node can (Eligible). Uncounted, each slow node could be ejected in turn while the last
	// sat on probation, and the share bounded nothing. n's own probation does not count: a slow
	// probe sends it back out.
	ejected := 0
	for _, m := range members {
		if m != n && (m.Ejected(now) || m.probation.Load() && m.healthy.Load()) {
			ejected++
		}
	}
	if ejected >= limit {
		return // the share is used up: the node stays, still counted slow
	}
	k := n.ejections.Add(1)
	d := min(time.Duration(k)*c.cfg.Outlier.BaseEjection, c.cfg.Outlier.MaxEjection)
	n.ejectedAt.Store(now.UnixNano()) // first: a status that shows the ejection shows its time
	n.ejectedUntil.Store(now.Add(d).UnixNano())
	n.slowRun.Store(0)
	n.probation.Store(true)
	c.log.Warn("scorer node ejected as an outlier", "node", n.addr, "for", d, "ejections", k)
	c.notify()
	// Wake WaitFor callers again when it comes back.
	time.AfterFunc(d, c.notify)
}

// outlier reports whether n is slower than the other serving nodes by outlierFactor (true when
// no other node has outcomes to compare with).
func (c *Cluster) outlier(n *Node, members []*Node, now time.Time) bool {
	var others []float64
	for _, m := range members {
		if s := m.slowness.Load(); m != n && s > 0 && m.healthy.Load() && !m.Ejected(now) {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return true
	}
	slices.Sort(others)
	med := others[len(others)/2]
	if len(others)%2 == 0 {
		med = (others[len(others)/2-1] + med) / 2
	}
	return n.slowness.Load() >= outlierFactor*med
}

// Ejected reports whether the node is ejected at now.
func (n *Node) Ejected(now time.Time) bool { return now.UnixNano() < n.ejectedUntil.Load() }
