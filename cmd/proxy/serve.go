package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/proxy/front/serve"
)

// runServe is `proxy serve`: flags override the config file, then serve until SIGTERM/SIGINT and
// drain (readiness false, stop accepting, finish in-flight requests within shutdown.timeout).
func runServe(args []string) error {
	fs := cli.NewFlagSet("proxy", "serve", "[--config FILE] [flags]")
	configPath := fs.String("config", "", "YAML config file (default: built-in defaults; see configs/proxy.yaml)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address host:port (default 127.0.0.1:8080)")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address host:port (default 127.0.0.1:9090)")
	nodes := fs.String("nodes", "", "comma-separated scorer node addresses host:port,host:port")
	dns := fs.String("dns", "", "NAME:PORT resolved (and re-resolved) to the scorer nodes")
	split := fs.String("split", "", "splitting strategy: fixed or cost")
	route := fs.String("route", "", "routing strategy: random, round_robin or least_loaded")
	hedge := fs.Bool("hedge", false, "hedge straggling batches")
	slo := fs.Duration("slo", 0, "budget of a request without a deadline (e.g. 500ms)")
	tokenCounter := fs.String("token-counter", "", "token counter: exact or estimate")
	maxBatchItems := fs.Int("max-batch-items", 0, "most items per batch")
	logLevel := fs.String("log-level", "", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	cfg := serve.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = serve.Load(*configPath); err != nil {
			return err
		}
	}
	// Only flags given on the command line override the file.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "http-addr":
			cfg.HTTP.Addr = *httpAddr
		case "grpc-addr":
			cfg.GRPC.Addr = *grpcAddr
		case "nodes":
			cfg.Proxy.Nodes.Static = splitList(*nodes)
		case "dns":
			cfg.Proxy.Nodes.DNS = *dns
		case "split":
			cfg.Proxy.Split.Strategy = *split
		case "route":
			cfg.Proxy.Route.Strategy = *route
		case "hedge":
			cfg.Proxy.Hedge.Enabled = *hedge
		case "slo":
			cfg.Proxy.SLO = *slo
		case "token-counter":
			cfg.Proxy.Cost.TokenCounter = *tokenCounter
		case "max-batch-items":
			cfg.Proxy.Split.MaxBatchItems = *maxBatchItems
		case "log-level":
			cfg.LogLevel = *logLevel
		}
	})
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	log, err := cfg.NewLogger(os.Stderr)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serve.Run(ctx, cfg, serve.Options{
		NewCore: newCore,
		Logger:  log,
		Listening: func(h, g net.Addr) {
			// One line each on stdout, for scripts that start the proxy on port 0.
			fmt.Printf("http listening on %s\ngrpc listening on %s\n", h, g)
		},
	})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// coreAdapter lets *proxy.Proxy serve GET /v1/nodes through serve.Core.
type coreAdapter struct{ *proxy.Proxy }

func (c coreAdapter) NodesJSON() any { return c.Nodes() }

func newCore(cfg proxy.Config, reg prometheus.Registerer, log *slog.Logger) (serve.Core, error) {
	p, err := proxy.New(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	return coreAdapter{p}, nil
}
