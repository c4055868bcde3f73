package serve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The benchmark's fasthttp client: sleeping cleaners that exit on their own.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}

type fakeCore struct {
	started, closed atomic.Bool
	// hold, when set, blocks Score until it is closed.
	hold    chan struct{}
	entered chan struct{}
}

func (c *fakeCore) Start(context.Context) error { c.started.Store(true); return nil }
func (c *fakeCore) Close() error                { c.closed.Store(true); return nil }
func (c *fakeCore) Ready() bool                 { return c.started.Load() && !c.closed.Load() }
func (c *fakeCore) NodesJSON() any              { return []string{"10.0.0.1:9000"} }
func (c *fakeCore) ServedModels() []string      { return []string{"qwen3-reranker", "rerank"} }

func (c *fakeCore) Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if c.hold != nil {
		c.entered <- struct{}{}
		<-c.hold
	}
	resp := &relevancev1.ScoreResponse{RequestId: "r"}
	for i := range req.GetItems() {
		resp.Scores = append(resp.Scores, &relevancev1.ItemScore{Index: uint32(i), Score: 0.5, Status: relevancev1.ItemStatus_ITEM_STATUS_OK})
	}
	return resp, nil
}

func testRunConfig() Config {
	cfg := DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.GRPC.HealthPoll = 10 * time.Millisecond
	cfg.Proxy.Nodes.Static = []string{"127.0.0.1:1"}
	return cfg
}

type running struct {
	httpURL  string
	grpcAddr string
	cancel   context.CancelFunc
	done     chan error
	reg      *prometheus.Registry
}

func startRun(t testing.TB, cfg Config, core *fakeCore) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), reg: prometheus.NewRegistry()}
	addrs := make(chan [2]net.Addr, 1)
	go func() {
		r.done <- Run(ctx, cfg, Options{
			NewCore: func(proxy.Config, prometheus.Registerer, *slog.Logger) (Core, error) { return core, nil },
			// The fake core registers nothing; the fronts' metrics go on this registry.
			Registry:  r.reg,
			Listening: func(h, g net.Addr) { addrs <- [2]net.Addr{h, g} },
		})
	}()
	select {
	case a := <-addrs:
		r.httpURL, r.grpcAddr = "http://"+a[0].String(), a[1].String()
	case err := <-r.done:
		cancel()
		t.Fatalf("Run returned before listening: %v", err)
	}
	return r
}

func get(t testing.TB, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRunServesBothFronts(t *testing.T) {
	core := &fakeCore{}
	r := startRun(t, testRunConfig(), core)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	if code, body := get(t, client, r.httpURL+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := get(t, client, r.httpURL+"/v1/nodes"); code != 200 || body != `["10.0.0.1:9000"]` {
		t.Errorf("/v1/nodes = %d %s", code, body)
	}
	resp, err := client.Post(r.httpURL+"/v2/rerank", "application/json", strings.NewReader(`{"model":"m","query":"q","documents":["a","b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/v2/rerank = %d", resp.StatusCode)
	}
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := relevancev1.NewRankerClient(conn).Score(ctx, &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "a"}}})
	conn.Close()
	if err != nil || len(got.GetScores()) != 1 {
		t.Errorf("Ranker.Score = %v, %v", got, err)
	}
	problems, err := testutil.GatherAndLint(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	if !core.closed.Load() {
		t.Error("core not closed after Run returned")
	}
}

// TestRunDrainsOnCancel is the SIGTERM path: cancel while a request is in the core; readiness
// must fail during the shutdown delay, the in-flight request must still succeed, Run returns nil.
func TestRunDrainsOnCancel(t *testing.T) {
	core := &fakeCore{hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	cfg := testRunConfig()
	cfg.Shutdown.Delay = time.Second
	r := startRun(t, cfg, core)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := client.Post(r.httpURL+"/v1/rerank", "application/json", strings.NewReader(`{"query":"q","documents":["a"]}`))
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-core.entered
	r.cancel() // as SIGTERM does through signal.NotifyContext
	// Readiness flips at once, while the listeners stay open for the delay.
	readyClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	deadline := time.Now().Add(800 * time.Millisecond)
	for {
		code, _ := get(t, readyClient, r.httpURL+"/readyz")
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after cancel", code)
		}
		time.Sleep(5 * time.Millisecond) // polling an external status; no event to wait on
	}
	close(core.hold)
	if code := <-got; code != 200 {
		t.Errorf("in-flight request = %d, want 200", code)
	}
	if err := <-r.done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if !core.closed.Load() {
		t.Error("core not closed")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	cfg := testRunConfig()
	cfg.Proxy.Nodes.Static = nil
	err := Run(context.Background(), cfg, Options{NewCore: func(proxy.Config, prometheus.Registerer, *slog.Logger) (Core, error) {
		t.Fatal("core built from an invalid config")
		return nil, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "proxy.nodes") {
		t.Errorf("Run = %v, want a proxy.nodes error", err)
	}
}

// cancelledCore blocks Score until its context ends (the drain's cancellation), then returns
// after the pipeline's unwinding, as the real core does.
type cancelledCore struct {
	fakeCore
	inScore       atomic.Int32
	closedInScore atomic.Bool
}

func (c *cancelledCore) Score(ctx context.Context, _ *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	c.inScore.Add(1)
	defer c.inScore.Add(-1)
	c.entered <- struct{}{}
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond) // node calls returning
	return nil, ctx.Err()
}

func (c *cancelledCore) Close() error {
	if c.inScore.Load() > 0 {
		c.closedInScore.Store(true)
	}
	return c.fakeCore.Close()
}

// runDrainingIn200ms runs the proxy on a cancelledCore with a 200 ms drain timeout and returns
// the core, the fronts' addresses, the cancel that starts the drain and Run's result.
func runDrainingIn200ms(t *testing.T) (core *cancelledCore, httpAddr, grpcAddr string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	core = &cancelledCore{fakeCore: fakeCore{entered: make(chan struct{}, 1)}}
	cfg := testRunConfig()
	cfg.Shutdown.Timeout = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan error, 1)
	addrs := make(chan [2]string, 1)
	go func() {
		ran <- Run(ctx, cfg, Options{Registry: prometheus.NewRegistry(),
			NewCore:   func(proxy.Config, prometheus.Registerer, *slog.Logger) (Core, error) { return core, nil },
			Listening: func(h, g net.Addr) { addrs <- [2]string{h.String(), g.String()} }})
	}()
	a := <-addrs
	return core, a[0], a[1], cancel, ran
}

// TestDrainTimeoutAnswersBeforeRunReturns: when the drain runs out of time with a request in
// flight, its core call is cancelled and the request answered 503 before Run closes the core and
// returns (and the process exits). Run used to close the core under the running call and return
// with the request unanswered: in the process its client read a reset.
func TestDrainTimeoutAnswersBeforeRunReturns(t *testing.T) {
	core, httpAddr, _, cancel, done := runDrainingIn200ms(t)
	url := "http://" + httpAddr
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	got := make(chan string, 1)
	go func() {
		resp, err := client.Post(url+"/v1/rerank", "application/json", strings.NewReader(`{"query":"q","documents":["a"]}`))
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.Status
	}()
	<-core.entered
	cancel()
	<-done
	if core.closedInScore.Load() {
		t.Error("the core was closed with a call still running in it (Run returned before its request was answered)")
	}
	if g := <-got; !strings.HasPrefix(g, "503") {
		t.Errorf("the in-flight request got %q, want 503", g)
	}
}

// TestGRPCDrainTimeoutAnswersBeforeRunReturns: a Ranker/Score call still running when the drain
// runs out of time is answered UNAVAILABLE by the server before Run closes the core and returns.
// The front used to tear its connections down (grpc.Server.Stop) under the call, whose client
// read a broken transport, and the core was closed with the call still in it.
func TestGRPCDrainTimeoutAnswersBeforeRunReturns(t *testing.T) {
	core, _, grpcAddr, cancel, done := runDrainingIn200ms(t)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_, err := relevancev1.NewRankerClient(conn).Score(cctx, &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "a"}}})
		got <- err
	}()
	<-core.entered
	cancel()
	<-done
	if core.closedInScore.Load() {
		t.Error("the core was closed with a gRPC call still running in it")
	}
	st := status.Convert(<-got)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
		t.Errorf("the in-flight call got %v %q, want the server's UNAVAILABLE answer", st.Code(), st.Message())
	}
}

// TestShutdownAsTheProxyStartsReturns: a SIGTERM as the proxy starts listening (before the HTTP
// Serve has taken its listener) still ends Run within the drain timeout, every time: it used to
// hang in a few runs in forty, serving until killed.
func TestShutdownAsTheProxyStartsReturns(t *testing.T) {
	for i := range 40 {
		cfg := testRunConfig()
		cfg.Shutdown.Timeout = 300 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, cfg, Options{Registry: prometheus.NewRegistry(),
				NewCore:   func(proxy.Config, prometheus.Registerer, *slog.Logger) (Core, error) { return &fakeCore{}, nil },
				Listening: func(net.Addr, net.Addr) { cancel() }})
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d: Run has not returned 5 s after a cancel at start (drain timeout 300 ms)", i)
		}
	}
}

// runFronts starts Run with cfg and opts until the returned stop is called, and returns the HTTP
// and gRPC addresses the fronts listen on; stop cancels Run and fails the test if it returned an
// error. opts.Listening is its own.
func runFronts(t *testing.T, cfg Config, opts Options) (httpAddr, grpcAddr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ http, grpc string }
	listening := make(chan addrs, 1)
	done := make(chan error, 1)
	opts.Listening = func(h, g net.Addr) { listening <- addrs{h.String(), g.String()} }
	go func() { done <- Run(ctx, cfg, opts) }()
	select {
	case a := <-listening:
		return a.http, a.grpc, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
		return "", "", nil
	}
}
