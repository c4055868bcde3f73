//go:build linux

package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// costFitCase is one pass shape of BenchmarkCostModelFit: groups of a prefix of prefix tokens and
// items × itemLen tokens each; cached runs the pass twice (the first publishes the prefix) and
// measures the second, whose prefix comes from the cache.
type costFitCase struct {
	class                          string
	prefix, items, itemLen, groups int
	cached                         bool
}

func (c costFitCase) String() string {
	s := fmt.Sprintf("P=%d n=%d L=%d", c.prefix, c.items, c.itemLen)
	if c.groups > 1 {
		s += fmt.Sprintf(" ×%d groups", c.groups)
	}
	if c.cached {
		s += " (prefix cached)"
	}
	return s
}

// costFitCases varies one thing at a time around P=60, 4 items of 128 tokens.
func costFitCases() []costFitCase {
	var cs []costFitCase
	for _, p := range []int{20, 120, 400, 1000} {
		cs = append(cs, costFitCase{class: "prefix length", prefix: p, items: 4, itemLen: 128, groups: 1})
	}
	for _, l := range []int{16, 64, 256, 512, 1024} {
		cs = append(cs, costFitCase{class: "item length", prefix: 60, items: 4, itemLen: l, groups: 1})
	}
	for _, n := range []int{1, 8, 16} {
		cs = append(cs, costFitCase{class: "item count", prefix: 60, items: n, itemLen: 128, groups: 1})
	}
	for _, c := range []bool{false, true} {
		cs = append(cs, costFitCase{class: "prefix cache", prefix: 400, items: 4, itemLen: 64, groups: 1, cached: c})
	}
	for _, g := range []int{2, 4} {
		cs = append(cs, costFitCase{class: "merged groups", prefix: 60, items: 4, itemLen: 128, groups: g})
	}
	return cs
}

// BenchmarkCostModelFit checks the three-term cost model (package costmodel: seconds ≈
// a·tokens + b·pairs + c·batches) against the real engine: it times forward passes of the small
// qwen3_moe preset on one kernel thread across prefix length, item length, item count, prefix
// cache hit or miss and merged groups, fits a, b, c to all of them (costmodel.Fit, as a node
// does at start-up) and prints the relative error of each shape. Passes are timed by the
// process's CPU time (one kernel thread: what the pass would take on a core of its own, free of
// a shared machine's contention) and, for comparison, by wall time. It is a measurement, not a
// test: nothing is asserted. bench/results/README.md has a run and the command:
//
//	go test -run '^$' -bench CostModelFit -benchtime 1x ./scorer/model
//
// $RELEVANCE_COSTFIT_MODEL names a checkpoint folder to use instead of the generated one;
// $RELEVANCE_COSTFIT_REPS the repetitions of each shape (default 3).
func BenchmarkCostModelFit(b *testing.B) {
	dir := os.Getenv("RELEVANCE_COSTFIT_MODEL")
	if dir == "" {
		dir = benchModel(b, GenSpec{Arch: "qwen3_moe", Preset: "small", Seed: 1})
	}
	reps := 3
	if r := os.Getenv("RELEVANCE_COSTFIT_REPS"); r != "" {
		if _, err := fmt.Sscan(r, &reps); err != nil || reps < 1 {
			b.Fatalf("RELEVANCE_COSTFIT_REPS=%q: want a positive integer", r)
		}
	}
	threads := kernels.Threads()
	b.Cleanup(func() { kernels.SetThreads(threads) })
	e, err := Load(dir, Options{Threads: 1, PrefixCacheBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	// A long text to cut prompts from: any tokens cost the same, and distinct windows make
	// distinct prefixes (no accidental cache hits).
	text := strings.Join(benchDocs(40, 200), " ")
	g, err := e.Tokenize("", "q", []string{text}, scorer.TokenizeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	doc := g.Items[0]
	rng := rand.New(rand.NewPCG(21, 22))
	window := func(n int) []int32 {
		off := rng.IntN(len(doc) - n + 1)
		return doc[off : off+n]
	}
	build := func(c costFitCase) []*scorer.Group {
		var gs []*scorer.Group
		for range c.groups {
			gr := &scorer.Group{Prefix: window(c.prefix), Truncated: make([]int, c.items), TooLong: make([]bool, c.items)}
			for range c.items {
				gr.Items = append(gr.Items, window(c.itemLen))
			}
			gs = append(gs, gr)
		}
		return gs
	}
	run := func(gs []*scorer.Group) (scorer.ForwardStats, time.Duration, error) {
		c0 := cpuTime(b)
		st, err := e.Forward(context.Background(), gs)
		return st, cpuTime(b) - c0, err
	}

	cases := costFitCases()
	type meas struct {
		f       costmodel.Features
		y, wall []float64 // CPU and wall seconds of each repetition
	}
	res := make([]meas, len(cases))
	for range b.N {
		// Warm-up: fault the weights in, grow the engine's buffers to the largest pass.
		for _, c := range []costFitCase{cases[8], cases[len(cases)-1]} {
			if _, _, err := run(build(c)); err != nil {
				b.Fatal(err)
			}
		}
		for range reps { // repetitions interleaved, so that machine load drifts over every shape
			for i, c := range cases {
				gs := build(c)
				if c.cached {
					if _, _, err := run(gs); err != nil { // publishes the prefix
						b.Fatal(err)
					}
					gs = []*scorer.Group{{Prefix: gs[0].Prefix, Items: build(c)[0].Items, Truncated: gs[0].Truncated, TooLong: gs[0].TooLong}}
				}
				st, cpu, err := run(gs)
				if err != nil {
					b.Fatal(err)
				}
				if c.cached != gs[0].PrefixCached {
					b.Fatalf("%v: prefix cached %v", c, gs[0].PrefixCached)
				}
				res[i].f = st.Features
				res[i].y = append(res[i].y, cpu.Seconds())
				res[i].wall = append(res[i].wall, st.Duration.Seconds())
			}
		}
	}

	fitOf := func(ys func(meas) []float64) costmodel.FitResult {
		var samples []costmodel.Sample
		for _, r := range res {
			for _, y := range ys(r) {
				samples = append(samples, costmodel.Sample{Features: r.f, Seconds: y})
			}
		}
		fit, err := costmodel.Fit(samples)
		if err != nil {
			b.Fatal(err)
		}
		return fit
	}
	fit := fitOf(func(m meas) []float64 { return m.y })
	wallFit := fitOf(func(m meas) []float64 { return m.wall })
	var out strings.Builder
	for _, f := range []struct {
		name string
		fit  costmodel.FitResult
	}{{"CPU time", fit}, {"wall time", wallFit}} {
		fmt.Fprintf(&out, "fit to %-9s over %d passes (%d shapes × %d): a = %.3g s/token  b = %.3g s/pair  c = %.3g s/batch  σ(log) = %.3f  R² = %.4f  max |rel err| = %.1f%%\n",
			f.name, len(cases)*reps, len(cases), reps, f.fit.Coeffs.A, f.fit.Coeffs.B, f.fit.Coeffs.C, f.fit.Sigma, f.fit.R2, 100*f.fit.MaxRelErr)
	}
	median := func(xs []float64) (med, spread float64) {
		y := slices.Clone(xs)
		slices.Sort(y)
		med = y[len(y)/2]
		return med, (y[len(y)-1] - y[0]) / 2 / med
	}
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\tshape\ttokens\tpairs\tCPU ms (median)\tspread\tpredicted ms\tpredicted/CPU\twall ms (median)\twall fit/wall\t")
	for i, c := range cases {
		med, spread := median(res[i].y)
		wmed, _ := median(res[i].wall)
		p := fit.Coeffs.Seconds(res[i].f)
		fmt.Fprintf(tw, "%s\t%v\t%.0f\t%.3g\t%.1f\t±%.0f%%\t%.1f\t%.2f\t%.1f\t%.2f\t\n", c.class, c, res[i].f.Tokens, res[i].f.Pairs,
			1000*med, 100*spread, 1000*p, p/med, 1000*wmed, wallFit.Coeffs.Seconds(res[i].f)/wmed)
	}
	tw.Flush()
	// The error by class, for the summary: the mean of log(predicted/measured) per class.
	fmt.Fprintln(&out, "\nmean predicted/CPU time by class (geometric):")
	var classes []string
	byClass := map[string][]float64{}
	for i, c := range cases {
		if _, ok := byClass[c.class]; !ok {
			classes = append(classes, c.class)
		}
		for _, y := range res[i].y {
			byClass[c.class] = append(byClass[c.class], math.Log(fit.Coeffs.Seconds(res[i].f)/y))
		}
	}
	for _, c := range classes {
		s := 0.0
		for _, l := range byClass[c] {
			s += l
		}
		fmt.Fprintf(&out, "  %-14s %.2f\n", c, math.Exp(s/float64(len(byClass[c]))))
	}
	b.ReportMetric(fit.MaxRelErr, "max-rel-err")
	b.ReportMetric(fit.Sigma, "sigma-log")
	fmt.Print(out.String())
}

// cpuTime is the process's CPU time (user + system).
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
