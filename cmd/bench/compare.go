package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/compare"
	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/internal/fakerank"
)

const defaultCompareWorkload = "configs/workloads/compare.yaml"

func runCompare(args []string) error {
	fs := cli.NewFlagSet("bench", "compare", "[--nodes 16] [--node-kind scorer|vllm|…] [--cost-profile F] [--out DIR] [flags]")
	nodes := fs.Int("nodes", 16, "number of scorer nodes")
	profile := fs.String("cost-profile", "bench/results/profile-small-auto-samples.json", "cost profile of the emulated nodes (with measured samples: replayed, not the fitted formula)")
	real := fs.Bool("real", false, "use real nodes (the model and threads from --cluster-config) instead of emulated ones")
	nodeKind := fs.String("node-kind", cluster.KindScorer, "scorer (emulated scorer nodes), or a rerank server to fake with `bench fakerank` nodes timed by --cost-profile: "+strings.Join(fakerank.Kinds(), ", "))
	nodeConc := fs.Int("node-concurrency", 1, "with a fake --node-kind: calls each fake processes at a time (the rest queue)")
	baseline := fs.String("baseline", "", "the headline's baseline configuration (default: fixed+random, or whole+round_robin when only that one runs)")
	clusterCfg := fs.String("cluster-config", "configs/local.yaml", "cluster config: bin dir, log dir, model and node settings")
	configs := fs.String("configs", "all", "comma-separated split+route[+hedge] list (split fixed, cost or whole: one batch per request), or all (fixed/cost × 3 routes × hedging off/on)")
	loads := fs.String("loads", "0.5,0.7,0.9", "load levels as fractions of the measured capacity")
	duration := fs.Duration("duration", 10*time.Second, "per run, warm-up included")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured start of each run")
	capacity := fs.Float64("capacity", 0, "capacity in requests/s; 0 measures it with a closed-loop probe")
	probeDur := fs.Duration("probe-duration", 8*time.Second, "capacity probe length")
	probeConc := fs.Int("probe-concurrency", 0, "capacity probe concurrency (0: max(4, nodes/2))")
	wl := fs.String("workload", defaultCompareWorkload, "workload YAML (sized for the calibrated small model on 16 nodes)")
	seed := fs.Uint64("seed", 0, "trace and arrival seed; 0 uses the workload's")
	traceSize := fs.Int("trace-size", 0, "distinct requests (0: the workload's trace_size, grown to what the busiest cell sends so that no cell repeats a request into the score cache)")
	slo := fs.Duration("slo", 500*time.Millisecond, "goodput SLO (also the proxy's default deadline)")
	proxySLO := fs.Duration("proxy-slo", 0, "the proxy's default deadline (0: 2×--slo, so latencies past the SLO are measured, not cut into 504s at it)")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request client timeout")
	useGRPC := fs.Bool("grpc", false, "drive the proxy's gRPC Ranker.Score instead of HTTP /v1/rerank")
	maxBatchItems := fs.Int("max-batch-items", 4, "proxy split.max_batch_items: the chunk size of fixed splitting and the cap of cost splitting")
	proxyCfg := fs.String("proxy-config", "", "proxy YAML for every configuration (default: written to OUT/proxy.yaml with the cost profile as the proxy's prior and --max-batch-items)")
	out := fs.String("out", "", "folder for results.json, results.md and plots (default bench/results/compare-<time>)")
	fresh := fs.Bool("fresh-cells", true, "restart the nodes and the proxy before every cell (configuration × load): each starts with cold prefix and score caches. Every cell replays the trace from its start, so with false a later cell finds the earlier cells' requests cached (--fresh-cells=false: faster, for runs without caches)")
	replot := fs.String("replot", "", "only re-render results.md and the plots of the run in this folder from its results.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *replot != "" {
		rep, err := compare.Load(*replot)
		if err != nil {
			return err
		}
		return rep.Write(*replot, "(not recorded)")
	}
	ccfg, err := cluster.LoadConfig(*clusterCfg)
	if err != nil {
		return err
	}
	if *nodes < 1 {
		return fmt.Errorf("--nodes must be ≥ 1, got %d", *nodes)
	}
	ccfg.Nodes.Count = *nodes
	ccfg.Nodes.GRPCBasePort, ccfg.Nodes.HTTPBasePort = 0, 0
	var prof *costmodel.Profile
	if *nodeKind != cluster.KindScorer {
		if *real {
			return fmt.Errorf("--real and --node-kind %s: fake nodes are always emulated", *nodeKind)
		}
		if *nodeConc < 1 {
			return fmt.Errorf("--node-concurrency must be ≥ 1, got %d", *nodeConc)
		}
		ccfg.Nodes.Kind = *nodeKind
		ccfg.Nodes.Concurrency = *nodeConc
		ccfg.Nodes.Args = nil // the scorer's flags
	}
	if !*real {
		ccfg.Nodes.Engine = "emulated"
		ccfg.Nodes.CostProfile = *profile
		if prof, err = costmodel.LoadProfile(*profile); err != nil {
			return fmt.Errorf("--cost-profile: %w", err)
		}
	} else {
		ccfg.Nodes.Engine = "real"
		// Real nodes: the profile, when there is one, still gives the proxy its prior.
		if _, serr := os.Stat(*profile); serr == nil {
			if prof, err = costmodel.LoadProfile(*profile); err != nil {
				return fmt.Errorf("--cost-profile: %w", err)
			}
		}
	}
	if err := ccfg.Validate(); err != nil {
		return err
	}
	switch {
	case ccfg.Nodes.Fake():
		ccfg.LogDir += "/compare-" + *nodeKind
	case !*real:
		ccfg.LogDir += "/compare"
	default:
		ccfg.LogDir += "/compare-real"
	}
	o := compare.Options{Cluster: ccfg, Duration: *duration, Warmup: *warmup, SLO: *slo, Timeout: *timeout, ProxySLO: *proxySLO, Capacity: *capacity,
		ProbeDuration: *probeDur, ProbeConcurrency: *probeConc, GRPC: *useGRPC, Profile: prof, FreshCells: *fresh, Log: os.Stderr}
	if *configs != "all" {
		for _, s := range strings.Split(*configs, ",") {
			c, err := compare.ParseConfig(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--configs: %w", err)
			}
			o.Configs = append(o.Configs, c)
		}
	}
	switch {
	case *baseline != "":
		if o.Baseline, err = compare.ParseConfig(*baseline); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
	case o.Configs != nil && !slices.Contains(o.Configs, compare.Baseline) && slices.Contains(o.Configs, compare.Whole):
		o.Baseline = compare.Whole
	}
	for _, s := range strings.Split(*loads, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("--loads: %q: %w", s, err)
		}
		o.Loads = append(o.Loads, f)
	}
	tr, err := loadTrace(*wl, *seed, *traceSize)
	if err != nil {
		return err
	}
	o.Trace, o.Seed = tr, *seed
	o.GrowTrace = *traceSize == 0
	if o.Seed == 0 {
		o.Seed = tr.Spec().Seed
	}
	if *out == "" {
		*out = "bench/results/compare-" + time.Now().UTC().Format("20060102-150405")
	}
	o.Out = *out
	if *proxyCfg == "" {
		// A deployment tells the proxy what its nodes cost; without it the proxy starts from its
		// generic prior and sizes batches for a far faster node until it has learned.
		*proxyCfg = filepath.Join(*out, "proxy.yaml")
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		y := fmt.Sprintf("# Written by bench compare: shared by every proxy configuration of the run.\nproxy:\n  split:\n    max_batch_items: %d\n", *maxBatchItems)
		if prof != nil {
			// The proxy wants every prior coefficient > 0; a fit may put one at exactly 0.
			y += fmt.Sprintf("  cost:\n    prior: {a: %g, b: %g, c: %g}\n", max(prof.A, 1e-12), max(prof.B, 1e-15), max(prof.C, 1e-9))
		}
		if err := os.WriteFile(*proxyCfg, []byte(y), 0o644); err != nil {
			return err
		}
	}
	o.Cluster.Proxy.Config = *proxyCfg
	if *real {
		c, err := cluster.New(ccfg, os.Stderr)
		if err != nil {
			return err
		}
		if err := c.EnsureModel(context.Background()); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := compare.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\n%s\n%s", rep.Summary(), rep.Table(false), rep.HeadlineText())
	if err := rep.Write(*out, "bin/bench compare "+strings.Join(args, " ")); err != nil {
		return err
	}
	fmt.Printf("wrote %s/results.{json,md} and plots\n", *out)
	return nil
}
