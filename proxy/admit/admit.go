// Package admit is the request pipeline's second stage: it admits a planned request only when its
// plan says it can be answered within its budget, and rejects it at once otherwise, so that the
// cluster does not spend node time on work that will miss its deadline.
//
// Rule. With T = plan.Finish() (the latest projected batch finish: each batch's node load when it
// was placed plus its predicted cost there; package plan), B the time left to the deadline and m
// the margin — a quantile of recent requests' observed time ÷ projected finish (plan.Accuracy fed
// with whole requests: the projections' own measured error where admission uses them, clamped to
// [0.5, 4]; 1 until MinSamples requests were seen) —
//
//	admit  iff  m · T ≤ headroom · B
//
// so that what is admitted finishes in time as often as the projections are right, not merely on
// average.
//
// Which quantile: MarginQuantile while plans fit, rising to OverloadMarginQuantile as the share of
// recent plans projected past their budget even without a margin reaches overloadShare. A refusal
// is a certain failure for its caller, and while the cluster has spare time an admitted request
// that runs late costs nobody else anything, so a borderline request is worth trying; under
// overload every admitted request is borderline and each one that runs late took the capacity
// another would have finished with, so admission must be sure. (The signal is the plans' own
// overrun, not the refusals: refusals caused by the margin would raise the margin that caused
// them — with a slow node in the cluster that loop refused 120 of 429 requests in the fault suite.) (A margin from single
// batches' error was the measure before: short batches' fixed delays made it 2.3 on two real
// nodes where whole requests' q0.9 was ≤ 1.5, and 12 % of requests were refused at half load;
// results §14.)
//
// A rejected request is RESOURCE_EXHAUSTED with a RetryInfo delay. Its reason is "deadline" when
// even idle nodes could not make it (plan.IdleFinish() > headroom · B; retry after the idle time)
// and "overload" otherwise (retry after T − headroom · B, the backlog that has to drain first).
// Projections are trusted only once every candidate node has learned its cost model from
// MinSamples replies: before that, everything is admitted.
//
// An Admitter is safe for concurrent use; its only state is the recent overrun share. Admission
// reads the plan; it places nothing.
package admit

import (
	"fmt"
	"math"
	"sync/atomic"
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
	// MarginQuantile is the quantile of the projections' error used as the margin while
	// admission refuses almost nothing (0: no margin).
	MarginQuantile float64
	// OverloadMarginQuantile is the quantile used once overloadShare of recent plans are
	// projected past their budget without a margin (in between, interpolated); ≤ MarginQuantile:
	// MarginQuantile always.
	OverloadMarginQuantile float64
}

// overloadShare is the share of recent plans projected past their budget (before any margin) at
// which the cluster counts as overloaded: the margin's quantile is then OverloadMarginQuantile.
// At 70 % load the fault suite refused ≤ 1 % of requests; under 2× overload 38–44 %.
const overloadShare = 0.1

// overrunMemory is how many recent plans the overrun share averages over (an exponential moving
// average with weight 1/overrunMemory).
const overrunMemory = 32

// Admitter applies the rule.
type Admitter struct {
	cfg      Config
	acc      *plan.Accuracy
	rejected *prometheus.CounterVec
	overruns atomic.Uint64 // float64 bits: moving share of recent plans projected past their budget
}

// New returns an admitter whose margin comes from acc, fed with whole requests' time ÷ projected
// finish (nil: no margin), counting rejections in rejected (labels: reason; nil counts nothing).
func New(cfg Config, acc *plan.Accuracy, rejected *prometheus.CounterVec) *Admitter {
	return &Admitter{cfg: cfg, acc: acc, rejected: rejected}
}

// Margin is the factor projections are multiplied by (see the package doc).
func (a *Admitter) Margin() float64 {
	if a.acc == nil || !(a.cfg.MarginQuantile > 0) {
		return 1
	}
	q, n := a.acc.Quantile(a.Quantile())
	if n < a.cfg.MinSamples || !(q > 0) {
		return 1
	}
	return min(4, max(0.5, q))
}

// Quantile is the quantile of the projections' error the margin is now (see the package doc).
func (a *Admitter) Quantile() float64 {
	lo, hi := a.cfg.MarginQuantile, a.cfg.OverloadMarginQuantile
	if !(hi > lo) {
		return lo
	}
	return lo + (hi-lo)*min(1, a.OverrunShare()/overloadShare)
}

// OverrunShare is the moving share of recent plans projected past their budget without a margin.
func (a *Admitter) OverrunShare() float64 { return math.Float64frombits(a.overruns.Load()) }

// planned folds one plan's overrun (projected finish past the budget, no margin) into the share.
func (a *Admitter) planned(overrun bool) {
	x := 0.0
	if overrun {
		x = 1
	}
	for {
		old := a.overruns.Load()
		v := math.Float64frombits(old)
		v += (x - v) / overrunMemory
		if a.overruns.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// Admit returns nil when p may go ahead with budget seconds left to its deadline, else the
// RESOURCE_EXHAUSTED error to answer with.
func (a *Admitter) Admit(p *plan.Plan, budget time.Duration) error {
	if a.cfg.Disabled || len(p.Batches) == 0 || p.MinSamples < int64(a.cfg.MinSamples) {
		return nil
	}
	allowed := a.cfg.Headroom * budget.Seconds()
	m := a.Margin()
	a.planned(p.Finish() > allowed)
	busy := m * p.Finish()
	if busy <= allowed {
		return nil
	}
	reason, retry := ReasonOverload, busy-allowed
	if idle := m * p.IdleFinish(); idle > allowed {
		reason, retry = ReasonDeadline, idle
	}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("admission: projected completion %.0fms exceeds the %.0fms budget (%s)", busy*1e3, allowed*1e3, reason))
	delay := time.Duration(math.Max(retry, 0.01) * float64(time.Second))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = d
	}
	return &Rejection{reason: reason, err: st.Err()}
}

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
