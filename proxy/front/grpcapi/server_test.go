package grpcapi

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/request"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeCore struct {
	ready atomic.Bool
	fn    func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error)
}

func (c *fakeCore) Ready() bool { return c.ready.Load() }

func (c *fakeCore) Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	return c.fn(ctx, req)
}

func echoScores(_ context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	resp := &relevancev1.ScoreResponse{RequestId: req.GetRequestId(), Model: "tiny"}
	for i, it := range req.GetItems() {
		resp.Scores = append(resp.Scores, &relevancev1.ItemScore{Index: uint32(i), Id: it.GetId(), Score: float32(i+1) / 10,
			Status: relevancev1.ItemStatus_ITEM_STATUS_OK})
	}
	return resp, nil
}

type env struct {
	srv    *Server
	reg    *prometheus.Registry
	conn   *grpc.ClientConn
	served chan error
}

func start(t testing.TB, cfg Config, core *fakeCore) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := front.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Core: core, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, reg: reg, served: make(chan error, 1)}
	go func() { e.served <- srv.Serve(ln) }()
	e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-e.served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return e
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.HealthPoll = 10 * time.Millisecond
	return cfg
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestScore(t *testing.T) {
	core := &fakeCore{fn: echoScores}
	core.ready.Store(true)
	e := start(t, testConfig(), core)
	req := &relevancev1.ScoreRequest{RequestId: "r1", Query: "q", Items: []*relevancev1.Item{{Id: "a", Text: "x"}, {Id: "b", Text: "y"}}}
	got, err := relevancev1.NewRankerClient(e.conn).Score(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := echoScores(context.Background(), req)
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("reply (-want +got):\n%s", d)
	}
}

func TestScoreErrors(t *testing.T) {
	overloaded, _ := status.New(codes.ResourceExhausted, "projected 2s > deadline").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	tests := []struct {
		name     string
		fn       func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error)
		code     codes.Code
		msg      string
		field    string // the BadRequest field violation's, when set
		retryFor time.Duration
	}{
		{name: "invalid keeps its field violation", code: codes.InvalidArgument, msg: "items[3].text: 40000 bytes, limit 32768",
			field: "items[3].text",
			fn: func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
				return nil, request.FieldError("items[3].text", "40000 bytes, limit 32768")
			}},
		{name: "overloaded keeps RetryInfo", code: codes.ResourceExhausted, msg: "projected 2s > deadline", retryFor: time.Second,
			fn: func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
				return nil, overloaded.Err()
			}},
		{name: "bare context error", code: codes.DeadlineExceeded, msg: "batch 2: context deadline exceeded",
			fn: func(ctx context.Context, _ *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
				return nil, fmt.Errorf("batch 2: %w", context.DeadlineExceeded)
			}},
		{name: "panic", code: codes.Internal, msg: "internal error",
			fn: func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
				panic("fake core panic")
			}},
		{name: "nil response", code: codes.Internal, msg: "core returned no response",
			fn: func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) { return nil, nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core := &fakeCore{fn: tc.fn}
			e := start(t, testConfig(), core)
			_, err := relevancev1.NewRankerClient(e.conn).Score(ctxT(t), &relevancev1.ScoreRequest{Query: "q"})
			st := status.Convert(err)
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("error = %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
			if tc.field != "" {
				if field, _, ok := request.Violation(err); !ok || field != tc.field {
					t.Errorf("Violation = %q, %v; want %q", field, ok, tc.field)
				}
			}
			if tc.retryFor > 0 {
				if f := front.Classify(err); f.RetryAfter != tc.retryFor || f.HTTPStatus != 429 {
					t.Errorf("Classify = %+v, want 429 retry after %s", f, tc.retryFor)
				}
			}
		})
	}
}

func TestDeadlineReachesCore(t *testing.T) {
	var left time.Duration
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "no deadline")
		}
		left = time.Until(dl)
		return echoScores(ctx, req)
	}}
	e := start(t, testConfig(), core)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if _, err := relevancev1.NewRankerClient(e.conn).Score(ctx, &relevancev1.ScoreRequest{Query: "q"}); err != nil {
		t.Fatal(err)
	}
	if left > 400*time.Millisecond || left < 100*time.Millisecond {
		t.Errorf("deadline left at the core = %s, want about 400ms", left)
	}
}

func TestMaxRecvBytes(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRecvBytes = 1 << 10
	e := start(t, cfg, &fakeCore{fn: echoScores})
	_, err := relevancev1.NewRankerClient(e.conn).Score(ctxT(t), &relevancev1.ScoreRequest{Query: strings.Repeat("q", 4<<10)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversize request: %v, want ResourceExhausted", err)
	}
}

// TestHealthFollowsReadiness watches grpc.health.v1 while the core's readiness flips, then
// drains: the stream must end on NOT_SERVING.
func TestHealthFollowsReadiness(t *testing.T) {
	core := &fakeCore{fn: echoScores}
	e := start(t, testConfig(), core)
	for _, svc := range []string{"", "relevance.v1.Ranker"} {
		t.Run("service="+svc, func(t *testing.T) {
			core.ready.Store(false)
			stream, err := healthpb.NewHealthClient(e.conn).Watch(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				t.Fatal(err)
			}
			next := func(want healthpb.HealthCheckResponse_ServingStatus) {
				t.Helper()
				for {
					r, err := stream.Recv()
					if err != nil {
						t.Fatalf("watch: %v", err)
					}
					if r.GetStatus() == want {
						return
					}
				}
			}
			next(healthpb.HealthCheckResponse_NOT_SERVING)
			core.ready.Store(true)
			next(healthpb.HealthCheckResponse_SERVING)
			core.ready.Store(false)
			next(healthpb.HealthCheckResponse_NOT_SERVING)
			core.ready.Store(true)
			next(healthpb.HealthCheckResponse_SERVING)
		})
	}
	e.srv.SetDraining()
	r, err := healthpb.NewHealthClient(e.conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after SetDraining: %v %v, want NOT_SERVING", r.GetStatus(), err)
	}
}

func TestReflectionListsRanker(t *testing.T) {
	e := start(t, testConfig(), &fakeCore{fn: echoScores})
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"relevance.v1.Ranker", "grpc.health.v1.Health"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

// TestShutdownDrains: an RPC in the core when Shutdown starts completes; Shutdown waits for it.
func TestShutdownDrains(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		close(entered)
		<-release
		return echoScores(ctx, req)
	}}
	e := start(t, testConfig(), core)
	errc := make(chan error, 1)
	go func() {
		_, err := relevancev1.NewRankerClient(e.conn).Score(context.Background(), &relevancev1.ScoreRequest{Query: "q"})
		errc <- err
	}()
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- e.srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with an RPC in flight", err)
	case <-time.After(50 * time.Millisecond): // only to give Shutdown a chance to return early
	}
	close(release)
	if err := <-errc; err != nil {
		t.Errorf("in-flight RPC: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		if req.GetQuery() == "panic" {
			panic("fake core panic") // recovered: counted as Internal
		}
		return echoScores(ctx, req)
	}}
	e := start(t, testConfig(), core)
	client := relevancev1.NewRankerClient(e.conn)
	if _, err := client.Score(ctxT(t), &relevancev1.ScoreRequest{Query: "q"}); err != nil {
		t.Fatal(err)
	}
	_, _ = client.Score(ctxT(t), &relevancev1.ScoreRequest{Query: "panic"})
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP relevance_proxy_requests_total Requests answered by the proxy fronts, by route (HTTP path or gRPC method) and code (HTTP status or gRPC code).
# TYPE relevance_proxy_requests_total counter
relevance_proxy_requests_total{code="Internal",route="/relevance.v1.Ranker/Score"} 1
relevance_proxy_requests_total{code="OK",route="/relevance.v1.Ranker/Score"} 1
`), "relevance_proxy_requests_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{name: "ok", edit: func(*Config) {}},
		{name: "addr", edit: func(c *Config) { c.Addr = "" }, want: `grpc.addr: must be host:port, got ""`},
		{name: "recv", edit: func(c *Config) { c.MaxRecvBytes = -1 }, want: "grpc.max_recv_bytes: must be > 0, got -1"},
		{name: "send", edit: func(c *Config) { c.MaxSendBytes = 0 }, want: "grpc.max_send_bytes: must be > 0, got 0"},
		{name: "poll", edit: func(c *Config) { c.HealthPoll = 0 }, want: "grpc.health_poll: must be > 0, got 0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestShutdownEndsHealthWatches: grpc.health.v1 Watch streams are long-lived RPCs that
// GracefulStop would wait for; a client (or load balancer) watching health must not hold a drain
// until its timeout. The watcher sees NOT_SERVING, then its stream ends.
func TestShutdownEndsHealthWatches(t *testing.T) {
	core := &fakeCore{fn: echoScores}
	core.ready.Store(true)
	e := start(t, testConfig(), core)
	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := healthpb.NewHealthClient(e.conn).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch reply %v, %v; want SERVING", r, err)
	}
	ctx, cancelShut := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelShut()
	start := time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown with a health watcher: %v (after %v)", err, time.Since(start))
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			break
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch reply during drain %v, want NOT_SERVING", r.GetStatus())
		}
	}
}

// rawCodec sends pre-encoded bytes, so that a test can put what protobuf-go's Marshal refuses to
// write (invalid UTF-8, malformed wire data) on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestUndecodableRequestIsInvalidArgument: bytes that are not a ScoreRequest (malformed protobuf)
// or hold invalid UTF-8 are the client's fault: INVALID_ARGUMENT naming the field (canonically, in
// an errdetails.BadRequest as the core's own errors carry it), counted as such, and the core is
// never called.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	var calls atomic.Int32
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		calls.Add(1)
		return echoScores(ctx, req)
	}}
	e := start(t, testConfig(), core)
	str := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	item := func(text string) []byte { return str(nil, 2, text) }
	msg := func(query string, items ...[]byte) []byte {
		b := str(nil, 2, query)
		for _, it := range items {
			b = protowire.AppendBytes(protowire.AppendTag(b, 4, protowire.BytesType), it)
		}
		return b
	}
	tests := []struct {
		name  string
		req   []byte
		field string // "" means OK
		want  string
	}{
		{"valid", msg("q", item("a")), "", ""},
		{"bad query", msg("q\xff", item("a")), "query", "invalid UTF-8"},
		{"bad second item", msg("q", item("a"), item("\xc3\x28")), "items[1].text", "invalid UTF-8"},
		{"truncated length", []byte{0x12, 0x7f, 'q'}, "query", "malformed protobuf: unexpected EOF"},
		{"truncated tag", append(msg("q", item("a")), 0x80), "request", "malformed protobuf: unexpected EOF"},
		{"field number zero", []byte{0x00, 0x01}, "request", "malformed protobuf: invalid field number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			out := new(relevancev1.ScoreResponse)
			err := e.conn.Invoke(ctxT(t), relevancev1.Ranker_Score_FullMethodName, tc.req, out, grpc.ForceCodec(rawCodec{}))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid request: %v", err)
				}
				return
			}
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.field+": "+tc.want {
				t.Errorf("error = %v %q, want InvalidArgument %q", st.Code(), st.Message(), tc.field+": "+tc.want)
			}
			if field, problem, ok := request.Violation(err); !ok || field != tc.field || problem != tc.want {
				t.Errorf("Violation = %q, %q, %v; want %q, %q", field, problem, ok, tc.field, tc.want)
			}
			if calls.Load() != before {
				t.Error("the core was called")
			}
		})
	}
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP relevance_proxy_requests_total Requests answered by the proxy fronts, by route (HTTP path or gRPC method) and code (HTTP status or gRPC code).
# TYPE relevance_proxy_requests_total counter
relevance_proxy_requests_total{code="InvalidArgument",route="/relevance.v1.Ranker/Score"} 5
relevance_proxy_requests_total{code="OK",route="/relevance.v1.Ranker/Score"} 1
`), "relevance_proxy_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestDrainTimeoutKeepsARequestsOwnError: after a drain timed out, a call that fails for a
// reason of its own (INVALID_ARGUMENT) keeps its error; only the calls the drain cut short are
// answered UNAVAILABLE ("send it again"), which for a bad request would only be refused again.
func TestDrainTimeoutKeepsARequestsOwnError(t *testing.T) {
	s := &Server{}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	s.cancelBase()
	info := &grpc.UnaryServerInfo{FullMethod: "/relevance.v1.Ranker/Score"}
	own := status.Error(codes.InvalidArgument, "items: at least one item is required")
	if _, err := s.drainInterceptor(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, own }); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad request after the drain timed out got %v, want its own INVALID_ARGUMENT", err)
	}
	cut := func(ctx context.Context, _ any) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
	if _, err := s.drainInterceptor(context.Background(), nil, info, cut); status.Code(err) != codes.Unavailable {
		t.Errorf("a call the drain cut short got %v, want UNAVAILABLE", err)
	}
}
