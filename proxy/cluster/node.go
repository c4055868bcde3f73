package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/registry"
)

// Node is the proxy's state for one scorer node. Hot fields are atomics; the learner has its own
// mutex and publishes its estimate through an atomic pointer, so routing never blocks.
type Node struct {
	addr   string
	conn   *grpc.ClientConn         // our scorer kind: gRPC ScoreBatch and health Watch
	client relevancev1.ScorerClient // nil for another kind
	// be is the node when it is another kind of server (backend.Backend: vLLM, TEI, …), polled
	// for health and load; nil for our scorer.
	be     backend.Backend
	kind   string
	limits backend.Limits
	// wantModel is the model configured for another kind of node (backend.Spec.Model).
	wantModel string
	// out says why the node is kept out of traffic although its server answers its health
	// endpoint — the server does not serve wantModel (backend.ModelChecker, or a reply that said
	// so) — and since when; nil: it is not. Replaced with the health verdict under outMu, so that
	// a poll's verdict cannot put back a node that a reply has just taken out.
	outMu sync.Mutex
	out   atomic.Pointer[modelOut]
	// advised is set once an advisory model finding (backend.ModelError.Advisory) was logged.
	advised atomic.Bool
	// emulated is what the node's last reply said: it runs the emulated engine (timings from a
	// cost profile, no model), so that figures measured through the proxy can say so.
	emulated atomic.Bool
	// callTimeout caps one call to a scorer node given as a backends entry (0: none, the
	// request's deadline alone).
	callTimeout time.Duration
	// pairSeconds is an average of observed seconds per (query, item) pair, to price the
	// server's own queue gauges (another kind).
	pairSeconds   atomicFloat
	inflightPairs atomic.Int64
	breaker       *gobreaker.TwoStepCircuitBreaker[struct{}]
	transitions   [3]atomic.Int64 // breaker state changes, by the state entered (gobreaker.State)

	healthy atomic.Bool
	// ledger is this proxy's work on the node (ledger), replaced whole under chargeMu, so that a
	// reader never sees a batch counted in flight with a finish that does not count it yet.
	ledger   atomic.Pointer[ledger]
	chargeMu sync.Mutex   // orders charge, uncharge and settle
	calls    atomic.Int64 // this proxy's calls in flight (for draining on removal)
	ext      atomic.Pointer[extLoad]
	coeffs   atomic.Pointer[costmodel.Coeffs]
	samples  atomic.Int64
	// Warm-up pricing (warm.go): samples when the node last (re)joined traffic, how many it
	// learns from before its own model prices it alone, and its trusted peers' mean model.
	warmFrom    atomic.Int64
	warm        int64
	peer        atomic.Pointer[costmodel.Coeffs]
	batches     atomic.Int64
	errors      atomic.Int64
	lastFailure atomic.Int64 // unix nanoseconds of the last counted failure
	removed     atomic.Bool
	// misconfigured: an UNIMPLEMENTED answer was logged (FirstMisconfigured).
	misconfigured atomic.Bool
	// keepsTemplates: the node keeps each instruction's template KV (KeepsTemplates).
	keepsTemplates atomic.Bool
	connClosed     atomic.Bool

	// Outlier detection (outlier.go).
	slowRun      atomic.Int32 // slow outcomes in a row
	slowness     atomicFloat  // average recent latency ÷ projected finish (0: no outcome yet)
	slowTotal    atomic.Int64
	ejections    atomic.Int32 // how many times ejected (the next ejection's multiplier)
	ejectedUntil atomic.Int64 // unix nanoseconds
	ejectedAt    atomic.Int64 // unix nanoseconds of the last ejection (0: never)
	probation    atomic.Bool  // back from an ejection, no OK outcome yet
	probing      atomic.Bool  // a probe (TakeProbe) is in flight

	// Stall detection (stall.go).
	lastAnswer atomic.Int64 // unix nanoseconds of the node's last answer to a call or check
	stalled    atomic.Bool
	checking   atomic.Bool // a stall check is running
	stalls     atomic.Int64
	stalledAt  atomic.Int64 // unix nanoseconds the node was last found stalled (0: never)
	stallMu    sync.Mutex
	stallCh    chan struct{} // closed when found stalled; replaced when it answers; guarded by stallMu

	ident     atomic.Pointer[identity] // the model of the node's last reply (nil before any)
	maxPrompt atomic.Int64             // the prompt limit of the node's last reply (0: unknown)
	// maxItems is our scorer node's own limit on items per batch (its max_items), as its last
	// reply or refusal said (0: unknown); Limits holds the batches to it.
	maxItems atomic.Int64

	// downWhy is why the node's health check last failed ("" while it passes): /v1/nodes says it,
	// where "healthy": false alone left an operator guessing (a node never reachable looked like
	// one that was draining).
	downWhy atomic.Pointer[string]

	prefixes  prefixMemory // prefix keys believed cached on the node (prefixes.go)
	cacheSeen atomic.Bool  // the node has reused a cached prefix at least once

	learnMu    sync.Mutex
	learn      *costmodel.Learner
	forgetting float64
	seeded     bool // learn restarted from the node's own cost model; guarded by learnMu
	prime      bool // Config.Prime
	// peers is the cluster's membership (Cluster.Snapshot), whose trusted nodes' models bound
	// the seed a node may start from (seed); nil: none.
	peers func() []*Node
	// log gets what the node's replies show that an operator should know (a seed ignored);
	// nil: nothing is logged.
	log *slog.Logger

	stop context.CancelFunc // ends the health watch
}

// maxComputeSeconds bounds what a reply may claim for its compute or its node's backlog: a day.
// A batch is seconds of work; an absurd finite figure (1e308 from a buggy node) would make a
// projection overflow, and every request's admission and routing with it.
const maxComputeSeconds = 86400

// extLoad is the node's backlog that is not this proxy's, as of a reply; it drains in real time.
type extLoad struct {
	seconds float64
	at      time.Time
}

// ErrExcluded wraps errors that must not count for or against a breaker: cancellations, the
// caller's bad input, deadlines that were the caller's.
var ErrExcluded = errors.New("excluded from breaker counts")

// newBackendNode is a node of another kind than our scorer, spoken through spec's adapter.
func newBackendNode(spec backend.Spec, cfg Config, onState func(addr string, to gobreaker.State)) (*Node, error) {
	be, err := registry.New(spec)
	if err != nil {
		return nil, err
	}
	n := &Node{addr: spec.Node(), be: be, kind: spec.Kind, limits: be.Limits(), wantModel: spec.Model,
		learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting}
	n.init(cfg, onState)
	return n, nil
}

func newNode(addr string, cfg Config, onState func(addr string, to gobreaker.State)) (*Node, error) {
	// A restarted node must be back in traffic within a second of being ready: gRPC's default
	// reconnect backoff (1 s growing ×1.6 to 2 min) kept one out for 2.6–4.8 s.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, err
	}
	n := &Node{addr: addr, conn: conn, client: relevancev1.NewScorerClient(conn), learn: costmodel.NewLearner(cfg.Prior, cfg.Forgetting), forgetting: cfg.Forgetting, kind: backend.KindScorer}
	n.init(cfg, onState)
	return n, nil
}

// init starts the node's cost model at the prior and builds its breaker.
func (n *Node) init(cfg Config, onState func(addr string, to gobreaker.State)) {
	addr := n.addr
	c := n.learn.Coeffs()
	n.coeffs.Store(&c)
	n.warm = int64(cfg.WarmSamples)
	n.prime = cfg.Prime
	n.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        addr,
		MaxRequests: cfg.Breaker.HalfOpenProbes,
		Timeout:     cfg.Breaker.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.Breaker.ConsecutiveFailures },
		IsExcluded:  func(err error) bool { return errors.Is(err, ErrExcluded) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if int(to) < len(n.transitions) {
				n.transitions[to].Add(1)
			}
			if to == gobreaker.StateClosed {
				n.rejoin() // back in traffic: warm up at the peers' price (warm.go)
			}
			if onState != nil {
				onState(addr, to)
			}
		},
	})
}

// Load is the node's outstanding estimated work in seconds: what is left of this proxy's
// in-flight batches plus the rest of the backlog the node last reported, minus what it has
// drained since.
//
// "What is left" is the projected finish time minus now, not the sum of the batches' charges:
// a node 5 ms from done must look less loaded than one that has just started the same batch.
// With charges alone, least_loaded could not tell them apart and lost to round robin (which
// picks the node it fed longest ago) at 50–70 % load; see route's TestLeastLoadedScanBeats….
//
// A batch still out after its projected finish is late, and a late node is not idle: its load
// is then how late it is (a batch that has overrun by d is expected to need about d more), so a
// stalled or slowed node looks busier the longer it stalls instead of looking free — which would
// make least-loaded routing pour work into it.
func (n *Node) Load(now time.Time) float64 {
	return n.book().ahead(clock(now)) + n.extLeft(now)
}

// extLeft is what is left at now of the backlog the node last reported that is not this proxy's.
func (n *Node) extLeft(now time.Time) float64 {
	if e := n.ext.Load(); e != nil {
		return math.Max(0, e.seconds-now.Sub(e.at).Seconds())
	}
	return 0
}

// book is the node's ledger (an empty one before the first charge).
func (n *Node) book() *ledger {
	if l := n.ledger.Load(); l != nil {
		return l
	}
	return &ledger{}
}

// ledger is this proxy's work on a node at one moment. Immutable once published.
type ledger struct {
	finish   float64 // projected time (clock seconds) the node is done with the batches out
	inflight float64 // their predicted seconds
	out      int     // how many: none out means idle, whatever float residue inflight keeps
	charges  uint64  // Charge calls so far: an Uncharge after a later one takes back less
	settles  uint64  // Settle calls so far: likewise
	// stack is the charges made since the last Settle, oldest first, each with the finish before
	// it: taking back the newest outstanding one restores the finish from before it (and before
	// any taken back under it), exactly, in whatever order a plan's leases come back.
	stack []pendingCharge
}

// maxPending bounds ledger.stack: each Charge and Uncharge copies it, under the node's lock.
const maxPending = 256

// pendingCharge is a charge made since the last Settle (ledger.stack).
type pendingCharge struct {
	id    uint64  // the ledger's charges count when it was made
	prior float64 // the finish before it
	taken bool    // given back (Uncharge)
}

// ahead is the work this proxy has on the node, seen at clock c: the time to its projected
// finish, or, with batches out past it, how late they are (see Load).
func (l *ledger) ahead(c float64) float64 {
	if d := l.finish - c; d >= 0 {
		return d
	}
	if l.out > 0 {
		return c - l.finish
	}
	return 0
}

// clockEpoch makes clock readings small floats (full precision) on the monotonic clock.
var clockEpoch = time.Now()

// clock is t in seconds since clockEpoch.
func clock(t time.Time) float64 { return t.Sub(clockEpoch).Seconds() }

// Charge adds a picked batch of predicted seconds: the node will be busy that much longer
// after its current projected finish (or after now, when idle). On a late node — batches still
// out past its projected finish — that is after the lateness Load counts it busy for (a batch
// overrun by d needs about d more): charged from now instead, a node late by d looked loaded by
// the new batch alone, less than just before it was picked. (On the fault suite's slow node this
// alone moved nothing measurable: it keeps the two views of a late node consistent.)
//
// It returns the charge, for Uncharge: how far it moved the projected finish (predicted, plus the
// lateness it began to count, or the idle gap it skipped).
//
// The charge's Start is the node's load when it was charged (as Load would have said just
// before), read under the same lock: two placements at one moment are queued one behind the
// other, never both promised the node's current backlog.
func (n *Node) Charge(now time.Time, predicted float64) Charge {
	n.chargeMu.Lock()
	defer n.chargeMu.Unlock()
	c, l := clock(now), n.book()
	start := l.ahead(c)
	base := c + start
	next := &ledger{finish: base + predicted, inflight: l.inflight + predicted, out: l.out + 1, charges: l.charges + 1, settles: l.settles,
		stack: append(slices.Clip(l.stack), pendingCharge{id: l.charges + 1, prior: l.finish})}
	if len(next.stack) > maxPending {
		// Bounded (a stalled node charged and never settled): the oldest entry goes, and its
		// lease, given back, takes back its cost alone.
		next.stack = next.stack[len(next.stack)-maxPending:]
	}
	n.ledger.Store(next)
	return Charge{predicted: predicted, start: start + n.extLeft(now), id: next.charges, settles: l.settles}
}

// Charge is one batch's charge to a node's load (Node.Charge), kept to be taken back.
type Charge struct {
	predicted float64
	start     float64 // the node's load when charged
	id        uint64  // the node's Charge count with it
	settles   uint64  // the node's Settle count when charged
}

// Start is the node's load, in seconds from the charge, ahead of the charged batch.
func (c Charge) Start() float64 { return c.start }

// Uncharge takes back a charge whose batch was never sent: its predicted cost from the work in
// flight and, from the projected finish, what the charge moved it by. A charge moves the finish
// by more than its cost on a late node (the lateness it begins to count) or an idle one (the gap
// it skips), so taking back the cost alone left a late node's lateness counted twice — it looked
// as if draining each time a plan placed on it was refused — or an idle node late by its idle
// time. So the newest outstanding charge restores the finish from before it (and before any
// under it already given back: a plan's leases come back in any order); an older one, with later
// charges begun from the finish it moved, takes back its cost, as does one from before a Settle
// (which rebuilt the finish from the work in flight).
func (n *Node) Uncharge(c Charge) {
	n.chargeMu.Lock()
	defer n.chargeMu.Unlock()
	l := n.book()
	at := -1
	if l.settles == c.settles {
		at = slices.IndexFunc(l.stack, func(p pendingCharge) bool { return p.id == c.id })
	}
	// Every charge made after it began from a finish that held its cost (a Settle since rebuilt
	// the finish from the work in flight, its cost with it): the finish, and the finishes the
	// later ones would restore, lose its cost.
	stack := slices.Clone(l.stack)
	for i := range stack {
		if stack[i].id > c.id {
			stack[i].prior -= c.predicted
		}
	}
	finish := l.finish - c.predicted
	if at >= 0 {
		stack[at].taken = true
	}
	if at >= 0 && at == len(stack)-1 {
		// The newest outstanding: the finish is what it was before it, and before every charge
		// under it already given back.
		for len(stack) > 0 && stack[len(stack)-1].taken {
			finish = stack[len(stack)-1].prior
			stack = stack[:len(stack)-1]
		}
	}
	next := l.without(c.predicted, finish)
	next.stack = stack
	n.ledger.Store(next)
}

// without is l less one batch of predicted seconds, with finish as its projected finish.
func (l *ledger) without(predicted, finish float64) *ledger {
	next := &ledger{finish: finish, inflight: l.inflight - predicted, out: max(l.out-1, 0), charges: l.charges, settles: l.settles,
		stack: l.stack}
	if next.out == 0 {
		next.inflight = 0 // no float residue of many charges and settles left counting as work
	}
	return next
}

// Settle releases a batch whose call has returned (answered, failed or cancelled) and
// reconciles the projection with what just happened: the node is done with that batch now,
// early or late, and what remains is the predicted cost of the batches still out. So a node's
// noise does not accumulate in its projection and every reply corrects it.
func (n *Node) Settle(now time.Time, predicted float64) {
	n.chargeMu.Lock()
	defer n.chargeMu.Unlock()
	l := n.book()
	next := l.without(predicted, 0)
	next.finish = clock(now) + math.Max(0, next.inflight)
	next.settles++
	next.stack = nil // the finish is rebuilt: charges before it take back their cost alone
	n.ledger.Store(next)
}

// Ahead is how long until the node is projected to finish every batch this proxy has charged
// it, from now: negative when the node is behind its projection (or idle).
func (n *Node) Ahead(now time.Time) float64 { return n.book().finish - clock(now) }

// Scale is the node's time for one second of reference work under ref.
func (n *Node) Scale(ref costmodel.Coeffs) float64 { return scale(n.Coeffs(), ref) }

// ownScale is Scale by the node's own learned model (what /v1/nodes and metrics report).
func (n *Node) ownScale(ref costmodel.Coeffs) float64 { return scale(*n.coeffs.Load(), ref) }

// scale is c's time for one second of reference work under ref (1 when ref prices it at 0).
func scale(c, ref costmodel.Coeffs) float64 {
	r := ref.Seconds(costmodel.RefFeatures)
	if !(r > 0) {
		return 1
	}
	return c.Seconds(costmodel.RefFeatures) / r
}

// MaxPromptTokens is the node's prompt limit in tokens, as its last reply reported it: an item
// is cut, or refused, to fit it. Before its first reply a scorer node is assumed at the
// scorer's default (prompt.DefaultMaxTokens), so that the first request with a long document
// is not priced at the document's whole length; another kind of server is at its configured
// max_item_tokens, to which the proxy cuts documents before sending (0: unknown).
func (n *Node) MaxPromptTokens() int {
	if m := n.maxPrompt.Load(); m > 0 {
		return int(m)
	}
	if n.client != nil {
		return prompt.DefaultMaxTokens
	}
	return n.limits.MaxItemTokens
}

// Observe learns from a successful reply.
func (n *Node) Observe(resp *relevancev1.ScoreBatchResponse, now time.Time) {
	// A NaN or infinite load (a buggy node) is ignored: it would make this node's load compare
	// false against everything (routing), or every projection NaN (admission rejects all).
	if l := resp.GetLoad(); l != nil {
		if rep := l.GetQueuedCostSeconds() + l.GetRunningCostSeconds(); rep >= 0 && rep <= maxComputeSeconds {
			n.ext.Store(&extLoad{seconds: math.Max(0, rep-n.Inflight()), at: now})
		}
	}
	n.SetModel(resp.GetModel(), resp.GetModelFingerprint())
	n.emulated.Store(resp.GetEmulated())
	if m := resp.GetMaxPromptTokens(); m > 0 {
		n.maxPrompt.Store(int64(m))
	}
	if m := resp.GetMaxBatchItems(); m > 0 {
		n.maxItems.Store(int64(m))
	}
	n.seed(resp.GetLoad().GetCostModel())
	st := resp.GetStats()
	if st == nil || !(st.GetComputeSeconds() > 0) || st.GetComputeSeconds() > maxComputeSeconds {
		return
	}
	// The prefix work the node did: none when it came from its cache, else all of it less the
	// leading tokens it reused (its template: the usage counts the prefix tokens computed), the
	// rest attending them as an item attends its prefix — as the node charges its own passes
	// (scorer.Group.Features), so the two models mean the same.
	P := int(st.GetPrefixTokens())
	computed := P
	if u := resp.GetUsage(); u != nil && len(resp.GetScores()) > 0 {
		computed = min(P, int(u.GetPrefixTokens()))
	}
	if st.GetPrefixCached() {
		computed = 0
	}
	n.observePrefixWork(P, computed)
	f := costmodel.Features{Batches: 1}
	switch {
	case computed == P:
		f = f.Add(costmodel.PrefixFeatures(P))
	case computed > 0:
		f = f.Add(costmodel.ItemFeatures(P-computed, computed))
	}
	for _, s := range resp.GetScores() {
		f = f.Add(costmodel.ItemFeatures(int(st.GetPrefixTokens()), int(s.GetTokens())))
	}
	// The batches of one merged pass share its forward time: that names the pass (0: alone).
	var pass uint64
	if st.GetMergedBatches() > 1 && st.GetForwardSeconds() > 0 {
		pass = math.Float64bits(st.GetForwardSeconds())<<8 ^ uint64(st.GetMergedBatches())
	}
	n.learnMu.Lock()
	n.learn.ObservePass(f, st.GetComputeSeconds(), pass)
	c := n.learn.Coeffs()
	n.learnMu.Unlock()
	n.coeffs.Store(&c)
	n.samples.Add(1)
}

// seed restarts the node's cost model from the node's own, once: a node times its passes at
// start-up and keeps learning from every one, so its model is a far better prior than the
// configured one (which is a guess for a model and machine this proxy has never seen). Later
// replies refine it as before. The passes the node's model was measured on count as samples
// (Samples: how far projections on the node are trusted), so that a freshly calibrated cluster
// is admitted against from its first replies rather than after MinSamples of each node's.
// A model that is not finite and non-negative, or all zero, is ignored, and so is one that prices
// the reference batch more than seedTrust times dearer or cheaper than the median of the node's
// trusted peers' models (peerPrice): a node that reported 2³⁰ samples skipped warm-up whatever
// its price, and one 100× too dear then got no batch, so no reply ever corrected it. Ignored, the
// node warms up at its peers' price and learns from its replies, as one that reports no model.
// Without trusted peers (a single node, the first of a fresh cluster to answer) every valid
// model is used.
func (n *Node) seed(cm *relevancev1.CostModel) {
	if cm == nil {
		return
	}
	c := costmodel.Coeffs{A: cm.GetA(), B: cm.GetB(), C: cm.GetC()}
	if c.Validate() != nil || c.A+c.B+c.C == 0 {
		return
	}
	n.learnMu.Lock()
	defer n.learnMu.Unlock()
	if n.seeded || n.forgetting == 0 {
		return
	}
	n.seeded = true
	if peer, ok := n.peerPrice(); ok {
		if r := c.Seconds(costmodel.RefFeatures) / peer; !(r <= seedTrust && r >= 1/seedTrust) {
			if n.log != nil {
				n.log.Warn("scorer node's own cost model is far from its peers': ignored, the node warms up on its replies",
					"node", n.addr, "ratio_to_peers", r, "reported_samples", cm.GetSamples())
			}
			return
		}
	}
	n.learn = costmodel.NewLearner(c, n.forgetting)
	n.coeffs.Store(&c)
	for s := int64(min(cm.GetSamples(), math.MaxInt32)); ; {
		if cur := n.samples.Load(); s <= cur || n.samples.CompareAndSwap(cur, s) {
			break
		}
	}
}

// seedTrust is how many times dearer or cheaper than its trusted peers' median a node's reported
// model may price the reference batch and still seed its learner. Nodes of one cluster serve one
// model (the fingerprint), so their speeds differ by their machines and load: peers sharing one
// machine under CPU contention learned 0.7–3.7× cheaper than the prior (warm.go), each within 4×
// of their median. A broken report is off by far more (a unit slip is 1000×, the reviews' lies
// 100× and 10⁴×). Too tight a bound costs little — a node of another class of hardware whose
// honest model is refused warms up for WarmSamples replies, as a node that reports none — and
// too loose one lets a wrong model price the node with full confidence, so 4×.
const seedTrust = 4.0

// peerPrice is the median of the reference batch's price by the own models of the node's trusted
// peers (trustedPeer) of its own kind: warmed up and taking traffic; false when it has none. (A
// mixed cluster's GPU servers are no measure of a CPU scorer node's honest model.) The median, not the
// mean (warm.go): one peer that is itself far off must not move the bound.
func (n *Node) peerPrice() (float64, bool) {
	if n.peers == nil {
		return 0, false
	}
	now := time.Now()
	var prices []float64
	for _, p := range n.peers() {
		if p != n && p.kind == n.kind && p.trustedPeer(now) {
			prices = append(prices, p.coeffs.Load().Seconds(costmodel.RefFeatures))
		}
	}
	if len(prices) == 0 {
		return 0, false
	}
	slices.Sort(prices)
	k := len(prices)
	m := (prices[(k-1)/2] + prices[k/2]) / 2
	return m, m > 0 && !math.IsInf(m, 0)
}

// setHealthy records the node's health and calls changed when it changed. A node that loses it
// is forgotten as a prefix holder and its model fingerprint is dropped: when it comes back it
// may have restarted with an empty cache, or on another model. Both are dropped again when it
// comes back: a draining node's health goes first and its running batches answer after, with the
// old model's fingerprint and prefixes, which would otherwise survive its restart.
// Coming back it warms up at its peers' price (warm.go), and the next cost model it reports
// seeds its learner again: a restarted node calibrated itself afresh.
func (n *Node) setHealthy(v bool, changed func()) (regained bool) {
	if n.healthy.Swap(v) != v {
		regained = v
		// It may come back on other weights (a restart for a model update): its model is
		// unknown until it answers again. Kept, the cluster would go on answering repeated
		// requests from the score cache under the model it had before, and pin requests to it.
		// Cleared on both edges: the replies of a drain arrive after its health went.
		n.prefixes.clear()
		n.updateIdentity(func(id *identity) { id.fingerprint = "" })
		if v {
			n.learnMu.Lock()
			n.seeded = false
			n.learnMu.Unlock()
			n.rejoin()
		}
		changed()
	}
	return regained
}

// primeBatch is the batch Node.primeCostModel sends: one item of one word.
var primeBatch = &relevancev1.ScoreBatchRequest{RequestId: "proxy-prime", Query: "prime", Items: []*relevancev1.Item{{Id: "0", Text: "prime"}}}

// primeCostModel sends the node one tiny batch and learns from the reply as from any other: it
// carries the node's calibrated cost model, which seeds the node's learner with the node's
// calibration passes as samples (seed), so admission trusts projections on the node from the
// first request. (Measured on `make run`: 8 requests of 24 documents sent to a fresh cluster at
// once were all admitted, as no node had answered yet; 2–3 of them then missed their deadline.)
// A failure is left to the breaker and health: the first real reply seeds the node instead.
func (n *Node) primeCostModel(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := n.ScoreBatch(ctx, primeBatch)
	if err != nil {
		return
	}
	n.Observe(resp, time.Now())
}

// watchHealth follows grpc.health.v1 Watch for the whole server ("") until ctx ends,
// re-establishing the stream with backoff. A node without the health service counts as healthy.
func (n *Node) watchHealth(ctx context.Context, changed func()) {
	hc := healthpb.NewHealthClient(n.conn)
	retry := 50 * time.Millisecond
	// Primes run beside the stream (a stalled node must not hold up health) and end with it.
	var primes sync.WaitGroup
	defer primes.Wait()
	set := func(v bool, why string) {
		n.setDownWhy(why)
		// Regaining health unseeds the node (setHealthy): the prime's reply seeds it again.
		if n.setHealthy(v, changed) && n.prime {
			primes.Go(func() { n.primeCostModel(ctx) })
		}
	}
	for ctx.Err() == nil {
		stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			for {
				resp, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				retry = 50 * time.Millisecond
				serving := resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
				why := ""
				if !serving {
					why = "health: " + resp.GetStatus().String() + " (starting, or draining)"
				}
				set(serving, why)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			set(true, "")
			<-ctx.Done()
			return
		}
		set(false, "health check: "+status.Convert(err).Message())
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, 250*time.Millisecond)
	}
}

// atomicFloat is a float64 updated with compare-and-swap.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) Load() float64 { return math.Float64frombits(f.bits.Load()) }

func (f *atomicFloat) Add(d float64) {
	for {
		old := f.bits.Load()
		v := math.Float64frombits(old) + d
		if math.Abs(v) < 1e-12 {
			v = 0 // keep release-after-charge exactly zero despite rounding
		}
		if f.bits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

func (f *atomicFloat) Store(v float64) { f.bits.Store(math.Float64bits(v)) }

// Addr is the node's address (host:port).
func (n *Node) Addr() string { return n.addr }

// Healthy reports the node's last grpc.health.v1 status (SERVING).
func (n *Node) Healthy() bool { return n.healthy.Load() }

// Breaker is the node's circuit breaker: Allow takes a permit whose done reports the outcome.
func (n *Node) Breaker() *gobreaker.TwoStepCircuitBreaker[struct{}] { return n.breaker }

// Samples is how many replies the node's cost model has learned from.
func (n *Node) Samples() int64 { return n.samples.Load() }

// Inflight is the estimated seconds of this proxy's batches on the node.
func (n *Node) Inflight() float64 { return n.book().inflight }

// CallStarted counts a call about to be made on the node, so that a node removed from the
// membership keeps its connection until its calls return. It reports whether the call is alone:
// no other call of this proxy's was in flight on the node.
func (n *Node) CallStarted() (alone bool) { return n.calls.Add(1) == 1 }

// CallEnded undoes CallStarted; the last call on a removed node closes its connection.
func (n *Node) CallEnded() {
	if n.calls.Add(-1) == 0 && n.removed.Load() {
		n.closeIdle()
	}
}

// Shed records that the node refused a call because it is full (RESOURCE_EXHAUSTED: its queue
// is full, or an HTTP server's 429) at now: its backlog that is not this proxy's is taken to be at
// least hold, draining in real time. A shedding node is not counted as failing (it is alive and
// answering), but if it looked idle — its refused call settled, nothing else known of its queue —
// least-loaded routing would send it the next batch too, and every batch would spend a retry.
func (n *Node) Shed(now time.Time, hold time.Duration) {
	if hold <= 0 {
		return
	}
	if e := n.ext.Load(); e != nil && e.seconds-now.Sub(e.at).Seconds() >= hold.Seconds() {
		return
	}
	n.ext.Store(&extLoad{seconds: hold.Seconds(), at: now})
}

// FirstMisconfigured reports true the first time it is called for the node (the caller logs
// that the node answers UNIMPLEMENTED: a wrong endpoint or model name), false after.
func (n *Node) FirstMisconfigured() bool { return n.misconfigured.CompareAndSwap(false, true) }

// Succeeded counts an answered batch.
func (n *Node) Succeeded() { n.batches.Add(1) }

// Failed counts a failure that the breaker counted too, at now.
func (n *Node) Failed(now time.Time) {
	n.errors.Add(1)
	n.lastFailure.Store(now.UnixNano())
}

// closeIdle closes a removed node's connection; called when nothing is in flight on it.
func (n *Node) closeIdle() {
	if n.connClosed.CompareAndSwap(false, true) {
		_ = n.closeConn()
	}
}

// MeanCoeffs is the reference cost model of a set of nodes (zero when empty).
func MeanCoeffs(nodes []*Node) costmodel.Coeffs {
	var c costmodel.Coeffs
	if len(nodes) == 0 {
		return c
	}
	for _, n := range nodes {
		k := n.coeffs.Load()
		c.A += k.A
		c.B += k.B
		c.C += k.C
	}
	f := float64(len(nodes))
	return costmodel.Coeffs{A: c.A / f, B: c.B / f, C: c.C / f}
}

// Kind is the node's kind (backend.KindScorer for ours).
func (n *Node) Kind() string { return n.kind }

// Limits are the node's per-request limits (zero: none): the configured ones, and for our
// scorer the item limit the node itself reported (its max_items) where that is lower.
func (n *Node) Limits() backend.Limits {
	l := n.limits
	if m := int(n.maxItems.Load()); m > 0 && (l.MaxItems <= 0 || m < l.MaxItems) {
		l.MaxItems = m
	}
	return l
}

// ScoreBatch runs one batch on the node, in the node's own wire format. Our scorer node's
// refusal of a batch over its max_items (INVALID_ARGUMENT with a BatchTooLarge) is learned as
// the node's item limit and returned as backend.ItemLimitError, as other kinds say it: a limit
// of the node's that the proxy's batch met, never the client's bad input.
func (n *Node) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	if n.be != nil {
		return n.be.ScoreBatch(ctx, req)
	}
	if n.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.callTimeout)
		defer cancel()
	}
	resp, err := n.client.ScoreBatch(ctx, req)
	if k := backend.ItemLimit(err); k > 0 {
		items := len(req.GetItems())
		if old := n.maxItems.Swap(int64(k)); old != int64(k) && n.log != nil {
			n.log.Warn("scorer node refused a batch over its max_items: batches to it are cut to its limit (set the proxy's split.max_batch_items to at most the nodes' max_items)",
				"node", n.addr, "items", items, "max_items", k)
		}
		return nil, backend.ItemLimitError(fmt.Sprintf("node %s: a batch of %d items is over the node's limit of %d items per batch (its max_items)", n.addr, items, k), items, k)
	}
	return resp, err
}

// ObserveLatency learns from a batch of features f that took seconds end to end, for a node that
// reports no compute time (another kind of server). Only batches that ran alone on the node —
// none other of this proxy's was in flight there — are learned from: with company, the latency
// includes the server's queueing of the others, and would read as a slow node.
func (n *Node) ObserveLatency(f costmodel.Features, seconds float64, items int, alone bool) {
	if items > 0 && seconds > 0 {
		per := seconds / float64(items)
		if old := n.pairSeconds.Load(); old > 0 {
			per = 0.8*old + 0.2*per
		}
		n.pairSeconds.Store(per)
	}
	if !alone || !(seconds > 0) {
		return
	}
	n.learnMu.Lock()
	n.learn.Observe(f, seconds)
	c := n.learn.Coeffs()
	n.learnMu.Unlock()
	n.coeffs.Store(&c)
	n.samples.Add(1)
}

// pollBackend keeps another kind of server's health (its health endpoint, every pollEvery) and
// its backlog (its own load gauges, where it has them: requests waiting and running beyond this
// proxy's, priced at the pairs' observed average) until ctx ends. A server whose kind can say
// what it serves (backend.ModelChecker) is healthy only once it serves the configured model.
func (n *Node) pollBackend(ctx context.Context, changed func(), log *slog.Logger) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	loader, _ := n.be.(backend.Loader)
	checker, _ := n.be.(backend.ModelChecker)
	probe := time.Second
	if w, ok := n.be.(backend.HealthWaiter); ok {
		probe = max(probe, w.HealthTimeout())
	}
	var recheck time.Time // when a check that did not conclude is asked again (zero: none due)
	var prior *modelOut   // the last conclusive finding that kept the node out (nil: none, or passed since)
	for {
		hctx, cancel := context.WithTimeout(ctx, probe)
		seen := n.out.Load()
		ok := n.be.Healthy(hctx)
		out := seen
		if ok {
			n.setDownWhy("")
		} else {
			n.setDownWhy("health endpoint: no healthy answer within " + probe.String())
		}
		switch {
		case !ok:
			out = nil // down: what it serves once back is checked afresh, at once
		case seen != nil || checker != nil && (!n.healthy.Load() || !recheck.IsZero() && time.Now().After(recheck)):
			// Joining, back, kept out for its model, or let in on a check that did not
			// conclude: its health endpoint answers whatever it serves (a typo in the
			// configuration, a restart on other weights). The check has its own time: the
			// health probe may have used the shared one up.
			mctx, mcancel := context.WithTimeout(ctx, probe)
			var again bool
			out, again = n.checkModel(mctx, checker, seen, prior, log)
			mcancel()
			ok = out == nil
			recheck = time.Time{}
			if again {
				recheck = time.Now().Add(modelRecheck)
			}
			if out != nil || !again {
				prior = out // a finding (or a kept one), or a pass: the last word until the next
			}
		}
		if ok && loader != nil {
			if waiting, running, has := loader.LoadGauge(hctx); has {
				pairs := math.Max(0, waiting+running-float64(n.inflightPairs.Load()))
				n.ext.Store(&extLoad{seconds: pairs * n.pairSeconds.Load(), at: time.Now()})
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		n.outMu.Lock()
		if n.out.Load() == seen {
			n.out.Store(out)
		} else {
			ok = false // a reply took it out meanwhile (Cluster.ModelNotServed): until the next check
		}
		n.setHealthy(ok, changed)
		n.outMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollEvery is how often another kind of server's health and load are read.
var pollEvery = 500 * time.Millisecond

// modelRecheck is how often the model of a node kept out for it is checked again (a server
// restarted with the right model joins within it, or at once when it was seen down). Not every
// poll: a server that cannot be checked but answered a batch that it does not serve the model
// comes back on each check, and costs a batch each time.
var modelRecheck = 5 * time.Second

// modelOut is why a node is kept out of traffic for its model, and when that was found.
type modelOut struct {
	reason string
	at     time.Time
}

// checkModel checks the model of a node joining, back, or kept out for its model (out: why, or
// nil; prior: the last conclusive finding that kept it out, kept across a down period), and
// returns why it stays out (nil: it may take traffic) and whether to check again after
// modelRecheck although it is let in (the check did not conclude: backend.ErrModelUnchecked). A
// node kept out is checked again only every modelRecheck; one whose kind cannot check (checker
// nil) is then let back. A finding is logged once, naming the configured and served models; an
// advisory one (the server answers whatever a request names) is only logged.
func (n *Node) checkModel(ctx context.Context, checker backend.ModelChecker, out, prior *modelOut, log *slog.Logger) (_ *modelOut, again bool) {
	now := time.Now()
	if out != nil && now.Sub(out.at) < modelRecheck {
		return out, false
	}
	var err error
	if checker != nil {
		err = checker.CheckModel(ctx)
	}
	me := (*backend.ModelError)(nil)
	errors.As(err, &me)
	switch {
	case errors.Is(err, backend.ErrModelUnchecked):
		// A model list that did not answer (starting up, a timeout) proves nothing either way.
		// A node whose last conclusive finding kept it out (out, or prior across a down period)
		// stays out, asked again after modelRecheck (the finding's time moves, or it was asked
		// every poll). Any other is let in, as its health says, and asked again until the list
		// answers: let in unchecked for good, a server of another model whose batches fail only
		// one by one (or never: TEI scores with its one model) stayed in traffic.
		if out == nil {
			out = prior
		}
		if out != nil {
			return &modelOut{reason: out.reason, at: now}, false
		}
		return nil, true
	case me != nil && me.Advisory:
		if !n.advised.Swap(true) {
			log.Warn("scorer node's server serves another model than the configured name; it answers whatever a request names, so the node takes traffic",
				"node", n.addr, "model", n.wantModel, "served", me.Served)
		}
		return nil, false
	case !errors.Is(err, backend.ErrModelNotServed):
		if out != nil {
			log.Info("scorer node passes its model check (or cannot be checked): back in traffic", "node", n.addr, "model", n.wantModel)
		}
		return nil, false
	}
	next := &modelOut{reason: err.Error(), at: now}
	if out == nil || out.reason != next.reason {
		var served []string
		if me != nil {
			served = me.Served
		}
		log.Warn("scorer node does not serve the configured model: kept out of traffic until it does",
			"node", n.addr, "model", n.wantModel, "served", served)
	}
	return next, false
}

// setDownWhy records why the health check failed ("": it passed).
func (n *Node) setDownWhy(why string) {
	if why == "" {
		if n.downWhy.Load() != nil {
			n.downWhy.Store(nil)
		}
		return
	}
	n.downWhy.Store(&why)
}

// DownWhy is why the node's health check last failed ("" while it passes).
func (n *Node) DownWhy() string {
	if p := n.downWhy.Load(); p != nil {
		return *p
	}
	return ""
}

// NotReady is why the node takes no traffic although its server answers its health endpoint
// ("": it is not kept out).
func (n *Node) NotReady() string {
	if o := n.out.Load(); o != nil {
		return o.reason
	}
	return ""
}

// closeConn closes the node's connection or adapter.
func (n *Node) closeConn() error {
	if n.be != nil {
		return n.be.Close()
	}
	return n.conn.Close()
}

// PairsStarted and PairsEnded count this proxy's (query, item) pairs in flight on the node, so
// that a server's own queue gauges, which count ours too, are not charged twice.
func (n *Node) PairsStarted(k int) { n.inflightPairs.Add(int64(k)) }

// PairsEnded undoes PairsStarted.
func (n *Node) PairsEnded(k int) { n.inflightPairs.Add(-int64(k)) }
