package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/emulated"
	"github.com/relevance-scoring/relevance/scorer/model"
	"github.com/relevance-scoring/relevance/scorer/node"
)

// runServe runs one scorer node until SIGTERM/SIGINT, then drains and exits.
func runServe(args []string) error {
	cfg, err := serveConfig(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n, err := node.New(cfg, engineLoader(cfg, reg, log), node.Options{Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := n.Start(); err != nil {
		return err
	}
	label := cfg.Engine
	if cfg.Engine == node.EngineEmulated {
		label = "EMULATED (no model; timings from " + cfg.CostProfile + ")"
	}
	log.Info("scorer node listening", "node_id", n.NodeID(), "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "engine", label)
	fmt.Printf("scorer node %s listening: grpc %s, http %s, engine %s\n", n.NodeID(), n.GRPCAddr(), n.HTTPAddr(), label)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received; draining", "drain_timeout", cfg.DrainTimeout)
	case <-n.Loaded():
		if runErr = n.LoadErr(); runErr == nil {
			select {
			case <-ctx.Done():
				log.Info("signal received; draining", "drain_timeout", cfg.DrainTimeout)
			case <-n.Broken():
				// The engine panicked: its state is suspect and the node serves nothing any
				// more. Exit non-zero so that a supervisor restarts it.
				runErr = fmt.Errorf("engine failed: %w", n.BrokenErr())
			}
		}
	}
	stop() // a second signal kills the process the default way
	sctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout+10*time.Second)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	return runErr
}

// serveConfig parses serve's flags: the config file (or the defaults), then the flags given on
// the command line, then validation.
func serveConfig(args []string) (node.Config, error) {
	fs := cli.NewFlagSet("scorer", "serve", "[--config FILE] [flags]\n\nFlags override the config file; without --config the defaults apply.")
	configPath := fs.String("config", "", "YAML config file (configs/scorer.yaml); empty: defaults")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address host:port (default 127.0.0.1:7070)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address host:port (default 127.0.0.1:7071)")
	nodeID := fs.String("node-id", "", "node id in replies and logs (default host:grpc-port)")
	engine := fs.String("engine", "", "engine: real (load --model) or emulated (sleep per --cost-profile)")
	modelDir := fs.String("model", "", "Hugging Face checkpoint folder (engine real); a name for engine emulated")
	costProfile := fs.String("cost-profile", "", "cost profile JSON written by 'bench calibrate' (engine emulated)")
	threads := fs.Int("threads", 0, "forward-pass threads (0: GOMAXPROCS)")
	maxTokens := fs.Int("max-tokens", 0, "longest prompt in tokens (0: the engine's limit)")
	moePolicy := fs.String("moe-policy", "", "MoE kernel policy: threshold, auto or fixed:<blockM>")
	bf16Matmul := fs.String("bf16-matmul", "", "how bf16 weights are multiplied: auto (AMX at f32 accuracy where available), widen or bf16 (bf16 dot products)")
	prefixCache := fs.Int64("prefix-cache-bytes", 0, "cross-request prefix cache budget in bytes (0 disables)")
	calBudget := fs.Duration("calibration-budget", 0, "time for timing passes of the model at start-up, when no cost is configured (default 3s; 0 disables)")
	calCache := fs.String("calibration-cache", "", "folder where the start-up calibration is kept and reused by the next start with the same model and settings (default: none)")
	memoryLimit := fs.Int64("memory-limit", 0, "Go soft memory limit in bytes (0: derived from the prefix cache budget and max batch tokens; -1: none; GOMEMLIMIT wins)")
	pprofOn := fs.Bool("pprof", false, "serve net/http/pprof under /debug/pprof/ on the HTTP port")
	faultInjection := fs.Bool("fault-injection", false, "enable GET/POST /debug/fault on the HTTP port (slowdown, stall, fail_next: for fault tests only)")
	if err := fs.Parse(args); err != nil {
		return node.Config{}, err
	}
	if fs.NArg() > 0 {
		return node.Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg, err := node.Load(*configPath)
	if err != nil {
		return cfg, err
	}
	// Only flags given on the command line override the file.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "grpc-addr":
			cfg.GRPCAddr = *grpcAddr
		case "http-addr":
			cfg.HTTPAddr = *httpAddr
		case "node-id":
			cfg.NodeID = *nodeID
		case "engine":
			cfg.Engine = *engine
		case "model":
			cfg.Model = *modelDir
		case "cost-profile":
			cfg.CostProfile = *costProfile
		case "threads":
			cfg.Threads = *threads
		case "max-tokens":
			cfg.MaxTokens = *maxTokens
		case "moe-policy":
			cfg.MoEPolicy = *moePolicy
		case "bf16-matmul":
			cfg.BF16Matmul = *bf16Matmul
		case "prefix-cache-bytes":
			cfg.PrefixCacheBytes = *prefixCache
		case "calibration-budget":
			cfg.CalibrationBudget = *calBudget
		case "calibration-cache":
			cfg.CalibrationCache = *calCache
		case "memory-limit":
			cfg.MemoryLimit = *memoryLimit
		case "pprof":
			cfg.PProf = *pprofOn
		case "fault-injection":
			cfg.FaultInjection = *faultInjection
		}
	})
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// engineLoader returns the node's LoadFunc for cfg.Engine.
func engineLoader(cfg node.Config, reg prometheus.Registerer, log *slog.Logger) node.LoadFunc {
	if cfg.Engine == node.EngineEmulated {
		return func(context.Context) (scorer.Engine, error) {
			prof, err := costmodel.LoadProfile(cfg.CostProfile)
			if err != nil {
				return nil, err
			}
			name := cfg.Model
			if name == "" {
				name = prof.Model
			}
			// Nodes of one emulated cluster get different noise: seed from the node id.
			h := fnv.New64a()
			h.Write([]byte(cfg.NodeID + "|" + cfg.GRPCAddr))
			return emulated.New(emulated.Options{
				Profile:          prof,
				Model:            name,
				MaxTokens:        cfg.MaxTokens,
				Seed:             h.Sum64(),
				PrefixCacheBytes: cfg.PrefixCacheBytes,
				Registerer:       reg,
			})
		}
	}
	return func(ctx context.Context) (scorer.Engine, error) {
		type result struct {
			e   *model.Engine
			err error
		}
		// model.Load takes no context: let a shutdown during a long load return at once (the
		// process is exiting; the load's goroutine ends with it).
		ch := make(chan result, 1)
		opt := model.Options{
			MaxTokens:        cfg.MaxTokens,
			Threads:          cfg.Threads,
			MoEPolicy:        cfg.MoEPolicy,
			BF16Matmul:       cfg.BF16Matmul,
			PrefixCacheBytes: cfg.PrefixCacheBytes,
			// One pass's rows within max_batch_tokens, as the memory limit assumes (a single
			// batch over it runs as several passes).
			MaxPassTokens: cfg.MaxBatchTokens,
			Registerer:    reg,
			Cost:          cfg.Cost,
		}
		if cfg.CalibrationCache != "" {
			// The MoE kernel policy's cost table is kept beside the calibrations.
			opt.MoECostTables = node.NewKeptMoECostTables(cfg.CalibrationCache, cfg.CalibrationCacheMaxAge, log)
		}
		go func() {
			e, err := model.Load(cfg.Model, opt)
			ch <- result{e, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			return r.e, nil
		case <-ctx.Done():
			log.Warn("model load abandoned by shutdown", "model", cfg.Model)
			// Release the checkpoint's mappings if the load still completes.
			go func() {
				if r := <-ch; r.e != nil {
					r.e.Close()
				}
			}()
			return nil, ctx.Err()
		}
	}
}
