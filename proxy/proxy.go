// Package proxy is the core of the relevance proxy: it validates a scoring request, estimates the
// cost of every item, splits the items into batches (package split and its strategies), routes
// each batch to a scorer node (package route and its strategies) behind a per-node circuit
// breaker, enforces the deadline with admission control, one retry and optional hedging, and
// merges the nodes' answers back in input order. Node membership comes from a static list and/or
// DNS; node health from grpc.health.v1 Watch; each node's cost coefficients are learned online
// from its replies. The HTTP and gRPC fronts (package proxy/front) call Proxy.Score.
//
// A Proxy is safe for concurrent use once New returns; Start must be called once before Score
// and Close once at the end. The hot path reads an immutable membership snapshot through an
// atomic pointer and per-node atomics, and never blocks on a lock held across I/O.
package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/split"
)

// Proxy fans scoring requests out to scorer nodes.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics
	tokens   *prompt.Counter
	splitter split.Splitter
	picker   route.Picker
	budget   *retryBudget
	hedge    *latencyTracker

	// lookup resolves the DNS name (tests inject one).
	lookup func(ctx context.Context, host string) ([]string, error)

	membersMu sync.Mutex // serialises membership changes; readers use members
	members   atomic.Pointer[[]*node]
	dnsAddrs  []string       // guarded by membersMu
	gone      []*node        // nodes that left with calls in flight, guarded by membersMu (Close closes their conns)
	watchers  sync.WaitGroup // every node's health watch, so Close can wait for them

	changedMu sync.Mutex
	changed   chan struct{} // closed and replaced on every health or membership change

	started atomic.Bool
	closed  atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup // the DNS loop
}

// NodeStatus is one node's state for /v1/nodes.
type NodeStatus struct {
	Addr    string `json:"addr"`
	Healthy bool   `json:"healthy"`
	// Breaker is "closed", "half-open" or "open".
	Breaker             string  `json:"breaker"`
	InflightCostSeconds float64 `json:"inflight_cost_seconds"`
	// BacklogSeconds adds the rest of the node's reported backlog to the in-flight cost.
	BacklogSeconds float64          `json:"backlog_seconds"`
	Coefficients   costmodel.Coeffs `json:"coefficients"`
	// SpeedRatio is the learned speed relative to the prior on a reference batch.
	SpeedRatio float64 `json:"speed_ratio"`
	Samples    int64   `json:"samples"`
	Batches    int64   `json:"batches"`
	Errors     int64   `json:"errors"`
}

// New builds a proxy from a validated configuration; metrics go to reg. It starts nothing.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tc, err := prompt.NewCounter(cfg.Cost.TokenCounter)
	if err != nil {
		return nil, fmt.Errorf("new proxy: %w", err)
	}
	p := &Proxy{
		cfg:      cfg,
		log:      log,
		tokens:   tc,
		splitter: splitters[cfg.Split.Strategy](cfg),
		picker:   pickers[cfg.Route.Strategy](cfg, route.DefaultRand),
		budget:   newRetryBudget(cfg.Retry.BudgetRatio, cfg.Retry.BudgetBurst),
		hedge:    newLatencyTracker(cfg.Hedge.Quantile),
		lookup:   net.DefaultResolver.LookupHost,
		changed:  make(chan struct{}),
	}
	p.members.Store(&[]*node{})
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if p.m, err = newMetrics(reg, p); err != nil {
		return nil, fmt.Errorf("new proxy: metrics: %w", err)
	}
	return p, nil
}

// Start connects to the static nodes, resolves DNS once and keeps re-resolving it, and starts a
// health watch per node. It returns at once (nodes become ready as their health arrives: see
// WaitReady); ctx bounds only the first DNS resolution. A failed first resolution is logged and
// retried, since a headless service may have no endpoints yet.
func (p *Proxy) Start(ctx context.Context) error {
	if p.closed.Load() {
		return errors.New("proxy start: closed")
	}
	if p.started.Swap(true) {
		return errors.New("proxy start: already started")
	}
	if p.cfg.Nodes.DNS != "" {
		p.resolve(ctx)
		p.bg.Go(p.dnsLoop)
	} else if err := p.setMembers(nil); err != nil {
		return fmt.Errorf("proxy start: %w", err)
	}
	return nil
}

// Ready reports whether at least one node is healthy.
func (p *Proxy) Ready() bool {
	for _, n := range p.snapshot() {
		if n.healthy.Load() {
			return true
		}
	}
	return false
}

// WaitReady blocks until Ready or ctx ends.
func (p *Proxy) WaitReady(ctx context.Context) error {
	return p.waitFor(ctx, p.Ready)
}

// waitFor blocks until cond holds (re-checked on every health or membership change) or ctx ends.
func (p *Proxy) waitFor(ctx context.Context, cond func() bool) error {
	for {
		p.changedMu.Lock()
		ch := p.changed
		p.changedMu.Unlock()
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

func (p *Proxy) notify() {
	p.changedMu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.changedMu.Unlock()
}

// Nodes reports every node's state, sorted by address.
func (p *Proxy) Nodes() []NodeStatus {
	now := time.Now()
	out := []NodeStatus{}
	for _, n := range p.snapshot() {
		out = append(out, NodeStatus{
			Addr:                n.addr,
			Healthy:             n.healthy.Load(),
			Breaker:             n.breaker.State().String(),
			InflightCostSeconds: n.inflight.Load(),
			BacklogSeconds:      n.load(now),
			Coefficients:        *n.coeffs.Load(),
			SpeedRatio:          1 / n.scale(p.cfg.Cost.Prior),
			Samples:             n.samples.Load(),
			Batches:             n.batches.Load(),
			Errors:              n.errors.Load(),
		})
	}
	return out
}

// Close stops the DNS loop and health watches and closes every connection. Call it after the fronts have drained; Score fails with UNAVAILABLE
// afterwards. Idempotent.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.cancel()
	p.bg.Wait()
	p.membersMu.Lock()
	nodes := append(*p.members.Load(), p.gone...)
	p.members.Store(&[]*node{})
	p.gone = nil
	p.membersMu.Unlock()
	for _, n := range nodes {
		n.stop()
	}
	p.watchers.Wait()
	var errs []error
	for _, n := range nodes {
		if n.connClosed.CompareAndSwap(false, true) {
			if err := n.conn.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", n.addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Proxy) snapshot() []*node { return *p.members.Load() }

// setMembers makes the membership the static list plus dns (nil: keep the last DNS answer).
func (p *Proxy) setMembers(dns []string) error {
	p.membersMu.Lock()
	defer p.membersMu.Unlock()
	if p.closed.Load() {
		return nil
	}
	if dns != nil {
		p.dnsAddrs = dns
	}
	want := map[string]bool{}
	for _, a := range p.cfg.Nodes.Static {
		want[a] = true
	}
	for _, a := range p.dnsAddrs {
		want[a] = true
	}
	// Nodes that left and have since drained (their conn is closed) are forgotten: with DNS
	// churn (rolling deploys) the list would otherwise grow for the life of the process.
	p.gone = slices.DeleteFunc(p.gone, func(n *node) bool { return n.connClosed.Load() })
	old := *p.members.Load()
	var next []*node
	have := map[string]bool{}
	for _, n := range old {
		if want[n.addr] {
			next = append(next, n)
			have[n.addr] = true
			continue
		}
		p.log.Info("scorer node left", "node", n.addr)
		n.removed.Store(true)
		n.stop()
		p.gone = append(p.gone, n)
		if n.calls.Load() == 0 {
			n.closeIdle()
		}
	}
	var errs []error
	for a := range want {
		if have[a] {
			continue
		}
		n, err := newNode(a, p.cfg, p.onBreaker)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", a, err))
			continue
		}
		ctx, cancel := context.WithCancel(p.ctx)
		n.stop = cancel
		p.watchers.Go(func() { n.watchHealth(ctx, p.notify) })
		p.log.Info("scorer node joined", "node", a)
		next = append(next, n)
	}
	slices.SortFunc(next, func(a, b *node) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	p.members.Store(&next)
	p.notify()
	return errors.Join(errs...)
}

func (p *Proxy) onBreaker(addr string, to gobreaker.State) {
	p.log.Warn("breaker state change", "node", addr, "state", to.String())
}

// resolve looks the DNS name up once and updates membership; failures keep the last answer.
func (p *Proxy) resolve(ctx context.Context) {
	host, port, _ := net.SplitHostPort(p.cfg.Nodes.DNS)
	ctx, cancel := context.WithTimeout(ctx, max(p.cfg.Nodes.DNSInterval, time.Second))
	defer cancel()
	ips, err := p.lookup(ctx, host)
	if err != nil {
		p.log.Warn("dns lookup failed; keeping the last node list", "name", host, "err", err)
		_ = p.setMembers(nil)
		return
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, port))
	}
	if err := p.setMembers(addrs); err != nil {
		p.log.Warn("membership update", "err", err)
	}
}

func (p *Proxy) dnsLoop() {
	t := time.NewTicker(p.cfg.Nodes.DNSInterval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			p.resolve(p.ctx)
		}
	}
}

// closeIdle closes a removed node's connection; called when nothing is in flight on it.
func (n *node) closeIdle() {
	if n.connClosed.CompareAndSwap(false, true) {
		_ = n.conn.Close()
	}
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// grpcError is a gRPC status error with a formatted message.
func grpcError(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}
