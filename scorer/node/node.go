// Package node is the scorer node's server around a scorer.Engine: gRPC relevance.v1.Scorer
// (ScoreBatch) with grpc.health.v1 and reflection, an HTTP port with /healthz, /readyz,
// /metrics and /v1/status, and the scheduler that queues batches and merges them into forward
// passes.
//
// The engine loads in the background after the node listens, so health answers (NOT_SERVING)
// while a model loads. Shutdown drains: readiness and health go false at once, new batches get
// UNAVAILABLE, queued and running work finishes (bounded by Config.DrainTimeout), then the
// servers stop. A call accepted before the drain began (still tokenizing) counts as in-flight
// work and finishes.
//
// The node knows its own speed: a cost model (package costmodel: seconds ≈ a·tokens + b·pairs +
// c·batches) that starts from the engine's prior — a measured profile or configured
// coefficients — or, when the engine only has a guess from its model's shape, from forward
// passes timed after the load and before the node reports ready (Config.Calibrate,
// Config.CalibrationBudget) or kept from an earlier start of the same model and settings
// (Config.CalibrationCache), and that learns from every pass it runs. It prices the early
// deadline check, the merge decision, the queued and running cost of every reply's NodeLoad
// (which also carries the coefficients) and /v1/status; relevance_scorer_estimate_ratio shows
// its error.
//
// An engine panic never kills the process: in a call's tokenizing it fails that call with
// INTERNAL; in a forward pass it fails the pass with INTERNAL and takes the node out of service
// for good (queued and later calls UNAVAILABLE, /healthz and /readyz 503, health NOT_SERVING,
// Broken closed), because the engine's state, its prefix cache above all, can no longer be
// trusted.
//
// The gRPC server bounds what one caller can hold: a call whose request message has not arrived
// within Config.RecvTimeout of its headers is cut off (internal/grpcrecv), and one connection may
// have at most Config.MaxConcurrentStreams calls open (derived by default from the queue and
// pass limits, so that it never holds back a proxy's calls).
//
// A Node is safe for concurrent use. Create it with New, then Start; Shutdown once.
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/grpcrecv"
	"github.com/relevance-scoring/relevance/internal/grpcutf8"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
)

// LoadFunc builds the engine; the node calls it once, in the background, after listening. It
// must return soon after ctx is done (Shutdown during a load cancels it).
type LoadFunc func(ctx context.Context) (scorer.Engine, error)

// PrefixCacheStatser is implemented by engines with a cross-request prefix cache; /v1/status
// shows its counters.
type PrefixCacheStatser interface {
	PrefixCacheStats() (prefixcache.Stats, bool)
}

// Options are the node's dependencies.
type Options struct {
	// Registry receives the node's metrics and is what /metrics serves; nil means a new one.
	// Pass the same registry to the engine so that its metrics (prefix cache) show too.
	Registry *prometheus.Registry
	// Logger logs lifecycle events; nil means slog.Default().
	Logger *slog.Logger
}

// Node is one scorer node.
type Node struct {
	cfg   Config
	load  LoadFunc
	log   *slog.Logger
	reg   *prometheus.Registry
	m     *metrics
	sched *scheduler
	mem   *memorySampler

	grpcSrv   *grpc.Server
	health    *health.Server
	httpSrv   *http.Server
	grpcLis   net.Listener
	httpLis   net.Listener
	nodeID    string
	startedAt time.Time
	stopGrace time.Duration // how long GracefulStop may wait for open streams (health Watch)

	mu       sync.Mutex // guards the load/draining transitions and their health updates
	draining bool
	loadErr  error

	engine     atomic.Pointer[scorer.Engine] // read on the hot path without n.mu
	isDraining atomic.Bool
	brokenErr  atomic.Pointer[error] // set when the engine panicked: out of service for good
	broken     chan struct{}         // closed when brokenErr is set
	loaded     chan struct{}
	loadCancel context.CancelFunc
	serveWG    sync.WaitGroup
	shutOnce   sync.Once
	shutErr    error
}

// scorerService is the name health reports for the Scorer service.
var scorerService = pb.Scorer_ServiceDesc.ServiceName

// New validates cfg and builds a node; nothing listens until Start.
func New(cfg Config, load LoadFunc, opt Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if load == nil {
		return nil, errors.New("node: a LoadFunc is required")
	}
	n := &Node{
		cfg:       cfg,
		load:      load,
		log:       opt.Logger,
		reg:       opt.Registry,
		sched:     newScheduler(cfg.MaxBatchTokens, cfg.MaxQueueBatches, cfg.MergePolicy == MergeFill),
		health:    health.NewServer(),
		loaded:    make(chan struct{}),
		broken:    make(chan struct{}),
		stopGrace: 2 * time.Second,
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.reg == nil {
		n.reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(n.reg, n.sched)
	if err != nil {
		return nil, err
	}
	n.m = m
	n.sched.m = m
	// A derived limit is set once the model is loaded and calibrated (runLoad): before, its heap
	// is unknown, and a limit without it made loading and calibration run under constant forced
	// collections (hundreds a pass for the 0.6B model).
	limit, source := int64(0), "derived"
	if os.Getenv("GOMEMLIMIT") != "" || cfg.MemoryLimit != 0 {
		limit, source = applyMemoryLimit(cfg, 0)
	}
	n.mem = &memorySampler{limit: limit, limitSource: source, prefixCache: n.prefixCacheBytes}
	if err := registerMemoryMetrics(n.reg, n.mem); err != nil {
		return nil, err
	}
	n.sched.log = n.log
	n.sched.onBroken = n.engineBroken
	for _, svc := range []string{"", scorerService} {
		n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	sopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(grpcutf8.Codec()),
		// The receive timer's stop first: the message is in before any other work runs.
		grpc.ChainUnaryInterceptor(grpcrecv.UnaryServerInterceptor, n.intercept),
		grpc.ChainStreamInterceptor(grpcrecv.StreamServerInterceptor),
		grpc.MaxRecvMsgSize(cfg.maxRecvBytes()),
	}
	if ms := cfg.maxConcurrentStreams(); ms > 0 {
		sopts = append(sopts, grpc.MaxConcurrentStreams(ms))
	}
	if cfg.RecvTimeout > 0 {
		sopts = append(sopts, grpc.InTapHandle(grpcrecv.TapHandle(cfg.RecvTimeout)))
	}
	n.grpcSrv = grpc.NewServer(sopts...)
	pb.RegisterScorerServer(n.grpcSrv, &service{n: n})
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	reflection.Register(n.grpcSrv)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if p := n.brokenErr.Load(); p != nil { // a liveness probe should restart the process
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "engine failed:", *p)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", n.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}))
	mux.HandleFunc("GET /v1/status", n.handleStatus)
	if cfg.PProf {
		registerPProf(mux)
	}
	if cfg.FaultInjection {
		n.sched.fault = newFaults(n.log)
		n.sched.fault.register(mux)
	}
	n.httpSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	return n, nil
}

// Start listens on both addresses, serves, and starts loading the engine in the background.
func (n *Node) Start() error {
	gl, err := net.Listen("tcp", n.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen grpc_addr %s: %w", n.cfg.GRPCAddr, err)
	}
	hl, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		gl.Close()
		return fmt.Errorf("listen http_addr %s: %w", n.cfg.HTTPAddr, err)
	}
	n.grpcLis, n.httpLis = gl, hl
	n.startedAt = time.Now()
	n.nodeID = n.cfg.NodeID
	if n.nodeID == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(gl.Addr().String())
		n.nodeID = host + ":" + port
	}
	n.serveWG.Add(2)
	go func() {
		defer n.serveWG.Done()
		if err := n.grpcSrv.Serve(gl); err != nil {
			n.log.Error("grpc server stopped", "err", err)
		}
	}()
	go func() {
		defer n.serveWG.Done()
		if err := n.httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	n.loadCancel = cancel
	n.serveWG.Add(1)
	go func() {
		defer n.serveWG.Done()
		n.runLoad(ctx)
	}()
	return nil
}

func (n *Node) runLoad(ctx context.Context) {
	defer close(n.loaded)
	start := time.Now()
	eng, err := n.load(ctx)
	if err == nil && eng == nil {
		err = errors.New("engine loader returned no engine")
	}
	var cost *costModel
	if err == nil {
		cost, err = n.startCostModel(ctx, eng)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.loadErr = fmt.Errorf("load engine: %w", err)
		n.log.Error("engine load failed", "node_id", n.nodeID, "err", err)
		return
	}
	if n.draining { // shut down while loading: never start serving
		return
	}
	if _, src := n.mem.limits(); src == "derived" {
		// The model's heap: what is live once it is loaded and calibrated, less what the
		// calibration passes left in the prefix cache (the limit adds the cache's whole budget
		// on its own; counted as model too, it was counted twice).
		model := liveHeap()
		if pc, ok := eng.(PrefixCacheStatser); ok {
			if st, ok := pc.PrefixCacheStats(); ok {
				model -= st.Bytes
			}
		}
		l, src := applyMemoryLimit(n.cfg, model)
		n.mem.setLimit(l, src)
	}
	n.sched.start(eng, cost)
	// Last: a call that finds the engine finds the scheduler started with its cost model (before,
	// calls in the window — which holds the full collection above — were priced by the engine's
	// starting guess of its speed).
	n.engine.Store(&eng)
	in := eng.Info()
	n.m.setInfo(n.nodeID, in)
	n.m.ready.Set(1)
	for _, svc := range []string{"", scorerService} {
		n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	attrs := []any{"node_id", n.nodeID, "model", in.Model, "architecture", in.Architecture,
		"dtype", in.DType, "kernels", in.Kernels, "max_tokens", in.MaxTokens, "fingerprint", in.Fingerprint, "took", time.Since(start).Round(time.Millisecond)}
	if in.Emulated {
		n.log.Warn("EMULATED engine ready: no model runs, timings come from a cost profile", attrs...)
	} else {
		n.log.Info("engine ready", attrs...)
	}
}

// startCostModel starts the node's cost model from the engine's prior or, when that is only a
// guess from the model's shape and calibration is on, from passes timed now (before the node
// reports ready), and logs where it started.
func (n *Node) startCostModel(ctx context.Context, eng scorer.Engine) (*costModel, error) {
	prior := eng.CostPrior()
	var cal calibration
	if prior.Source == scorer.CostSourceShape && n.cfg.Calibrate && n.cfg.CalibrationBudget > 0 {
		var err error
		if cal, err = n.startCalibration(ctx, eng); err != nil {
			return nil, err
		}
	}
	m := newCostModel(cal, prior)
	s := m.snapshot()
	c := s.Coeffs
	attrs := []any{"node_id", n.nodeID, "source", s.Source, "a", c.A, "b", c.B, "c", c.C,
		"ref_batch_seconds", c.Seconds(costmodel.RefFeatures)}
	if cal.Took > 0 {
		attrs = append(attrs, "calibration_seconds", cal.Took.Seconds(), "calibration_passes", cal.Passes,
			"fit_max_rel_err", cal.Fit.MaxRelErr, "prior", prior.Source)
	}
	if cal.PairSeconds > 0 {
		attrs = append(attrs, "b_measured_alone", true) // b is the attention's own timing, not fitted
	}
	if !cal.KeptFrom.IsZero() {
		attrs = append(attrs, "calibration_kept_from", cal.KeptFrom.UTC().Format(time.RFC3339))
	}
	if cal.Err != nil {
		n.log.Warn("cost model calibration failed; starting from the engine's guess", append(attrs, "err", cal.Err)...)
	} else {
		n.log.Info("cost model", attrs...)
	}
	return m, nil
}

// GRPCAddr is the address gRPC listens on (after Start).
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// HTTPAddr is the address HTTP listens on (after Start).
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// NodeID is the node's id in replies (after Start).
func (n *Node) NodeID() string { return n.nodeID }

// Loaded is closed when the engine load has finished, successfully or not (see LoadErr).
func (n *Node) Loaded() <-chan struct{} { return n.loaded }

// LoadErr is the engine load's error, once Loaded is closed.
func (n *Node) LoadErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.loadErr
}

// Ready reports whether the node takes batches: engine loaded and not draining or broken.
func (n *Node) Ready() bool {
	return n.engine.Load() != nil && !n.isDraining.Load() && n.brokenErr.Load() == nil
}

// Broken is closed when the engine has failed (panicked in a forward pass) and the node is out
// of service for good; BrokenErr says why. A supervisor should shut the node down and restart it.
func (n *Node) Broken() <-chan struct{} { return n.broken }

// BrokenErr is the engine's failure once Broken is closed, else nil.
func (n *Node) BrokenErr() error {
	if p := n.brokenErr.Load(); p != nil {
		return *p
	}
	return nil
}

// engineBroken takes the node out of service for good after the engine panicked in a forward
// pass (the scheduler has failed that pass's and the queued batches): readiness, liveness and
// health all turn false so that the node is routed around and restarted.
func (n *Node) engineBroken(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.brokenErr.Load() != nil {
		return
	}
	n.brokenErr.Store(&err)
	close(n.broken)
	n.m.ready.Set(0)
	for _, svc := range []string{"", scorerService} {
		n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.log.Error("engine failed: node out of service; restart it", "node_id", n.nodeID, "err", err)
}

// Drain stops taking new batches (readiness false, health NOT_SERVING, ScoreBatch UNAVAILABLE)
// and waits until queued and running work has finished or ctx is done.
func (n *Node) Drain(ctx context.Context) error {
	n.mu.Lock()
	if !n.draining {
		n.draining = true
		n.isDraining.Store(true)
		n.m.ready.Set(0)
		for _, svc := range []string{"", scorerService} {
			n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
		}
		n.log.Info("draining", "node_id", n.nodeID)
	}
	n.mu.Unlock()
	n.sched.close()
	return n.sched.waitIdle(ctx)
}

// Shutdown drains (for at most Config.DrainTimeout, and until ctx is done), then stops the
// scheduler and both servers. Work still queued when the drain ends fails with UNAVAILABLE. It
// returns the drain's error, if any; later calls return the same.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() {
		dctx, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
		err := n.Drain(dctx)
		cancel()
		if err != nil {
			n.shutErr = fmt.Errorf("drain: %w", err)
			n.log.Warn("drain incomplete; stopping", "node_id", n.nodeID, "err", err)
		}
		if n.loadCancel != nil {
			n.loadCancel()
			<-n.loaded
		}
		n.sched.stop()
		n.health.Shutdown()
		// GracefulStop also waits for open streams (a health Watch never ends by itself); after the
		// drain no ScoreBatch is left, so bound the wait and close what remains.
		stopped := make(chan struct{})
		go func() {
			n.grpcSrv.GracefulStop()
			close(stopped)
		}()
		grace := time.NewTimer(n.stopGrace)
		select {
		case <-stopped:
		case <-ctx.Done():
			n.grpcSrv.Stop()
			<-stopped
		case <-grace.C:
			n.grpcSrv.Stop()
			<-stopped
		}
		grace.Stop()
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.httpSrv.Shutdown(hctx); err != nil {
			n.httpSrv.Close()
		}
		hcancel()
		n.serveWG.Wait()
		n.log.Info("stopped", "node_id", n.nodeID)
	})
	return n.shutErr
}

func (n *Node) handleReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch p := n.brokenErr.Load(); {
	case n.Ready():
		fmt.Fprintln(w, "ready")
	case p != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "engine failed:", *p)
	case n.isDraining.Load():
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "draining")
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		if err := n.LoadErr(); err != nil {
			fmt.Fprintln(w, "engine failed to load:", err)
			return
		}
		fmt.Fprintln(w, "loading")
	}
}

// Status is the JSON body of GET /v1/status.
type Status struct {
	NodeID             string             `json:"node_id"`
	Model              string             `json:"model"`
	Architecture       string             `json:"architecture"`
	DType              string             `json:"dtype"`
	Kernels            string             `json:"kernels"`
	MoEPolicy          string             `json:"moe_policy"`
	MaxTokens          int                `json:"max_tokens"`
	Emulated           bool               `json:"emulated"`
	ModelFingerprint   string             `json:"model_fingerprint,omitempty"` // scorer.Info.Fingerprint
	Engine             string             `json:"engine"`                      // "EMULATED" or "real"
	Loaded             bool               `json:"loaded"`
	LoadError          string             `json:"load_error,omitempty"`
	EngineError        string             `json:"engine_error,omitempty"` // the engine panicked: out of service
	Ready              bool               `json:"ready"`
	Draining           bool               `json:"draining"`
	InflightBatches    int                `json:"inflight_batches"`
	QueuedBatches      int                `json:"queued_batches"`
	QueuedTokens       int                `json:"queued_tokens"`
	QueuedCostSeconds  float64            `json:"queued_cost_seconds"`
	RunningCostSeconds float64            `json:"running_cost_seconds"`
	TokensPerSecond    float64            `json:"tokens_per_second"`
	UptimeSeconds      float64            `json:"uptime_seconds"`
	PrefixCache        *prefixcache.Stats `json:"prefix_cache,omitempty"`
	Memory             Memory             `json:"memory"`
	// CostModel is the node's learned speed, which prices the costs above (nil until loaded).
	CostModel *CostModelStatus `json:"cost_model,omitempty"`
}

// Status returns the node's current status.
func (n *Node) Status() Status {
	l := n.sched.load()
	s := Status{
		NodeID:             n.nodeID,
		MoEPolicy:          n.cfg.MoEPolicy,
		Engine:             n.cfg.Engine,
		Ready:              n.Ready(),
		Draining:           n.isDraining.Load(),
		InflightBatches:    l.InflightBatches,
		QueuedBatches:      l.QueuedBatches,
		QueuedTokens:       l.QueuedTokens,
		QueuedCostSeconds:  l.QueuedCostSeconds,
		RunningCostSeconds: l.RunningCostSeconds,
		TokensPerSecond:    l.TokensPerSecond,
		UptimeSeconds:      time.Since(n.startedAt).Seconds(),
	}
	if err := n.LoadErr(); err != nil {
		s.LoadError = err.Error()
	}
	if p := n.brokenErr.Load(); p != nil {
		s.EngineError = (*p).Error()
	}
	if p := n.engine.Load(); p != nil {
		eng := *p
		in := eng.Info()
		s.Loaded = true
		s.Model, s.Architecture, s.DType, s.Kernels, s.MaxTokens, s.Emulated = in.Model, in.Architecture, in.DType, in.Kernels, in.MaxTokens, in.Emulated
		s.MoEPolicy = in.MoEPolicy // the engine's: "" when it has no MoE layers
		s.ModelFingerprint = in.Fingerprint
		if pc, ok := eng.(PrefixCacheStatser); ok {
			if st, ok := pc.PrefixCacheStats(); ok {
				s.PrefixCache = &st
			}
		}
	}
	if c := n.sched.costModel(); c != nil {
		s.CostModel = c.snapshot().status()
	}
	s.Memory = n.mem.sample()
	if s.Emulated {
		s.Engine = "EMULATED"
	}
	return s
}

func (n *Node) handleStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(n.Status()); err != nil {
		n.log.Warn("write /v1/status", "err", err)
	}
}

// service implements relevance.v1.Scorer.
type service struct {
	pb.UnimplementedScorerServer
	n *Node
}

// intercept wraps every unary call: ScoreBatch's request metrics count every outcome, including
// requests that grpcutf8 rejects for invalid UTF-8 before the handler runs; and a panic in a
// handler (an engine's Tokenize or EstimateSeconds) becomes INTERNAL instead of killing the
// process (grpc-go does not recover handler panics).
func (n *Node) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	called := false
	defer func() {
		if p := recover(); p != nil {
			n.log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
			n.m.errors.WithLabelValues(reasonPanic).Inc()
			resp, err = nil, status.Errorf(codes.Internal, "internal error: %v", p)
		}
		if info.FullMethod != pb.Scorer_ScoreBatch_FullMethodName {
			return
		}
		if !called && err != nil {
			n.m.errors.WithLabelValues(reasonInvalid).Inc()
		}
		n.m.requests.WithLabelValues(status.Code(err).String()).Inc()
		n.m.batchDuration.Observe(time.Since(start).Seconds())
	}()
	return grpcutf8.UnaryServerInterceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		called = true
		return handler(ctx, req)
	})
}

func (s *service) ScoreBatch(ctx context.Context, req *pb.ScoreBatchRequest) (*pb.ScoreBatchResponse, error) {
	n := s.n
	if err := n.sched.fault.failCall(); err != nil {
		n.m.errors.WithLabelValues(reasonInjected).Inc()
		return nil, err
	}
	p := n.engine.Load()
	switch {
	case n.isDraining.Load():
		n.m.errors.WithLabelValues(reasonUnavailable).Inc()
		return nil, errDraining
	case p == nil:
		n.m.errors.WithLabelValues(reasonUnavailable).Inc()
		return nil, status.Error(codes.Unavailable, "engine is loading")
	}
	eng := *p
	info := eng.Info()
	if err := validate(req, &n.cfg); err != nil {
		n.m.errors.WithLabelValues(reasonInvalid).Inc()
		st := status.New(codes.InvalidArgument, err.Error())
		if errors.Is(err, errTooManyItems) {
			// Too large for this node's configuration, not wrong: the detail says the limit, so
			// that the caller that cut the batch (the proxy) cuts it smaller rather than pass the
			// refusal on to its client as bad input.
			if d, derr := st.WithDetails(&pb.BatchTooLarge{Items: uint32(len(req.Items)), MaxBatchItems: uint32(n.cfg.MaxItems)}); derr == nil {
				st = d
			}
		}
		return nil, st.Err()
	}
	if err := n.sched.fault.failBatch(req); err != nil {
		n.m.errors.WithLabelValues(reasonInjected).Inc()
		return nil, err
	}
	// Refuse before tokenizing when the queue is already full: under overload, tokenizing
	// batches that will be turned away takes the cores from the forward pass.
	if err := ctx.Err(); err != nil { // the caller has gone: not even tokenizing for it
		n.m.errors.WithLabelValues(errorReason(status.FromContextError(err).Err())).Inc()
		return nil, status.FromContextError(err).Err()
	}
	// Where the batch queues: at its arrival (before tokenizing, which finishes in any order when
	// calls arrive together) plus the work its caller projected ahead of it, so that batches run
	// in the order the proxy planned them (scheduler.submit).
	order := n.sched.now().Add(secondsDur(min(req.QueuedAheadSeconds, maxQueuedAhead)))
	// An admitted call is in-flight work that a drain waits for; it ends with submit or release.
	if err := n.sched.admit(); err != nil {
		n.m.errors.WithLabelValues(admitReason(err)).Inc()
		return nil, err
	}
	submitted := false
	defer func() {
		if !submitted {
			n.sched.release()
		}
	}()
	docs := make([]string, len(req.Items))
	for i, it := range req.Items {
		docs[i] = it.Text
	}
	opt := scorer.TokenizeOptions{
		MaxDocTokens: int(req.GetOptions().GetMaxTokensPerItem()),
		NoTruncate:   req.GetOptions().GetTruncation() == pb.Truncation_TRUNCATION_NONE,
	}
	// Tokenize on the caller's goroutine: calls tokenize in parallel, the worker only runs passes.
	g, err := eng.Tokenize(req.Instruction, req.Query, docs, opt)
	if err != nil {
		n.m.errors.WithLabelValues(reasonTokenize).Inc()
		return nil, status.Errorf(codes.InvalidArgument, "tokenize: %v", err)
	}
	if len(g.Items) != len(docs) || len(g.Truncated) != len(docs) || len(g.TooLong) != len(docs) {
		n.m.errors.WithLabelValues(reasonTokenize).Inc()
		return nil, status.Errorf(codes.Internal, "tokenize: engine returned %d items for %d documents", len(g.Items), len(docs))
	}
	if info.MaxTokens > 0 && len(g.Prefix) >= info.MaxTokens {
		n.m.errors.WithLabelValues(reasonInvalid).Inc()
		return nil, status.Errorf(codes.InvalidArgument, "query too long for the model: the prompt prefix is %d tokens, the limit is %d", len(g.Prefix), info.MaxTokens)
	}

	var r passResult
	scorable := 0
	for i := range g.Items {
		if !g.TooLong[i] {
			scorable++
		}
	}
	if scorable > 0 {
		submitted = true
		j, err := n.sched.submit(ctx, eng, g, order)
		if err != nil {
			n.m.errors.WithLabelValues(errorReason(err)).Inc()
			return nil, err
		}
		select {
		case r = <-j.done:
		case <-ctx.Done():
			n.sched.remove(j)
			r = passResult{err: status.FromContextError(ctx.Err()).Err()}
		}
		if r.err != nil {
			n.m.errors.WithLabelValues(errorReason(r.err)).Inc()
			return nil, r.err
		}
		n.m.queueWait.Observe(r.queueWait.Seconds())
		if len(g.Logits) != len(g.Items) {
			n.m.errors.WithLabelValues(reasonForward).Inc()
			return nil, status.Errorf(codes.Internal, "forward pass: engine returned %d logits for %d items", len(g.Logits), len(g.Items))
		}
	}
	return n.reply(req, g, r, info), nil
}

func admitReason(err error) string {
	if status.Code(err) == codes.ResourceExhausted {
		return reasonOverloaded
	}
	return reasonUnavailable
}

func errorReason(err error) string {
	switch status.Code(err) {
	case codes.Canceled:
		return reasonCancelled
	case codes.DeadlineExceeded:
		return reasonDeadline
	case codes.Unavailable:
		return reasonUnavailable
	default:
		return reasonForward
	}
}

func (n *Node) reply(req *pb.ScoreBatchRequest, g *scorer.Group, r passResult, info scorer.Info) *pb.ScoreBatchResponse {
	P := len(g.Prefix)
	resp := &pb.ScoreBatchResponse{
		Scores:   make([]*pb.ItemScore, len(req.Items)),
		Usage:    &pb.Usage{},
		Model:    info.Model,
		NodeId:   n.nodeID,
		Emulated: info.Emulated,
		// The proxy pins a request to one fingerprint and keys its score cache by it.
		ModelFingerprint: info.Fingerprint,
		// The proxy caps its cost estimates of long items at what this node computes of them.
		MaxPromptTokens: uint32(max(0, min(info.MaxTokens, math.MaxUint32))),
		// The proxy cuts its batches to it (a larger one is refused).
		MaxBatchItems: uint32(min(n.cfg.MaxItems, math.MaxUint32)),
	}
	// An item is refused over the model's prompt limit or the request's cap on document tokens;
	// the engine does not say which, so with a cap both are named (the cap alone would be wrong
	// for a document within it whose prompt is over the model's limit).
	tooLong := fmt.Sprintf("prompt longer than the model's limit of %d tokens and truncation is NONE", info.MaxTokens)
	if perItem := req.GetOptions().GetMaxTokensPerItem(); perItem > 0 {
		tooLong = fmt.Sprintf("document longer than max_tokens_per_item (%d) or prompt longer than the model's limit of %d tokens, and truncation is NONE", perItem, info.MaxTokens)
	}
	scored := 0
	for i, it := range req.Items {
		sc := &pb.ItemScore{Index: uint32(i), Id: it.Id, Tokens: uint32(len(g.Items[i])), TruncatedTokens: uint32(g.Truncated[i])}
		resp.Usage.TokensTruncated += uint64(g.Truncated[i])
		if g.TooLong[i] {
			sc.Status = pb.ItemStatus_ITEM_STATUS_TOO_LONG
			sc.Error = tooLong
			sc.Tokens = 0
		} else {
			scored++
			l := g.Logits[i]
			sc.Logit = l
			sc.Score = float32(1 / (1 + math.Exp(-float64(l))))
			sc.Status = pb.ItemStatus_ITEM_STATUS_OK
			if g.Truncated[i] > 0 {
				sc.Status = pb.ItemStatus_ITEM_STATUS_TRUNCATED
			}
			resp.Usage.PromptTokens += uint64(P + len(g.Items[i]))
			resp.Usage.ItemTokens += uint64(len(g.Items[i]))
		}
		resp.Scores[i] = sc
	}
	if scored > 0 {
		// The prefix is computed once, less what the engine reused (scorer.Group.PrefixReused:
		// all of it on a prefix-cache hit or when a batch merged into the same pass had the same
		// prefix, the template's when only that was); every other item reuses it.
		notComputed := min(g.PrefixReused, P)
		if g.PrefixCached {
			notComputed = P
		}
		resp.Usage.PrefixTokens = uint64(P - notComputed)
		resp.Usage.PrefixTokensReused = uint64(scored-1)*uint64(P) + uint64(notComputed)
	}
	l := n.sched.load()
	resp.Load = &pb.NodeLoad{
		QueuedCostSeconds:  l.QueuedCostSeconds,
		RunningCostSeconds: l.RunningCostSeconds,
		QueuedBatches:      uint32(l.QueuedBatches),
		InflightBatches:    uint32(l.InflightBatches),
		QueuedTokens:       uint64(l.QueuedTokens),
		TokensPerSecond:    l.TokensPerSecond,
	}
	if c := n.sched.costModel(); c != nil {
		resp.Load.CostModel = c.snapshot().proto()
	}
	resp.Stats = &pb.BatchStats{
		QueueSeconds:      r.queueWait.Seconds(),
		ComputeSeconds:    r.compute.Seconds(),
		PrefixTokens:      uint32(P),
		PrefixCached:      g.PrefixCached,
		ItemTokens:        resp.Usage.ItemTokens,
		MergedBatches:     uint32(r.merged),
		ForwardTokens:     uint64(r.forwardTokens),
		ForwardSeconds:    r.forward.Seconds(),
		MergeDelaySeconds: r.mergeDelay.Seconds(),
	}
	return resp
}

// maxQueuedAhead bounds the work a caller may say is ahead of its batch, in seconds: far beyond
// any deadline, it only keeps the queue position a representable time.
const maxQueuedAhead = 3600.0

// errTooManyItems is validate's error for a batch over max_items: the node's limit rather than
// anything wrong with the batch (ScoreBatch attaches a BatchTooLarge).
var errTooManyItems = errors.New("too many items")

// validate checks a request against the node's limits; the error names the problem.
func validate(req *pb.ScoreBatchRequest, cfg *Config) error {
	switch {
	case req.Query == "":
		return errors.New("query is empty")
	case !utf8.ValidString(req.Query):
		return errors.New("query is not valid UTF-8")
	case !utf8.ValidString(req.Instruction):
		return errors.New("instruction is not valid UTF-8")
	case len(req.Items) == 0:
		return errors.New("no items: a batch needs at least one")
	case len(req.Items) > cfg.MaxItems:
		return fmt.Errorf("%w: %d, the limit is %d (max_items)", errTooManyItems, len(req.Items), cfg.MaxItems)
	case !(req.QueuedAheadSeconds >= 0) || math.IsInf(req.QueuedAheadSeconds, 1):
		return fmt.Errorf("queued_ahead_seconds is %v: it must be finite and >= 0", req.QueuedAheadSeconds)
	}
	for i, it := range req.Items {
		switch {
		case it == nil:
			return fmt.Errorf("item %d is missing", i)
		case len(it.Text) > cfg.MaxItemBytes:
			return fmt.Errorf("item %d: text is %d bytes, the limit is %d (max_item_bytes)", i, len(it.Text), cfg.MaxItemBytes)
		case !utf8.ValidString(it.Text):
			return fmt.Errorf("item %d: text is not valid UTF-8", i)
		}
	}
	return nil
}
