package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
)

// scenario is one fault case: run fills the result's summary, figures and criteria (judged after
// it returns); an error is the suite's own failure to run it.
type scenario struct {
	name, goal string
	run        func(ctx context.Context, e *env, r *Result) error
}

// suite is the registration list, in running order: the scenarios that need a whole, unharmed
// cluster first; the proxy's SIGTERM (which restarts it) near the end.
func suite() []scenario {
	return []scenario{
		{"baseline", "70 % of capacity, no fault: 0 failed requests that an idle cluster serves within the SLO", runBaseline},
		{"sigkill", "one node SIGKILLed at 70 % (the supervisor restarts it): 0 failed requests; back in traffic ≤ 1 s after its /readyz", runSigkill},
		{"slow10", "one node 10× slower at 70 %: 0 failed requests; p99 ≤ baseline + 20 %", slow(10, 1)},
		{"slow3", "one node 3× slower at 70 %: 0 failed requests; p99 ≤ baseline + 20 %", slow(3, 2)},
		{"sigstop", "one node SIGSTOPped 2 s, SIGCONTed 2 s, repeatedly, at 70 %: 0 failed requests; p99 ≤ baseline + 20 %", runSigstop},
		{"overload", "HTTP, 2× capacity for 20 s then 50 %: ≥ 99 % of accepted requests within the SLO; recovery ≤ 1 s (429s reported, not failures)", overload(false)},
		{"overload-grpc", "gRPC, 2× capacity for 20 s then 50 %: ≥ 99 % of accepted requests within the SLO; recovery ≤ 1 s (RESOURCE_EXHAUSTED reported, not failures)", overload(true)},
		{"sigterm-node", "SIGTERM one node mid-flight at 70 %: 0 dropped (every admitted request answered 200, those in flight on the node by the others' retries; admission's refusals while the node's capacity is gone are counted, not drops)", runSigtermNode},
		{"sigterm-proxy", "SIGTERM the proxy mid-flight (HTTP and gRPC load): every request in flight at the signal answered 200 before it exits", runSigtermProxy},
		{"malformed", "~200 malformed inputs over HTTP and gRPC: 4xx / INVALID_ARGUMENT whose message names the field; 0 crashes", runMalformed},
		{"memory", "steady 50 % load, every query distinct: each process's RSS growth ≤ its caches' budgets + margin", runMemory},
		{"prefix-crash", "real nodes: a node SIGKILLed mid-batch with the prefix cache on, amid a cancellation storm: 0 dirty prefix-cache reads", runPrefixCrash},
	}
}

// Names lists the scenarios in running order.
func Names() []string {
	var out []string
	for _, s := range suite() {
		out = append(out, s.name)
	}
	return out
}

// Goals maps each scenario to its goal.
func Goals() map[string]string {
	m := map[string]string{}
	for _, s := range suite() {
		m[s.name] = s.goal
	}
	return m
}

// selectScenarios returns the named scenarios in the suite's order (all when names is empty).
func selectScenarios(names []string) ([]scenario, error) {
	all := suite()
	if len(names) == 0 {
		return all, nil
	}
	for _, n := range names {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("--scenarios: unknown scenario %q; known: %s", n, strings.Join(Names(), ", "))
		}
	}
	var out []scenario
	for _, s := range all {
		if slices.Contains(names, s.name) {
			out = append(out, s)
		}
	}
	return out, nil
}

// steady runs load at share of capacity for d over HTTP and returns the recorder and the start;
// paired: the paired load (see startLoad), for the scenarios judged against the baseline.
func (e *env) steady(ctx context.Context, share float64, d time.Duration, paired bool, during func(t0 time.Time, rec *recorder)) (*recorder, time.Time, error) {
	rec := &recorder{}
	t0 := time.Now()
	lr, err := e.startLoad(ctx, rec, share, d, false, paired, e.o.Workload)
	if err != nil {
		rec.close()
		return nil, t0, err
	}
	if during != nil {
		during(t0, rec)
	}
	if err := lr.wait(); err != nil {
		rec.close()
		return nil, t0, err
	}
	return rec, t0, nil
}

// measured summarises the calls after the warm-up of a steady run that started at t0.
func (e *env) measured(r *Result, rec *recorder, t0 time.Time, share float64, d time.Duration) []call {
	calls := between(rec.snapshot(), t0.Add(e.d.warmup), t0.Add(d))
	r.Summary = summarize(calls, e.o.SLO, nil)
	r.HasLoad = true
	r.RateRPS = share * e.capacity
	// What was measured must be the load that was meant: a window that caught few of the
	// scheduled requests (an interrupted load, a tiny rate) has few failures for want of
	// requests, not for the cluster's merit.
	if want := r.RateRPS * (d - e.d.warmup).Seconds(); want > 0 {
		r.add("measured_share", float64(r.Requests)/want, "")
		r.require("measured_share", ">=", 0.5)
	}
	r.Details = append(r.Details, kindSamples(calls)...)
	return calls
}

// failureDetails lists up to n failed calls with their time relative to ref.
func failureDetails(calls []call, ref time.Time, refName string, n int) []string {
	var out []string
	for _, c := range calls {
		if c.kind == "" {
			continue
		}
		if len(out) == n {
			out = append(out, "…")
			break
		}
		out = append(out, fmt.Sprintf("failed %s: sent at %s%+.2f s, answered after %.0f ms", c.kind, refName, c.start.Sub(ref).Seconds(), ms(c.latency())))
	}
	return out
}

func runBaseline(ctx context.Context, e *env, r *Result) error {
	var before nodeWork
	var from time.Time
	rec, t0, err := e.steady(ctx, 0.7, e.d.load, true, func(t0 time.Time, _ *recorder) {
		sleep(ctx, time.Until(t0.Add(e.d.warmup)))
		from, before = time.Now(), e.nodeWork(ctx)
	})
	if err != nil {
		return err
	}
	defer rec.close()
	after, to := e.nodeWork(ctx), time.Now()
	calls := e.measured(r, rec, t0, 0.7, e.d.load)
	s := r.Summary
	e.baseline = &s
	e.addNodeWork(r, before, after, to.Sub(from), len(calls))
	if err := e.idealFigures(r, rec.snapshot(), t0, t0.Add(e.d.warmup), t0.Add(e.d.load), time.Time{}, 0); err != nil {
		return err
	}
	// A failure counts against the cluster only when the request is one that an idle cluster
	// serves within the SLO: send each failed request again, alone, once the load is over.
	var failed []call
	for _, c := range calls {
		if c.kind != "" {
			failed = append(failed, c)
		}
	}
	sleep(ctx, e.d.settle)
	served, unserved := 0, 0
	// Bounded: at most 100 re-sends, each given twice the SLO (it passes only within the SLO),
	// within a minute in all.
	retestEnd := time.Now().Add(time.Minute)
	for i, c := range failed {
		if i == 100 || time.Now().After(retestEnd) { // the rest count as served: a failure not retested is still a failure
			served += len(failed) - i
			break
		}
		cctx, cancel := context.WithTimeout(ctx, min(e.o.Timeout, 2*e.o.SLO))
		start := time.Now()
		err := c.t.Do(cctx, c.p)
		cancel()
		if err == nil && time.Since(start) <= e.o.SLO {
			served++
		} else {
			unserved++
		}
	}
	r.add("failed_idle_served", float64(served), "req")
	r.add("failed_idle_unserved", float64(unserved), "req")
	r.require("failed_idle_served", "==", 0)
	// A cluster that fails every request, and the same way when idle (a broken deploy), must not
	// pass for want of failures an idle cluster would not have.
	r.require("goodput", ">=", 0.9)
	r.Details = append(r.Details, failureDetails(calls, t0, "start", 20)...)
	return nil
}

// backEvents are the moments a killed node comes back, as the node and the proxy show them.
type backEvents struct {
	unhealthy, ready, healthy, traffic time.Time
}

// watchBack polls, after old (node i's process) was killed at tKill, until the node's new
// process answers /readyz, the proxy sees it healthy, and the proxy has had an answered batch
// from it (its /v1/nodes batches count grows), or until deadline.
func (e *env) watchBack(ctx context.Context, i int, old *cluster.Proc, tKill, deadline time.Time) backEvents {
	var ev backEvents
	addr := e.node(i).GRPCAddr
	var batchesAtReady int64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		now := time.Now()
		m, err := e.nodes(ctx)
		st, known := m[addr]
		if err == nil && known && ev.unhealthy.IsZero() && !st.Healthy {
			ev.unhealthy = now
		}
		if ev.ready.IsZero() {
			if nd := e.node(i); nd.Proc != old && e.ready(ctx, nd) {
				ev.ready = time.Now()
				batchesAtReady = st.Batches
				if m2, err := e.nodes(ctx); err == nil {
					batchesAtReady = m2[addr].Batches
				}
			}
		} else if err == nil && known {
			if ev.healthy.IsZero() && st.Healthy {
				ev.healthy = now
			}
			if st.Batches > batchesAtReady {
				ev.traffic = now
				return ev
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return ev
}

func addSince(r *Result, name string, from, to time.Time) {
	if !from.IsZero() && !to.IsZero() {
		r.add(name, to.Sub(from).Seconds(), "s")
	}
}

func runSigkill(ctx context.Context, e *env, r *Result) error {
	i := e.pick(0)
	var ev backEvents
	var tKill time.Time
	var killErr error
	nd := e.node(i)
	rec, t0, err := e.steady(ctx, 0.7, e.d.load, false, func(t0 time.Time, rec *recorder) {
		sleep(ctx, time.Until(t0.Add(e.d.warmup+e.d.killAt)))
		tKill = time.Now()
		if killErr = syscall.Kill(nd.Pid(), syscall.SIGKILL); killErr != nil {
			return
		}
		e.logf("SIGKILL %s (pid %d)", nd.Name, nd.Pid())
		ev = e.watchBack(ctx, i, nd.Proc, tKill, t0.Add(e.d.load))
	})
	if err != nil {
		return err
	}
	defer rec.close()
	if killErr != nil {
		return fmt.Errorf("SIGKILL %s: %w", nd.Name, killErr)
	}
	calls := e.measured(r, rec, t0, 0.7, e.d.load)
	addSince(r, "kill_to_unhealthy_s", tKill, ev.unhealthy)
	addSince(r, "kill_to_ready_s", tKill, ev.ready)
	addSince(r, "ready_to_healthy_s", ev.ready, ev.healthy)
	addSince(r, "back_in_traffic_s", ev.ready, ev.traffic)
	if !ev.traffic.IsZero() {
		r.add("failed_kill_to_traffic", float64(failedBetween(calls, tKill, ev.traffic)), "req")
	}
	r.require("failed", "==", 0)
	r.require("back_in_traffic_s", "<=", 1)
	r.Details = append(r.Details, fmt.Sprintf("%s (pid %d) SIGKILLed at start%+.2f s", nd.Name, nd.Pid(), tKill.Sub(t0).Seconds()))
	r.Details = append(r.Details, failureDetails(calls, tKill, "kill", 20)...)
	if ev.ready.IsZero() {
		// Wait for the restart anyway, so the next scenario has the whole cluster.
		return e.waitRestarted(ctx, i, nd.Proc)
	}
	return nil
}

// p99Impact adds the p99's change against the baseline, judged when the baseline ran.
func (e *env) p99Impact(r *Result) {
	if e.baseline != nil && e.baseline.P99ms > 0 && r.OK > 0 {
		r.add("p99_impact", r.P99ms/e.baseline.P99ms-1, "")
		r.add("baseline_p99_ms", e.baseline.P99ms, "ms")
	}
	r.Criteria = append(r.Criteria, Criterion{Figure: "p99_impact", Op: "<=", Limit: 0.2, Optional: true})
}

// nodeShare adds node addr's share of the answered batches between two /v1/nodes reads, and its
// ejections and slow outcomes.
func nodeShare(r *Result, before, after map[string]nodeStatus, addr string) {
	var total int64
	for a, s := range after {
		total += s.Batches - before[a].Batches
	}
	if total > 0 {
		r.add("node_batch_share", float64(after[addr].Batches-before[addr].Batches)/float64(total), "")
	}
	r.add("node_ejections", float64(after[addr].Ejections-before[addr].Ejections), "")
	r.add("node_slow_outcomes", float64(after[addr].Slow-before[addr].Slow), "")
	r.add("node_stalls", float64(after[addr].Stalls-before[addr].Stalls), "")
	if v := after[addr].SpeedRatio; v > 0 {
		r.add("node_speed_ratio_end", v, "")
	}
}

// ejectionWatch polls the proxy's view of node addr from the fault's start until end: when it
// first ejected the node, and the share of polls that found it ejected. The first times are the
// proxy's own (NodeStatus.LastEjectedAt, LastStalledAt), so they do not depend on the polling
// interval; a proxy that does not report them leaves the poll's time.
type ejectionWatch struct {
	first         time.Time
	polls, ejects int
	// firstStall and stalls: the same for the node found stalled (package cluster's stall.go).
	firstStall time.Time
	stalls     int
}

func (e *env) watchEjection(ctx context.Context, addr string, from, end time.Time) ejectionWatch {
	var w ejectionWatch
	// earliest keeps the earliest time at or after from: the proxy's, else the poll's.
	earliest := func(first *time.Time, at time.Time) {
		if at.IsZero() || at.Before(from) {
			at = time.Now()
		}
		if first.IsZero() || at.Before(*first) {
			*first = at
		}
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		if m, err := e.nodes(ctx); err == nil {
			w.polls++
			if s := m[addr]; s.Ejected {
				w.ejects++
				earliest(&w.first, s.LastEjectedAt)
			}
			if s := m[addr]; s.Stalled {
				w.stalls++
				earliest(&w.firstStall, s.LastStalledAt)
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return w
}

// addEjection adds the watch's figures for a fault that started at tFault, and the failures
// before the first ejection.
func addEjection(r *Result, w ejectionWatch, tFault time.Time, calls []call) {
	addSince(r, "fault_to_ejection_s", tFault, w.first)
	if w.polls > 0 {
		r.add("ejected_time_share", float64(w.ejects)/float64(w.polls), "")
	}
	if !w.firstStall.IsZero() {
		addSince(r, "fault_to_stall_s", tFault, w.firstStall)
		r.add("stalled_time_share", float64(w.stalls)/float64(w.polls), "")
	}
	if !w.first.IsZero() {
		r.add("failed_before_ejection", float64(failedBetween(calls, tFault, w.first)), "req")
	}
}

// slow makes node pick(k) factor× slower for the whole measured run.
func slow(factor float64, k int) func(ctx context.Context, e *env, r *Result) error {
	return func(ctx context.Context, e *env, r *Result) error {
		i := e.pick(k)
		nd := e.node(i)
		before, err := e.nodes(ctx)
		if err != nil {
			return err
		}
		var faultErr error
		var tFault time.Time
		var w ejectionWatch
		rec, t0, err := e.steady(ctx, 0.7, e.d.load, true, func(t0 time.Time, rec *recorder) {
			sleep(ctx, time.Until(t0.Add(e.d.warmup)))
			tFault = time.Now()
			if faultErr = e.setFault(ctx, nd, fmt.Sprintf(`{"slowdown":%g}`, factor)); faultErr != nil {
				return
			}
			e.logf("%s slowed down %g×", nd.Name, factor)
			w = e.watchEjection(ctx, nd.GRPCAddr, tFault, t0.Add(e.d.load))
		})
		if err != nil {
			return err
		}
		defer rec.close()
		if faultErr != nil {
			return faultErr
		}
		after, err := e.nodes(ctx)
		if err != nil {
			return err
		}
		calls := e.measured(r, rec, t0, 0.7, e.d.load)
		if err := e.idealFigures(r, rec.snapshot(), t0, t0.Add(e.d.warmup), t0.Add(e.d.load), tFault, factor); err != nil {
			return err
		}
		nodeShare(r, before, after, nd.GRPCAddr)
		addEjection(r, w, tFault, calls)
		r.require("failed", "==", 0)
		e.p99Impact(r)
		r.Details = append(r.Details, fmt.Sprintf("%s slowed %g× from the end of the warm-up (start+%.0f s) to the end", nd.Name, factor, e.d.warmup.Seconds()))
		r.Details = append(r.Details, failureDetails(calls, t0.Add(e.d.warmup), "fault", 20)...)
		return e.restartNode(ctx, i)
	}
}

func runSigstop(ctx context.Context, e *env, r *Result) error {
	i := e.pick(3)
	nd := e.node(i)
	before, err := e.nodes(ctx)
	if err != nil {
		return err
	}
	stops := 0
	var sigErr error
	var tFault time.Time
	var w ejectionWatch
	rec, t0, err := e.steady(ctx, 0.7, e.d.load, true, func(t0 time.Time, rec *recorder) {
		sleep(ctx, time.Until(t0.Add(e.d.warmup)))
		end := t0.Add(e.d.load)
		tFault = time.Now()
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			w = e.watchEjection(ctx, nd.GRPCAddr, tFault, end)
		}()
		defer func() { <-watched }()
		for time.Until(end) > e.d.stop && ctx.Err() == nil {
			if sigErr = syscall.Kill(nd.Pid(), syscall.SIGSTOP); sigErr != nil {
				return
			}
			stops++
			sleep(context.Background(), e.d.stop) // a stopped node must always be continued
			_ = syscall.Kill(nd.Pid(), syscall.SIGCONT)
			sleep(ctx, e.d.stop)
		}
	})
	_ = syscall.Kill(nd.Pid(), syscall.SIGCONT)
	if err != nil {
		return err
	}
	defer rec.close()
	if sigErr != nil {
		return fmt.Errorf("SIGSTOP %s: %w", nd.Name, sigErr)
	}
	after, err := e.nodes(ctx)
	if err != nil {
		return err
	}
	calls := e.measured(r, rec, t0, 0.7, e.d.load)
	r.add("stops", float64(stops), "")
	r.require("stops", ">=", 1) // the fault was injected
	nodeShare(r, before, after, nd.GRPCAddr)
	addEjection(r, w, tFault, calls)
	r.require("failed", "==", 0)
	e.p99Impact(r)
	r.Details = append(r.Details, fmt.Sprintf("%s SIGSTOPped %v then SIGCONTed %v, %d times from start+%.0f s", nd.Name, e.d.stop, e.d.stop, stops, e.d.warmup.Seconds()))
	r.Details = append(r.Details, failureDetails(calls, t0.Add(e.d.warmup), "first stop", 20)...)
	return e.restartNode(ctx, i)
}

// overload sends 2× capacity for d.overload, then 50 % for d.after (two Poisson streams: 1.5×
// for the first phase and 0.5× throughout, over one front).
func overload(grpc bool) func(ctx context.Context, e *env, r *Result) error {
	return func(ctx context.Context, e *env, r *Result) error {
		rec := &recorder{}
		defer rec.close()
		t0 := time.Now()
		a, err := e.startLoad(ctx, rec, 1.5, e.d.overload, grpc, false, e.o.Workload)
		if err != nil {
			return err
		}
		b, err := e.startLoad(ctx, rec, 0.5, e.d.overload+e.d.after, grpc, false, e.o.Workload)
		if err != nil {
			_ = a.wait()
			return err
		}
		errA, errB := a.wait(), b.wait()
		if errA != nil || errB != nil {
			return fmt.Errorf("load: %v %v", errA, errB)
		}
		tEnd := t0.Add(e.d.overload)
		calls := rec.snapshot()
		r.Summary = summarize(between(calls, t0, tEnd.Add(e.d.after)), e.o.SLO, rejectedKinds)
		r.HasLoad = true
		r.RateRPS = 2 * e.capacity
		f := judgeOverload(between(calls, t0, tEnd), between(calls, tEnd, tEnd.Add(e.d.after)), tEnd, e.o.SLO)
		r.Figures = append(r.Figures, f...)
		r.Details = append(r.Details, kindSamples(calls)...)
		r.require("accepted_within_slo", ">=", 0.99)
		r.require("recovery_s", "<=", 1)
		r.Details = append(r.Details, fmt.Sprintf("2× phase: %.1f req/s for %v, then %.1f req/s for %v", 2*e.capacity, e.d.overload, 0.5*e.capacity, e.d.after))
		return nil
	}
}

// judgeOverload measures the overload phase (p1: accepted requests answered within the SLO,
// rejections) and the phase after it (p2, starting at tEnd): the recovery time is the end of the
// last one-second window (by send time) with a failure, a rejection or a reply beyond the SLO.
func judgeOverload(p1, p2 []call, tEnd time.Time, slo time.Duration) []Figure {
	var rejected, accepted, within int64
	for _, c := range p1 {
		switch {
		case rejectedKinds[c.kind]:
			rejected++
			continue
		case c.kind == "" && c.latency() <= slo:
			within++
		}
		accepted++
	}
	f := []Figure{{"overload_requests", float64(len(p1)), "req"}, {"rejected", float64(rejected), "req"}}
	if len(p1) > 0 {
		f = append(f, Figure{"rejected_share", float64(rejected) / float64(len(p1)), ""})
	}
	if accepted > 0 {
		f = append(f, Figure{"accepted_within_slo", float64(within) / float64(accepted), ""})
	}
	recovery := 0.0
	bad := 0
	for _, c := range p2 {
		if c.kind != "" || c.latency() > slo {
			bad++
			w := float64(int(c.start.Sub(tEnd).Seconds()) + 1)
			recovery = max(recovery, w)
		}
	}
	f = append(f, Figure{"after_requests", float64(len(p2)), "req"}, Figure{"after_bad", float64(bad), "req"})
	if len(p2) > 0 {
		f = append(f, Figure{"recovery_s", recovery, "s"})
	}
	return f
}

func runSigtermNode(ctx context.Context, e *env, r *Result) error {
	i := e.pick(4)
	nd := e.node(i)
	var tSig, tExit time.Time
	var sigErr error
	rec, t0, err := e.steady(ctx, 0.7, e.d.short, false, func(t0 time.Time, rec *recorder) {
		sleep(ctx, time.Until(t0.Add(e.d.warmup+e.d.short/4)))
		waitInflight(ctx, rec, 2)
		tSig = time.Now()
		if sigErr = syscall.Kill(nd.Pid(), syscall.SIGTERM); sigErr != nil {
			return
		}
		e.logf("SIGTERM %s (pid %d)", nd.Name, nd.Pid())
		select {
		case <-nd.Done():
			tExit = time.Now()
		case <-time.After(e.d.short):
		}
	})
	if err != nil {
		return err
	}
	defer rec.close()
	if sigErr != nil {
		return fmt.Errorf("SIGTERM %s: %w", nd.Name, sigErr)
	}
	calls := e.measured(r, rec, t0, 0.7, e.d.short)
	addSince(r, "drain_s", tSig, tExit)
	if !tExit.IsZero() {
		r.add("failed_during_drain", float64(failedBetween(calls, tSig.Add(-time.Second), tExit.Add(time.Second))), "req")
	}
	clean := 0.0
	if !tExit.IsZero() && nd.Err() == nil {
		clean = 1
	}
	r.add("node_exit_clean", clean, "")
	r.require("node_exit_clean", "==", 1) // a node that crashes on SIGTERM is no drain
	// Dropped: admitted and then failed. A refusal (429 / RESOURCE_EXHAUSTED) is admission
	// declining work that the cluster, one node short, could not finish in time: reported, but
	// no request's work was lost.
	dropped, refused, inflight := 0, 0, 0
	for _, c := range calls {
		switch {
		case c.kind == "":
		case rejectedKinds[c.kind]:
			refused++
		default:
			dropped++
		}
		if c.start.Before(tSig) && c.end.After(tSig) {
			inflight++
		}
	}
	r.add("inflight_at_signal", float64(inflight), "req")
	r.add("dropped", float64(dropped), "req")
	r.add("refused", float64(refused), "req")
	r.require("dropped", "==", 0)
	r.require("inflight_at_signal", ">=", 1)
	r.Details = append(r.Details, fmt.Sprintf("%s (pid %d) SIGTERMed at start%+.2f s", nd.Name, nd.Pid(), tSig.Sub(t0).Seconds()))
	r.Details = append(r.Details, failureDetails(calls, tSig, "signal", 20)...)
	return e.waitRestarted(ctx, i, nd.Proc)
}

// waitInflight waits (at most two seconds) until rec has at least n calls in flight.
func waitInflight(ctx context.Context, rec *recorder, n int64) {
	deadline := time.Now().Add(2 * time.Second)
	for rec.inflight.Load() < n && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 5*time.Millisecond)
	}
}

func runSigtermProxy(ctx context.Context, e *env, r *Result) error {
	p := e.proxyProc()
	rec := &recorder{}
	defer rec.close()
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	t0 := time.Now()
	a, err := e.startLoad(lctx, rec, 0.35, e.d.short, false, false, e.o.Workload)
	if err != nil {
		return err
	}
	b, err := e.startLoad(lctx, rec, 0.35, e.d.short, true, false, e.o.Workload)
	if err != nil {
		stopLoad()
		_ = a.wait()
		return err
	}
	sleep(ctx, time.Until(t0.Add(e.d.warmup+e.d.short/4)))
	waitInflight(ctx, rec, 3)
	inflightNow := rec.inflight.Load()
	tSig := time.Now()
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		stopLoad()
		_, _ = a.wait(), b.wait()
		return fmt.Errorf("SIGTERM proxy: %w", err)
	}
	e.logf("SIGTERM proxy (pid %d) with %d requests in flight", p.Pid(), inflightNow)
	tExit := proxyExit(p, 30*time.Second, 10*time.Second)
	// Nothing serves now: stop the load (the calls still waiting are after the signal).
	sleep(ctx, 200*time.Millisecond)
	stopLoad()
	_, _ = a.wait(), b.wait()

	calls := rec.snapshot()
	before := between(calls, t0.Add(e.d.warmup), tSig)
	after := between(calls, tSig, time.Now().Add(time.Hour))
	r.Summary = summarize(before, e.o.SLO, nil)
	r.HasLoad = true
	r.RateRPS = 0.7 * e.capacity
	inflight, inflightFailed := 0, 0
	for _, c := range before {
		if c.end.After(tSig) {
			inflight++
			if c.kind != "" {
				inflightFailed++
			}
		}
	}
	afterOK := 0
	afterKinds := map[string]int64{}
	for _, c := range after {
		if c.kind == "" {
			afterOK++
		} else {
			afterKinds[c.kind]++
		}
	}
	r.add("inflight_at_signal", float64(inflight), "req")
	r.add("inflight_failed", float64(inflightFailed), "req")
	addSince(r, "proxy_exit_s", tSig, tExit)
	clean := 0.0
	if !tExit.IsZero() && p.Err() == nil {
		clean = 1
	}
	r.add("proxy_exit_clean", clean, "")
	r.add("after_signal_requests", float64(len(after)), "req")
	r.add("after_signal_ok", float64(afterOK), "req")
	r.require("inflight_failed", "==", 0)
	r.require("inflight_at_signal", ">=", 1)
	r.require("proxy_exit_clean", "==", 1)
	r.Details = append(r.Details, fmt.Sprintf("proxy (pid %d) SIGTERMed at start%+.2f s; exit status %v", p.Pid(), tSig.Sub(t0).Seconds(), p.Err()))
	if len(afterKinds) > 0 {
		r.Details = append(r.Details, "requests sent after the signal (not judged): "+kinds(afterKinds))
	}
	r.Details = append(r.Details, kindSamples(calls)...)
	r.Details = append(r.Details, failureDetails(before, tSig, "signal", 20)...)
	tRestart := time.Now()
	if err := e.startProxy(ctx); err != nil {
		return fmt.Errorf("restart proxy: %w", err)
	}
	r.add("proxy_restart_s", time.Since(tRestart).Seconds(), "s")
	return nil
}

// proxyExit waits up to limit for p, signalled, to exit, and returns when it did (zero: it did
// not). A proxy still running then is stopped (SIGTERM again, SIGKILL after grace) before the
// scenario restarts one: left running, it keeps the ports the new proxy needs (every later
// scenario would fail on "restart proxy"), and once e.proxy names the new one nothing stops it.
func proxyExit(p *cluster.Proc, limit, grace time.Duration) time.Time {
	select {
	case <-p.Done():
		return time.Now()
	case <-time.After(limit):
	}
	p.Stop(grace)
	return time.Time{}
}
