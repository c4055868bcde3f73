// Package grpcapi is the proxy's gRPC front: relevance.v1.Ranker/Score delegating to the core,
// grpc.health.v1 (SERVING while the core is Ready, for the empty service name and for
// relevance.v1.Ranker), server reflection, a recovery interceptor (a panic becomes INTERNAL and is
// logged) and request metrics.
//
// The front only decodes. A request that cannot be decoded (invalid UTF-8, malformed protobuf) is
// INVALID_ARGUMENT naming the field (internal/grpcutf8); every other rule is the core's
// (proxy/request), whose errors, errdetails.BadRequest included, reach the client as they are:
// gRPC clients get the canonical field names.
//
// A Server is safe for concurrent use; Serve once, then Shutdown.
package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/grpcrecv"
	"github.com/relevance-scoring/relevance/internal/grpcutf8"
	"github.com/relevance-scoring/relevance/internal/reqid"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
)

// Config is the gRPC front's section of the proxy configuration (`grpc:` in configs/proxy.yaml).
type Config struct {
	// Addr is the listen address, host:port. Port 0 picks a free port.
	Addr string `yaml:"addr"`
	// MaxRecvBytes is the largest request message accepted (RESOURCE_EXHAUSTED beyond). Must be > 0.
	MaxRecvBytes int `yaml:"max_recv_bytes"`
	// MaxSendBytes is the largest reply message sent. Must be > 0.
	MaxSendBytes int `yaml:"max_send_bytes"`
	// HealthPoll is how often the core's readiness is copied into grpc.health.v1. Must be > 0.
	HealthPoll time.Duration `yaml:"health_poll"`
	// KeepaliveMinTime is the shortest interval between a client's keepalive pings the server
	// accepts; KeepalivePermitWithoutStream accepts them on a connection with no call open.
	// grpc-go's defaults (5 min, no) answer a client pinging every 10 s — common behind load
	// balancers that drop idle connections — with GOAWAY ENHANCE_YOUR_CALM, failing its calls.
	// KeepaliveMinTime 0 accepts any interval (grpc-go itself would read 0 as its 5 min default).
	KeepaliveMinTime             time.Duration `yaml:"keepalive_min_time"`
	KeepalivePermitWithoutStream bool          `yaml:"keepalive_permit_without_stream"`
	// MaxConcurrentStreams bounds the calls one connection may have open at once (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS; streams past it are refused with REFUSED_STREAM, which a
	// client that ignored the setting may retry). grpc-go's default is no limit: one connection
	// could open streams without end, each a goroutine and buffers on the proxy. 0: no limit.
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// RecvTimeout bounds how long a call's request message may take to arrive, from its headers
	// (for a stream, its first message), as http.read_timeout bounds an HTTP request's body. The
	// budget (the call's deadline, else the SLO) starts only in the handler, once the message has
	// arrived: without this a client that sends headers and part of a message, with no deadline,
	// held its stream and the bytes it had sent (up to max_recv_bytes) for as long as it kept
	// the connection open. Such a call is ended CANCELLED (internal/grpcrecv). 0: no limit.
	RecvTimeout time.Duration `yaml:"recv_timeout"`
}

// DefaultConfig returns the defaults: 127.0.0.1:9090, 16 MiB in and out, readiness polled every
// 500 ms, 1000 calls at once per connection, 10 s for a request message to arrive.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:9090", MaxRecvBytes: 16 << 20, MaxSendBytes: 16 << 20, HealthPoll: 500 * time.Millisecond,
		KeepaliveMinTime: 10 * time.Second, KeepalivePermitWithoutStream: true,
		MaxConcurrentStreams: 1000, RecvTimeout: 10 * time.Second}
}

// Validate reports the first bad field, named as in the YAML file under "grpc.".
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("grpc.addr: must be host:port, got %q", c.Addr)
	}
	if c.MaxRecvBytes <= 0 {
		return fmt.Errorf("grpc.max_recv_bytes: must be > 0, got %d", c.MaxRecvBytes)
	}
	if c.MaxSendBytes <= 0 {
		return fmt.Errorf("grpc.max_send_bytes: must be > 0, got %d", c.MaxSendBytes)
	}
	if c.HealthPoll <= 0 {
		return fmt.Errorf("grpc.health_poll: must be > 0, got %s", c.HealthPoll)
	}
	if c.KeepaliveMinTime < 0 {
		return fmt.Errorf("grpc.keepalive_min_time: must be ≥ 0, got %s", c.KeepaliveMinTime)
	}
	if c.RecvTimeout < 0 {
		return fmt.Errorf("grpc.recv_timeout: must be ≥ 0, got %s", c.RecvTimeout)
	}
	return nil
}

// Options are the gRPC front's collaborators.
type Options struct {
	// Core scores requests. Required.
	Core front.Core
	// Metrics records requests. Required (see front.NewMetrics).
	Metrics *front.Metrics
	// Logger gets panics; nil discards.
	Logger *slog.Logger
}

// Server is the gRPC front.
type Server struct {
	cfg    Config
	core   front.Core
	log    *slog.Logger
	gs     *grpc.Server
	health *health.Server

	stopPoll chan struct{}
	pollDone chan struct{}
	stopOnce sync.Once

	// stopWatches is closed when Shutdown begins: it ends the grpc.health.v1 Watch streams,
	// which GracefulStop would otherwise wait for until the drain timeout.
	stopWatches chan struct{}
	watchOnce   sync.Once

	// baseCtx parents every Ranker call; cancelled when a drain runs out of time, so that the
	// calls still running are answered UNAVAILABLE by their handlers before the transport is
	// torn down (which their clients would read as a broken connection, not an answer).
	baseCtx    context.Context
	cancelBase context.CancelFunc
}

// answerGrace bounds how long a drain that ran out of time waits, once it has cancelled the calls
// still running, for their answers to be sent before it closes every connection.
const answerGrace = 2 * time.Second

// errDrainTimedOut is the answer to a call still running when the drain ran out of time.
var errDrainTimedOut = status.Error(codes.Unavailable, "proxy shutting down: its drain ran out of time before this request finished; send it again (another proxy will take it)")

// rankerService is the name grpc.health.v1 reports besides the empty (whole server) name.
var rankerService = relevancev1.Ranker_ServiceDesc.ServiceName

// New builds the gRPC front and starts copying the core's readiness into the health service (a
// goroutine that Shutdown or SetDraining stops). It does not listen; call Serve.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Core == nil {
		return nil, errors.New("grpcapi: nil Core")
	}
	if opts.Metrics == nil {
		return nil, errors.New("grpcapi: nil Metrics")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, core: opts.Core, log: log, health: health.NewServer(),
		stopPoll: make(chan struct{}), pollDone: make(chan struct{}), stopWatches: make(chan struct{})}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	sopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.MaxSendMsgSize(cfg.MaxSendBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime(cfg.KeepaliveMinTime), PermitWithoutStream: cfg.KeepalivePermitWithoutStream}),
		// Metrics outermost (after the receive timer's stop, which must come before any work)
		// so that a recovered panic is counted as the INTERNAL it became.
		// grpcutf8 answers INVALID_ARGUMENT, naming the field, for a request that could not be
		// decoded (invalid UTF-8, malformed protobuf), where grpc-go would answer INTERNAL.
		grpc.ForceServerCodecV2(grpcutf8.Codec()),
		grpc.ChainUnaryInterceptor(grpcrecv.UnaryServerInterceptor, metricsInterceptor(opts.Metrics), recoveryInterceptor(log), s.drainInterceptor, grpcutf8.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(grpcrecv.StreamServerInterceptor),
	}
	if cfg.MaxConcurrentStreams > 0 {
		sopts = append(sopts, grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams))
	}
	if cfg.RecvTimeout > 0 {
		sopts = append(sopts, grpc.InTapHandle(grpcrecv.TapHandle(cfg.RecvTimeout)))
	}
	s.gs = grpc.NewServer(sopts...)
	relevancev1.RegisterRankerServer(s.gs, &ranker{core: opts.Core})
	healthpb.RegisterHealthServer(s.gs, &drainingHealth{Server: s.health, stop: s.stopWatches})
	reflection.Register(s.gs)
	s.setHealth(opts.Core.Ready())
	go s.pollReadiness()
	return s, nil
}

// keepaliveMinTime is the EnforcementPolicy.MinTime for keepalive_min_time d. grpc-go replaces a
// MinTime of 0 with its 5 min default, the strictest policy, where the key's 0 means no minimum:
// the smallest positive interval is that.
func keepaliveMinTime(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// Serve answers RPCs on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc serve: %w", err)
	}
	return nil
}

// SetDraining reports NOT_SERVING from now on, so that clients and load balancers move away
// while in-flight RPCs finish.
func (s *Server) SetDraining() {
	s.stopOnce.Do(func() { close(s.stopPoll) })
	<-s.pollDone
	s.health.Shutdown() // NOT_SERVING for every service, and ignores later updates
}

// Shutdown drains: NOT_SERVING, no new RPCs, in-flight RPCs finish until ctx is done, after
// which the rest are cancelled and answered UNAVAILABLE (waiting up to answerGrace for those
// answers to go out), the connections closed, and ctx's error returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetDraining()
	s.watchOnce.Do(func() { close(s.stopWatches) })
	done := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// GracefulStop returns by itself once the cancelled calls have been answered.
		s.cancelBase()
		select {
		case <-done:
		case <-time.After(answerGrace):
			s.gs.Stop()
			<-done
		}
		return fmt.Errorf("grpc shutdown: %w", ctx.Err())
	}
}

// cancelled reports whether err is a cancellation's or a deadline's, as a call cut short ends.
func cancelled(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	c := status.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}

// drainInterceptor runs each call under the server's base context as well as its own, and
// answers one that a timed-out drain cancelled UNAVAILABLE.
func (s *Server) drainInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.baseCtx, cancel)
	defer stop()
	resp, err := handler(ctx, req)
	if err != nil && s.baseCtx.Err() != nil && cancelled(err) {
		// Cancelled by the drain: its error is the cancellation's, not the request's. (An
		// error of its own — INVALID_ARGUMENT — stays: a client told to retry it would be
		// refused again.)
		return nil, errDrainTimedOut
	}
	return resp, err
}

func (s *Server) pollReadiness() {
	defer close(s.pollDone)
	t := time.NewTicker(s.cfg.HealthPoll)
	defer t.Stop()
	for {
		select {
		case <-s.stopPoll:
			return
		case <-t.C:
			s.setHealth(s.core.Ready())
		}
	}
}

func (s *Server) setHealth(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rankerService, st)
}

// requestIDKey is the metadata key of a call's request id.
const requestIDKey = "x-request-id"

type ranker struct {
	relevancev1.UnimplementedRankerServer
	core front.Core
}

// Score answers a ScoreRequest. Its request id is the request's, else the caller's x-request-id
// metadata, else a fresh one; it goes back in the x-request-id header, on errors too, as the HTTP
// front's X-Request-Id does: a failed search is found in the proxy's logs by it.
func (r *ranker) Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if req.GetRequestId() == "" {
		if v := metadata.ValueFromIncomingContext(ctx, requestIDKey); len(v) > 0 && v[0] != "" && utf8.ValidString(v[0]) {
			req.RequestId = v[0]
		} else {
			req.RequestId = reqid.New()
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(requestIDKey, req.GetRequestId()))
	resp, err := r.core.Score(ctx, req)
	if err != nil {
		return nil, front.ToStatusError(err)
	}
	if resp == nil {
		return nil, status.Error(codes.Internal, "core returned no response")
	}
	return resp, nil
}

func recoveryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

func metricsInterceptor(m *front.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.ObserveGRPC(info.FullMethod, status.Code(err), time.Since(start))
		return resp, err
	}
}

// drainingHealth is grpc's health server whose Watch streams end when stop is closed. A Watch
// never ends by itself, and GracefulStop waits for every open stream: without this, one client
// watching health would hold every drain until its timeout.
type drainingHealth struct {
	*health.Server
	stop <-chan struct{}
}

// Watch implements healthpb.HealthServer.
func (h *drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(req, watchStream{Health_WatchServer: stream, ctx: ctx})
}

// watchStream is a Watch stream whose context also ends on drain.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }
