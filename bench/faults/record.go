package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relevance-scoring/relevance/bench/load"
)

// call is one request as the client saw it. Its latency is from the actual send, not from the
// open-loop schedule's intended time: on this shared machine the load generator itself is
// sometimes late, and a scenario judges the cluster, not the client's scheduling.
type call struct {
	start, end time.Time
	kind       string // "" when answered successfully
	msg        string // the error, for failures
	p          load.Prepared
	t          load.Target // the unwrapped target, to send p again
}

func (c call) latency() time.Duration { return c.end.Sub(c.start) }

// recorder keeps every call made through the targets it wraps. Safe for concurrent use.
type recorder struct {
	inflight atomic.Int64 // calls sent and not yet answered
	mu       sync.Mutex
	calls    []call
	targets  []load.Target
}

// recTarget is a load.Target that records into a recorder.
type recTarget struct {
	load.Target
	r *recorder
	// budget, when set, is each call's deadline counted from its actual send (see Do).
	budget time.Duration
}

// target opens a load target for raw (http://… or grpc://…) that records its calls; budget
// (0: none of its own) bounds each call from its actual send.
func (r *recorder) target(raw string, budget time.Duration) (load.Target, error) {
	t, err := load.NewTarget(raw, 256)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.targets = append(r.targets, t)
	r.mu.Unlock()
	return &recTarget{Target: t, r: r, budget: budget}, nil
}

func (t *recTarget) Do(ctx context.Context, p load.Prepared) error {
	t.r.inflight.Add(1)
	start := time.Now()
	if t.budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = sentBudget(ctx, start, t.budget)
		defer cancel()
	}
	err := t.Target.Do(ctx, p)
	t.r.inflight.Add(-1)
	c := call{start: start, end: time.Now(), p: p, t: t.Target}
	if err != nil {
		c.kind, c.msg = load.KindOf(err), err.Error()
	}
	t.r.mu.Lock()
	t.r.calls = append(t.r.calls, c)
	t.r.mu.Unlock()
	return err
}

// sentBudget is parent with its deadline moved to sent + budget. load.Run gives each open-loop
// call a deadline from its intended send time; the scenarios judge a call from its actual send
// (call's doc), so its budget (the deadline a gRPC call carries to the proxy) counts from there
// too: a late generator must not shorten what the cluster gets. The parent's cancellation (the
// load stopped) still ends the call; its deadline does not.
func sentBudget(parent context.Context, sent time.Time, budget time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), sent.Add(budget))
	stop := context.AfterFunc(parent, func() {
		if !errors.Is(parent.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return ctx, func() { stop(); cancel() }
}

// overflowed records a request the load could not send (its in-flight cap was reached) as a
// failed call: it is a request the cluster did not answer.
func (t *recTarget) overflowed(p load.Prepared) {
	now := time.Now()
	t.r.mu.Lock()
	t.r.calls = append(t.r.calls, call{start: now, end: now, kind: load.KindOverflow, msg: "not sent: the load's in-flight cap was reached", p: p, t: t.Target})
	t.r.mu.Unlock()
}

// Close does nothing: the recorder closes its targets (close), after any re-sends.
func (t *recTarget) Close() error { return nil }

// snapshot returns the calls so far, by start time.
func (r *recorder) snapshot() []call {
	r.mu.Lock()
	out := slices.Clone(r.calls)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b call) int { return a.start.Compare(b.start) })
	return out
}

// close releases every target's connections.
func (r *recorder) close() {
	r.mu.Lock()
	ts := r.targets
	r.targets = nil
	r.mu.Unlock()
	for _, t := range ts {
		_ = t.Close()
	}
}

// between returns the calls that started in [from, to).
func between(calls []call, from, to time.Time) []call {
	var out []call
	for _, c := range calls {
		if !c.start.Before(from) && c.start.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// rejectedKinds are admission's refusals: the overload scenario reports them but does not count
// them as failures.
// (bench/load names a gRPC code's kind "grpc_" + its lower-case name, without underscores.)
var rejectedKinds = map[string]bool{"http_429": true, "grpc_resourceexhausted": true}

// summarize tallies calls; kinds in exclude are left out of Failed (and of Requests' denominator
// of Goodput they stay in).
func summarize(calls []call, slo time.Duration, exclude map[string]bool) Summary {
	s := Summary{FailedBy: map[string]int64{}}
	var lat []float64
	good := int64(0)
	for _, c := range calls {
		s.Requests++
		if c.kind != "" {
			if !exclude[c.kind] {
				s.Failed++
				s.FailedBy[c.kind]++
			}
			continue
		}
		s.OK++
		lat = append(lat, ms(c.latency()))
		if c.latency() <= slo {
			good++
		}
	}
	if len(s.FailedBy) == 0 {
		s.FailedBy = nil
	}
	if s.Requests > 0 {
		s.Goodput = float64(good) / float64(s.Requests)
	}
	s.P50ms, s.P99ms = quantile(lat, 0.50), quantile(lat, 0.99)
	return s
}

// quantile is the nearest-rank q-quantile of xs (0 when empty); xs is sorted in place.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// kindSamples gives one error message per failure kind, for the report.
func kindSamples(calls []call) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range calls {
		if c.kind != "" && !seen[c.kind] {
			seen[c.kind] = true
			out = append(out, fmt.Sprintf("%s e.g. %q", c.kind, truncate(c.msg, 200)))
		}
	}
	return out
}

// failedBetween counts the failures among calls sent in [from, to).
func failedBetween(calls []call, from, to time.Time) int {
	n := 0
	for _, c := range between(calls, from, to) {
		if c.kind != "" {
			n++
		}
	}
	return n
}
