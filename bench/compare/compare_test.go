package compare

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
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/workload"
)

// The test binary doubles as fake scorer and proxy (see fakeChild). The fake proxy answers
// /v1/rerank after a delay that depends on its --split and --route, so the comparison has a
// known winner.
func TestMain(m *testing.M) {
	if os.Getenv("BENCH_FAKE_CHILD") == "1" {
		os.Exit(fakeChild(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func fakeChild(args []string) int {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "--") {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				flags[args[i]] = args[i+1]
				i++
			} else {
				flags[args[i]] = "true"
			}
		}
	}
	if dir := os.Getenv("BENCH_FAKE_STARTS"); dir != "" && flags["--node-id"] != "" {
		// Record this node start (TestFreshCellsRestartTheNodes counts them).
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d", flags["--node-id"], os.Getpid())), nil, 0o644)
	}
	// The baseline's handicap must dominate scheduling noise: under -race on a loaded 2-core
	// machine the fast proxy's p99 alone has reached ~350 ms.
	delay := 2 * time.Millisecond
	if flags["--split"] == "fixed" {
		delay = 600 * time.Millisecond
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/v1/rerank", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Documents []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		time.Sleep(delay)
		var b strings.Builder
		b.WriteString(`{"results":[`)
		for i := range req.Documents {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"index":%d,"relevance_score":0.5}`, i)
		}
		b.WriteString("]}")
		_, _ = w.Write([]byte(b.String()))
	})
	srv := &http.Server{Addr: flags["--http-addr"], Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; srv.Close() }()
	_ = srv.ListenAndServe()
	return 0
}

func fakeCluster(t *testing.T) cluster.Config {
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
	c := cluster.Config{BinDir: dir, LogDir: t.TempDir(), ReadyTimeout: 20 * time.Second,
		Nodes: cluster.Nodes{Count: 2, Engine: "emulated", CostProfile: "p.json"}}
	c.Defaults()
	return c
}

func trace(t *testing.T) *workload.Trace {
	t.Helper()
	s := workload.Default()
	s.Items = workload.Dist{Kind: "const", Value: 3}
	s.ItemTokens = workload.Dist{Kind: "const", Value: 20}
	s.TraceSize = 4
	tr, err := workload.New(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestCompareEndToEnd(t *testing.T) {
	out := t.TempDir()
	o := Options{Cluster: fakeCluster(t), Configs: []Config{Baseline, Best}, Loads: []float64{0.05, 0.1}, Trace: trace(t), Seed: 1,
		Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond, ProbeDuration: 300 * time.Millisecond, ProbeConcurrency: 2,
		Out: out, Log: &bytes.Buffer{}, GrowTrace: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, o.Log)
	}
	// The 4-request trace is grown so that no cell cycles through it (a repeat would be answered
	// by the proxy's score cache): the busiest cell sends up to 0.1 × capacity × 0.5 s requests.
	if need := 1.2 * 0.1 * rep.CapacityRPS * 0.5; rep.TraceSize <= 4 || float64(rep.TraceSize) < need {
		t.Errorf("trace of %d distinct requests for cells of up to ~%.0f requests", rep.TraceSize, need)
	}
	for _, r := range rep.Rows {
		if r.Requests > int64(rep.TraceSize) {
			t.Errorf("%s at %.2f sent %d requests from a trace of %d: it repeated requests", r.Config, r.Load, r.Requests, rep.TraceSize)
		}
	}
	// Probe: 2 workers on the 2 ms "best" proxy: well over 100 req/s, under 1000. The loads are
	// small fractions of it so the runs measure the proxies, not a CPU the test saturates.
	if rep.CapacityRPS < 100 || rep.CapacityRPS > 1000 || !strings.Contains(rep.CapacityMethod, "closed-loop probe") {
		t.Errorf("capacity %.1f (%s)", rep.CapacityRPS, rep.CapacityMethod)
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, fmt.Sprintf("%s@%.2f", r.Config, r.Load))
		if r.Requests == 0 || r.P50ms <= 0 {
			t.Errorf("%s at %.1f: %d requests p50 %.1f", r.Config, r.Load, r.Requests, r.P50ms)
		}
	}
	want := []string{"fixed+random@0.05", "fixed+random@0.10", "cost+least_loaded@0.05", "cost+least_loaded@0.10"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("runs (-want +got):\n%s", diff)
	}
	if len(rep.Headline) != 2 || rep.Headline[0].P99Ratio <= 1 || rep.Headline[1].P99Ratio <= 1 {
		t.Errorf("headline %+v: the 2 ms proxy should beat the 600 ms one", rep.Headline)
	}
	if err := rep.Write(out, "bin/bench compare --test"); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"EMULATED", "bin/bench compare --test", "cost+least_loaded", "p99.9 ms", "distinct requests"} {
		if !bytes.Contains(md, []byte(s)) {
			t.Errorf("results.md lacks %q", s)
		}
	}
	for _, f := range []string{"results.json", "p99-by-load.png", "goodput-by-load.png", "cdf-highest-load.png", "runs/cost+least_loaded-10/result.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(rep.Table(false), "EMULATED") && !strings.Contains(rep.Summary(), "EMULATED") {
		t.Error("summary does not say EMULATED")
	}
}

func TestParseConfig(t *testing.T) {
	for _, c := range AllConfigs() {
		got, err := ParseConfig(c.Name())
		if err != nil || got != c {
			t.Errorf("ParseConfig(%q) = %+v, %v", c.Name(), got, err)
		}
	}
	for _, bad := range []string{"cost", "cost+fast", "even+random", "cost+random+x", ""} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
	}
	if n := len(AllConfigs()); n != 12 {
		t.Errorf("%d configs, want 12", n)
	}
}

// TestFreshCellsRestartTheNodes: with FreshCells every cell runs on nodes started for it (so no
// cell inherits another's caches); without it the nodes serve the whole comparison.
func TestFreshCellsRestartTheNodes(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		starts := t.TempDir()
		t.Setenv("BENCH_FAKE_STARTS", starts)
		o := Options{Cluster: fakeCluster(t), Configs: []Config{Best}, Loads: []float64{0.05, 0.1}, Trace: trace(t), Seed: 1,
			Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Capacity: 50, FreshCells: fresh, Log: &bytes.Buffer{}}
		rep, err := Run(context.Background(), o)
		if err != nil {
			t.Fatalf("fresh %v: %v\nlog:\n%s", fresh, err, o.Log)
		}
		ents, err := os.ReadDir(starts)
		if err != nil {
			t.Fatal(err)
		}
		want := 2 // the 2 nodes, once
		if fresh {
			want = 2 * 3 // at the start, then before each of the 2 cells
		}
		if len(ents) != want || len(rep.Rows) != 2 || rep.FreshCells != fresh {
			t.Errorf("fresh %v: %d node starts, %d rows (report fresh %v); want %d starts, 2 rows", fresh, len(ents), len(rep.Rows), rep.FreshCells, want)
		}
	}
}
