package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/front/grpcapi"
	"github.com/relevance-scoring/relevance/proxy/front/httpapi"
)

// Core is the proxy core as Run drives it (*proxy.Proxy behind a small adapter in cmd/proxy).
type Core interface {
	front.Core
	// Start begins membership, health watches and connections.
	Start(ctx context.Context) error
	// NodesJSON is the node table served on GET /v1/nodes.
	NodesJSON() any
	// ServedModels are the model names served on GET /v1/models.
	ServedModels() []string
	// Close stops watches and closes connections; called after the fronts drained.
	Close() error
}

// Options are Run's collaborators.
type Options struct {
	// NewCore builds the core from the proxy section. Required.
	NewCore func(cfg proxy.Config, reg prometheus.Registerer, log *slog.Logger) (Core, error)
	// Logger; nil discards.
	Logger *slog.Logger
	// Registry receives every metric and is what /metrics serves; nil: a new registry with the
	// Go runtime and process collectors.
	Registry *prometheus.Registry
	// Listening, when set, is called once both fronts listen, with their bound addresses.
	Listening func(httpAddr, grpcAddr net.Addr)
}

// Run validates cfg, starts the core and both fronts, and serves until ctx is cancelled (the
// caller's SIGTERM/SIGINT) or a front fails. Then it drains: readiness goes false at once
// (/readyz 503, grpc.health.v1 NOT_SERVING), after cfg.Shutdown.Delay the listeners close,
// in-flight requests get up to cfg.Shutdown.Timeout to finish, and the core is closed. A drain
// that completes returns nil.
func Run(ctx context.Context, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if opts.NewCore == nil {
		return errors.New("serve: nil NewCore")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	core, err := opts.NewCore(cfg.Proxy, reg, log)
	if err != nil {
		return fmt.Errorf("build proxy core: %w", err)
	}
	// The core's watches must outlive ctx: they keep serving the drain.
	coreCtx, stopCore := context.WithCancel(context.Background())
	defer stopCore()
	closeCore := func() {
		if err := core.Close(); err != nil {
			log.Warn("close proxy core", "err", err)
		}
	}
	if err := core.Start(coreCtx); err != nil {
		closeCore()
		return fmt.Errorf("start proxy core: %w", err)
	}
	metrics, err := front.NewMetrics(reg)
	if err != nil {
		closeCore()
		return err
	}
	hs, err := httpapi.New(cfg.HTTP, httpapi.Options{Core: core, Nodes: core.NodesJSON, Models: core.ServedModels, Metrics: metrics, Gatherer: reg, Logger: log,
		DefaultBudget: cfg.Proxy.SLO, MaxItems: cfg.Proxy.Limits.MaxItems})
	if err != nil {
		closeCore()
		return err
	}
	gs, err := grpcapi.New(cfg.GRPC, grpcapi.Options{Core: core, Metrics: metrics, Logger: log})
	if err != nil {
		closeCore()
		return err
	}
	hl, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		gs.SetDraining() // stops its readiness poller
		closeCore()
		return fmt.Errorf("http listen: %w", err)
	}
	gl, err := net.Listen("tcp", cfg.GRPC.Addr)
	if err != nil {
		hl.Close()
		gs.SetDraining()
		closeCore()
		return fmt.Errorf("grpc listen: %w", err)
	}
	log.Info("proxy listening", "http", hl.Addr().String(), "grpc", gl.Addr().String())
	if opts.Listening != nil {
		opts.Listening(hl.Addr(), gl.Addr())
	}

	failed := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := hs.Serve(hl); err != nil {
			failed <- fmt.Errorf("http serve: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := gs.Serve(gl); err != nil {
			failed <- fmt.Errorf("grpc serve: %w", err)
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("draining", "delay", cfg.Shutdown.Delay, "timeout", cfg.Shutdown.Timeout)
	case runErr = <-failed:
		log.Error("front failed; shutting down", "err", runErr)
	}
	hs.SetDraining()
	gs.SetDraining()
	if cfg.Shutdown.Delay > 0 && runErr == nil {
		time.Sleep(cfg.Shutdown.Delay) // let load balancers see the failing readiness first
	}
	dctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.Timeout)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- hs.Shutdown(dctx) }()
	go func() { errs <- gs.Shutdown(dctx) }()
	drainErr := errors.Join(<-errs, <-errs)
	// A shutdown that came before the HTTP Serve had registered its listener found none to close
	// and returned; that Serve would then accept for ever and wg.Wait never return. Closing the
	// listener here ends it either way (after a normal shutdown it is closed already).
	_ = hl.Close()
	wg.Wait()
	closeCore()
	if drainErr != nil {
		log.Warn("drain did not finish in time; in-flight requests were cancelled", "err", drainErr)
	} else {
		log.Info("drained")
	}
	return runErr
}
