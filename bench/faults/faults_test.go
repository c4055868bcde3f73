package faults

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/workload"
)

// buildBinaries builds the real scorer and proxy into a temporary bin folder.
func buildBinaries(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the scorer and proxy with")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/relevance-scoring/relevance/cmd/scorer", "github.com/relevance-scoring/relevance/cmd/proxy")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build scorer and proxy: %v\n%s", err, out)
	}
	return dir
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// emulatedTestCluster is a cluster of n emulated nodes from freshly built binaries, logging to a
// temporary folder, and the compare workload.
func emulatedTestCluster(t *testing.T, n int) (cluster.Config, workload.Spec) {
	t.Helper()
	bin := buildBinaries(t)
	spec, err := workload.Load("../../configs/workloads/compare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg cluster.Config
	cfg.BinDir, cfg.LogDir = bin, t.TempDir()
	cfg.ReadyTimeout = time.Minute
	cfg.Nodes.Count, cfg.Nodes.Engine, cfg.Nodes.CostProfile = n, "emulated", "../results/profile-small-auto.json"
	return cfg, spec
}

// TestEndToEnd runs three scenarios, quick, on two real emulated nodes and a real proxy: the
// baseline (with the ideal scheduler's yardstick and the nodes' own accounts), a node SIGKILLed
// under load (restarted by the supervisor, watched back into traffic) and the malformed inputs
// (which must leave every process alive).
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and sends load for ~15 s")
	}
	cfg, spec := emulatedTestCluster(t, 2)
	var lines []string
	var pids []int
	o := Options{Cluster: cfg, Workload: spec, Quick: true, Capacity: 3, Scenarios: []string{"baseline", "sigkill", "malformed"},
		OnResult: func(r Result) { lines = append(lines, r.Line()) }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := runWith(ctx, o, func(e *env) {
		for _, n := range e.c.Nodes() {
			pids = append(pids, n.Pid())
		}
		pids = append(pids, e.proxyProc().Pid())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s in %v:\n%s", rep.Summary(), time.Since(start).Round(time.Second), strings.Join(lines, "\n"))
	if len(rep.Results) != 3 || rep.Results[0].Name != "baseline" || rep.Results[1].Name != "sigkill" || rep.Results[2].Name != "malformed" {
		t.Fatalf("results %+v, want baseline, sigkill and malformed", rep.Results)
	}
	base, kill, bad := rep.Results[0], rep.Results[1], rep.Results[2]
	if base.Err != "" || kill.Err != "" || bad.Err != "" {
		t.Errorf("suite errors: %q, %q, %q", base.Err, kill.Err, bad.Err)
	}
	// The baseline prices its requests for the ideal scheduler and reads the nodes' work: a load
	// of 70 % of a given capacity is real work on both sides (not 0, not above the whole cluster).
	for _, f := range []string{"ideal_load", "node_busy", "batches_per_request"} {
		if v, ok := base.figure(f); !ok || !(v > 0) || (f != "batches_per_request" && v > 1.5) {
			t.Errorf("baseline: %s = %v (measured %v); figures %+v", f, v, ok, base.Figures)
		}
	}
	for _, f := range []string{"ideal_failed", "ideal_failed_at_cluster_cost"} {
		if _, ok := base.figure(f); !ok {
			t.Errorf("baseline: %s not measured; figures %+v", f, base.Figures)
		}
	}
	if v, ok := base.figure("cluster_cost_ratio"); !ok || !(v > 0) {
		t.Errorf("baseline: cluster_cost_ratio = %v (measured %v); figures %+v", v, ok, base.Figures)
	}
	// The killed node came back: restarted, ready, and in traffic again. (Whether the cluster
	// met the goals on this shared machine is the verdict's business, not this test's.)
	for _, f := range []string{"kill_to_ready_s", "back_in_traffic_s"} {
		if _, ok := kill.figure(f); !ok {
			t.Errorf("sigkill: %s not measured; figures %+v", f, kill.Figures)
		}
	}
	if !kill.HasLoad || kill.Requests == 0 {
		t.Errorf("sigkill measured no requests: %+v", kill.Summary)
	}
	if v, ok := bad.figure("crashed"); !ok || v != 0 {
		t.Errorf("malformed: crashed = %v (measured %v), want 0; details %q", v, ok, bad.Details)
	}
	if v, _ := bad.figure("cases"); v < 200 {
		t.Errorf("malformed: %v cases, want ≥ 200", v)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[1], string(kill.Verdict)+" sigkill: ") {
		t.Errorf("lines %q", lines)
	}
	out := t.TempDir()
	if err := rep.Write(out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "results.md"} {
		if b, err := os.ReadFile(filepath.Join(out, f)); err != nil || !strings.Contains(string(b), "sigkill") {
			t.Errorf("%s: %v", f, err)
		}
	}
	// Every child is gone once Run returns.
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still alive after Run", pid)
		}
	}
}

// TestPrefixCrashRunsOnRealNodesBesideAnEmulatedCluster runs the prefix-crash scenario, quick, on
// an emulated cluster with PrefixCrashRealNodes set: the scenario starts real nodes of its own
// (a generated tiny model), kills one mid-batch in a cancellation storm and compares every
// score with its reference bit for bit; it must run, not skip, and leave no child behind.
func TestPrefixCrashRunsOnRealNodesBesideAnEmulatedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters and a storm for ~10 s")
	}
	cfg, spec := emulatedTestCluster(t, 1)
	cfg.Model = cluster.Model{Dir: filepath.Join(t.TempDir(), "tiny-qwen3"), Arch: "qwen3", Preset: "tiny", Seed: 3}
	cfg.Nodes.Threads = 1
	o := Options{Cluster: cfg, Workload: spec, Quick: true, Capacity: 3, Scenarios: []string{"prefix-crash"}, PrefixCrashRealNodes: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("results %+v, want prefix-crash alone", rep.Results)
	}
	r := rep.Results[0]
	t.Logf("%s\n%s", r.Line(), strings.Join(r.Details, "\n"))
	if r.Verdict == Skip || r.Err != "" {
		t.Fatalf("prefix-crash: verdict %s, error %q; want it run on real nodes", r.Verdict, r.Err)
	}
	if v, ok := r.figure("checked_scores"); !ok || v == 0 {
		t.Errorf("checked_scores = %v (measured %v), want > 0", v, ok)
	}
	if v, ok := r.figure("dirty_reads"); !ok || v != 0 {
		t.Errorf("dirty_reads = %v (measured %v), want 0: %q", v, ok, r.Details)
	}
	if !slices.ContainsFunc(r.Details, func(d string) bool { return strings.Contains(d, "2 REAL nodes") }) {
		t.Errorf("details %q do not say the scenario ran on its own real nodes", r.Details)
	}
	if !cluster.ModelComplete(cfg.Model.Dir) {
		t.Errorf("no generated model in %s: the real nodes did not load the configured model", cfg.Model.Dir)
	}
}
