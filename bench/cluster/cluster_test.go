package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as the fake scorer and proxy: linked into a temp bin dir under those
// names and started with BENCH_FAKE_CHILD=1, it serves /readyz (and /v1/rerank for the proxy)
// on its --http-addr until SIGTERM.
func TestMain(m *testing.M) {
	if os.Getenv("BENCH_FAKE_CHILD") == "1" {
		os.Exit(fakeChild(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func fakeChild(args []string) int {
	name := filepath.Base(os.Args[0])
	var httpAddr string
	for i, a := range args {
		if a == "--http-addr" && i+1 < len(args) {
			httpAddr = args[i+1]
		}
	}
	fmt.Println(name, "starting", strings.Join(args, " "))
	if os.Getenv("BENCH_FAKE_FAIL") == name {
		fmt.Println("fatal: cannot load model: boom")
		return 3
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/v1/rerank", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Documents []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		fmt.Fprint(w, `{"results":[{"index":2,"relevance_score":0.9},{"index":0,"relevance_score":0.8}]}`)
	})
	srv := &http.Server{Addr: httpAddr, Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; fmt.Println(name, "stopping"); srv.Close() }()
	_ = srv.ListenAndServe()
	return 0
}

func fakeBinDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"scorer", "proxy"} {
		if err := os.Symlink(self, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("BENCH_FAKE_CHILD", "1")
	return dir
}

func testConfig(t *testing.T) Config {
	t.Helper()
	httpPort, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	grpcPort, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{BinDir: fakeBinDir(t), LogDir: t.TempDir(), ReadyTimeout: 20 * time.Second,
		Nodes: Nodes{Count: 3, Engine: "emulated", CostProfile: "p.json"},
		Proxy: Proxy{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", httpPort), GRPCAddr: fmt.Sprintf("127.0.0.1:%d", grpcPort), Split: "cost", Route: "least_loaded"}}
	cfg.Defaults()
	return cfg
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestClusterLifecycle(t *testing.T) {
	cfg := testConfig(t)
	c, err := New(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.StartNodes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartProxy(ctx, cfg.Proxy, "proxy"); err != nil {
		t.Fatal(err)
	}
	got, err := SelfTest(ctx, cfg.Proxy.HTTPAddr, 5*time.Second)
	if err != nil || !strings.Contains(got, "#2 0.9000") {
		t.Fatalf("self-test %q, %v", got, err)
	}
	var pids []int
	for _, n := range c.Nodes() {
		pids = append(pids, n.Pid())
	}
	b, err := os.ReadFile(filepath.Join(cfg.LogDir, "node-1.log"))
	if err != nil || !strings.Contains(string(b), "--engine emulated --cost-profile p.json") {
		t.Errorf("node-1 log %q, %v: want the node's flags", b, err)
	}

	// A node that dies makes Wait return with its last lines.
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := c.Wait(ctx)
	if werr == nil || !strings.Contains(werr.Error(), "node-1 exited") || !strings.Contains(werr.Error(), "scorer starting serve") {
		t.Fatalf("Wait: %v, want node-1's exit with its log tail", werr)
	}
	c.Stop()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still alive after Stop", pid)
		}
	}
	b, _ = os.ReadFile(filepath.Join(cfg.LogDir, "node-0.log"))
	if !strings.Contains(string(b), "scorer stopping") {
		t.Errorf("node-0 was not stopped with SIGTERM first: log %q", b)
	}
}

// TestSuperviseRestartsDeadNode: under Supervise a node that dies is restarted with the same
// arguments while the proxy keeps answering; Stop afterwards leaves nothing running.
func TestSuperviseRestartsDeadNode(t *testing.T) {
	cfg := testConfig(t)
	cfg.Nodes.Count = 2
	defer func(d time.Duration) { RestartDelay = d }(RestartDelay)
	RestartDelay = 10 * time.Millisecond
	var log syncBuffer
	c, err := New(cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.StartNodes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartProxy(ctx, cfg.Proxy, "proxy"); err != nil {
		t.Fatal(err)
	}
	sctx, stopSupervising := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Supervise(sctx) }()
	old := c.Nodes()[1].Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for c.Nodes()[1].Restarts == 0 {
		select {
		case err := <-done:
			t.Fatalf("Supervise returned %v after a node died; want it restarted", err)
		case <-ctx.Done():
			t.Fatalf("node-1 not restarted; log:\n%s", log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	nd := c.Nodes()[1]
	if nd.Pid() == old {
		t.Fatal("restarted node has the old pid")
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := WaitReady(rctx, nd.Proc, "http://"+nd.HTTPAddr+"/readyz"); err != nil {
		t.Fatalf("restarted node not ready: %v", err)
	}
	if _, err := SelfTest(ctx, cfg.Proxy.HTTPAddr, 5*time.Second); err != nil {
		t.Errorf("proxy after the restart: %v", err)
	}
	if !strings.Contains(log.String(), "node-1 exited") || !strings.Contains(log.String(), "node-1 restarted") {
		t.Errorf("log %q: want the exit and the restart reported", log.String())
	}
	stopSupervising()
	if err := <-done; err != nil {
		t.Errorf("Supervise after cancel: %v", err)
	}
	c.Stop()
	for _, n := range c.Nodes() {
		if alive(n.Pid()) {
			t.Errorf("%s (pid %d) alive after Stop", n.Name, n.Pid())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the supervisor's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestEarlyExitReported(t *testing.T) {
	cfg := testConfig(t)
	t.Setenv("BENCH_FAKE_FAIL", "scorer")
	c, err := New(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	err = c.StartNodes(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot load model: boom") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("StartNodes: %v, want the node's last lines and exit status", err)
	}
}

func TestWaitStopsOnContext(t *testing.T) {
	cfg := testConfig(t)
	cfg.Nodes.Count = 1
	c, err := New(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartNodes(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Wait(ctx); err != nil {
		t.Errorf("Wait after cancel: %v", err)
	}
	c.Stop()
	c.Stop() // idempotent
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"defaults", "", ""},
		{"repo config", "", ""},
		{"bad count", "nodes: {count: -1}\n", "nodes.count"},
		{"emulated without profile", "nodes: {engine: emulated}\n", "nodes.cost_profile"},
		{"bad split", "proxy: {split: magic}\n", "proxy.split"},
		{"bad addr", "proxy: {http_addr: nope}\n", "proxy.http_addr"},
		{"unknown field", "nodez: 3\n", "nodez"},
		{"bad arch", "model: {arch: llama}\n", "model.arch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if tt.name == "repo config" {
				path = "../../configs/local.yaml"
			} else if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadConfig(path)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
			case tt.wantErr == "" && (cfg.Proxy.HTTPAddr != "127.0.0.1:8080" || cfg.Proxy.GRPCAddr != "127.0.0.1:9090"):
				t.Errorf("proxy addresses %s %s, want the contract defaults", cfg.Proxy.HTTPAddr, cfg.Proxy.GRPCAddr)
			}
		})
	}
}

func TestModelComplete(t *testing.T) {
	dir := t.TempDir()
	if ModelComplete(dir) {
		t.Fatal("empty dir is complete")
	}
	for _, f := range []string{"config.json", "tokenizer.json", "model.safetensors"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !ModelComplete(dir) {
		t.Fatal("complete dir not recognised")
	}
}

// TestSelfTestLeavesTheExampleUncached: the proxy's score cache is keyed by query and item, so a
// self-test that shared the printed example's query would turn the user's first copy-paste into
// a cache hit (prompt_tokens 0). Both bodies must also be valid requests of the same shape.
func TestSelfTestLeavesTheExampleUncached(t *testing.T) {
	type body struct {
		Query     string   `json:"query"`
		Documents []string `json:"documents"`
		TopN      int      `json:"top_n"`
	}
	var ex, st body
	if err := json.Unmarshal([]byte(ExampleRerankBody), &ex); err != nil {
		t.Fatalf("example body: %v", err)
	}
	if err := json.Unmarshal([]byte(SelfTestBody), &st); err != nil {
		t.Fatalf("self-test body: %v", err)
	}
	if st.Query == ex.Query {
		t.Errorf("self-test query %q is the example's", st.Query)
	}
	if len(st.Documents) != len(ex.Documents) || st.TopN != ex.TopN {
		t.Errorf("self-test %d documents, top_n %d; example %d, %d: want the same shape", len(st.Documents), st.TopN, len(ex.Documents), ex.TopN)
	}
}
