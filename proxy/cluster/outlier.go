package cluster

import (
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
// deadline the node could not meet), or failed (the breaker's business). ConsecutiveSlow slow
// outcomes in a row eject the node: it leaves Eligible for n × BaseEjection (n its ejection count,
// capped at MaxEjection), then comes back on probation, where one slow outcome ejects it again
// and one OK outcome ends the probation. At most MaxEjectionPercent of the nodes are ejected at
// once (at least one when there are two or more), so detection never empties the cluster.

// ReportOK records a call that ended in time.
func (c *Cluster) ReportOK(n *Node, now time.Time) {
	n.slowRun.Store(0)
	if n.probation.Swap(false) && now.Sub(time.Unix(0, n.ejectedUntil.Load())) > c.cfg.Outlier.MaxEjection {
		n.ejections.Store(0)
	}
}

// ReportSlow records a slow outcome (counted once per call) and ejects the node when it is the
// last straw.
func (c *Cluster) ReportSlow(n *Node, now time.Time) {
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
	limit := len(members) * c.cfg.Outlier.MaxEjectionPercent / 100
	if len(members) >= 2 {
		limit = max(limit, 1)
	}
	ejected := 0
	for _, m := range members {
		if m.Ejected(now) {
			ejected++
		}
	}
	if ejected >= limit {
		return // the share is used up: the node stays, still counted slow
	}
	k := n.ejections.Add(1)
	d := min(time.Duration(k)*c.cfg.Outlier.BaseEjection, c.cfg.Outlier.MaxEjection)
	n.ejectedUntil.Store(now.Add(d).UnixNano())
	n.slowRun.Store(0)
	n.probation.Store(true)
	c.log.Warn("scorer node ejected as an outlier", "node", n.addr, "for", d, "ejections", k)
	c.notify()
	// Wake WaitFor callers again when it comes back.
	time.AfterFunc(d, c.notify)
}

// Ejected reports whether the node is ejected at now.
func (n *Node) Ejected(now time.Time) bool { return now.UnixNano() < n.ejectedUntil.Load() }
