// Package proxy is the core of the relevance proxy: Proxy.Score runs one scoring request through
// the pipeline's stages, each a package named for its concept:
//
//	validate   the request contract (fields, sizes, UTF-8)
//	plan       token counts → per-item cost → batches, each placed on a node with its projected
//	           finish (proxy/plan; the one placement function, plan.Placer, also places retries
//	           and hedges)
//	admit      admit only what the plan says can finish in time (proxy/admit)
//	dispatch   send each batch to its node: breaker, retry, hedge (proxy/dispatch)
//	merge      scores in item order, ranking, usage, timings (proxy/merge)
//
// The nodes themselves — membership from a static list and/or DNS, health from grpc.health.v1,
// breakers, load and learned speed — are proxy/cluster. Splitting and routing strategies are
// proxy/split and proxy/route, registered once in strategies.go. The HTTP and gRPC fronts
// (proxy/front) call Proxy.Score.
//
// A Proxy is safe for concurrent use once New returns; Start must be called once before Score
// and Close once at the end. The hot path reads an immutable membership snapshot through an
// atomic pointer and per-node atomics, and never blocks on a lock held across I/O.
package proxy

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/internal/reqid"
	"github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/proxy/admit"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
	"github.com/relevance-scoring/relevance/proxy/plan"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/scorecache"
)

// Proxy fans scoring requests out to scorer nodes.
type Proxy struct {
	cfg        Config
	log        *slog.Logger
	m          *metrics
	cluster    *cluster.Cluster
	planner    *plan.Planner
	admitter   *admit.Admitter
	dispatcher *dispatch.Dispatcher
	cache      *scorecache.Cache // nil: disabled
}

// NodeStatus is one node's state for /v1/nodes.
type NodeStatus = cluster.NodeStatus

// New builds a proxy from a validated configuration; metrics go to reg. It starts nothing.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	counter, err := prompt.NewCounter(cfg.Cost.TokenCounter)
	if err != nil {
		return nil, fmt.Errorf("new proxy: %w", err)
	}
	p := &Proxy{cfg: cfg, log: log}
	p.cluster = cluster.New(cluster.Config{
		Static:      cfg.Nodes.Static,
		Backends:    cfg.Nodes.Backends,
		DNS:         cfg.Nodes.DNS,
		DNSInterval: cfg.Nodes.DNSInterval,
		Breaker: cluster.BreakerConfig{
			ConsecutiveFailures: cfg.Breaker.ConsecutiveFailures,
			OpenTimeout:         cfg.Breaker.OpenTimeout,
			HalfOpenProbes:      cfg.Breaker.HalfOpenProbes,
		},
		Outlier: cluster.OutlierConfig{
			Disabled:           cfg.Outlier.Disabled,
			ConsecutiveSlow:    cfg.Outlier.ConsecutiveSlow,
			BaseEjection:       cfg.Outlier.BaseEjection,
			MaxEjection:        cfg.Outlier.MaxEjection,
			MaxEjectionPercent: cfg.Outlier.MaxEjectionPercent,
		},
		StallTimeout: cfg.Outlier.StallTimeout,
		Prior:        cfg.Cost.Prior,
		Forgetting:   cfg.Cost.Forgetting,
		WarmSamples:  cfg.Cost.WarmSamples,
		Prime:        cfg.Cost.Prime,
	}, log)
	if cfg.Cache.BudgetBytes > 0 {
		p.cache = scorecache.New(cfg.Cache.BudgetBytes, cfg.Cache.TTL, nil)
	}
	if p.m, err = newMetrics(reg, p); err != nil {
		return nil, fmt.Errorf("new proxy: metrics: %w", err)
	}
	acc := &plan.Accuracy{}
	placer := plan.NewPlacer(p.cluster, pickers[cfg.Route.Strategy](cfg, route.DefaultRand))
	p.planner = plan.NewPlanner(plan.Config{MaxBatchItems: cfg.Split.MaxBatchItems, TargetBatchSeconds: cfg.Split.TargetBatchSeconds, LearnTokens: cfg.Cost.LearnTokenCounts},
		counter, splitters[cfg.Split.Strategy](cfg), p.cluster, placer)
	p.admitter = admit.New(admit.Config{Disabled: cfg.Admission.Disabled, Headroom: cfg.Admission.Headroom,
		MinSamples: cfg.Admission.MinSamples, MarginQuantile: cfg.Admission.MarginQuantile, OnTimeTarget: cfg.Admission.OnTimeTarget}, acc, p.m.rejected)
	p.dispatcher = dispatch.New(dispatch.Config{
		RetryDisabled:   cfg.Retry.Disabled,
		BudgetRatio:     cfg.Retry.BudgetRatio,
		BudgetBurst:     cfg.Retry.BudgetBurst,
		Hedge:           cfg.Hedge.Enabled,
		HedgeQuantile:   cfg.Hedge.Quantile,
		HedgeMinDelay:   cfg.Hedge.MinDelay,
		HedgeMinSamples: cfg.Hedge.MinSamples,
		SlowFactor:      slowFactor(cfg.Outlier),
		SlowMin:         cfg.Outlier.SlowMin,
		RescueFactor:    cfg.Retry.RescueFactor,
		RescueMinLate:   cfg.Retry.RescueMinLate,
		TrustSamples:    cfg.Admission.MinSamples,
		Log:             log,
	}, p.cluster, placer, acc, dispatch.Metrics{
		Retries:         p.m.retries,
		Hedges:          p.m.hedges,
		HedgeWins:       p.m.hedgeWins,
		Rescues:         p.m.rescues,
		RescuesDeferred: p.m.rescuesDeferred,
		LosersKept:      p.m.losersKept,
		CopiesRefused:   p.m.copiesRefused,
		BatchDuration:   p.m.batchDuration,
		EstimateRatio:   p.m.estimateRatio,
	})
	return p, nil
}

// Start connects to the nodes (see cluster.Cluster.Start). It returns at once: nodes become
// ready as their health arrives (WaitReady).
func (p *Proxy) Start(ctx context.Context) error {
	if err := p.cluster.Start(ctx); err != nil {
		return fmt.Errorf("proxy start: %w", err)
	}
	return nil
}

// Ready reports whether at least one node is healthy.
func (p *Proxy) Ready() bool { return p.cluster.Ready() }

// WaitReady blocks until Ready or ctx ends.
func (p *Proxy) WaitReady(ctx context.Context) error { return p.cluster.WaitReady(ctx) }

// Nodes reports every node's state, sorted by address.
func (p *Proxy) Nodes() []NodeStatus { return p.cluster.Status() }

// Close stops the DNS loop and health watches and closes every connection. Call it after the
// fronts have drained; Score fails with UNAVAILABLE afterwards. Idempotent.
func (p *Proxy) Close() error { return p.cluster.Close() }

// slowFactor is the dispatcher's slow threshold: off (0) when outlier detection is.
func slowFactor(o OutlierConfig) float64 {
	if o.Disabled {
		return 0
	}
	return o.SlowFactor
}

func newRequestID() string { return reqid.New() }
