package faults

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
)

// The ideal scheduler: a yardstick for the goal "0 failed requests at 70 % of capacity".
//
// Open-loop Poisson arrivals bunch up: at 70 % of capacity some half-second windows bring more work
// than the cluster can do in half a second. To tell failures that no proxy could avoid from those a
// better one would, the baseline and slow-node scenarios replay their own arrivals (the actual send
// times) through a scheduler no real cluster can beat: every node pooled into one machine of the
// nodes' summed speed, perfectly divisible and preemptive (a request may use all of it at once),
// that knows every request's exact work and refuses the fewest requests it must so that every one
// it keeps meets its deadline. A request's work is the emulated nodes' cost profile over its exact
// token counts (the emulator's own formula for a coefficients-only profile; the fit of the measured
// shapes for a samples one), charged as lightly as any placement could: one batch overhead (c) per
// request, the prompt template never, a query's own prefix tokens only the first time the query is
// seen, a (query, item) pair already sent never (the proxy's score cache; even when the ideal
// refused the request that sent it — pairs rarely repeat in the suite's workloads). A request this
// scheduler fails cannot be served within the SLO by any proxy on this trace. The slow-node
// scenarios run it with that node's share of the speed cut from the slow-down on. The figures are
// emulated clusters' alone (a real engine's work is not a formula) and hold in expectation
// (emulated passes carry the profile's noise).
//
// Beside them, the nodes' own counters say what the cluster spent: node_busy (the share of node
// time in forward passes) against ideal_load (the share the lightest pricing needs) is the node
// time lost to splitting — a pass overhead per batch, a query's prefix on every node it reaches.
// Their ratio in the baseline (cluster_cost_ratio) prices a second pooled machine that pays what
// the cluster pays: the requests it fails (ideal_failed_at_cluster_cost) are those splitting's
// cost alone explains, and the cluster's failures beyond them are its placement, the
// indivisibility of a running batch, and admission's margin.

// idealJob is one request as the ideal scheduler sees it.
type idealJob struct {
	release float64 // seconds, on any common clock
	work    float64 // node-seconds
}

// speedFunc gives when work (node-seconds) started at start is done.
type speedFunc func(start, work float64) float64

func constSpeed(speed float64) speedFunc {
	return func(start, work float64) float64 { return start + work/speed }
}

// stepSpeed is a machine of speed before until at, and after from then on (a node slowed at at).
func stepSpeed(before, after, at float64) speedFunc {
	return func(start, work float64) float64 {
		if start >= at {
			return start + work/after
		}
		if done := start + work/before; done <= at {
			return done
		}
		return at + (work-(at-start)*before)/after
	}
}

// idealServed returns, for jobs sorted by release, which ones a single preemptive machine of
// speed m (which may change over time) serves by release + slo when it refuses as few jobs as it
// can. Every deadline is its release plus the same slo, so deadlines are in release order,
// earliest-deadline-first is first-come-first-served, and a set of jobs is feasible exactly
// when serving it in release order meets every deadline. Of all feasible sets of k jobs among
// the first j, the one that finishes earliest leaves the most room for what comes after, so
// best[j][k], that earliest finish, is a dynamic program over (j, k) — exact, O(n²) (a
// Moore–Hodgson "refuse the largest" rule is not, once jobs have release dates: the tests
// check the program against exhaustive search).
func idealServed(jobs []idealJob, m speedFunc, slo float64) []bool {
	n := len(jobs)
	inf := math.Inf(1)
	// best[j][k]: the earliest finish of k jobs kept among the first j (inf: impossible);
	// keep[j][k]: whether that schedule keeps job j-1.
	best := make([][]float64, n+1)
	keep := make([][]bool, n+1)
	best[0] = []float64{0}
	for j := 1; j <= n; j++ {
		jb := jobs[j-1]
		best[j] = make([]float64, j+1)
		keep[j] = make([]bool, j+1)
		for k := 0; k <= j; k++ {
			v := inf
			if k < j {
				v = best[j-1][k]
			}
			if k > 0 && best[j-1][k-1] < inf {
				if f := m(max(best[j-1][k-1], jb.release), jb.work); f <= jb.release+slo+1e-12 && f < v {
					v = f
					keep[j][k] = true
				}
			}
			best[j][k] = v
		}
	}
	k := 0
	for c := range best[n] {
		if best[n][c] < inf {
			k = c
		}
	}
	served := make([]bool, n)
	for j := n; j > 0; j-- {
		if keep[j][k] {
			served[j-1] = true
			k--
		}
	}
	return served
}

// idealFigures adds the ideal scheduler's figures for the calls of a run (all of them, warm-up
// included, by start time) to r: how many of the measured calls (those started in [from, to))
// it fails, and when (from t0), and the load their work puts on it. slowAt, when not zero, is
// when one node became slow by the factor slow (its speed 1/slow from then on). It adds nothing
// for a cluster that is not emulated.
func (e *env) idealFigures(r *Result, all []call, t0, from, to time.Time, slowAt time.Time, slow float64) error {
	if e.o.Cluster.Nodes.Engine != "emulated" || e.o.Cluster.Nodes.CostProfile == "" || len(all) == 0 {
		return nil
	}
	prof, err := costmodel.LoadProfile(e.o.Cluster.Nodes.CostProfile)
	if err != nil {
		return fmt.Errorf("ideal scheduler: %w", err)
	}
	counter, err := prompt.NewCounter(prompt.CountExact)
	if err != nil {
		return fmt.Errorf("ideal scheduler: %w", err)
	}
	jobs := idealJobs(all, prof.Coeffs, counter)
	speed := float64(len(e.c.Nodes()))
	m := constSpeed(speed)
	if !slowAt.IsZero() && slow > 1 {
		m = stepSpeed(speed, speed-1+1/slow, slowAt.Sub(all[0].start).Seconds())
		speed = speed - 1 + 1/slow // the measured window's (it starts at the slow-down)
	}
	served := idealServed(jobs, m, e.o.SLO.Seconds())
	failed, work := 0, 0.0
	var when []string
	for i, c := range all {
		if c.start.Before(from) || !c.start.Before(to) {
			continue
		}
		work += jobs[i].work
		if served[i] {
			continue
		}
		failed++
		if len(when) < 10 {
			when = append(when, fmt.Sprintf("%+.2f s", c.start.Sub(t0).Seconds()))
		}
	}
	r.add("ideal_failed", float64(failed), "req")
	// The share of the pooled machine the measured calls' lightest pricing takes: against the
	// scenario's nominal load, how much node time the cluster spends beyond that pricing (a
	// query's prefix on every node its batches reach, one overhead per pass, …).
	load := work / (speed * to.Sub(from).Seconds())
	r.add("ideal_load", load, "")
	if failed > 0 {
		r.Details = append(r.Details, fmt.Sprintf("ideal scheduler (all nodes pooled, exact costs, fewest refusals) fails %d, sent at start %s", failed, strings.Join(when, ", ")))
	}
	// The same machine paying what the cluster pays: every request's work scaled by the
	// baseline's node time over this pricing. What it fails is what splitting's cost alone
	// explains; what the cluster fails beyond that is placement, granularity and admission.
	if busy, ok := r.figure("node_busy"); ok && load > 0 && e.costRatio == 0 {
		e.costRatio = busy / load
	}
	if e.costRatio > 0 {
		scaled := make([]idealJob, len(jobs))
		for i, j := range jobs {
			scaled[i] = idealJob{release: j.release, work: j.work * e.costRatio}
		}
		servedAtCost := idealServed(scaled, m, e.o.SLO.Seconds())
		failedAtCost := 0
		for i, c := range all {
			if !c.start.Before(from) && c.start.Before(to) && !servedAtCost[i] {
				failedAtCost++
			}
		}
		r.add("ideal_failed_at_cluster_cost", float64(failedAtCost), "req")
		r.add("cluster_cost_ratio", e.costRatio, "")
	}
	return nil
}

// idealJobs prices each call's request as lightly as any placement could (see the ideal
// scheduler's doc). calls are by start time; releases are seconds from the first.
func idealJobs(calls []call, k costmodel.Coeffs, counter *prompt.Counter) []idealJob {
	type pair struct{ instruction, query, item string }
	seenQuery := map[[2]string]bool{}
	seenPair := map[pair]bool{}
	jobs := make([]idealJob, len(calls))
	for i, c := range calls {
		jobs[i].release = c.start.Sub(calls[0].start).Seconds()
		req := c.p.Request()
		if req == nil {
			continue
		}
		p := counter.Prefix(req.Instruction, req.Query)
		w := k.C
		if q := [2]string{req.Instruction, req.Query}; !seenQuery[q] {
			seenQuery[q] = true
			w += k.Seconds(costmodel.PrefixFeatures(p).Sub(costmodel.PrefixFeatures(counter.Template(req.Instruction))))
		}
		for _, it := range req.Items {
			if pr := (pair{req.Instruction, req.Query, it}); !seenPair[pr] {
				seenPair[pr] = true
				w += k.Seconds(costmodel.ItemFeatures(p, counter.Item(it)))
			}
		}
		jobs[i].work = w
	}
	return jobs
}

// nodeWork is what the nodes' /metrics say they did, summed over the nodes.
type nodeWork struct {
	forward float64 // seconds in forward passes
	passes  float64
	batches float64 // batches those passes ran (merged ones count each)
	ok      bool    // every node answered
}

// nodeWork reads the nodes' forward-pass counters.
func (e *env) nodeWork(ctx context.Context) nodeWork {
	w := nodeWork{ok: true}
	for _, nd := range e.c.Nodes() {
		b, err := e.get(ctx, "http://"+nd.HTTPAddr+"/metrics")
		if err != nil {
			w.ok = false
			continue
		}
		eachSample(b, func(_, name string, v float64) {
			switch name {
			case "relevance_scorer_forward_duration_seconds_sum":
				w.forward += v
			case "relevance_scorer_forward_passes_total":
				w.passes += v
			case "relevance_scorer_forward_merged_batches_sum":
				w.batches += v
			}
		})
	}
	return w
}

// addNodeWork adds, for a window of d between two reads, the share of the nodes' time spent in
// forward passes (beside ideal_load: the node time the cluster spent against the least the
// requests needed), the batches per pass and per request (of the requests sent in the window).
func (e *env) addNodeWork(r *Result, before, after nodeWork, d time.Duration, requests int) {
	if !before.ok || !after.ok || after.passes <= before.passes || d <= 0 {
		return
	}
	r.add("node_busy", (after.forward-before.forward)/(float64(len(e.c.Nodes()))*d.Seconds()), "")
	r.add("batches_per_pass", (after.batches-before.batches)/(after.passes-before.passes), "")
	if requests > 0 {
		r.add("batches_per_request", (after.batches-before.batches)/float64(requests), "")
	}
}
