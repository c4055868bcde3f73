// Package admit is the request pipeline's second stage: it admits a planned request only when its
// plan says it can be answered within its budget, and rejects it at once otherwise, so that the
// cluster does not spend node time on work that will miss its deadline.
//
// Rule. With T = plan.Finish() (the latest projected batch finish: each batch's node load when it
// was placed plus its predicted cost there; package plan), B the time left to the deadline and m
// the margin — for a plan of k batches, the q^(1/k) quantile of recent batches' observed latency
// ÷ projected finish (plan.Accuracy: the projections' own measured error, clamped to [0.5, 4]; 1
// until MinSamples batches were seen, and not below 1 until youngWindow were), with q
// MarginQuantile or adapted (see "The promise") —
//
//	admit  iff  m · T ≤ headroom · B
//
// so that what is admitted finishes in time as often as the projections are right, not merely on
// average.
//
// The promise. A fixed quantile promises each admitted request alone: under overload every
// admitted plan sits just inside the budget, and one in ten of them may be late; at moderate load
// few sit near the edge and the same quantile refuses requests that would have made it. So when
// Config.OnTimeTarget is set, the quantile follows what admission is judged by — the share of
// admitted requests answered within their deadline (Outcome reports each): a late request halves
// the tail 1 − q, an on-time one widens it by 2^(L/(1−L)) with L = 1 − OnTimeTarget, which holds
// still exactly when a share L of admitted requests is late. The tail stays within
// [L/10, 1 − MarginQuantile]: MarginQuantile is the loosest margin, taken while nothing is late.
// A rejected request is RESOURCE_EXHAUSTED with a RetryInfo delay. Its reason is "deadline" when
// even idle nodes could not make it (m · idle > headroom · B, idle a bound on the plan's work
// with every candidate idle: idleBound; the delay is the budget the request needs, m · idle / headroom,
// and the message says so: a retry with the same budget would be refused again) and "overload"
// otherwise (retry after T − headroom · B / m, the backlog that has to drain first).
// Projections are trusted only once every candidate node has learned its cost model from
// MinSamples replies: before that, everything is admitted.
//
// An Admitter has no state of its own and is safe for concurrent use. Admission reads the plan; it
// places nothing.
package admit

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/relevance-scoring/relevance/proxy/plan"
)

// Rejection reasons (relevance_proxy_rejected_total{reason}).
const (
	ReasonOverload = "overload"
	ReasonDeadline = "deadline"
)

// Reasons lists every rejection reason, for pre-initialising the metric's series.
var Reasons = []string{ReasonOverload, ReasonDeadline}

// Config configures admission.
type Config struct {
	// Disabled admits everything.
	Disabled bool
	// Headroom multiplies the budget (> 0).
	Headroom float64
	// MinSamples is how many replies every candidate must have learned from before projections
	// are trusted.
	MinSamples int
	// MarginQuantile is the quantile of the projections' error used as the margin (0: none);
	// with OnTimeTarget, the loosest one.
	MarginQuantile float64
	// OnTimeTarget, in (0, 1), is the share of admitted requests that should be answered within
	// their deadline: the margin's quantile adapts to hold it (see the package doc). 0 keeps
	// MarginQuantile fixed.
	OnTimeTarget float64
}

// Admitter applies the rule.
type Admitter struct {
	cfg      Config
	acc      *plan.Accuracy
	rejected *prometheus.CounterVec

	mu sync.Mutex
	// tail is 1 − the margin's quantile: within [tailMin, tailMax], adapted by Outcome.
	tail, tailMin, tailMax float64
}

// New returns an admitter whose margin comes from acc (nil: no margin), counting rejections in
// rejected (labels: reason; nil counts nothing).
func New(cfg Config, acc *plan.Accuracy, rejected *prometheus.CounterVec) *Admitter {
	a := &Admitter{cfg: cfg, acc: acc, rejected: rejected}
	a.tailMax = 1 - cfg.MarginQuantile
	a.tail, a.tailMin = a.tailMax, a.tailMax
	if late := 1 - cfg.OnTimeTarget; cfg.OnTimeTarget > 0 && late > 0 {
		a.tailMin = min(late/10, a.tailMax)
	}
	return a
}

// lateStep is the factor a late request divides the tail by: from MarginQuantile 0.9, three late
// requests take the quantile to 0.9875. Faster steps (4) swung the margin harder without more
// requests on time at 2× overload.
const lateStep = 2.0

// youngWindow is how many batches the projections' error must rest on before a margin below 1
// is used.
const youngWindow = 128

// Outcome reports how an admitted request whose projections were trusted ended: late when its
// deadline passed before it was answered, else answered in time. Requests that failed for other
// reasons (cancelled, no node) say nothing about admission and are not reported. Without an
// OnTimeTarget it does nothing.
func (a *Admitter) Outcome(late bool) {
	if !(a.cfg.OnTimeTarget > 0) || a.tailMin == a.tailMax {
		return
	}
	l := 1 - a.cfg.OnTimeTarget
	a.mu.Lock()
	defer a.mu.Unlock()
	if late {
		a.tail /= lateStep
	} else {
		a.tail *= math.Pow(lateStep, l/(1-l))
	}
	a.tail = min(a.tailMax, max(a.tailMin, a.tail))
}

// Quantile is the quantile of the projections' error a one-batch plan is stretched by now.
func (a *Admitter) Quantile() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return 1 - a.tail
}

// Margin is the factor a one-batch plan's projection is multiplied by (see the package doc).
func (a *Admitter) Margin() float64 { return a.MarginFor(1) }

// MarginFor is the margin of a plan of k batches: the window's quantile at Quantile()^(1/k).
// A request is on time only when all its batches are, so for it to be on time as often as
// Quantile() says, each batch must be on time more often (as if their errors were
// independent: batches on different nodes mostly are).
func (a *Admitter) MarginFor(k int) float64 {
	if a.acc == nil || !(a.cfg.MarginQuantile > 0) {
		return 1
	}
	q, n := a.acc.Quantile(math.Pow(a.Quantile(), 1/float64(max(1, k))))
	if n < a.cfg.MinSamples || !(q > 0) {
		return 1
	}
	// A margin below 1 admits plans projected past the budget: that takes a window's worth of
	// evidence that the projections run long. A young window is the cluster's first batches,
	// answered before any queue formed; under a sudden overload it let in work that then
	// missed its deadline.
	if q < 1 && n < youngWindow {
		return 1
	}
	return min(4, max(0.5, q))
}

// Admit returns nil when p may go ahead with budget seconds left to its deadline, else the
// RESOURCE_EXHAUSTED error to answer with.
func (a *Admitter) Admit(p *plan.Plan, budget time.Duration) error {
	if a.cfg.Disabled || len(p.Batches) == 0 || p.MinSamples < int64(a.cfg.MinSamples) {
		return nil
	}
	allowed := a.cfg.Headroom * budget.Seconds()
	m := a.MarginFor(len(p.Batches))
	busy := m * p.Finish()
	if busy <= allowed {
		return nil
	}
	// The backlog ahead of the plan drains one second per second: the plan fits once
	// m·(T − d) ≤ allowed, after d = T − allowed/m (not m·T − allowed, which is m times that).
	// A plan shaped by backlog may have left a busy candidate out: then the request fits only
	// once enough of the candidates' backlogs has drained (drainDelay), which its own T misses
	// (a request placed whole on an idle node beside one with 10 s queued was told 53 ms).
	reason, retry := ReasonOverload, (busy-allowed)/m
	if p.Backlogged() {
		retry = max(retry, drainDelay(p.Backlogs, planWork(p), allowed/m))
	}
	msg := fmt.Sprintf("admission: projected completion %.0fms exceeds the %.0fms budget (%s)", busy*1e3, allowed*1e3, reason)
	if idle := m * idleBound(p); idle > allowed {
		// Waiting will not help: the same request with the same budget is refused again. Say
		// what would: the RetryInfo delay is the budget it needs (m·idle ≤ headroom·B).
		// Rounded up to the millisecond: truncated (to the nanosecond here, to the millisecond
		// in Retry-After-Ms), a client resending with exactly that budget was refused again.
		reason, retry = ReasonDeadline, math.Ceil(idle/a.cfg.Headroom*1e3)/1e3
		msg = fmt.Sprintf("admission: the request needs a budget of about %.0fms even on idle nodes, more than its %.0fms "+
			"(deadline): send a longer deadline, or fewer or shorter items", retry*1e3, budget.Seconds()*1e3)
	}
	st := status.New(codes.ResourceExhausted, msg)
	// At least 10 ms, at most maxRetryDelay; NaN (a plan priced by a broken cost model) is the
	// least: math.Max passes NaN, and a NaN or huge delay converted became MinInt64, a negative
	// delay that clients honour by retrying at once.
	if !(retry >= 0.01) {
		retry = 0.01
	}
	delay := time.Duration(math.Min(retry, maxRetryDelay.Seconds()) * float64(time.Second))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = d
	}
	return &Rejection{reason: reason, err: st.Err()}
}

// idleBound is when the plan's work would be answered with every candidate idle, as far as the
// plan can tell. A plan made with every candidate idle was split and placed knowing that: its
// IdleFinish is the answer, even when it left candidates unused (a request the splitter keeps in
// one batch). A plan shaped by backlog (Plan.Backlogged) may hold its work in fewer or
// worse-placed batches than idle nodes would get (the cost splitter picks fewer batches behind a
// busy peer, often one on the idle node): then its work spread evenly over as many candidates
// as it has items, never more than IdleFinish. That bound is optimistic (a finer split adds a
// batch's overhead), as it must be: "deadline" tells the client that the same budget is refused
// again, and a request that an idle cluster fits must not be told that.
func idleBound(p *plan.Plan) float64 {
	idle := p.IdleFinish()
	if !p.Backlogged() {
		return idle
	}
	return min(idle, planWork(p)/float64(max(1, min(p.Candidates, len(p.ItemTokens)))))
}

// planWork is the plan's work: its batches' predicted seconds.
func planWork(p *plan.Plan) float64 {
	var w float64
	for _, b := range p.Batches {
		if b.Lease != nil {
			w += b.Lease.Predicted
		}
	}
	return w
}

// drainDelay is how long from now until work seconds, spread over nodes with these backlogs
// (each draining one second per second), could all be done within the next within seconds: the
// least d with Σ max(0, within − max(0, b − d)) ≥ work. Spread evenly it is a lower bound on
// when the request fits (a split is not that fine), so a client told it is not told too long.
// +Inf never: past the largest backlog every node is idle, and the caller refused only requests
// an idle cluster fits (else its reason is deadline).
func drainDelay(backlogs []float64, work, within float64) float64 {
	room := func(d float64) float64 {
		var r float64
		for _, b := range backlogs {
			r += max(0, within-max(0, b-d))
		}
		return r
	}
	hi := 0.0
	for _, b := range backlogs {
		hi = max(hi, b)
	}
	if !(work > 0) || !(within > 0) || room(0) >= work || math.IsInf(hi, 0) || math.IsNaN(hi) {
		return 0
	}
	lo := 0.0
	for range 50 { // to ~1e-15 of the largest backlog
		mid := (lo + hi) / 2
		if room(mid) >= work {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// maxRetryDelay caps a refusal's RetryInfo delay.
const maxRetryDelay = time.Hour

// Rejection is Admit's refusal: a RESOURCE_EXHAUSTED status error (with RetryInfo) and its
// reason. It is counted only by Count: the caller may still find a plan that fits.
type Rejection struct {
	reason string
	err    error
}

func (r *Rejection) Error() string { return r.err.Error() }

// GRPCStatus makes the rejection the gRPC status it carries.
func (r *Rejection) GRPCStatus() *status.Status { return status.Convert(r.err) }

// Count records a rejection that stands (relevance_proxy_rejected_total{reason}).
func (a *Admitter) Count(err error) {
	if r, ok := err.(*Rejection); ok && a.rejected != nil {
		a.rejected.WithLabelValues(r.reason).Inc()
	}
}
