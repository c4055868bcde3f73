package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/relevance-scoring/relevance/bench/load"
	"github.com/relevance-scoring/relevance/bench/report"
	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/internal/cli"
)

// defaultRate is the open-loop rate when neither --rate nor --concurrency is given: under half
// of what the default `make run` cluster (2 nodes of the small model, one thread each) sustains
// on the default workload on a shared 2-core machine (bench/results/README.md §6).
const defaultRate = 0.3

func runLoad(args []string) error {
	fs := cli.NewFlagSet("bench", "load", "[--target URL] [--rate R | --concurrency N] [--duration D] [flags]")
	target := fs.String("target", "http://127.0.0.1:8080/v1/rerank", "proxy endpoint: http://host:port/{v1/rerank,rerank,v2/rerank,v1/score} or grpc://host:port (Ranker.Score)")
	rate := fs.Float64("rate", defaultRate, "open loop: Poisson arrivals per second (latency from the intended send time); the default suits the default workload on the cluster of make run")
	conc := fs.Int("concurrency", 0, "closed loop: workers sending back to back (instead of --rate)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send requests (warm-up included)")
	warmup := fs.Duration("warmup", 0, "initial part of --duration not measured")
	wl := fs.String("workload", "", "workload YAML (default: the built-in small mix, the same as configs/workloads/small.yaml)")
	seed := fs.Uint64("seed", 0, "trace and schedule seed; 0 uses the workload's seed")
	traceSize := fs.Int("trace-size", 0, "distinct requests to generate and cycle; 0 uses the workload's trace_size")
	slo := fs.Duration("slo", 500*time.Millisecond, "latency within which a reply counts as goodput")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	maxInflight := fs.Int("max-inflight", 1000, "open loop: cap on outstanding requests; a due request over the cap is counted as an overflow error")
	asJSON := fs.Bool("json", false, "print the result object as JSON on stdout")
	out := fs.String("out", "", "folder for result.json and PNG plots (nothing written when empty)")
	nodesURL := fs.String("nodes-url", "", "proxy /v1/nodes to poll for per-node load (default: derived from an HTTP target; 'none' disables)")
	emulated := fs.Bool("emulated", false, "label the result EMULATED (the nodes behind the proxy are emulated; found by itself when the proxy's /v1/nodes is polled)")
	writeBody := fs.String("write-body", "", "write the first request's HTTP body to this file and exit (for wrk/hey cross-checks)")
	maxErrRate := fs.Float64("max-error-rate", 0.01, "exit non-zero when more than this share of measured requests fail, in [0, 1]")
	noCache := fs.Bool("no-cache", false, "bypass the proxy's score cache on every request (\"cache\": false; options.no_cache), so the nodes score every item of the cycled trace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["concurrency"] {
		if set["rate"] && *rate > 0 && *conc > 0 {
			return fmt.Errorf("--rate %v and --concurrency %d: give one (open or closed loop)", *rate, *conc)
		}
		if !set["rate"] {
			*rate = 0
		}
	}
	if !(*maxErrRate >= 0 && *maxErrRate <= 1) {
		return fmt.Errorf("--max-error-rate: must be in [0, 1], got %v", *maxErrRate)
	}
	tr, err := loadTrace(*wl, *seed, *traceSize)
	if err != nil {
		return err
	}
	maxConns := *conc
	if *rate > 0 {
		maxConns = *maxInflight
	}
	var topts []load.TargetOption
	if *noCache {
		topts = append(topts, load.NoScoreCache())
	}
	tg, err := load.NewTarget(*target, maxConns, topts...)
	if err != nil {
		return err
	}
	defer tg.Close()
	if *writeBody != "" {
		p, err := tg.Prepare(tr.At(0))
		if err != nil {
			return err
		}
		if p.Body() == nil {
			return errors.New("--write-body needs an HTTP target")
		}
		return os.WriteFile(*writeBody, p.Body(), 0o644)
	}
	cfg := load.Config{
		Target: tg, Trace: tr, Rate: *rate, Concurrency: *conc, Duration: *duration, Warmup: *warmup,
		SLO: *slo, Timeout: *timeout, MaxInFlight: *maxInflight, Seed: tr.Spec().Seed,
	}
	if *seed != 0 {
		cfg.Seed = *seed
	}
	cfg.NodesURL = nodesEndpoint(*target, *nodesURL)
	label := ""
	if *emulated {
		label = "EMULATED "
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		cfg.Progress = progressLine(label)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*asJSON {
		mode := fmt.Sprintf("open loop %.1f req/s", *rate)
		if *rate == 0 {
			mode = fmt.Sprintf("closed loop, concurrency %d", *conc)
		}
		fmt.Fprintf(os.Stderr, "%sload: %s, %s for %v, workload %s (%d distinct requests, %.1f items each)\n",
			label, tg, mode, *duration, tr.Spec().Name, tr.Len(), tr.MeanItems())
	}
	res, err := load.Run(ctx, cfg)
	if cfg.Progress != nil {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	// The proxy's /v1/nodes says so of emulated nodes even when --emulated was not given.
	res.Emulated = res.Emulated || *emulated
	if res.Emulated {
		label = "EMULATED "
	}
	if *out != "" {
		if err := report.WriteLoad(*out, strings.TrimSpace(label+"bench load"), res); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Printf("%s%s\n", label, strings.ReplaceAll(res.Summary(), "\n", "\n"+label))
		if *out != "" {
			fmt.Printf("wrote %s/result.json and plots\n", *out)
		}
	}
	return res.CheckErrors(*maxErrRate)
}

// loadTrace reads the workload (or the built-in default) and generates its trace.
func loadTrace(path string, seed uint64, size int) (*workload.Trace, error) {
	spec := workload.Small()
	if path != "" {
		s, err := workload.Load(path)
		if err != nil {
			return nil, err
		}
		spec = s
	}
	if size < 0 {
		return nil, fmt.Errorf("--trace-size must be ≥ 0, got %d", size)
	}
	if size > 0 {
		spec.TraceSize = size
	}
	if seed == 0 {
		seed = spec.Seed
	}
	return workload.New(spec, seed)
}

// nodesEndpoint picks the /v1/nodes URL to poll: explicit, none, or the HTTP target's host.
func nodesEndpoint(target, flagValue string) string {
	switch flagValue {
	case "none":
		return ""
	case "":
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return ""
		}
		return u.Scheme + "://" + u.Host + "/v1/nodes"
	}
	return flagValue
}

// progressLine returns a Progress callback that redraws one status line on stderr.
func progressLine(label string) func(load.Progress) {
	return func(p load.Progress) {
		frac := p.Elapsed.Seconds() / p.Duration.Seconds()
		if frac > 1 {
			frac = 1
		}
		const width = 24
		bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
		fmt.Fprintf(os.Stderr, "\r\033[K%s[%s] %5.1fs/%v  sent %d  ok %d  err %d  inflight %d  p50 %v  p99 %v",
			label, bar, p.Elapsed.Seconds(), p.Duration, p.Sent, p.OK, p.Errors, p.InFlight,
			p.P50.Round(100*time.Microsecond), p.P99.Round(100*time.Microsecond))
	}
}
