package compare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/report"
)

func (r *Report) label() string {
	if r.Emulated {
		return "EMULATED"
	}
	return "REAL NODES"
}

// Table is the side-by-side table: one row per (configuration, load). When the nodes' metrics
// were read, four columns give the node side (NodeFigures): node-seconds per request and the
// template, query-prefix and score-cache hit rates.
func (r *Report) Table(md bool) string {
	header := []string{"config", "load", "req/s", "n", "p50 ms", "p99 ms", "p99.9 ms", fmt.Sprintf("goodput≤%.0fms", r.SLOms), "good req/s", "errors"}
	// p50 … p99.9 are of the successes; when any run failed requests, a column gives p99 with
	// each failure counted at the client's timeout, or the failures would make a run read fast.
	failed := slices.ContainsFunc(r.Rows, func(x Row) bool { return x.Errors > 0 })
	if failed {
		header = append(header, "p99 all ms")
	}
	node := slices.ContainsFunc(r.Rows, func(x Row) bool { return x.Node != nil })
	if node {
		header = append(header, "node-s/req", "batches/req", "template hits", "query-prefix hits", "score-cache hits")
	}
	rows := append([]Row(nil), r.Rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Load < rows[j].Load })
	var cells [][]string
	for _, x := range rows {
		p50, p99, p999 := fmt.Sprintf("%.1f", x.P50ms), fmt.Sprintf("%.1f", x.P99ms), fmt.Sprintf("%.1f", x.P999ms)
		if x.Requests == x.Errors { // no successful request: no latency to show
			p50, p99, p999 = "n/a", "n/a", "n/a"
		}
		row := []string{x.Config, fmt.Sprintf("%.0f%%", 100*x.Load), fmt.Sprintf("%.2f", x.RateRPS), fmt.Sprint(x.Requests),
			p50, p99, p999,
			fmt.Sprintf("%.1f%%", 100*x.GoodputRatio), fmt.Sprintf("%.2f", x.GoodputRPS), errString(x)}
		if failed {
			all := "-" // older reports lack it
			if x.P99AllMs > 0 {
				all = fmt.Sprintf("%.1f", x.P99AllMs)
			}
			row = append(row, all)
		}
		if node {
			if f := x.Node; f != nil {
				row = append(row, fmt.Sprintf("%.3f", f.NodeSecondsPerRequest), fmt.Sprintf("%.2f", f.BatchesPerRequest),
					percent(f.TemplateHitRate), percent(f.QueryPrefixHitRate), percent(f.ScoreCacheHitRate))
			} else {
				row = append(row, "n/a", "n/a", "n/a", "n/a", "n/a")
			}
		}
		cells = append(cells, row)
	}
	return report.Table(header, cells, md)
}

func errString(x Row) string {
	if x.Errors == 0 {
		return "0"
	}
	var ks []string
	for k, n := range x.ErrorsBy {
		ks = append(ks, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(ks)
	return fmt.Sprintf("%d (%s)", x.Errors, strings.Join(ks, " "))
}

// HeadlineText says by how much Best beats the baseline.
func (r *Report) HeadlineText() string {
	var b strings.Builder
	base := r.Baseline
	if base == "" {
		base = Baseline.Name()
	}
	for _, g := range r.Headline {
		// A side without a successful request has no latency: n/a, and no ratio.
		lat := func(from, to, ratio float64) string {
			switch {
			case g.BaselineNoSuccess && g.BestNoSuccess:
				return "n/a → n/a"
			case g.BaselineNoSuccess:
				return fmt.Sprintf("n/a → %.1f ms", to)
			case g.BestNoSuccess:
				return fmt.Sprintf("%.1f ms → n/a", from)
			}
			return fmt.Sprintf("%.1f → %.1f ms (%.2f×)", from, to, ratio)
		}
		fmt.Fprintf(&b, "%s at %.0f%% load: %s vs %s: p99 %s, p99.9 %s, goodput≤%.0fms %.1f%% → %.1f%% (%+.1f points)",
			r.label(), 100*g.Load, Best.Name(), base, lat(g.BaselineP99ms, g.BestP99ms, g.P99Ratio), lat(g.BaselineP999ms, g.BestP999ms, g.P999Ratio),
			r.SLOms, 100*g.BaselineGood, 100*g.BestGood, g.GoodputPoints)
		if g.BaselineErrors+g.BestErrors > 0 && (g.BaselineP99AllMs > 0 || g.BestP99AllMs > 0) {
			// The p99s above are of the successes: with failures, also the p99 that counts them.
			all := func(v float64) string {
				if v <= 0 {
					return "n/a"
				}
				return fmt.Sprintf("%.1f", v)
			}
			fmt.Fprintf(&b, "; failed %d vs %d, p99 with failures at the timeout %s → %s ms",
				g.BaselineErrors, g.BestErrors, all(g.BaselineP99AllMs), all(g.BestP99AllMs))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Summary is the header printed above the table.
func (r *Report) Summary() string {
	trace := ""
	if r.TraceSize > 0 {
		trace = fmt.Sprintf(", %d distinct requests", r.TraceSize)
	}
	s := fmt.Sprintf("%s comparison: %d %s, workload %s (trace seed %d%s, %.1f items/request), capacity %.2f req/s (%s), %gs per run (%gs warm-up), goodput SLO %.0f ms, proxy deadline %.0f ms\n",
		r.label(), r.Nodes, r.nodesText(), r.Workload, r.TraceSeed, trace, r.MeanItems, r.CapacityRPS, r.CapacityMethod, r.DurationSec, r.WarmupSec, r.SLOms, r.ProxySLOms)
	if r.FreshCells {
		s += "every cell on freshly started nodes and proxy (cold prefix and score caches)\n"
	}
	if r.ModelCapacityRPS > 0 {
		s += fmt.Sprintf("cost-model capacity estimate (each request split over every node, no batch merging on a node): %.2f req/s\n", r.ModelCapacityRPS)
	}
	return s
}

// nodesText names the nodes: scorer nodes, or fakes of a server.
func (r *Report) nodesText() string {
	if r.NodeKind == "" || r.NodeKind == cluster.KindScorer {
		return "scorer nodes"
	}
	return fmt.Sprintf("fake %s nodes (bench fakerank: %s's HTTP API, %d call(s) at a time, each timed by the cost profile)", r.NodeKind, r.NodeKind, max(1, r.NodeConcurrency))
}

// Write puts results.json, results.md and the plots into dir. command is recorded when the
// report has none yet.
func (r *Report) Write(dir, command string) error {
	if r.Command == "" {
		r.Command = command
	}
	command = r.Command
	if err := report.WriteJSON(filepath.Join(dir, "results.json"), r); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# %s proxy comparison\n\n", r.label())
	fmt.Fprintf(&md, "Command:\n\n```\n%s\n```\n\n", command)
	fmt.Fprintf(&md, "%s\nStarted %s on %s; wall time %.0f s.\n\n", strings.TrimSpace(r.Summary()), r.StartedAt, r.Machine, r.WallSec)
	if len(r.Headline) > 0 {
		fmt.Fprintf(&md, "## Headline\n\n")
		for _, l := range strings.Split(strings.TrimSpace(r.HeadlineText()), "\n") {
			fmt.Fprintf(&md, "- %s\n", l)
		}
		md.WriteString("\n")
	}
	fmt.Fprintf(&md, "## Table\n\n`n` is the number of measured requests per run: p99.9 of fewer than 1000 requests is close to the maximum.\n\n")
	if slices.ContainsFunc(r.Rows, func(x Row) bool { return x.Errors > 0 }) {
		md.WriteString("p50, p99 and p99.9 are of the successful requests only; `p99 all` is p99 over every measured request, each failure counted as the client's timeout.\n\n")
	}
	if slices.ContainsFunc(r.Rows, func(x Row) bool { return x.Node != nil }) {
		md.WriteString("The node side is read from the nodes' and the proxy's /metrics before and after each run, so it covers the warm-up too: " +
			"`node-s/req` is the nodes' forward seconds summed over nodes ÷ the requests sent (warm-up included), `batches/req` the ScoreBatch calls they answered ÷ the same; " +
			"hit rates are hits ÷ lookups: templates (looked up when a whole prefix missed), whole query prefixes, the proxy's score cache (items; n/a without one).\n\n")
	}
	fmt.Fprintf(&md, "%s\n", r.Table(true))
	md.WriteString("![p99 by load](p99-by-load.png)\n![goodput by load](goodput-by-load.png)\n![latency percentiles at the highest load](cdf-highest-load.png)\n")
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return r.plots(dir)
}

func (r *Report) plots(dir string) error {
	var names []string
	idx := map[string]int{}
	var xs, p99, good [][]float64
	for _, x := range r.Rows {
		i, ok := idx[x.Config]
		if !ok {
			i = len(names)
			idx[x.Config] = i
			names = append(names, x.Config)
			xs, p99, good = append(xs, nil), append(p99, nil), append(good, nil)
		}
		xs[i] = append(xs[i], 100*x.Load)
		p99[i] = append(p99[i], x.P99ms)
		good[i] = append(good[i], 100*x.GoodputRatio)
	}
	if err := report.LinePlot(filepath.Join(dir, "p99-by-load.png"), r.label()+": p99 latency by load", "load (% of measured capacity)", "p99 latency (ms)", true, names, xs, p99); err != nil {
		return err
	}
	if err := report.LinePlot(filepath.Join(dir, "goodput-by-load.png"), fmt.Sprintf("%s: goodput within %.0f ms", r.label(), r.SLOms), "load (% of measured capacity)", "requests within SLO (%)", false, names, xs, good); err != nil {
		return err
	}
	top := 0.0
	for _, x := range r.Rows {
		top = max(top, x.Load)
	}
	var series []report.Series
	for _, x := range r.Rows {
		if x.Load == top {
			series = append(series, report.Series{Name: x.Config, CDF: x.CDF})
		}
	}
	return report.PercentilePlot(filepath.Join(dir, "cdf-highest-load.png"), fmt.Sprintf("%s: latency percentiles at %.0f%% load", r.label(), 100*top), series)
}

// Load reads a report written by Write (to re-render it).
func Load(dir string) (*Report, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, fmt.Errorf("load report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("load report %s: %w", dir, err)
	}
	return &r, nil
}
