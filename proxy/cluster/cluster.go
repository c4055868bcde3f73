// Package cluster is the proxy's view of its scorer nodes: membership (a static list and/or DNS),
// health (grpc.health.v1 Watch per node), one circuit breaker per node (sony/gobreaker v2), and
// each node's load and learned speed.
//
// Load. A node's load is its outstanding estimated work in seconds: what is left of this proxy's
// batches on it (their projected finish time minus now, pushed by every charge and reset to
// now + the charges still out by every reply) plus the rest of the backlog the node last reported,
// drained in real time since. Node.Load is the one load formula: routing compares it, planning
// places batches behind it, admission and hedging read the placements made with it.
//
// Speed. Each node's cost coefficients (package costmodel) are learned online from the compute
// time and token counts of its replies, starting from the configured prior, or from the model the
// node reports of itself when that is within seedTrust of its trusted peers' (Node.seed).
//
// A Cluster is safe for concurrent use once New returns; Start once, Close once. Readers use an
// immutable membership snapshot through an atomic pointer and per-node atomics, and never block on
// a lock held across I/O.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Config is what the cluster needs of the proxy's configuration.
type Config struct {
	// Static lists node addresses (host:port) of our scorer.
	Static []string
	// Backends lists nodes of any kind (backend.Spec): our scorer or another rerank server.
	Backends []backend.Spec
	// DNS is a name:port whose A/AAAA records are the nodes; empty: none.
	DNS string
	// DNSInterval is how often DNS is re-resolved.
	DNSInterval time.Duration
	// Breaker configures every node's circuit breaker.
	Breaker BreakerConfig
	// Outlier configures outlier detection.
	Outlier OutlierConfig
	// StallTimeout is how long a node with an overdue batch must have been silent before its
	// health is checked, and how long it then gets to answer before it counts as stalled
	// (stall.go); 0: no stall detection.
	StallTimeout time.Duration
	// Prior is every node's starting cost model; Forgetting the learner's factor in (0, 1].
	Prior      costmodel.Coeffs
	Forgetting float64
	// WarmSamples is how many replies a node that joined or came back learns from before its
	// own model prices it alone (see Node.Coeffs); 0: from the first.
	WarmSamples int
	// Prime sends each scorer node that becomes healthy one tiny batch, so that its reply brings
	// the node's calibrated cost model (and its calibration passes as samples) before any
	// request needs it: without it, admission trusts no projection until every node has
	// answered a request, and a fresh cluster's first burst is admitted blind.
	Prime bool
}

// BreakerConfig configures the per-node circuit breakers.
type BreakerConfig struct {
	// ConsecutiveFailures trips the breaker.
	ConsecutiveFailures uint32
	// OpenTimeout is how long a breaker stays open before half-opening.
	OpenTimeout time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through.
	HalfOpenProbes uint32
}

// leftGrace is how long a node that left the membership keeps its connection for calls leased
// just before it left (its last call closes it; so does Close). A variable for tests.
var leftGrace = 2 * time.Second

// Cluster is the set of scorer nodes.
type Cluster struct {
	cfg Config
	log *slog.Logger
	// odd holds "addr\x00fingerprint" of every node seen serving a model other than the
	// cluster's, warned about once each.
	odd sync.Map

	// Lookup resolves the DNS name; tests replace it before Start.
	Lookup func(ctx context.Context, host string) ([]string, error)

	membersMu sync.Mutex // serialises membership changes; readers use members
	members   atomic.Pointer[[]*Node]
	dnsAddrs  []string       // guarded by membersMu
	gone      []*Node        // nodes that left with calls in flight, guarded by membersMu (Close closes their conns)
	watchers  sync.WaitGroup // every node's health watch, so Close can wait for them

	ejectMu sync.Mutex // serialises ejections, so the share of ejected nodes holds

	changedMu sync.Mutex
	changed   chan struct{} // closed and replaced on every health or membership change

	started atomic.Bool
	closed  atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup // the DNS loop
	// checks are the stall checks running (stall.go); checksMu orders their start against
	// Close, which sets checksOver.
	checksMu   sync.Mutex
	checks     sync.WaitGroup
	checksOver bool // guarded by checksMu
}

// New builds a cluster; it connects to nothing until Start.
func New(cfg Config, log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, log: log, Lookup: net.DefaultResolver.LookupHost, changed: make(chan struct{})}
	c.members.Store(&[]*Node{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Start connects to the static nodes, resolves DNS once and keeps re-resolving it, and starts a
// health watch per node. It returns at once (nodes become ready as their health arrives: see
// WaitReady); ctx bounds only the first DNS resolution. A failed first resolution is logged and
// retried, since a headless service may have no endpoints yet.
func (c *Cluster) Start(ctx context.Context) error {
	if c.closed.Load() {
		return errors.New("cluster start: closed")
	}
	if c.started.Swap(true) {
		return errors.New("cluster start: already started")
	}
	if c.cfg.DNS != "" {
		c.resolve(ctx)
		c.bg.Go(c.dnsLoop)
	} else if err := c.setMembers(nil); err != nil {
		return fmt.Errorf("cluster start: %w", err)
	}
	return nil
}

// Closed reports whether Close has been called.
func (c *Cluster) Closed() bool { return c.closed.Load() }

// Ready reports whether at least one node is healthy.
func (c *Cluster) Ready() bool {
	for _, n := range c.Snapshot() {
		if n.healthy.Load() {
			return true
		}
	}
	return false
}

// WaitReady blocks until Ready or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	return c.WaitFor(ctx, c.Ready)
}

// WaitFor blocks until cond holds (re-checked on every health or membership change) or ctx ends.
func (c *Cluster) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		c.changedMu.Lock()
		ch := c.changed
		c.changedMu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (c *Cluster) notify() {
	c.changedMu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.changedMu.Unlock()
}

// Snapshot is the current membership, sorted by address. Immutable: do not modify.
func (c *Cluster) Snapshot() []*Node { return *c.members.Load() }

// Eligible lists the nodes a batch may go to: healthy, breaker not open, not ejected as an
// outlier, not stalled, not in exclude.
func (c *Cluster) Eligible(exclude []*Node) []*Node {
	var out, probation, stalled []*Node
	now := time.Now()
	c.priceWarming()
	for _, n := range c.Snapshot() {
		if n.healthy.Load() && n.breaker.State() != gobreaker.StateOpen && !n.Ejected(now) && !slices.Contains(exclude, n) {
			switch {
			case n.stalled.Load():
				stalled = append(stalled, n)
			case n.probation.Load():
				probation = append(probation, n)
			default:
				out = append(out, n)
			}
		}
	}
	// A node back from an ejection earns its way back with probes (TakeProbe) rather than the
	// requests' own batches, unless no other node is left; a stalled node takes batches only
	// when no other node can (a whole machine paused stalls every node: refusing all of them
	// would fail every request at once, where waiting may still make the deadline).
	switch {
	case len(out) > 0:
		return out
	case len(probation) > 0:
		return probation
	}
	return stalled
}

// TakeProbe returns a node on probation — back from an outlier ejection with no outcome since —
// that is healthy, not ejected, and has no probe in flight, marking it probing; nil when there is
// none. The caller sends it a copy of a batch that another node also runs (package dispatch), so
// that a node that is still slow costs no request its deadline: the probe's outcome ends the
// probation (OK) or ejects the node again (slow), and ProbeEnded clears the mark.
func (c *Cluster) TakeProbe() *Node {
	now := time.Now()
	for _, n := range c.Snapshot() {
		if n.probation.Load() && n.healthy.Load() && !n.Ejected(now) && n.breaker.State() != gobreaker.StateOpen &&
			n.probing.CompareAndSwap(false, true) {
			return n
		}
	}
	return nil
}

// ProbeEnded clears the probing mark TakeProbe set.
func (n *Node) ProbeEnded() { n.probing.Store(false) }

// Fallback is what keeps breakers and outlier ejection from removing every node: when no
// healthy, non-ejected node has a closed breaker (each is open, or half-open with its probes
// possibly all out, so that none may take the batch), it returns the healthy node (not in
// exclude) whose last failure is oldest — the one most likely to have recovered. Otherwise (some
// breaker is closed) it returns nothing.
func (c *Cluster) Fallback(exclude []*Node) []*Node {
	var best *Node
	now := time.Now()
	for _, n := range c.Snapshot() {
		if !n.healthy.Load() {
			continue
		}
		if n.breaker.State() == gobreaker.StateClosed && !n.Ejected(now) {
			return nil // that breaker lets traffic through
		}
		if slices.Contains(exclude, n) {
			continue
		}
		if best == nil || n.lastFailure.Load() < best.lastFailure.Load() {
			best = n
		}
	}
	if best == nil {
		return nil
	}
	return []*Node{best}
}

// ModelNotServed takes out of traffic a node of another kind whose server answered a batch that
// it does not serve the configured model (backend.ErrModelNotServed): every batch sent to it would
// fail alike, and counted as failures they would only open its breaker, which lets a batch
// through again every open timeout. Its health poll lets it back once its model check passes
// or cannot tell (checkModel), checked every modelRecheck.
func (c *Cluster) ModelNotServed(n *Node, err error) {
	if n.be == nil {
		return // our scorer's health is its own
	}
	n.outMu.Lock()
	first := n.out.Load() == nil
	n.out.Store(&modelOut{reason: status.Convert(err).Message(), at: time.Now()})
	n.setHealthy(false, c.notify)
	n.outMu.Unlock()
	if first {
		c.log.Warn("scorer node answers that it does not serve the configured model: kept out of traffic until it does",
			"node", n.addr, "model", n.wantModel, "err", err)
	}
}

// Models is the sorted set of model names the nodes last reported (empty before any reply).
func (c *Cluster) Models() []string {
	var out []string
	for _, n := range c.Snapshot() {
		if m := n.identity().model; m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// ModelOf is the model name that the healthy nodes last answering with fingerprint fp reported
// (the alphabetically first, should they disagree); served says whether any healthy node did. During
// an update that renames the model, Models holds both names: this is the one that goes with
// the scores of fp.
func (c *Cluster) ModelOf(fp string) (name string, served bool) {
	if fp == "" {
		return "", false
	}
	for _, n := range c.Snapshot() {
		if id := n.identity(); id.fingerprint == fp && n.healthy.Load() {
			served = true
			if id.model != "" && (name == "" || id.model < name) {
				name = id.model
			}
		}
	}
	return name, served
}

// identity is the model a node answered with: its name and fingerprint, stored together so that
// no reader pairs one reply's name with another's fingerprint (ModelOf names a fingerprint's
// scores by it).
type identity struct{ model, fingerprint string }

// identity is the model the node last answered with (zero before any).
func (n *Node) identity() identity {
	if id := n.ident.Load(); id != nil {
		return *id
	}
	return identity{}
}

// updateIdentity stores f applied to the node's identity (replies may be observed concurrently).
func (n *Node) updateIdentity(f func(*identity)) {
	for {
		old := n.ident.Load()
		var cur identity
		if old != nil {
			cur = *old
		}
		next := cur
		f(&next)
		if next == cur || n.ident.CompareAndSwap(old, &next) {
			return
		}
	}
}

// SetModel records the model a node answered with, its name and fingerprint ("" leaves that
// part as it was).
func (n *Node) SetModel(name, fp string) {
	n.updateIdentity(func(id *identity) {
		if name != "" {
			id.model = name
		}
		if fp != "" {
			id.fingerprint = fp
		}
	})
}

// SetFingerprint records the model fingerprint a node answered with ("" changes nothing).
func (n *Node) SetFingerprint(fp string) { n.SetModel("", fp) }

// Fingerprint is the model fingerprint the node last answered with ("" before any).
func (n *Node) Fingerprint() string { return n.identity().fingerprint }

// Fingerprint is the model fingerprint that most healthy nodes last answered with ("" when none
// has answered with one). During a rolling model update the cluster serves each request from
// one fingerprint: this one.
func (c *Cluster) Fingerprint() string {
	count := map[string]int{}
	best, bestN := "", 0
	for _, n := range c.Snapshot() {
		fp := n.Fingerprint()
		if fp == "" || !n.healthy.Load() {
			continue
		}
		count[fp]++
		if k := count[fp]; k > bestN || (k == bestN && fp < best) {
			best, bestN = fp, k
		}
	}
	if len(count) > 1 {
		// A node of another model gets none of the cluster's requests: say so once, or an
		// operator sees it healthy and idle without a word (a node started with another
		// max_tokens, say, which the fingerprint covers).
		for _, n := range c.Snapshot() {
			if fp := n.Fingerprint(); fp != "" && fp != best && n.healthy.Load() {
				if _, seen := c.odd.LoadOrStore(n.addr+"\x00"+fp, true); !seen {
					c.log.Warn("scorer node serves another model than the cluster's: it gets none of its requests (check its model, max_tokens and dtype)",
						"node", n.addr, "fingerprint", fp, "cluster_fingerprint", best)
				}
			}
		}
	}
	return best
}

// NodeStatus is one node's state for /v1/nodes.
type NodeStatus struct {
	Addr    string `json:"addr"`
	Kind    string `json:"kind"`
	Healthy bool   `json:"healthy"`
	// Breaker is "closed", "half-open" or "open"; BreakerOpened and BreakerHalfOpened count
	// how many times it entered those states.
	Breaker             string  `json:"breaker"`
	BreakerOpened       int64   `json:"breaker_opened"`
	BreakerHalfOpened   int64   `json:"breaker_half_opened"`
	InflightCostSeconds float64 `json:"inflight_cost_seconds"`
	// BacklogSeconds adds the rest of the node's reported backlog to the in-flight cost.
	BacklogSeconds float64          `json:"backlog_seconds"`
	Coefficients   costmodel.Coeffs `json:"coefficients"`
	// SpeedRatio is the learned speed relative to the prior on a reference batch.
	SpeedRatio float64 `json:"speed_ratio"`
	Samples    int64   `json:"samples"`
	// WarmingSamples is how many more replies the node, back in traffic, is priced with its
	// peers' mean model blended in (Node.Coeffs); Coefficients are its own either way.
	WarmingSamples int64 `json:"warming_samples,omitempty"`
	// NotReady is why the node is kept out of traffic although its server answers its health
	// endpoint: it does not serve the configured model ("": it is not).
	NotReady string `json:"not_ready,omitempty"`
	// Unhealthy is why the node's health check last failed ("" while it passes): unreachable
	// (the connection's error), or answering NOT_SERVING (starting, draining).
	Unhealthy string `json:"unhealthy,omitempty"`
	// Model and Fingerprint are what the node last answered with.
	Model       string `json:"model,omitempty"`
	Fingerprint string `json:"model_fingerprint,omitempty"`
	// Emulated: the node's replies say it runs the emulated engine (no model; timings from a
	// cost profile). bench load labels its results EMULATED from it.
	Emulated bool `json:"emulated,omitempty"`
	// MaxItems is the most items the proxy puts in one batch to the node: the configured limit
	// or the one the node reported (a scorer node's max_items), whichever is lower (0: none).
	// MaxPromptTokens is the prompt limit the node last reported (0: unknown).
	MaxItems        int   `json:"max_items,omitempty"`
	MaxPromptTokens int64 `json:"max_prompt_tokens,omitempty"`
	Batches         int64 `json:"batches"`
	Errors          int64 `json:"errors"`
	// Slow counts slow outcomes (outlier detection); Ejected whether the node is ejected now,
	// EjectedSeconds for how much longer, Ejections how many times it was, LastEjectedAt when
	// the last time began (zero: never; a poller learns when, not only that).
	Slow           int64     `json:"slow"`
	Ejected        bool      `json:"ejected"`
	EjectedSeconds float64   `json:"ejected_seconds,omitempty"`
	Ejections      int32     `json:"ejections"`
	LastEjectedAt  time.Time `json:"last_ejected_at,omitzero"`
	// Stalled: the node did not answer a health check while its batches were overdue (it takes
	// no batches until it answers); Stalls counts how many times it was found so, LastStalledAt
	// when it last was (zero: never).
	Stalled       bool      `json:"stalled"`
	Stalls        int64     `json:"stalls"`
	LastStalledAt time.Time `json:"last_stalled_at,omitzero"`
}

// unixTime is t (unix nanoseconds) as a time, zero for 0.
func unixTime(t int64) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, t).UTC()
}

// Status reports every node's state, sorted by address.
func (c *Cluster) Status() []NodeStatus {
	now := time.Now()
	out := []NodeStatus{}
	for _, n := range c.Snapshot() {
		id := n.identity() // one read: a name is never shown beside another reply's fingerprint
		out = append(out, NodeStatus{
			Addr:                n.addr,
			Kind:                n.kind,
			Healthy:             n.healthy.Load(),
			NotReady:            n.NotReady(),
			Unhealthy:           n.DownWhy(),
			Breaker:             n.breaker.State().String(),
			BreakerOpened:       n.transitions[gobreaker.StateOpen].Load(),
			BreakerHalfOpened:   n.transitions[gobreaker.StateHalfOpen].Load(),
			InflightCostSeconds: n.Inflight(),
			BacklogSeconds:      n.Load(now),
			Coefficients:        *n.coeffs.Load(),
			SpeedRatio:          1 / n.ownScale(c.cfg.Prior),
			WarmingSamples:      n.warmingLeft(),
			Samples:             n.samples.Load(),
			Model:               id.model,
			Fingerprint:         id.fingerprint,
			Emulated:            n.emulated.Load(),
			MaxItems:            n.Limits().MaxItems,
			MaxPromptTokens:     n.maxPrompt.Load(),
			Batches:             n.batches.Load(),
			Errors:              n.errors.Load(),
			Slow:                n.slowTotal.Load(),
			Ejected:             n.Ejected(now),
			EjectedSeconds:      max(0, time.Unix(0, n.ejectedUntil.Load()).Sub(now).Seconds()),
			Ejections:           n.ejections.Load(),
			LastEjectedAt:       unixTime(n.ejectedAt.Load()),
			Stalled:             n.stalled.Load(),
			Stalls:              n.stalls.Load(),
			LastStalledAt:       unixTime(n.stalledAt.Load()),
		})
	}
	return out
}

// Close stops the DNS loop and health watches and closes every connection. Call it after the
// fronts have drained. Idempotent.
func (c *Cluster) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	c.bg.Wait()
	c.checksMu.Lock()
	c.checksOver = true // no stall check starts after this
	c.checksMu.Unlock()
	c.checks.Wait()
	c.membersMu.Lock()
	nodes := append(*c.members.Load(), c.gone...)
	c.members.Store(&[]*Node{})
	c.gone = nil
	c.membersMu.Unlock()
	for _, n := range nodes {
		n.stop()
	}
	c.watchers.Wait()
	var errs []error
	for _, n := range nodes {
		if n.connClosed.CompareAndSwap(false, true) {
			if err := n.closeConn(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", n.addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// setMembers makes the membership the static list plus dns (nil: keep the last DNS answer).
func (c *Cluster) setMembers(dns []string) error {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	if c.closed.Load() {
		return nil
	}
	if dns != nil {
		c.dnsAddrs = dns
	}
	want := map[string]bool{}
	specs := map[string]backend.Spec{}   // nodes of another kind, by Node() name
	scorers := map[string]backend.Spec{} // scorer nodes given as backends, by address
	for _, a := range c.cfg.Static {
		want[a] = true
	}
	for _, s := range c.cfg.Backends {
		if s.Kind == backend.KindScorer {
			want[s.Addr] = true
			scorers[s.Addr] = s
			continue
		}
		want[s.Node()] = true
		specs[s.Node()] = s
	}
	for _, a := range c.dnsAddrs {
		want[a] = true
	}
	// Nodes that left and have since drained (their conn is closed) are forgotten: with DNS
	// churn (rolling deploys) the list would otherwise grow for the life of the process.
	c.gone = slices.DeleteFunc(c.gone, func(n *Node) bool { return n.connClosed.Load() })
	old := *c.members.Load()
	var next []*Node
	have := map[string]bool{}
	for _, n := range old {
		if want[n.addr] {
			next = append(next, n)
			have[n.addr] = true
			continue
		}
		c.log.Info("scorer node left", "node", n.addr)
		n.removed.Store(true)
		n.stop()
		c.gone = append(c.gone, n)
		// Its connection closes once it has no call in flight — not at once: a planner that
		// read the membership just before may still lease it and send a batch (a rolling
		// deploy's node is alive), which a closed connection would fail for a retry.
		time.AfterFunc(leftGrace, func() {
			if n.calls.Load() == 0 {
				n.closeIdle()
			}
		})
	}
	var errs []error
	for a := range want {
		if have[a] {
			continue
		}
		var n *Node
		var err error
		if s, ok := specs[a]; ok {
			n, err = newBackendNode(s, c.cfg, c.onBreaker)
		} else {
			n, err = newNode(a, c.cfg, c.onBreaker)
			if s, ok := scorers[a]; ok && err == nil {
				// A backends entry's max_items and timeout hold for our scorer too.
				n.limits, n.callTimeout = backend.Limits{MaxItems: s.MaxItems}, s.TimeoutOr()
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", a, err))
			continue
		}
		n.peers, n.log = c.Snapshot, c.log
		ctx, cancel := context.WithCancel(c.ctx)
		n.stop = cancel
		if n.be != nil {
			c.watchers.Go(func() { n.pollBackend(ctx, c.notify, c.log) })
		} else {
			c.watchers.Go(func() { n.watchHealth(ctx, c.notify) })
		}
		c.log.Info("scorer node added: it takes traffic once its health check passes (/v1/nodes says why not)", "node", a)
		next = append(next, n)
	}
	slices.SortFunc(next, func(a, b *Node) int { return strings.Compare(a.addr, b.addr) })
	c.members.Store(&next)
	c.notify()
	return errors.Join(errs...)
}

func (c *Cluster) onBreaker(addr string, to gobreaker.State) {
	c.log.Warn("breaker state change", "node", addr, "state", to.String())
}

// resolve looks the DNS name up once and updates membership; failures keep the last answer.
func (c *Cluster) resolve(ctx context.Context) {
	host, port, _ := net.SplitHostPort(c.cfg.DNS)
	ctx, cancel := context.WithTimeout(ctx, max(c.cfg.DNSInterval, time.Second))
	defer cancel()
	ips, err := c.Lookup(ctx, host)
	if err != nil {
		c.log.Warn("dns lookup failed; keeping the last node list", "name", host, "err", err)
		_ = c.setMembers(nil)
		return
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, port))
	}
	if err := c.setMembers(addrs); err != nil {
		c.log.Warn("membership update", "err", err)
	}
}

func (c *Cluster) dnsLoop() {
	t := time.NewTicker(c.cfg.DNSInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.resolve(c.ctx)
		}
	}
}
