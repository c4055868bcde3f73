// Package compare runs one seeded trace against several proxy configurations (split fixed/cost
// × route random/round_robin/least_loaded × hedging off/on) at several loads (fractions of the
// measured capacity) in front of the same scorer nodes, and tabulates p50, p99, p99.9 and
// goodput within the SLO side by side. With scorer nodes (emulated or real) every cell also gets
// the node side, from the nodes' and the proxy's /metrics read before and after it: node-seconds
// per request and the template, query-prefix and score-cache hit rates (NodeFigures).
//
// Every configuration sees the same requests at the same intended times (same trace seed, same
// arrival seed per load level); the proxy is restarted per configuration so no learned state
// carries over. Nodes are normally emulated (scorer serve --engine emulated), or fakes of another
// rerank server timed by the same cost profile (cluster nodes.kind: vllm, …), and everything
// this package prints or writes then says EMULATED.
//
// Besides fixed and cost, the split "whole" is the baseline of a team without our proxy: each
// request sent whole to one server (whole+round_robin: servers in turn). It runs as the fixed
// splitter with max_batch_items at least the trace's largest request (WholeBatchItems).
//
// Run is not safe for concurrent use with another Run on the same ports.
package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/bench/calibrate"
	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/load"
	"github.com/relevance-scoring/relevance/bench/report"
	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy"
)

// Config is one proxy configuration.
type Config struct {
	Split string `json:"split"`
	Route string `json:"route"`
	Hedge bool   `json:"hedge"`
}

// Name is split+route[+hedge].
func (c Config) Name() string {
	n := c.Split + "+" + c.Route
	if c.Hedge {
		n += "+hedge"
	}
	return n
}

// SplitWhole is the split of no split: one batch per request.
const SplitWhole = "whole"

// ParseConfig reads a Name back.
func ParseConfig(s string) (Config, error) {
	parts := strings.Split(s, "+")
	if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "hedge") {
		return Config{}, fmt.Errorf("config %q: want split+route[+hedge], e.g. cost+least_loaded+hedge", s)
	}
	c := Config{Split: parts[0], Route: parts[1], Hedge: len(parts) == 3}
	if c.Split != SplitWhole && !slices.Contains(proxy.SplitStrategies(), c.Split) {
		return Config{}, fmt.Errorf("config %q: split must be one of %s or %s", s, strings.Join(proxy.SplitStrategies(), ", "), SplitWhole)
	}
	if !slices.Contains(proxy.RouteStrategies(), c.Route) {
		return Config{}, fmt.Errorf("config %q: route must be one of %s", s, strings.Join(proxy.RouteStrategies(), ", "))
	}
	return c, nil
}

// Baseline and Best are the two configurations the headline compares (Options.Baseline can name
// another baseline).
var (
	Baseline = Config{Split: "fixed", Route: "random"}
	Best     = Config{Split: "cost", Route: "least_loaded"}
	// Whole is the baseline without our proxy's planning: each request whole to the next server.
	Whole = Config{Split: SplitWhole, Route: "round_robin"}
)

// WholeBatchItems is the max_batch_items that makes the fixed splitter send every request of
// tr as one batch: its largest request's items.
func WholeBatchItems(tr *workload.Trace) int {
	n := 1
	for i := range tr.Len() {
		n = max(n, len(tr.At(i).Items))
	}
	return n
}

// proxyFor is the cluster's proxy settings for configuration cfg; wholeItems is
// WholeBatchItems of the trace (for split whole).
func proxyFor(base cluster.Proxy, cfg Config, wholeItems int) cluster.Proxy {
	p := base
	p.Split, p.Route, p.Hedge = cfg.Split, cfg.Route, cfg.Hedge
	if cfg.Split == SplitWhole {
		p.Split = "fixed"
		p.Args = append(slices.Clone(base.Args), "--max-batch-items", strconv.Itoa(wholeItems))
	}
	return p
}

// AllConfigs is the full grid: 2 splits × 3 routes × hedging off/on (whole is not in it: name
// it, e.g. whole+round_robin).
func AllConfigs() []Config {
	var out []Config
	for _, h := range []bool{false, true} {
		for _, s := range []string{"fixed", "cost"} {
			for _, r := range []string{"random", "round_robin", "least_loaded"} {
				out = append(out, Config{Split: s, Route: r, Hedge: h})
			}
		}
	}
	return out
}

// Options is one comparison.
type Options struct {
	Cluster cluster.Config // the nodes (emulated or real) and binaries; Proxy fields are overridden
	Configs []Config       // nil: AllConfigs()
	Loads   []float64      // fractions of capacity; nil: 0.5, 0.7, 0.9
	Trace   *workload.Trace
	// GrowTrace regenerates Trace (same spec and seed) with more distinct requests when a cell
	// would send more than it holds: an open-loop cell cycles through the trace, and the proxy's
	// score cache answers the repeats, so the cell would measure the cache rather than the nodes
	// (a 64-node run saw 65–82 % of items answered from it). Off when the trace size was chosen.
	GrowTrace bool
	Seed      uint64
	Duration  time.Duration // per run, warm-up included
	Warmup    time.Duration
	SLO       time.Duration
	Timeout   time.Duration // per request; 0: 10 s
	// ProxySLO is the proxy's default request deadline (--slo of proxy serve); 0 means 2×SLO.
	// Above the goodput SLO on purpose: a deadline at the SLO turns every slow request into a
	// 504 at exactly the SLO, and the latency percentiles then only describe the survivors.
	ProxySLO time.Duration
	// Capacity in requests/s; 0 measures it with a closed-loop probe of ProbeConfig.
	Capacity         float64
	ProbeConfig      Config
	ProbeDuration    time.Duration
	ProbeConcurrency int
	// GRPC targets Ranker.Score instead of HTTP /v1/rerank.
	GRPC bool
	// Profile, when set, gives a model-based capacity estimate to print beside the probe's.
	Profile *costmodel.Profile
	// Baseline is what the headline compares Best with; zero: the package's Baseline
	// (fixed+random).
	Baseline Config
	// FreshCells restarts the nodes and the proxy before every cell (configuration × load), so
	// that each starts with cold prefix and score caches. Without it the nodes serve the whole
	// comparison and the proxy every load of one configuration, and since every cell replays the
	// trace from its start, a later cell finds the requests of the earlier ones cached: on a
	// workload that repeats itself, later configurations are favoured.
	FreshCells bool
	Out        string    // folder for results; "" writes nothing
	Log        io.Writer // progress
}

// Row is one (configuration, load) run.
type Row struct {
	Config   string  `json:"config"`
	Load     float64 `json:"load"`
	RateRPS  float64 `json:"rate_rps"`
	Requests int64   `json:"requests"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	P999ms   float64 `json:"p999_ms"`
	// P50ms … P999ms are of the successful requests only: a configuration whose slowest
	// requests fail (504 at the proxy deadline) reads fast for it. P99AllMs is p99 over every
	// measured request, each failure counted as the client's timeout (load.Result.P99AllMs);
	// 0 in older reports.
	P99AllMs float64 `json:"p99_all_ms,omitempty"`
	// GoodputRPS and GoodputRatio count successful replies within the SLO.
	GoodputRPS    float64          `json:"goodput_rps"`
	GoodputRatio  float64          `json:"goodput_ratio"`
	ThroughputRPS float64          `json:"throughput_rps"`
	Errors        int64            `json:"errors"`
	ErrorsBy      map[string]int64 `json:"errors_by_kind"`
	CDF           []load.Quantile  `json:"cdf"`
	// Node is the node side of the cell; nil when the nodes' metrics could not be read (fake
	// nodes of another server, older reports).
	Node *NodeFigures `json:"node,omitempty"`
}

// Report is a whole comparison.
type Report struct {
	Emulated bool `json:"emulated"`
	Nodes    int  `json:"nodes"`
	// NodeKind is the nodes' kind: scorer ("" in older reports) or the server a fake node
	// fakes (vllm, …).
	NodeKind string `json:"node_kind,omitempty"`
	// NodeConcurrency is how many calls a fake node processes at a time (0 for scorer nodes).
	NodeConcurrency int `json:"node_concurrency,omitempty"`
	// Baseline is the headline's baseline configuration ("" in older reports: fixed+random).
	Baseline  string  `json:"baseline,omitempty"`
	Workload  string  `json:"workload"`
	TraceSeed uint64  `json:"trace_seed"`
	MeanItems float64 `json:"mean_items_per_request"`
	// TraceSize is the trace's distinct requests, as the cells replayed it.
	TraceSize        int     `json:"trace_size"`
	CapacityRPS      float64 `json:"capacity_rps"`
	CapacityMethod   string  `json:"capacity_method"`
	ModelCapacityRPS float64 `json:"model_capacity_rps,omitempty"`
	DurationSec      float64 `json:"duration_s"`
	WarmupSec        float64 `json:"warmup_s"`
	SLOms            float64 `json:"slo_ms"`
	ProxySLOms       float64 `json:"proxy_deadline_ms"`
	Machine          string  `json:"machine"`
	StartedAt        string  `json:"started_at"`
	WallSec          float64 `json:"wall_s"`
	// FreshCells: every cell ran on freshly started nodes and proxy (Options.FreshCells).
	FreshCells bool   `json:"fresh_cells,omitempty"`
	Rows       []Row  `json:"rows"`
	Headline   []Gain `json:"headline"`
	// Command is the command line that produced the report (set by the caller).
	Command string `json:"command,omitempty"`
}

// Gain is how Best beats Baseline at one load.
type Gain struct {
	Load float64 `json:"load"`
	// P99Ratio and P999Ratio are baseline/best (×2 means best's tail is half as long).
	P99Ratio  float64 `json:"p99_ratio"`
	P999Ratio float64 `json:"p999_ratio"`
	// GoodputPoints is best's goodput ratio minus baseline's, in percentage points.
	GoodputPoints  float64 `json:"goodput_points"`
	BaselineP99ms  float64 `json:"baseline_p99_ms"`
	BestP99ms      float64 `json:"best_p99_ms"`
	BaselineP999ms float64 `json:"baseline_p999_ms"`
	BestP999ms     float64 `json:"best_p999_ms"`
	BaselineGood   float64 `json:"baseline_goodput_ratio"`
	BestGood       float64 `json:"best_goodput_ratio"`
	// BaselineNoSuccess and BestNoSuccess: that side had no successful request, so it has no
	// latency (its p99 fields are 0 and the ratios undefined, written as 0).
	BaselineNoSuccess bool `json:"baseline_no_success,omitempty"`
	BestNoSuccess     bool `json:"best_no_success,omitempty"`
	// BaselineErrors and BestErrors are the failed requests; the p99s with each failure counted
	// at the client's timeout (Row.P99AllMs) are what the tails compare when either failed.
	BaselineErrors   int64   `json:"baseline_errors,omitempty"`
	BestErrors       int64   `json:"best_errors,omitempty"`
	BaselineP99AllMs float64 `json:"baseline_p99_all_ms,omitempty"`
	BestP99AllMs     float64 `json:"best_p99_all_ms,omitempty"`
}

func (o *Options) defaults() error {
	if o.Trace == nil {
		return errors.New("compare: no trace")
	}
	if o.Configs == nil {
		o.Configs = AllConfigs()
	}
	if o.Loads == nil {
		o.Loads = []float64{0.5, 0.7, 0.9}
	}
	for _, l := range o.Loads {
		if !(l > 0) || l > 2 {
			return fmt.Errorf("compare: --loads: each must be in (0, 2], got %v", l)
		}
	}
	if o.Duration <= 0 {
		return fmt.Errorf("compare: --duration must be > 0, got %v", o.Duration)
	}
	if o.Warmup < 0 || o.Warmup >= o.Duration {
		return fmt.Errorf("compare: --warmup must be in [0, duration), got %v", o.Warmup)
	}
	if o.SLO == 0 {
		o.SLO = 500 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.ProxySLO == 0 {
		o.ProxySLO = 2 * o.SLO
	}
	if o.ProbeConfig == (Config{}) {
		o.ProbeConfig = Best
	}
	if o.Baseline == (Config{}) {
		o.Baseline = Baseline
	}
	if o.ProbeDuration == 0 {
		o.ProbeDuration = 8 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Run performs the comparison: start the nodes, measure capacity, then for every
// configuration restart the proxy and run every load level.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	label := ""
	if o.Cluster.Emulated() {
		label = "EMULATED "
	}
	logf := func(format string, a ...any) { fmt.Fprintf(o.Log, label+format+"\n", a...) }
	c, err := cluster.New(o.Cluster, o.Log)
	if err != nil {
		return nil, err
	}
	defer func() { c.Stop() }() // c changes with FreshCells
	kind := o.Cluster.Nodes.Kind
	if kind == "" {
		kind = cluster.KindScorer
	}
	if o.Cluster.Nodes.Fake() {
		logf("compare: starting %d fake %s nodes (bench fakerank: %s's API, latency from cost profile %s) …", o.Cluster.Nodes.Count, kind, kind, o.Cluster.Nodes.CostProfile)
	} else {
		logf("compare: starting %d scorer nodes …", o.Cluster.Nodes.Count)
	}
	if err := c.StartNodes(ctx); err != nil {
		return nil, fmt.Errorf("start nodes: %w", err)
	}
	wholeItems := WholeBatchItems(o.Trace)
	conc := 0
	if o.Cluster.Nodes.Fake() {
		conc = max(1, o.Cluster.Nodes.Concurrency)
	}
	rep := &Report{
		Emulated: o.Cluster.Emulated(), Nodes: o.Cluster.Nodes.Count, NodeKind: kind, NodeConcurrency: conc, Baseline: o.Baseline.Name(), Workload: o.Trace.Spec().Name,
		TraceSeed: o.Seed, MeanItems: o.Trace.MeanItems(), DurationSec: o.Duration.Seconds(), WarmupSec: o.Warmup.Seconds(),
		SLOms: float64(o.SLO) / 1e6, ProxySLOms: float64(o.ProxySLO) / 1e6, StartedAt: began.UTC().Format(time.RFC3339), Machine: calibrate.Machine(),
		FreshCells: o.FreshCells,
	}
	// restartNodes replaces the nodes by fresh ones (FreshCells): new processes, cold caches.
	restartNodes := func() error {
		c.Stop()
		if c, err = cluster.New(o.Cluster, o.Log); err != nil {
			return err
		}
		if err := c.StartNodes(ctx); err != nil {
			return fmt.Errorf("restart nodes: %w", err)
		}
		return nil
	}
	// scorerNodes are the HTTP addresses whose /metrics give a cell's node side (fake nodes of
	// another server export none of the scorer's counters).
	scorerNodes := func() []string {
		var a []string
		for _, n := range c.Nodes() {
			if n.Kind == cluster.KindScorer || n.Kind == "" {
				a = append(a, n.HTTPAddr)
			}
		}
		return a
	}
	if o.Profile != nil {
		rep.ModelCapacityRPS = ModelCapacity(o.Trace, o.Profile.Coeffs, o.Cluster.Nodes.Count)
		logf("compare: cost-model capacity estimate (%d nodes, each request split over all, no merging): %.1f req/s", o.Cluster.Nodes.Count, rep.ModelCapacityRPS)
	}
	proxyCfg := func(cfg Config) (cluster.Proxy, error) {
		hp, err := cluster.FreePort("127.0.0.1")
		if err != nil {
			return cluster.Proxy{}, err
		}
		gp, err := cluster.FreePort("127.0.0.1")
		if err != nil {
			return cluster.Proxy{}, err
		}
		p := proxyFor(o.Cluster.Proxy, cfg, wholeItems)
		p.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
		p.GRPCAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(gp))
		p.SLO = o.ProxySLO
		return p, nil
	}
	targetOf := func(p cluster.Proxy) string {
		if o.GRPC {
			return "grpc://" + p.GRPCAddr
		}
		return "http://" + p.HTTPAddr + "/v1/rerank"
	}

	rep.CapacityRPS, rep.CapacityMethod = o.Capacity, "given (--capacity)"
	if o.Capacity <= 0 {
		conc := o.ProbeConcurrency
		if conc <= 0 {
			conc = max(4, o.Cluster.Nodes.Count/2)
		}
		p, err := proxyCfg(o.ProbeConfig)
		if err != nil {
			return nil, err
		}
		// Capacity is what the cluster completes when kept busy. Under the SLO deadline an
		// overloaded closed loop wastes work on requests that then miss it, which measures the
		// collapse rather than the capacity, so the probe's proxy gets the client timeout.
		p.SLO = o.Timeout
		if err := c.StartProxy(ctx, p, "proxy-probe"); err != nil {
			return nil, fmt.Errorf("start proxy: %w", err)
		}
		// The closed loop cycles through the trace: the probe bypasses the proxy's score cache,
		// or its repeats would be answered from it and measure the cache, not the nodes.
		res, err := runOne(ctx, o, targetOf(p), 0, conc, o.ProbeDuration, o.ProbeDuration/4, load.NoScoreCache())
		c.StopProxy()
		if err != nil {
			return nil, err
		}
		if res.ThroughputRPS <= 0 {
			return nil, fmt.Errorf("capacity probe: no successful request (errors %v); see the logs in %s", res.ErrorsBy, o.Cluster.LogDir)
		}
		rep.CapacityRPS = res.ThroughputRPS
		rep.CapacityMethod = fmt.Sprintf("closed-loop probe: %s, concurrency %d, %v, proxy deadline %v, score cache bypassed (p50 %.0f ms, errors %d)",
			o.ProbeConfig.Name(), conc, o.ProbeDuration, o.Timeout, res.P50ms, res.Errors)
		logf("compare: capacity %.2f req/s (%s)", rep.CapacityRPS, rep.CapacityMethod)
	}
	if o.GrowTrace {
		if need := cellRequests(o, rep.CapacityRPS); need > o.Trace.Len() {
			spec := o.Trace.Spec()
			spec.TraceSize = need
			tr, err := workload.New(spec, o.Seed)
			if err != nil {
				return nil, fmt.Errorf("grow trace: %w", err)
			}
			logf("compare: trace grown from %d to %d distinct requests (the most a cell sends, +20 %%), so no cell repeats one", o.Trace.Len(), need)
			o.Trace = tr
			wholeItems = WholeBatchItems(o.Trace)
			rep.MeanItems = o.Trace.MeanItems()
		}
	}
	rep.TraceSize = o.Trace.Len()

	for i, cfg := range o.Configs {
		var p cluster.Proxy
		for j, l := range o.Loads {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			if j == 0 || o.FreshCells {
				c.StopProxy()
				if o.FreshCells {
					if err := restartNodes(); err != nil {
						return nil, err
					}
				}
				if p, err = proxyCfg(cfg); err != nil {
					return nil, err
				}
				if err := c.StartProxy(ctx, p, "proxy-"+cfg.Name()); err != nil {
					return nil, fmt.Errorf("start proxy %s: %w", cfg.Name(), err)
				}
			}
			rate := l * rep.CapacityRPS
			sc := newScraper(scorerNodes())
			before, serr := sc.snapshot(ctx, p.HTTPAddr)
			res, err := runOne(ctx, o, targetOf(p), rate, 0, o.Duration, o.Warmup)
			if err != nil {
				return nil, err
			}
			after, aerr := sc.settled(ctx, p.HTTPAddr, 3*time.Second)
			if serr = errors.Join(serr, aerr); serr != nil {
				logf("compare: reading /metrics for the node side: %v", serr)
			}
			// Open loop: the cell sent its whole schedule, warm-up included (as many requests as
			// the counters' difference covers).
			node := nodeFigures(before, after, int64(len(load.Schedule(rate, o.Duration, o.Seed))))
			row := Row{Config: cfg.Name(), Load: l, RateRPS: rate, Requests: res.Requests, P50ms: res.P50ms, P99ms: res.P99ms,
				P999ms: res.P999ms, P99AllMs: res.P99AllMs, GoodputRPS: res.GoodputRPS, GoodputRatio: res.GoodputRatio, ThroughputRPS: res.ThroughputRPS,
				Errors: res.Errors, ErrorsBy: res.ErrorsBy, CDF: res.CDF, Node: node}
			rep.Rows = append(rep.Rows, row)
			logf("compare: [%2d/%d] %-26s load %3.0f%% (%6.2f req/s): p50 %7.1f  p99 %7.1f  p99.9 %7.1f ms  goodput %5.1f%%  errors %d%s",
				i+1, len(o.Configs), cfg.Name(), 100*l, rate, res.P50ms, res.P99ms, res.P999ms, 100*res.GoodputRatio, res.Errors, node.text())
			if o.Out != "" {
				res.Emulated = rep.Emulated
				dir := filepath.Join(o.Out, "runs", fmt.Sprintf("%s-%02.0f", cfg.Name(), 100*l))
				if err := report.WriteJSON(filepath.Join(dir, "result.json"), res); err != nil {
					return nil, err
				}
			}
		}
		c.StopProxy()
	}
	rep.Headline = HeadlineVs(rep.Rows, o.Baseline, Best)
	rep.WallSec = time.Since(began).Seconds()
	return rep, nil
}

func runOne(ctx context.Context, o Options, target string, rate float64, conc int, d, warm time.Duration, opts ...load.TargetOption) (*load.Result, error) {
	maxConns := conc
	if rate > 0 {
		maxConns = 1000
	}
	tg, err := load.NewTarget(target, maxConns, opts...)
	if err != nil {
		return nil, err
	}
	defer tg.Close()
	return load.Run(ctx, load.Config{Target: tg, Trace: o.Trace, Rate: rate, Concurrency: conc, Duration: d, Warmup: warm,
		SLO: o.SLO, Timeout: o.Timeout, Seed: o.Seed})
}

// ModelCapacity is the request rate n nodes sustain at perfect balance under coefficients c,
// when each request is split into n batches (prefix paid once per batch): n / mean seconds per
// request. It ignores the proxy and queueing: an upper bound.
func ModelCapacity(tr *workload.Trace, c costmodel.Coeffs, n int) float64 {
	const prefix = 60 // template + instruction + short query, tokens
	total := 0.0
	for i := range tr.Len() {
		r := tr.At(i)
		batches := min(n, len(r.Items))
		f := costmodel.Features{Batches: float64(batches)}
		for range batches {
			f = f.Add(costmodel.PrefixFeatures(prefix))
		}
		for _, l := range r.ApproxTokens {
			f = f.Add(costmodel.ItemFeatures(prefix, l+12))
		}
		total += c.Seconds(f)
	}
	mean := total / float64(tr.Len())
	if mean <= 0 {
		return math.Inf(1)
	}
	return float64(n) / mean
}

// Headline compares Best with Baseline at every load where both ran.
func Headline(rows []Row) []Gain { return HeadlineVs(rows, Baseline, Best) }

// HeadlineVs compares best with baseline at every load where both ran.
func HeadlineVs(rows []Row, baseline, best Config) []Gain {
	find := func(name string, l float64) *Row {
		for i := range rows {
			if rows[i].Config == name && rows[i].Load == l {
				return &rows[i]
			}
		}
		return nil
	}
	var out []Gain
	seen := map[float64]bool{}
	for _, r := range rows {
		if seen[r.Load] {
			continue
		}
		seen[r.Load] = true
		b, w := find(baseline.Name(), r.Load), find(best.Name(), r.Load)
		if b == nil || w == nil {
			continue
		}
		g := Gain{Load: r.Load, P99Ratio: ratio(b.P99ms, w.P99ms), P999Ratio: ratio(b.P999ms, w.P999ms),
			GoodputPoints: 100 * (w.GoodputRatio - b.GoodputRatio), BaselineP99ms: b.P99ms, BestP99ms: w.P99ms,
			BaselineP999ms: b.P999ms, BestP999ms: w.P999ms, BaselineGood: b.GoodputRatio, BestGood: w.GoodputRatio,
			BaselineNoSuccess: noLatency(*b), BestNoSuccess: noLatency(*w),
			BaselineErrors: b.Errors, BestErrors: w.Errors, BaselineP99AllMs: b.P99AllMs, BestP99AllMs: w.P99AllMs}
		if g.BaselineNoSuccess || g.BestNoSuccess {
			// No latency on one side: a ratio against its 0 would read as a gain (or loss) of 0×.
			g.P99Ratio, g.P999Ratio = 0, 0
		}
		out = append(out, g)
	}
	return out
}

// noLatency reports a row without a successful request: its latency fields are all 0 (a success
// takes some time, so its p50 is > 0).
func noLatency(r Row) bool { return r.P50ms <= 0 && r.P99ms <= 0 && r.P999ms <= 0 }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// cellRequests is about the most requests one cell sends: its Poisson arrivals at the highest load
// for the whole run, +20 % (bounded by the workload's own limit).
func cellRequests(o Options, capacity float64) int {
	hi := 0.0
	for _, l := range o.Loads {
		hi = max(hi, l)
	}
	n := math.Ceil(1.2*hi*capacity*o.Duration.Seconds()) + 1
	return int(min(n, 1_000_000))
}
