package grpcrecv_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/grpcrecv"
	"github.com/relevance-scoring/relevance/internal/rawh2"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 300 * time.Millisecond

// healthSrv is grpc's health server whose Check waits hold, then answers with its context's
// error (nil: the call was not cut off), and reports each call on called.
type healthSrv struct {
	*health.Server
	hold   time.Duration
	called chan struct{}
}

func (h *healthSrv) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.called <- struct{}{}
	select {
	case <-time.After(h.hold):
	case <-ctx.Done():
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return h.Server.Check(ctx, req)
}

// serve runs a gRPC server with the receive timeout d (0: no tap, interceptors only) and the
// health service, and returns its address and the service.
func serve(t *testing.T, d time.Duration, hold time.Duration) (string, *healthSrv) {
	t.Helper()
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpcrecv.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(grpcrecv.StreamServerInterceptor),
	}
	if d > 0 {
		opts = append(opts, grpc.InTapHandle(grpcrecv.TapHandle(d)))
	}
	gs := grpc.NewServer(opts...)
	h := &healthSrv{Server: health.NewServer(), hold: hold, called: make(chan struct{}, 16)}
	healthpb.RegisterHealthServer(gs, h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return ln.Addr().String(), h
}

// TestStalledUnaryMessageIsCutOff: a unary call whose request message never finishes arriving
// (headers, part of the message, then nothing; no deadline) is ended within the timeout, and its
// handler never runs.
func TestStalledUnaryMessageIsCutOff(t *testing.T) {
	addr, h := serve(t, timeout, 0)
	r := rawh2.Dial(t, addr)
	r.Open(1, healthpb.Health_Check_FullMethodName)
	r.SendPartial(1, 1000, 10)
	f, took, ok := r.WaitEnd(1, 3*time.Second)
	if !ok {
		t.Fatalf("stream with a stalled request message still open after %s (timeout %s)", took.Round(time.Millisecond), timeout)
	}
	t.Logf("stream ended after %s: trailers %v, RST_STREAM %v", took.Round(time.Millisecond), f.Ended, f.RST)
	if took < timeout*3/4 || took > 2*time.Second {
		t.Errorf("stream ended after %s, want about the timeout (%s)", took, timeout)
	}
	select {
	case <-h.called:
		t.Error("the handler ran for a request that never arrived")
	default:
	}
}

// TestSilentStreamIsCutOff: a streaming call whose client never sends its first message is
// ended within the timeout.
func TestSilentStreamIsCutOff(t *testing.T) {
	addr, _ := serve(t, timeout, 0)
	r := rawh2.Dial(t, addr)
	r.Open(1, healthpb.Health_Watch_FullMethodName)
	if _, took, ok := r.WaitEnd(1, 3*time.Second); !ok {
		t.Fatalf("stream with no message still open after %s (timeout %s)", took.Round(time.Millisecond), timeout)
	}
}

// TestArrivedMessageIsNotCutOff: once a call's message has arrived the timer is stopped: a unary
// handler and a stream that outlive the timeout several times over are not cancelled.
func TestArrivedMessageIsNotCutOff(t *testing.T) {
	addr, h := serve(t, timeout, 3*timeout)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check holding %s after its message arrived: %v", 3*timeout, err)
	}

	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the initial status (SERVICE_UNKNOWN)
		t.Fatal(err)
	}
	time.Sleep(3 * timeout)
	h.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	resp, err := w.Recv()
	if err != nil {
		t.Fatalf("Watch open %s after its first message: %v", 3*timeout, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch got %v, want SERVING", resp.GetStatus())
	}
}

// TestNoTapNoTimer: without the tap the interceptors pass calls through untouched: a stalled
// message is not cut off (the server's other bounds apply), and Stop reports no timer.
func TestNoTapNoTimer(t *testing.T) {
	addr, _ := serve(t, 0, 0)
	r := rawh2.Dial(t, addr)
	r.Open(1, healthpb.Health_Check_FullMethodName)
	r.SendPartial(1, 1000, 10)
	if _, _, ok := r.WaitEnd(1, 3*timeout); ok {
		t.Error("stream ended with no receive timeout installed")
	}
	if grpcrecv.Stop(context.Background()) {
		t.Error("Stop reported a timer on a context without one")
	}
}

// TestStopAfterFiring: Stop reports false once the timer has fired, and the call's context is
// then cancelled.
func TestStopAfterFiring(t *testing.T) {
	ctx, err := grpcrecv.TapHandle(time.Millisecond)(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if grpcrecv.Stop(ctx) {
		t.Error("Stop reported a timer stopped after it fired")
	}
	if status.FromContextError(ctx.Err()).Code() != codes.Canceled {
		t.Errorf("ctx.Err() = %v, want Canceled", ctx.Err())
	}
}
