package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/faults"
	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/internal/cli"
)

// errFaultsFailed makes the command exit 1 after printing its report.
var errFaultsFailed = errors.New("faults: at least one scenario failed")

func runFaults(args []string) error {
	fs := cli.NewFlagSet("bench", "faults", "[--scenarios a,b] [--quick] [--out DIR] [flags]\n\n"+
		"Starts a local cluster (scorer nodes with --fault-injection, a proxy with its defaults), measures its capacity\n"+
		"with a closed-loop probe and runs the fault scenarios, each bounded in time, each PASS, FAIL or SKIP:\n  "+
		strings.Join(faults.Names(), ", ")+"\n"+
		"The scenarios judged against the baseline's p99 (slow10, slow3, sigstop) replay the baseline's arrivals and\n"+
		"requests, under queries of their own, so that the comparison is not the luck of two Poisson draws.\n"+
		"Exit status 1 when a scenario fails.")
	nodes := fs.Int("nodes", 8, "number of scorer nodes")
	engine := fs.String("engine", "emulated", "node engine: emulated (sleeps per --cost-profile) or real (the model and threads of --cluster-config)")
	profile := fs.String("cost-profile", "bench/results/profile-small-auto-samples.json", "cost profile of the emulated nodes (with measured samples: replayed, not the fitted formula the proxy plans with)")
	clusterCfg := fs.String("cluster-config", "configs/local.yaml", "cluster config: bin dir, model and node threads (its ports and node count are replaced)")
	wl := fs.String("workload", defaultCompareWorkload, "workload YAML")
	seed := fs.Uint64("seed", 0, "first trace and arrival seed (0: the workload's)")
	proxyCfg := fs.String("proxy-config", "", "proxy YAML over the proxy's defaults (e.g. to turn one mechanism off for a side-by-side run); \"\": the defaults")
	slo := fs.Duration("slo", 500*time.Millisecond, "SLO: goodput counts within it, and the proxy's default budget")
	timeout := fs.Duration("timeout", 5*time.Second, "per-request client timeout")
	capacity := fs.Float64("capacity", 0, "capacity in requests/s; 0 measures it with a closed-loop probe")
	probeDur := fs.Duration("probe-duration", 0, "capacity probe length (0: 8s, --quick 3s)")
	probeConc := fs.Int("probe-concurrency", 0, "capacity probe concurrency (0: the node count)")
	scen := fs.String("scenarios", "", "comma-separated scenarios to run (default all): "+strings.Join(faults.Names(), ","))
	quick := fs.Bool("quick", false, "shorten every scenario to a few seconds (smoke runs, tests)")
	rssMargin := fs.Int64("rss-margin", 64<<20, "memory: allowed RSS growth in bytes beyond the caches' budgets")
	memDur := fs.Duration("memory-duration", 0, "memory: how long the steady load runs (0: 60s, --quick 5s); real nodes need long enough to fill their prefix cache")
	proxyCache := fs.Int64("proxy-cache-bytes", 64<<20, "memory: the proxy's score-cache budget its RSS may grow by")
	crashNodes := fs.Int("prefix-crash-nodes", 2, "prefix-crash on an emulated cluster: real nodes to start beside it for that scenario (the cluster config's model and threads); 0: skip it")
	out := fs.String("out", "bench/results/faults", "folder for results.json and results.md (\"\": none)")
	list := fs.Bool("list", false, "list the scenarios and their goals, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *list {
		goals := faults.Goals()
		for _, n := range faults.Names() {
			fmt.Printf("%-14s %s\n", n, goals[n])
		}
		return nil
	}
	ccfg, err := cluster.LoadConfig(*clusterCfg)
	if err != nil {
		return err
	}
	if *nodes < 1 {
		return fmt.Errorf("--nodes must be ≥ 1, got %d", *nodes)
	}
	ccfg.Nodes.Count = *nodes
	switch *engine {
	case "emulated":
		ccfg.Nodes.Engine, ccfg.Nodes.CostProfile = "emulated", *profile
	case "real":
		ccfg.Nodes.Engine = "real"
	default:
		return fmt.Errorf("--engine must be emulated or real, got %q", *engine)
	}
	label := "" // each verdict line says what its nodes were
	if ccfg.Emulated() {
		label = "EMULATED "
	}
	// The proxy keeps its own defaults (or --proxy-config's); only the SLO is the suite's.
	ccfg.Proxy = cluster.Proxy{SLO: *slo, Config: *proxyCfg}
	ccfg.LogDir = ".cache/faults"
	spec, err := workload.Load(*wl)
	if err != nil {
		return err
	}
	if *seed == 0 {
		*seed = spec.Seed
	}
	var names []string
	if *scen != "" {
		for _, s := range strings.Split(*scen, ",") {
			names = append(names, strings.TrimSpace(s))
		}
	}
	o := faults.Options{Cluster: ccfg, Workload: spec, Seed: *seed, SLO: *slo, Timeout: *timeout, Capacity: *capacity,
		ProbeDuration: *probeDur, ProbeConcurrency: *probeConc, Scenarios: names, Quick: *quick, RSSMargin: *rssMargin, MemoryDuration: *memDur,
		ProxyCacheBytes: *proxyCache, PrefixCrashRealNodes: *crashNodes, Log: os.Stderr,
		OnResult: func(r faults.Result) { fmt.Println(label + r.Line()) }}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := faults.Run(ctx, o)
	if rep == nil {
		return err
	}
	rep.Command = strings.TrimSpace("bin/bench faults " + strings.Join(args, " "))
	fmt.Println(rep.Summary())
	if *out != "" {
		if werr := rep.Write(*out); werr != nil {
			return werr
		}
		fmt.Printf("wrote %s/results.{json,md}\n", *out)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return errFaultsFailed
	}
	return nil
}
