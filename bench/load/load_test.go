package load

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/relevance-scoring/relevance/bench/workload"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func smallTrace(t testing.TB) *workload.Trace {
	t.Helper()
	s := workload.Default()
	s.Items = workload.Dist{Kind: "uniform", Min: 2, Max: 5}
	s.ItemTokens = workload.Dist{Kind: "const", Value: 20}
	s.TraceSize = 8
	tr, err := workload.New(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// rerankServer answers /v1/rerank like the proxy after handle decides what to do with request n.
func rerankServer(t testing.TB, handle func(n int64, w http.ResponseWriter) bool) *httptest.Server {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Documents []string `json:"documents"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if handle != nil && !handle(n.Add(1), w) {
			return
		}
		type res struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		}
		out := struct {
			Results []res `json:"results"`
		}{}
		for i := range req.Documents {
			out.Results = append(out.Results, res{i, 0.5})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newTarget(t testing.TB, url string, conns int) Target {
	t.Helper()
	tg, err := NewTarget(url, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// TestOpenLoopKeepsSchedule: a server that handles one request at a time falls behind; the open
// loop must still send every scheduled request on time and charge the queueing to latency.
func TestOpenLoopKeepsSchedule(t *testing.T) {
	const service = 20 * time.Millisecond
	var mu sync.Mutex
	var arrivals []time.Time
	srv := rerankServer(t, func(_ int64, _ http.ResponseWriter) bool {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		time.Sleep(service) // the server is the bottleneck: serialised work
		mu.Unlock()
		return true
	})
	cfg := Config{Target: newTarget(t, srv.URL, 100), Trace: smallTrace(t), Rate: 150, Duration: 400 * time.Millisecond, Seed: 3}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sched := Schedule(150, 400*time.Millisecond, 3)
	if res.Requests != int64(len(sched)) || res.Errors != 0 {
		t.Fatalf("requests %d errors %d %v, want all %d scheduled requests answered", res.Requests, res.Errors, res.ErrorsBy, len(sched))
	}
	// n requests of 20 ms serialised end n·20 ms after the first arrival while the last was
	// intended at ~0.4 s: its latency from the intended time must show the backlog.
	backlog := time.Duration(len(sched))*service - sched[len(sched)-1]
	if backlog < 100*time.Millisecond {
		t.Fatalf("test setup: backlog %v too small to measure", backlog)
	}
	if got := time.Duration(res.MaxMs * float64(time.Millisecond)); got < backlog*8/10 {
		t.Errorf("max latency %v, want ≥ %v: queueing behind the slow server is hidden", got, backlog*8/10)
	}
	if res.P99ms <= res.P50ms || res.P50ms < float64(service/time.Millisecond) {
		t.Errorf("p50 %.1f p99 %.1f ms: latency does not include the wait", res.P50ms, res.P99ms)
	}
	// The sender must not have slowed down: all arrivals reached the server (they queue there).
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != len(sched) {
		t.Errorf("server saw %d requests, want %d", len(arrivals), len(sched))
	}
}

func TestOpenLoopOverflow(t *testing.T) {
	release := make(chan struct{})
	srv := rerankServer(t, func(_ int64, _ http.ResponseWriter) bool { <-release; return true })
	cfg := Config{Target: newTarget(t, srv.URL, 4), Trace: smallTrace(t), Rate: 200, Duration: 200 * time.Millisecond,
		MaxInFlight: 2, Seed: 1}
	go func() { time.Sleep(300 * time.Millisecond); close(release) }()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 2 || res.ErrorsBy[KindOverflow] != res.Requests-2 || res.ErrorsBy[KindOverflow] == 0 {
		t.Fatalf("ok %d, errors %v of %d requests; want 2 sent and the rest overflow", res.OK, res.ErrorsBy, res.Requests)
	}
}

func TestClosedLoop(t *testing.T) {
	var inflight, peak atomic.Int64
	srv := rerankServer(t, func(_ int64, _ http.ResponseWriter) bool {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		inflight.Add(-1)
		return true
	})
	cfg := Config{Target: newTarget(t, srv.URL, 3), Trace: smallTrace(t), Concurrency: 3, Duration: 300 * time.Millisecond}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if peak.Load() > 3 {
		t.Errorf("peak concurrency at the server %d, want ≤ 3", peak.Load())
	}
	// 3 workers × 300 ms / ≥10 ms each: at most 90 requests (+1 in flight per worker). The floor
	// only says every worker kept going: a loaded machine under -race can slow each request a lot.
	if res.Requests > 93 || res.Requests < 6 || res.Errors != 0 {
		t.Errorf("requests %d errors %d, want 6..93 without errors", res.Requests, res.Errors)
	}
	if res.P50ms < 10 {
		t.Errorf("p50 %.2f ms, below the server's 10 ms", res.P50ms)
	}
	if res.Mode != "closed" || res.ThroughputRPS <= 0 || res.ItemsPerSec < 2*res.ThroughputRPS {
		t.Errorf("mode %q throughput %.1f items/s %.1f", res.Mode, res.ThroughputRPS, res.ItemsPerSec)
	}
}

func TestErrorKinds(t *testing.T) {
	srv := rerankServer(t, func(n int64, w http.ResponseWriter) bool {
		switch n % 4 {
		case 1:
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"overloaded"}`, http.StatusTooManyRequests)
			return false
		case 2:
			http.Error(w, "no nodes", http.StatusServiceUnavailable)
			return false
		case 3:
			_, _ = io.WriteString(w, `{"results":[]}`)
			return false
		}
		return true
	})
	cfg := Config{Target: newTarget(t, srv.URL, 1), Trace: smallTrace(t), Concurrency: 1, Duration: 150 * time.Millisecond}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests < 8 {
		t.Fatalf("only %d requests", res.Requests)
	}
	// Requests cycle through the four answers in order (one worker).
	want := map[string]int64{"http_429": (res.Requests + 3) / 4, "http_503": (res.Requests + 2) / 4, KindBadResponse: (res.Requests + 1) / 4}
	if diff := cmp.Diff(want, res.ErrorsBy); diff != "" {
		t.Errorf("errors by kind (-want +got):\n%s", diff)
	}
	if res.OK != res.Requests/4 || res.Errors != res.Requests-res.OK {
		t.Errorf("ok %d errors %d of %d", res.OK, res.Errors, res.Requests)
	}
}

func TestTimeoutAndConnectionErrors(t *testing.T) {
	block := make(chan struct{})
	srv := rerankServer(t, func(_ int64, _ http.ResponseWriter) bool { <-block; return true })
	defer close(block)
	cfg := Config{Target: newTarget(t, srv.URL, 1), Trace: smallTrace(t), Concurrency: 1, Duration: 50 * time.Millisecond, Timeout: 30 * time.Millisecond}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorsBy[KindTimeout] == 0 || res.OK != 0 {
		t.Errorf("errors %v ok %d, want timeouts only", res.ErrorsBy, res.OK)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg = Config{Target: newTarget(t, "http://"+addr+"/v1/rerank", 1), Trace: smallTrace(t), Concurrency: 1, Duration: 30 * time.Millisecond}
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorsBy[KindConnection] == 0 || res.ErrorsBy[KindConnection] != res.Errors {
		t.Errorf("errors %v, want connection errors", res.ErrorsBy)
	}
}

func TestResultJSONContract(t *testing.T) {
	srv := rerankServer(t, nil)
	res, err := Run(context.Background(), Config{Target: newTarget(t, srv.URL, 2), Trace: smallTrace(t), Rate: 100, Duration: 100 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p50_ms", "p99_ms", "throughput_rps", "errors", "goodput_rps", "p90_ms", "p999_ms", "items_per_s", "errors_by_kind"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result JSON lacks %q", k)
		}
	}
	if m["p50_ms"].(float64) <= 0 || m["goodput_rps"].(float64) <= 0 {
		t.Errorf("p50_ms %v goodput_rps %v, want > 0", m["p50_ms"], m["goodput_rps"])
	}
}

func TestConfigErrors(t *testing.T) {
	tr := smallTrace(t)
	tg := newTarget(t, "http://127.0.0.1:1/v1/rerank", 1)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no mode", Config{Target: tg, Trace: tr, Duration: time.Second}},
		{"no duration", Config{Target: tg, Trace: tr, Rate: 1}},
		{"negative rate", Config{Target: tg, Trace: tr, Rate: -1, Duration: time.Second}},
		{"warmup too long", Config{Target: tg, Trace: tr, Rate: 1, Duration: time.Second, Warmup: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tt.cfg); err == nil {
				t.Fatal("no error")
			}
		})
	}
	for _, u := range []string{"ftp://x:1", "http://x:1/v9/nope", "localhost"} {
		if _, err := NewTarget(u, 1); err == nil {
			t.Errorf("NewTarget(%q): no error", u)
		}
	}
}

type fakeRanker struct {
	relevancev1.UnimplementedRankerServer
	calls atomic.Int64
}

func (f *fakeRanker) Score(_ context.Context, r *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if f.calls.Add(1)%3 == 0 {
		return nil, status.Error(codes.ResourceExhausted, "shed")
	}
	out := &relevancev1.ScoreResponse{}
	for i := range r.Items {
		out.Scores = append(out.Scores, &relevancev1.ItemScore{Index: uint32(i), Score: 0.5})
	}
	return out, nil
}

func TestGRPCTarget(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	relevancev1.RegisterRankerServer(s, &fakeRanker{})
	go s.Serve(l)
	defer s.Stop()
	tg := newTarget(t, "grpc://"+l.Addr().String(), 1)
	res, err := Run(context.Background(), Config{Target: tg, Trace: smallTrace(t), Concurrency: 1, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK == 0 || res.ErrorsBy["grpc_resourceexhausted"] != res.Requests/3 {
		t.Errorf("ok %d errors %v of %d, want every third resource_exhausted", res.OK, res.ErrorsBy, res.Requests)
	}
}

func TestParseNodes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []NodeSample
	}{
		{"array", `[{"id":"n1","inflight_cost_seconds":0.5,"inflight":3},{"id":"n2","inflight_cost_seconds":0}]`,
			[]NodeSample{{Node: "n1", Load: 0.5}, {Node: "n2", Load: 0}}},
		{"object", `{"nodes":[{"addr":"127.0.0.1:1","in_flight":2}]}`, []NodeSample{{Node: "127.0.0.1:1", Load: 2}}},
		{"garbage", `nope`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseNodes([]byte(tt.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestScheduleRate(t *testing.T) {
	s := Schedule(1000, 2*time.Second, 9)
	if n := len(s); n < 1850 || n > 2150 {
		t.Errorf("%d arrivals in 2 s at 1000/s", n)
	}
	if diff := cmp.Diff(s, Schedule(1000, 2*time.Second, 9)); diff != "" {
		t.Error("schedule not deterministic by seed")
	}
}

// TestNoScoreCacheAsksEveryShapeToBypassTheCache: with NoScoreCache every request asks the
// proxy to skip its score cache in the shape's own words ("cache": false on the rerank shapes,
// options.no_cache on /v1/score and gRPC), and without it none does.
func TestNoScoreCacheAsksEveryShapeToBypassTheCache(t *testing.T) {
	r := &workload.Request{Query: "q", Items: []string{"a", "b"}}
	prepare := func(url string, off bool) Prepared {
		t.Helper()
		var opts []TargetOption
		if off {
			opts = append(opts, NoScoreCache())
		}
		tg, err := NewTarget(url, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		p, err := tg.Prepare(r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, off := range []bool{false, true} {
		for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank", "/v1/score"} {
			p := prepare("http://127.0.0.1:1"+path, off)
			var got bool
			if path == "/v1/score" {
				var m relevancev1.ScoreRequest
				if err := protojson.Unmarshal(p.Body(), &m); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				got = m.GetOptions().GetNoCache()
			} else {
				var m struct {
					Cache *bool `json:"cache"`
				}
				if err := json.Unmarshal(p.Body(), &m); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				got = m.Cache != nil && !*m.Cache
			}
			if got != off {
				t.Errorf("%s, NoScoreCache %v: body %s asks to bypass the cache: %v", path, off, p.Body(), got)
			}
		}
		if got := prepare("grpc://127.0.0.1:1", off).grpc.GetOptions().GetNoCache(); got != off {
			t.Errorf("grpc, NoScoreCache %v: options.no_cache %v", off, got)
		}
	}
}
