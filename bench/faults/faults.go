// Package faults is the fault suite (`bench faults`): it starts a local cluster of scorer nodes
// with fault injection and a proxy with its defaults (package cluster), measures the cluster's
// capacity with a short closed-loop probe, then runs scenarios against it — node loss, slow and
// stalled nodes, overload, SIGTERM of a node and of the proxy, malformed input, memory growth
// under many distinct queries and, with real nodes, a crash mid-batch with the prefix cache. Each
// scenario is bounded in time, measures its figures and is judged PASS, FAIL or SKIP against
// criteria stated beside them (Result.Criteria).
//
// Load is open-loop (Poisson, package load) at a share of the measured capacity. Every load
// scenario draws fresh requests (its own trace seed, a trace as long as the run), except those
// judged against the baseline's p99, which replay the baseline's (see startLoad) with queries of
// their own: the same items come back, but never under the same query, so no cache between the
// client and the nodes (the proxy's score cache, a node's prefix cache) answers in the nodes'
// place. Faults are injected through the nodes' /debug/fault hook (scorer serve
// --fault-injection) and with signals to the children's process ids; the cluster's supervisor
// restarts a node that exits. A node a scenario has made slow or stopped is restarted afterwards
// (SIGTERM; the supervisor brings it back), so that what it learned of its own speed does not
// leak into the next scenario.
//
// Run is not safe for concurrent use with another Run on the same ports or bin folder; it starts
// and stops its own children.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/load"
	"github.com/relevance-scoring/relevance/bench/workload"
)

// Options configure a run. The zero value of every field but Cluster and Workload has a default.
type Options struct {
	// Cluster is what to start: bin folder, log folder, nodes (count, engine, cost profile,
	// threads) and the proxy (flags left empty keep the proxy's defaults). Run adds
	// --fault-injection to every node and gives every child free ports on 127.0.0.1.
	Cluster cluster.Config
	// Workload is the spec every request is drawn from.
	Workload workload.Spec
	// Seed is the first trace and arrival seed; each load gets the next one. 0 means 1.
	Seed uint64
	// SLO is the latency goodput counts within and the proxy's default budget; 0 means 500ms.
	SLO time.Duration
	// Timeout bounds each client request; 0 means 5s.
	Timeout time.Duration
	// Capacity in requests/s; 0 measures it with a closed-loop probe.
	Capacity float64
	// ProbeDuration is the probe's length (0: 8s, quick 3s); ProbeConcurrency its workers (0: the
	// node count).
	ProbeDuration    time.Duration
	ProbeConcurrency int
	// Scenarios to run, by name (see Names); empty means all, in the suite's order.
	Scenarios []string
	// Quick shortens every scenario to a few seconds (tests, smoke runs).
	Quick bool
	// RSSMargin is the memory scenario's allowance for RSS growth beyond the caches' budgets; 0
	// means 64 MiB.
	RSSMargin int64
	// ProxyCacheBytes is the proxy's score-cache budget that the proxy's RSS may grow by; 0 means
	// 64 MiB (the proxy's default score_cache.budget_bytes).
	ProxyCacheBytes int64
	// MemoryDuration is the memory scenario's load; 0 means 60s (quick: 5s).
	MemoryDuration time.Duration
	// NodeCacheBytes is the real nodes' prefix-cache budget that their RSS may grow by; 0 means
	// 256 MiB (the scorer's default prefix_cache_bytes). Emulated nodes hold no KV, so it is not
	// allowed for them.
	NodeCacheBytes int64
	// PrefixCrashRealNodes is how many real nodes the prefix-crash scenario starts beside an
	// emulated cluster (the cluster config's model, threads and calibration cache, its own
	// proxy), since an emulated node's scores do not depend on prefix KV; 0 skips the scenario
	// on an emulated cluster. On a real cluster the scenario runs on it.
	PrefixCrashRealNodes int
	// Log receives progress; nil discards it.
	Log io.Writer
	// OnResult, when set, is called with each scenario's result as soon as it is judged.
	OnResult func(Result)
}

// timing is every scenario's length.
type timing struct {
	load, warmup time.Duration // a load scenario and its unmeasured start
	killAt       time.Duration // when the fault hits, after the warm-up
	short        time.Duration // the SIGTERM scenarios
	overload     time.Duration // 2× capacity
	after        time.Duration // then 50 %
	memory       time.Duration
	probe        time.Duration
	stop         time.Duration // SIGSTOP on, then as long off
	settle       time.Duration // pause between scenarios
	back         time.Duration // longest wait for a node to come back
}

func timings(quick bool) timing {
	if quick {
		return timing{load: 7 * time.Second, warmup: time.Second, killAt: time.Second, short: 5 * time.Second,
			overload: 3 * time.Second, after: 3 * time.Second, memory: 5 * time.Second, probe: 3 * time.Second,
			stop: time.Second, settle: 500 * time.Millisecond, back: 20 * time.Second}
	}
	return timing{load: 40 * time.Second, warmup: 3 * time.Second, killAt: 8 * time.Second, short: 20 * time.Second,
		overload: 20 * time.Second, after: 15 * time.Second, memory: 60 * time.Second, probe: 8 * time.Second,
		stop: 2 * time.Second, settle: 2 * time.Second, back: 30 * time.Second}
}

// Report is a whole run.
type Report struct {
	StartedAt      time.Time `json:"started_at"`
	WallSec        float64   `json:"wall_s"`
	Command        string    `json:"command,omitempty"`
	Machine        string    `json:"machine"`
	Nodes          int       `json:"nodes"`
	Engine         string    `json:"engine"`
	CostProfile    string    `json:"cost_profile,omitempty"`
	ProxyConfig    string    `json:"proxy_config,omitempty"` // "": the proxy's defaults
	Workload       string    `json:"workload"`
	SLOms          float64   `json:"slo_ms"`
	Quick          bool      `json:"quick,omitempty"`
	CapacityRPS    float64   `json:"capacity_rps"`
	CapacityMethod string    `json:"capacity_method"`
	Results        []Result  `json:"results"`
	Passed         int       `json:"passed"`
	Failed         int       `json:"failed"`
	Skipped        int       `json:"skipped"`
}

// OK reports whether no scenario failed.
func (r *Report) OK() bool { return r.Failed == 0 }

// Summary is the final line.
func (r *Report) Summary() string {
	var failed []string
	for _, x := range r.Results {
		if x.Verdict == Fail {
			failed = append(failed, x.Name)
		}
	}
	s := fmt.Sprintf("faults: %d passed, %d failed, %d skipped of %d scenarios (%s nodes, capacity %.1f req/s, SLO %.0f ms, %.0f s)",
		r.Passed, r.Failed, r.Skipped, len(r.Results), r.Engine, r.CapacityRPS, r.SLOms, r.WallSec)
	if len(failed) > 0 {
		s += "; failed: " + strings.Join(failed, ", ")
	}
	return s
}

// env is a running suite: the cluster, the proxy and what earlier scenarios measured.
type env struct {
	o        Options
	d        timing
	log      io.Writer
	c        *cluster.Cluster
	pcfg     cluster.Proxy
	proxyMu  sync.Mutex
	proxy    *cluster.Proc
	client   *http.Client
	capacity float64
	seed     uint64
	// replays counts the paired loads started (see startLoad): each prefixes its queries with
	// its own tag.
	replays int
	// baseline is the baseline scenario's summary, once it has run.
	baseline *Summary
	// costRatio is the baseline's node time over the ideal scheduler's pricing of the same
	// requests (node_busy ÷ ideal_load), once it has run: what splitting costs (see ideal.go).
	costRatio float64

	supCancel context.CancelFunc
	supDone   chan struct{}
}

// Run starts the cluster, runs the selected scenarios and returns the report. It returns an error
// only when the suite cannot start (a bad option, a child that does not come up); a scenario the
// suite could not complete is a FAIL with its error.
func Run(ctx context.Context, o Options) (*Report, error) { return runWith(ctx, o, nil) }

// runWith is Run; done, when set, sees the environment after the last scenario, before the
// children are stopped (tests collect their process ids).
func runWith(ctx context.Context, o Options, done func(*env)) (*Report, error) {
	sel, err := selectScenarios(o.Scenarios)
	if err != nil {
		return nil, err
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{StartedAt: time.Now().UTC(), Machine: machine(), Nodes: o.Cluster.Nodes.Count,
		Engine: o.Cluster.Nodes.Engine, ProxyConfig: o.Cluster.Proxy.Config, Workload: o.Workload.Name, SLOms: ms(o.SLO), Quick: o.Quick}
	if o.Cluster.Emulated() {
		rep.CostProfile = o.Cluster.Nodes.CostProfile
	}
	d := timings(o.Quick)
	if o.MemoryDuration > 0 {
		d.memory = o.MemoryDuration
	}
	e := &env{o: o, d: d, log: o.Log, seed: o.Seed,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}}
	defer e.client.CloseIdleConnections()
	if err := e.start(ctx); err != nil {
		e.stop()
		return nil, err
	}
	defer e.stop()

	e.capacity, rep.CapacityMethod = o.Capacity, "given (--capacity)"
	if e.capacity <= 0 {
		if e.capacity, rep.CapacityMethod, err = e.probe(ctx); err != nil {
			return nil, err
		}
	}
	rep.CapacityRPS = e.capacity
	e.logf("capacity %.2f req/s (%s)", e.capacity, rep.CapacityMethod)

	for i, sc := range sel {
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			sleep(ctx, e.d.settle)
		}
		r := Result{Name: sc.name, Goal: sc.goal}
		e.logf("scenario %s: %s", sc.name, sc.goal)
		start := time.Now()
		before := e.counters(ctx)
		if err := e.ensureUp(ctx); err != nil {
			r.Err = err.Error()
		} else if err := sc.run(ctx, e, &r); err != nil {
			r.Err = err.Error()
		}
		if d := counterDeltas(before, e.counters(ctx)); d != "" {
			r.Details = append(r.Details, "proxy counters: "+d)
		}
		r.WallSec = time.Since(start).Seconds()
		r.judge()
		rep.Results = append(rep.Results, r)
		if o.OnResult != nil {
			o.OnResult(r)
		}
	}
	if done != nil {
		done(e)
	}
	for _, r := range rep.Results {
		switch r.Verdict {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		case Skip:
			rep.Skipped++
		}
	}
	rep.WallSec = time.Since(rep.StartedAt).Seconds()
	return rep, ctx.Err()
}

func (o *Options) defaults() error {
	c := &o.Cluster
	c.Defaults()
	c.Nodes.GRPCBasePort, c.Nodes.HTTPBasePort = 0, 0
	c.Nodes.Host = "127.0.0.1"
	if !slices.Contains(c.Nodes.Args, "--fault-injection") {
		c.Nodes.Args = append(slices.Clone(c.Nodes.Args), "--fault-injection")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if o.Workload.Name == "" {
		o.Workload.Name = "workload"
	}
	if err := o.Workload.Validate(); err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.SLO <= 0 {
		o.SLO = 500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.ProbeDuration <= 0 {
		o.ProbeDuration = timings(o.Quick).probe
	}
	if o.ProbeConcurrency <= 0 {
		o.ProbeConcurrency = c.Nodes.Count
	}
	if o.RSSMargin <= 0 {
		o.RSSMargin = 64 << 20
	}
	if o.ProxyCacheBytes <= 0 {
		o.ProxyCacheBytes = 64 << 20
	}
	if o.NodeCacheBytes <= 0 {
		o.NodeCacheBytes = 256 << 20
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if c.Proxy.SLO == 0 {
		c.Proxy.SLO = o.SLO
	}
	return nil
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "faults: "+format+"\n", args...)
}

// start brings up the nodes, the proxy and the nodes' supervisor.
func (e *env) start(ctx context.Context) error {
	c, err := cluster.New(e.o.Cluster, e.log)
	if err != nil {
		return err
	}
	e.c = c
	if !e.o.Cluster.Emulated() {
		if err := c.EnsureModel(ctx); err != nil {
			return err
		}
	}
	e.logf("starting %d %s nodes (logs in %s)", e.o.Cluster.Nodes.Count, e.o.Cluster.Nodes.Engine, e.o.Cluster.LogDir)
	if err := c.StartNodes(ctx); err != nil {
		return err
	}
	e.pcfg = e.o.Cluster.Proxy
	for _, a := range []*string{&e.pcfg.HTTPAddr, &e.pcfg.GRPCAddr} {
		p, err := cluster.FreePort("127.0.0.1")
		if err != nil {
			return err
		}
		*a = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	if err := e.startProxy(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	e.supCancel, e.supDone = cancel, make(chan struct{})
	go func() {
		defer close(e.supDone)
		_ = c.Supervise(sctx) // no proxy in the cluster: it returns when sctx ends
	}()
	return nil
}

// startProxy starts the proxy (the suite's own child, so that it can be signalled) and waits for
// its /readyz.
func (e *env) startProxy(ctx context.Context) error {
	return e.startProxyWith(ctx, e.pcfg, "proxy")
}

// startProxyWith starts the proxy with config pc, logging to LogDir/name.log (the previous log
// kept as name.log.1).
func (e *env) startProxyWith(ctx context.Context, pc cluster.Proxy, name string) error {
	log := filepath.Join(e.o.Cluster.LogDir, name+".log")
	if _, err := os.Stat(log); err == nil {
		_ = os.Rename(log, log+".1")
	}
	p, err := cluster.StartProc("proxy", filepath.Join(e.o.Cluster.BinDir, "proxy"), cluster.ProxyArgs(pc, e.c.NodeAddrs()), log)
	if err != nil {
		return err
	}
	e.proxyMu.Lock()
	e.proxy = p
	e.proxyMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cluster.WaitReady(rctx, p, e.proxyURL("/readyz")); err != nil {
		return err
	}
	// Ready means one node is healthy; wait for all of them, so a scenario starts on a whole cluster.
	return e.waitAllHealthy(ctx, 30*time.Second)
}

func (e *env) proxyProc() *cluster.Proc {
	e.proxyMu.Lock()
	defer e.proxyMu.Unlock()
	return e.proxy
}

// stop ends the supervisor, the proxy and the nodes.
func (e *env) stop() {
	if e.supCancel != nil {
		e.supCancel()
		<-e.supDone
	}
	if p := e.proxyProc(); p != nil {
		p.Stop(10 * time.Second)
	}
	if e.c != nil {
		e.c.Stop()
	}
}

// ensureUp restarts the proxy if a scenario left it down, and waits until every node is healthy
// and none is ejected or stalled: a scenario starts on the whole cluster.
func (e *env) ensureUp(ctx context.Context) error {
	if p := e.proxyProc(); p == nil || isDone(p) {
		e.logf("proxy is down; restarting it")
		if err := e.startProxy(ctx); err != nil {
			return fmt.Errorf("restart proxy: %w", err)
		}
	}
	if err := e.waitAllHealthy(ctx, e.d.back); err != nil {
		return err
	}
	return e.waitNoneEjected(ctx, maxEjectionWait)
}

// maxEjectionWait bounds waitNoneEjected: the proxy's longest ejection (outlier.max_ejection,
// 30 s by default) and a little more.
const maxEjectionWait = 35 * time.Second

// waitNoneEjected waits until the proxy has no node ejected or found stalled. An ejection
// outlives the scenario that caused it (slow10's eighth lasts 8 s) and the proxy ejects at most
// max_ejection_percent of the nodes at once: the next scenario would run on one node fewer, and
// its own slowed node could not be ejected.
func (e *env) waitNoneEjected(ctx context.Context, timeout time.Duration) error {
	logged := false
	return e.pollNodes(ctx, timeout, "still ejected or stalled", func(m map[string]nodeStatus) []string {
		out := []string{}
		for addr, nd := range m {
			if nd.Ejected || nd.Stalled {
				out = append(out, addr)
			}
		}
		slices.Sort(out)
		if len(out) > 0 && !logged {
			e.logf("waiting for the proxy to take back %s (ejected or stalled by the last scenario)", strings.Join(out, ", "))
			logged = true
		}
		return out
	})
}

// pollNodes reads the proxy's node table every 50 ms until bad finds no node in it, or timeout
// passes: then the error names the nodes bad last found (problem says what is wrong with them).
func (e *env) pollNodes(ctx context.Context, timeout time.Duration, problem string, bad func(map[string]nodeStatus) []string) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := e.nodes(ctx)
		var out []string
		if err == nil {
			if out = bad(m); len(out) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("nodes %s after %v: %w", problem, timeout, err)
			}
			return fmt.Errorf("nodes %s after %v: %s", problem, timeout, strings.Join(out, ", "))
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func isDone(p *cluster.Proc) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

func (e *env) proxyURL(path string) string { return "http://" + e.pcfg.HTTPAddr + path }

// target is the load target URL for the proxy's HTTP or gRPC front.
func (e *env) target(grpc bool) string {
	if grpc {
		return "grpc://" + e.pcfg.GRPCAddr
	}
	return e.proxyURL("/v1/rerank")
}

// nodeStatus is what the suite reads of the proxy's /v1/nodes.
type nodeStatus struct {
	Addr      string `json:"addr"`
	Healthy   bool   `json:"healthy"`
	Breaker   string `json:"breaker"`
	Batches   int64  `json:"batches"`
	Errors    int64  `json:"errors"`
	Slow      int64  `json:"slow"`
	Ejected   bool   `json:"ejected"`
	Ejections int64  `json:"ejections"`
	// LastEjectedAt is when the proxy last ejected the node (zero: never, or a proxy that does
	// not say).
	LastEjectedAt time.Time `json:"last_ejected_at"`
	// Stalled: the proxy found the node silent (no answer to a health check with batches
	// overdue); Stalls counts how many times, LastStalledAt when it last did.
	Stalled       bool      `json:"stalled"`
	Stalls        int64     `json:"stalls"`
	LastStalledAt time.Time `json:"last_stalled_at"`
	// SpeedRatio is the proxy's learned time of the node for a reference batch over its prior's.
	SpeedRatio float64 `json:"speed_ratio"`
}

// nodes reads the proxy's node table, keyed by address.
func (e *env) nodes(ctx context.Context) (map[string]nodeStatus, error) {
	b, err := e.get(ctx, e.proxyURL("/v1/nodes"))
	if err != nil {
		return nil, err
	}
	var list []nodeStatus
	if err := json.Unmarshal(b, &list); err != nil {
		var wrapped struct {
			Nodes []nodeStatus `json:"nodes"`
		}
		if err2 := json.Unmarshal(b, &wrapped); err2 != nil {
			return nil, fmt.Errorf("decode /v1/nodes: %w", err)
		}
		list = wrapped.Nodes
	}
	m := make(map[string]nodeStatus, len(list))
	for _, n := range list {
		m[n.Addr] = n
	}
	return m, nil
}

// get fetches url and returns its body; a status other than 200 is an error.
func (e *env) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, nil
}

// ready reports whether a node's /readyz answers 200.
func (e *env) ready(ctx context.Context, nd cluster.Node) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := e.get(cctx, "http://"+nd.HTTPAddr+"/readyz")
	return err == nil
}

// waitAllHealthy waits until the proxy sees every node healthy.
func (e *env) waitAllHealthy(ctx context.Context, timeout time.Duration) error {
	return e.pollNodes(ctx, timeout, "not healthy", func(m map[string]nodeStatus) []string {
		var out []string
		for _, nd := range e.c.Nodes() {
			if !m[nd.GRPCAddr].Healthy {
				out = append(out, nd.Name)
			}
		}
		return out
	})
}

// setFault POSTs body to node's /debug/fault.
func (e *env) setFault(ctx context.Context, nd cluster.Node, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.HTTPAddr+"/debug/fault", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s /debug/fault: %w", nd.Name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /debug/fault %s: %s %s (is the node started with --fault-injection?)", nd.Name, body, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// node returns node i as it runs now (a restart replaces its process).
func (e *env) node(i int) cluster.Node { return e.c.Nodes()[i%len(e.c.Nodes())] }

// pick is the node a scenario harms: a different one per scenario where the cluster has enough.
func (e *env) pick(k int) int { return k % len(e.c.Nodes()) }

// restartNode clears node i's faults, stops it with SIGTERM and waits until the supervisor has
// restarted it and the proxy sees it healthy again: a clean node for the next scenario.
func (e *env) restartNode(ctx context.Context, i int) error {
	nd := e.node(i)
	_ = syscall.Kill(nd.Pid(), syscall.SIGCONT) // in case a SIGSTOP was left
	_ = e.setFault(ctx, nd, `{"slowdown":0,"stall":false,"fail_next":0}`)
	if err := syscall.Kill(nd.Pid(), syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", nd.Name, err)
	}
	return e.waitRestarted(ctx, i, nd.Proc)
}

// waitRestarted waits until node i runs a process other than old, answers /readyz, and the proxy
// sees it healthy.
func (e *env) waitRestarted(ctx context.Context, i int, old *cluster.Proc) error {
	deadline := time.Now().Add(e.d.back)
	for {
		nd := e.node(i)
		if nd.Proc != old && e.ready(ctx, nd) {
			if m, err := e.nodes(ctx); err == nil && m[nd.GRPCAddr].Healthy {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not back (restarted, ready and healthy) within %v", nd.Name, e.d.back)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// nextSeed returns a fresh trace and arrival seed.
func (e *env) nextSeed() uint64 {
	e.seed++
	return e.seed
}

// trace draws n fresh requests from spec.
func (e *env) trace(spec workload.Spec, n int) (*workload.Trace, error) {
	return traceOf(spec, n, e.nextSeed())
}

// traceOf is the trace of n requests of spec drawn with seed.
func traceOf(spec workload.Spec, n int, seed uint64) (*workload.Trace, error) {
	spec.TraceSize = max(n, 16)
	return workload.New(spec, seed)
}

// loadRun is one open-loop load in the background.
type loadRun struct {
	done chan struct{}
	res  *load.Result
	err  error
}

// Paired loads. The steady scenarios judged against the baseline (p99 ≤ baseline + 20 %) replay
// the baseline's load: the same arrival times and the same requests, each run's queries prefixed
// with a tag of its own ("r01 ", "r02 ", …, one token length) so that no cache answers for an
// earlier run. A p99 of a few hundred requests at 70 % load is set by a handful of arrival bursts,
// so it moves far more between traces than between runs of one trace (bench/results/README.md
// §19): fresh traces per scenario would judge the fault against the luck of the draw; the replay
// judges it against the same arrivals without it.
const (
	pairedTraceSeed   = 1 << 32
	pairedArrivalSeed = 2 << 32
)

// startLoad sends open-loop load at share × capacity for d (fresh requests from spec, through a
// target that records into rec) until d has passed or ctx ends; wait for it with wait. A paired
// load replays the paired trace and arrivals instead (see above).
func (e *env) startLoad(ctx context.Context, rec *recorder, share float64, d time.Duration, grpc, paired bool, spec workload.Spec) (*loadRun, error) {
	rate := share * e.capacity
	tr, arrivals, err := e.loadPlan(rate, d, paired, spec)
	if err != nil {
		return nil, err
	}
	// A gRPC call carries its deadline to the proxy, which then budgets the request by it: give
	// it the SLO, as a search backend would. An HTTP call carries none (the proxy applies its SLO)
	// and the client waits up to Timeout, so that it sees the proxy's own answer.
	timeout := e.o.Timeout
	if grpc {
		timeout = e.o.SLO
	}
	t, err := rec.target(e.target(grpc), timeout)
	if err != nil {
		return nil, err
	}
	lr := &loadRun{done: make(chan struct{})}
	cfg := load.Config{Target: t, Trace: tr, Rate: rate, Duration: d, Timeout: timeout, SLO: e.o.SLO, Seed: arrivals}
	if rt, ok := t.(*recTarget); ok {
		cfg.Overflow = rt.overflowed
	}
	go func() {
		defer close(lr.done)
		lr.res, lr.err = load.Run(ctx, cfg)
	}()
	return lr, nil
}

// loadPlan returns the requests and the arrival seed of a load at rate for d: fresh ones, or the
// paired load's (see startLoad).
func (e *env) loadPlan(rate float64, d time.Duration, paired bool, spec workload.Spec) (*workload.Trace, uint64, error) {
	n := int(rate*d.Seconds()*1.3) + 32
	// A paired load draws (and drops) a fresh trace and seed too, so that every other scenario
	// gets the seeds it got before pairing: their traces stay comparable with earlier runs.
	tr, err := e.trace(spec, n)
	if err != nil {
		return nil, 0, err
	}
	arrivals := e.nextSeed()
	if !paired {
		return tr, arrivals, nil
	}
	if tr, err = traceOf(spec, n, e.o.Seed+pairedTraceSeed); err != nil {
		return nil, 0, err
	}
	e.replays++
	return tr.WithQueryPrefix(fmt.Sprintf("r%02d ", e.replays%100)), e.o.Seed + pairedArrivalSeed, nil
}

func (lr *loadRun) wait() error {
	<-lr.done
	return lr.err
}

// probe measures the capacity: closed-loop load at ProbeConcurrency for ProbeDuration, the
// successful replies per second after a quarter of warm-up. It runs against a proxy of its own
// with admission off and the client's timeout as its budget, so that it measures what the nodes
// sustain (queueing included) rather than what admission lets through: a closed loop against a
// rejecting proxy mostly measures how fast it can be turned away. The proxy under test is started
// again afterwards.
func (e *env) probe(ctx context.Context) (float64, string, error) {
	pc := e.pcfg
	pc.SLO = e.o.Timeout
	pc.Config = filepath.Join(e.o.Cluster.LogDir, "proxy-probe.yaml")
	if err := os.WriteFile(pc.Config, []byte("# bench faults: the capacity probe's proxy\nproxy:\n  admission:\n    disabled: true\n"), 0o644); err != nil {
		return 0, "", err
	}
	e.proxyProc().Stop(10 * time.Second)
	if err := e.startProxyWith(ctx, pc, "proxy-probe"); err != nil {
		return 0, "", fmt.Errorf("capacity probe: %w", err)
	}
	capacity, how, err := e.runProbe(ctx)
	e.proxyProc().Stop(10 * time.Second)
	if err != nil {
		return 0, "", err
	}
	if err := e.startProxy(ctx); err != nil {
		return 0, "", err
	}
	return capacity, how, nil
}

func (e *env) runProbe(ctx context.Context) (float64, string, error) {
	tr, err := e.trace(e.o.Workload, 512)
	if err != nil {
		return 0, "", err
	}
	// Bypass the score cache: the closed loop cycles through its trace (see load.NoScoreCache).
	t, err := load.NewTarget(e.target(false), e.o.ProbeConcurrency, load.NoScoreCache())
	if err != nil {
		return 0, "", err
	}
	defer t.Close()
	e.logf("capacity probe: closed loop, concurrency %d, %v, proxy admission off, score cache bypassed", e.o.ProbeConcurrency, e.o.ProbeDuration)
	res, err := load.Run(ctx, load.Config{Target: t, Trace: tr, Concurrency: e.o.ProbeConcurrency, Duration: e.o.ProbeDuration,
		Warmup: e.o.ProbeDuration / 4, Timeout: e.o.Timeout, SLO: e.o.SLO, Seed: e.nextSeed()})
	if err != nil {
		return 0, "", err
	}
	if res.OK == 0 || res.ThroughputRPS <= 0 {
		return 0, "", fmt.Errorf("capacity probe: no successful request (errors %v); see the logs in %s", res.ErrorsBy, e.o.Cluster.LogDir)
	}
	how := fmt.Sprintf("closed-loop probe: concurrency %d, %v, proxy admission off and budget %v (p50 %.0f ms, p99 %.0f ms, %d ok, %d errors)",
		e.o.ProbeConcurrency, e.o.ProbeDuration, e.o.Timeout, res.P50ms, res.P99ms, res.OK, res.Errors)
	return res.ThroughputRPS, how, nil
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// machine describes this machine for the report.
func machine() string {
	s := fmt.Sprintf("%d CPUs, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			s += ", load average at start " + strings.Join(f[:3], " ")
		}
	}
	return s
}

// watchedCounters are the proxy's counters a scenario's failures are explained with.
var watchedCounters = []string{"relevance_proxy_rejected_total", "relevance_proxy_retries_total",
	"relevance_proxy_hedges_total", "relevance_proxy_rescues_total", "relevance_proxy_rescues_deferred_total",
	"relevance_proxy_copies_refused_total", "relevance_proxy_score_cache_hits_total",
	"relevance_proxy_request_projection_ratio_bucket", "relevance_proxy_node_stalls_total",
	"relevance_proxy_admission_replans_total"}

// counters reads the watched counters from the proxy's /metrics, by series (nil when it cannot).
func (e *env) counters(ctx context.Context) map[string]float64 {
	b, err := e.get(ctx, e.proxyURL("/metrics"))
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	eachSample(b, func(series, name string, v float64) {
		if slices.Contains(watchedCounters, name) {
			m[strings.TrimPrefix(series, "relevance_proxy_")] = v
		}
	})
	return m
}

// eachSample calls f with every sample of a Prometheus text exposition: the series (name and
// labels), the metric's name and the value.
func eachSample(b []byte, f func(series, name string, v float64)) {
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series := line[:i]
		name, _, _ := strings.Cut(series, "{")
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			f(series, name, v)
		}
	}
}

// counterDeltas lists the counters that grew between two reads ("" when none did, or when the
// proxy restarted in between and a counter went back).
func counterDeltas(before, after map[string]float64) string {
	if before == nil || after == nil {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		d := after[k] - before[k]
		if d < 0 {
			return ""
		}
		if d > 0 {
			parts = append(parts, fmt.Sprintf("%s +%s", k, num(d)))
		}
	}
	return strings.Join(parts, ", ")
}
