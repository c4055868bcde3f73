// Package admit is the request pipeline's second stage: it admits a planned request only when its
// plan says it can be answered within its budget, and rejects it at once otherwise, so that the
// cluster does not spend node time on work that will miss its deadline.
//
// Rule. With T = plan.Finish() (the latest projected batch finish: each batch's node load when it
// was placed plus its predicted cost there; package plan), B the time left to the deadline and m
// the margin — for a plan of k batches, the MarginQuantile^(1/k) quantile of recent batches'
// observed latency ÷ projected finish
// (plan.Accuracy: the projections' own measured error, clamped to [0.5, 4]; 1 until MinSamples
// batches were seen) —
//
//	admit  iff  m · T ≤ headroom · B
//
// so that what is admitted finishes in time as often as the projections are right, not merely on
// average.
// A rejected request is RESOURCE_EXHAUSTED with a RetryInfo delay. Its reason is "deadline" when
// even idle nodes could not make it (plan.IdleFinish() > headroom · B; retry after the idle time)
// and "overload" otherwise (retry after T − headroom · B, the backlog that has to drain first).
// Projections are trusted only once every candidate node has learned its cost model from
// MinSamples replies: before that, everything is admitted.
//
// An Admitter has no state of its own and is safe for concurrent use. Admission reads the plan; it
// places nothing.
package admit

import (
	"fmt"
	"math"
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
	// MarginQuantile is the quantile of the projections' error used as the margin (0: none).
	MarginQuantile float64
}

// Admitter applies the rule.
type Admitter struct {
	cfg      Config
	acc      *plan.Accuracy
	rejected *prometheus.CounterVec
}

// New returns an admitter whose margin comes from acc (nil: no margin), counting rejections in
// rejected (labels: reason; nil counts nothing).
func New(cfg Config, acc *plan.Accuracy, rejected *prometheus.CounterVec) *Admitter {
	return &Admitter{cfg: cfg, acc: acc, rejected: rejected}
}

// Margin is the factor a one-batch plan's projection is multiplied by (see the package doc).
func (a *Admitter) Margin() float64 { return a.MarginFor(1) }

// MarginFor is the margin of a plan of k batches: the window's quantile at MarginQuantile^(1/k).
// A request is on time only when all its batches are, so for it to be on time as often as
// MarginQuantile says, each batch must be on time more often (as if their errors were
// independent: batches on different nodes mostly are).
func (a *Admitter) MarginFor(k int) float64 {
	if a.acc == nil || !(a.cfg.MarginQuantile > 0) {
		return 1
	}
	q, n := a.acc.Quantile(math.Pow(a.cfg.MarginQuantile, 1/float64(max(1, k))))
	if n < a.cfg.MinSamples || !(q > 0) {
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
