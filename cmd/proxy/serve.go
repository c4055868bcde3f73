package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/proxy/front/serve"
)

// runServe is `proxy serve`: flags override the config file; serve until SIGTERM/SIGINT, then
// drain (readiness false, stop accepting, finish in-flight requests within shutdown.timeout) and
// exit 0.
func runServe(args []string) error {
	fs := cli.NewFlagSet("proxy", "serve", "[--config FILE] [flags]")
	flags := serve.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg, err := flags.Load()
	if err != nil {
		return err
	}
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

// coreAdapter serves *proxy.Proxy's node table on GET /v1/nodes.
type coreAdapter struct{ *proxy.Proxy }

// NodesJSON is the node table; [] rather than null when there are none.
func (c coreAdapter) NodesJSON() any {
	if n := c.Nodes(); n != nil {
		return n
	}
	return []proxy.NodeStatus{}
}

func newCore(cfg proxy.Config, reg prometheus.Registerer, log *slog.Logger) (serve.Core, error) {
	p, err := proxy.New(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	return coreAdapter{p}, nil
}
