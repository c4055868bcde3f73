package cluster

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Stall detection. A stopped process (SIGSTOP, a paused VM, a host thrashing in swap) looks to
// everything else the proxy sees like a busy node: its connection stays up, its health watch
// reports nothing new, and the batches it holds are merely late. Outlier detection needs
// ConsecutiveSlow slow outcomes, each timed at slow_factor × the projection, and least-loaded
// routing keeps feeding the node while it is within its projected schedule; by the time either
// acts, the batches placed there have missed their deadlines (fault suite, sigstop scenario: 25
// of 26 504s were batches on the stopped node whose rescue came too late to make the deadline).
//
// So a batch overdue on a node that has answered nothing for StallTimeout makes the proxy ask
// the node what any live server answers at once: a grpc.health.v1 Check (another kind's health
// endpoint). No answer within StallTimeout, and no answer to any call meanwhile: the node is
// stalled. A stalled node takes no new batches while another node can, and every call waiting
// on it is told at once (Node.StallSignal), so that its batch is rescued elsewhere while the
// deadline allows. The proxy asks again every stallRecheck until the node answers (the check or
// any call); then it serves again with nothing held against it. A stall is a state, like
// health, not an outcome: ejection stays outlier detection's business.

// stallRecheck is the pause between a stalled node's health checks.
const stallRecheck = 50 * time.Millisecond

// StallSignal returns a channel closed when the node is found stalled (at once, when it is
// stalled now). A node that answers again gets a new channel; take a fresh one per call.
func (n *Node) StallSignal() <-chan struct{} {
	n.stallMu.Lock()
	defer n.stallMu.Unlock()
	if n.stallCh == nil {
		n.stallCh = make(chan struct{})
	}
	return n.stallCh
}

// Stalled reports whether the node is stalled now.
func (n *Node) Stalled() bool { return n.stalled.Load() }

// Answered records that the node answered a call at now (a reply, or an error the node itself
// sent): it is not stalled.
func (c *Cluster) Answered(n *Node, now time.Time) {
	for {
		old := n.lastAnswer.Load()
		if old >= now.UnixNano() || n.lastAnswer.CompareAndSwap(old, now.UnixNano()) {
			break
		}
	}
	if n.stalled.Load() {
		c.unstall(n)
	}
}

// SuspectStall is called when a batch on n is overdue at now. If n has answered nothing within
// the last StallTimeout, its health is checked (one check per node at a time); see the stall
// detection doc above. (Not "nothing since the batch was sent": a node stopped just after it
// answered a batch would then be checked only by batches sent later, and those sent before the
// stop would wait for their rescue timers.)
func (c *Cluster) SuspectStall(n *Node, now time.Time) {
	if c.cfg.StallTimeout <= 0 || n.stalled.Load() || n.lastAnswer.Load() >= now.Add(-c.cfg.StallTimeout).UnixNano() || c.ctx.Err() != nil {
		return
	}
	if !n.checking.CompareAndSwap(false, true) {
		return
	}
	c.checksMu.Lock()
	defer c.checksMu.Unlock()
	if c.checksOver {
		n.checking.Store(false)
		return
	}
	c.checks.Go(func() { c.checkStall(n) })
}

// checkStall asks n whether it is alive until it answers, marking it stalled while it does not.
func (c *Cluster) checkStall(n *Node) {
	defer n.checking.Store(false)
	for {
		start := time.Now()
		answered, err := n.ping(c.ctx, c.cfg.StallTimeout)
		if c.ctx.Err() != nil || n.removed.Load() {
			return
		}
		switch {
		case answered:
			c.Answered(n, time.Now())
			return
		case errors.Is(err, context.DeadlineExceeded) && n.lastAnswer.Load() < start.UnixNano():
			c.stall(n, start) // silent, and no call answered meanwhile
		case !n.stalled.Load():
			// It answered a call meanwhile (busy, not stopped), or the check was refused or the
			// node is unreachable: a lost connection is the health watch's and the breaker's
			// business, not a stall.
			return
		}
		// Stalled: ask again until it answers, even while unreachable (a stopped node killed
		// and restarted must not stay marked stalled with nobody asking).
		t := time.NewTimer(stallRecheck)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// ping asks the node for its health, waiting at most timeout: answered is true when it replied
// at all (whatever it said: NOT_SERVING is the health watch's business).
func (n *Node) ping(ctx context.Context, timeout time.Duration) (answered bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if n.be != nil {
		n.be.Healthy(ctx)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return true, nil
	}
	_, err = healthpb.NewHealthClient(n.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case status.Code(err) == codes.Unavailable:
		return false, err // no connection: nobody answered
	}
	return true, nil // an error the server sent (e.g. no health service) is an answer too
}

// stall marks n stalled, unless it answered since the check began at start, and tells every call
// waiting on it.
func (c *Cluster) stall(n *Node, start time.Time) {
	n.stallMu.Lock()
	if n.stalled.Swap(true) {
		n.stallMu.Unlock()
		return
	}
	// Answered stores lastAnswer, then reads stalled; this stores stalled, then reads lastAnswer:
	// one of the two sees the other, so an answer racing the check never leaves the node stalled.
	if n.lastAnswer.Load() >= start.UnixNano() {
		n.stalled.Store(false)
		n.stallMu.Unlock()
		return
	}
	if n.stallCh == nil {
		n.stallCh = make(chan struct{})
	}
	close(n.stallCh)
	n.stallMu.Unlock()
	n.stalls.Add(1)
	n.stalledAt.Store(time.Now().UnixNano())
	c.log.Warn("scorer node stalled: no answer to a health check with batches overdue", "node", n.addr, "timeout", c.cfg.StallTimeout)
	c.notify()
}

// unstall ends n's stall: it answered.
func (c *Cluster) unstall(n *Node) {
	n.stallMu.Lock()
	if !n.stalled.Swap(false) {
		n.stallMu.Unlock()
		return
	}
	n.stallCh = make(chan struct{})
	n.stallMu.Unlock()
	c.log.Info("scorer node answers again after a stall", "node", n.addr)
	c.notify()
}
