package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/backend"
)

// buildBins builds the real bench and proxy binaries into a temp dir (the fakes are `bench
// fakerank` children and the proxy must really read the generated config).
func buildBins(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds bench and proxy")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build bench and proxy")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", dir+string(os.PathSeparator),
		"github.com/relevance-scoring/relevance/cmd/bench", "github.com/relevance-scoring/relevance/cmd/proxy")
	cmd.Env = append(os.Environ(), "BENCH_FAKE_CHILD=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// TestFakeNodes: a cluster of kind vllm starts 2 `bench fakerank` nodes, the proxy reaches
// them through its generated nodes.backends config, and both answer; Stop ends them.
func TestFakeNodes(t *testing.T) {
	bin := buildBins(t)
	hp, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	gp, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(base, []byte("proxy:\n  split: {max_batch_items: 2}\n  nodes: {static: [\"127.0.0.1:1\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{BinDir: bin, LogDir: t.TempDir(), ReadyTimeout: 60 * time.Second,
		Nodes: Nodes{Kind: backend.KindVLLM, Count: 2, CostProfile: "../../bench/results/profile-small-auto.json"},
		Proxy: Proxy{HTTPAddr: "127.0.0.1:" + strconv.Itoa(hp), GRPCAddr: "127.0.0.1:" + strconv.Itoa(gp), Split: "fixed", Route: "round_robin", Config: base}}
	if !cfg.Emulated() {
		t.Error("a cluster of fakes is not labelled emulated")
	}
	c, err := New(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.StartNodes(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.NodeAddrs()) != 0 || len(c.Backends()) != 2 || c.Backends()[0].Kind != "vllm" {
		t.Fatalf("NodeAddrs %v, Backends %v: want the fakes as 2 vllm backends", c.NodeAddrs(), c.Backends())
	}
	if err := c.StartProxy(ctx, cfg.Proxy, "proxy"); err != nil {
		t.Fatal(err)
	}
	gen, err := os.ReadFile(filepath.Join(cfg.LogDir, "proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"max_batch_items: 2", "kind: vllm", "addr: " + c.Backends()[1].Addr} {
		if !strings.Contains(string(gen), want) {
			t.Errorf("generated proxy config lacks %q:\n%s", want, gen)
		}
	}
	if strings.Contains(string(gen), "127.0.0.1:1") {
		t.Errorf("generated proxy config keeps the base's static nodes:\n%s", gen)
	}
	// 4 documents in batches of 2, round robin: both fakes score.
	for range 3 {
		got, err := SelfTest(ctx, cfg.Proxy.HTTPAddr, 30*time.Second)
		if err != nil || !strings.Contains(got, "#") {
			t.Fatalf("self-test through the proxy: %q, %v", got, err)
		}
	}
	nodes := c.Nodes()
	c.Stop()
	calls := regexp.MustCompile(`stopped after \S+, (\d+) rerank calls`)
	for _, nd := range nodes {
		b, _ := os.ReadFile(nd.LogPath)
		if !strings.Contains(string(b), "EMULATED fakerank vllm listening on "+nd.HTTPAddr) {
			t.Errorf("%s log lacks its address:\n%s", nd.Name, b)
		}
		m := calls.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s was not stopped with SIGTERM:\n%s", nd.Name, b)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); n == 0 {
			t.Errorf("%s got no rerank call from the proxy", nd.Name)
		}
		if alive(nd.Pid()) {
			t.Errorf("%s alive after Stop", nd.Name)
		}
	}
}

func TestWriteProxyConfig(t *testing.T) {
	dir := t.TempDir()
	specs := []backend.Spec{{Kind: "vllm", Addr: "127.0.0.1:8000"}, {Kind: "vllm", Addr: "127.0.0.1:8001"}}
	path := filepath.Join(dir, "gen.yaml")
	if err := WriteProxyConfig(path, "", specs); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	want := "# Written by bench cluster: the proxy's defaults, with proxy.nodes.backends = the cluster's 2 fake nodes (EMULATED).\n" +
		"proxy:\n    nodes:\n        backends:\n            - addr: 127.0.0.1:8000\n              kind: vllm\n            - addr: 127.0.0.1:8001\n              kind: vllm\n"
	if string(b) != want {
		t.Errorf("got\n%s\nwant\n%s", b, want)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("proxy: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteProxyConfig(path, bad, specs); err == nil || !strings.Contains(err.Error(), "proxy is not a mapping") {
		t.Errorf("bad base: %v", err)
	}
}

func TestFakeConfigValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, wantErr string }{
		{"nodes: {kind: vllm, cost_profile: p.json}\n", ""},
		{"nodes: {kind: tei, cost_profile: p.json, concurrency: 4}\n", ""},
		{"nodes: {kind: vllm}\n", "nodes.cost_profile"},
		{"nodes: {kind: triton, cost_profile: p.json}\n", "nodes.kind"},
		{"nodes: {kind: vllm, cost_profile: p.json, concurrency: -1}\n", "nodes.concurrency"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(path)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.wantErr)
		case tc.wantErr == "" && !cfg.Emulated():
			t.Errorf("%q: not emulated", tc.yaml)
		}
	}
	cfg, err := LoadConfig("")
	if err != nil || cfg.Nodes.Kind != KindScorer || cfg.Emulated() {
		t.Errorf("defaults: kind %q emulated %v, %v", cfg.Nodes.Kind, cfg.Emulated(), err)
	}
}
