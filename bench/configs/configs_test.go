package configs_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy/front/serve"
	"github.com/relevance-scoring/relevance/scorer/node"
)

// root is the repository root: configs name their paths relative to it, as the binaries
// (run from the root by make) read them.
const root = "../.."

// makeRun is the config `make run` starts (Makefile: bench cluster --config configs/local.yaml).
const makeRun = "configs/local.yaml"

func path(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

// checks holds one check per file directly in configs/: a new file needs one here.
var checks = map[string]func(rel string) error{
	"local.yaml":            checkCluster,
	"bench-crosscheck.yaml": checkCluster,
	"scorer.yaml":           checkScorer,
	"proxy.yaml":            checkProxy,
}

// checkProfile loads a referenced cost profile ("" is no reference).
func checkProfile(field, rel string) error {
	if rel == "" {
		return nil
	}
	if _, err := costmodel.LoadProfile(path(rel)); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// checkCluster loads a cluster config as `bench cluster --config` does and the files it names.
func checkCluster(rel string) error {
	c, err := cluster.LoadConfig(path(rel))
	if err != nil {
		return err
	}
	errs := []error{checkProfile("nodes.cost_profile", c.Nodes.CostProfile)}
	if c.Proxy.Config != "" {
		if _, err := os.Stat(path(c.Proxy.Config)); err != nil {
			errs = append(errs, fmt.Errorf("proxy.config: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkScorer validates a node config as `scorer serve --config` does (the model itself is not
// loaded) and requires its model to be the checkpoint make run generates, so that the file
// starts after a `make run`.
func checkScorer(rel string) error {
	cfg, err := node.Load(path(rel))
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := checkProfile("cost_profile", cfg.CostProfile); err != nil {
		return err
	}
	if cfg.Engine != node.EngineReal {
		return nil
	}
	c, err := cluster.LoadConfig(path(makeRun))
	if err != nil {
		return fmt.Errorf("%s: %w", makeRun, err)
	}
	if filepath.Clean(cfg.Model) != filepath.Clean(c.Model.Dir) {
		return fmt.Errorf("model: %q, but make run (%s) generates %q: the file would not start", cfg.Model, makeRun, c.Model.Dir)
	}
	return nil
}

// checkProxy validates a proxy config as `proxy serve --config` does and requires its static
// nodes to be the ones make run starts.
func checkProxy(rel string) error {
	cfg, err := serve.Load(path(rel))
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	c, err := cluster.LoadConfig(path(makeRun))
	if err != nil {
		return fmt.Errorf("%s: %w", makeRun, err)
	}
	if c.Nodes.GRPCBasePort == 0 {
		return nil // make run picks free ports: nothing to compare with
	}
	var want []string
	for i := range c.Nodes.Count {
		want = append(want, net.JoinHostPort(c.Nodes.Host, strconv.Itoa(c.Nodes.GRPCBasePort+i)))
	}
	if diff := cmp.Diff(want, cfg.Proxy.Nodes.Static); diff != "" {
		return fmt.Errorf("proxy.nodes.static differs from the nodes of make run (%s) (-want +got):\n%s", makeRun, diff)
	}
	return nil
}

// checkWorkload parses a workload as `bench load --workload` does and generates a few requests.
func checkWorkload(rel string) error {
	s, err := workload.Load(path(rel))
	if err != nil {
		return err
	}
	s.TraceSize = 4
	tr, err := workload.New(s, s.Seed)
	if err != nil {
		return err
	}
	if tr.MeanItems() < 1 {
		return fmt.Errorf("mean items per request %v", tr.MeanItems())
	}
	return nil
}

// files lists the regular files of a folder under the root.
func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(path(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestEveryConfigLoads runs the real loader and validation on every file in configs/ and
// configs/workloads/.
func TestEveryConfigLoads(t *testing.T) {
	top := files(t, "configs")
	for _, name := range top {
		rel := "configs/" + name
		t.Run(rel, func(t *testing.T) {
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no check for %s: add its loader to checks in this file", rel)
			}
			if err := check(rel); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		})
	}
	for name := range checks {
		if !slices.Contains(top, name) {
			t.Errorf("configs/%s: checked here but missing", name)
		}
	}
	wls := files(t, "configs/workloads")
	if len(wls) == 0 {
		t.Fatal("configs/workloads is empty")
	}
	for _, name := range wls {
		rel := "configs/workloads/" + name
		t.Run(rel, func(t *testing.T) {
			if filepath.Ext(name) != ".yaml" {
				t.Fatalf("%s: workloads are YAML", rel)
			}
			if err := checkWorkload(rel); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		})
	}
}

// TestBackendExamplesLoad: every example in configs/backends/ is a proxy config that loads and
// validates (its nodes are other kinds of rerank server, which need not be running).
func TestBackendExamplesLoad(t *testing.T) {
	names := files(t, "configs/backends")
	if len(names) == 0 {
		t.Fatal("configs/backends is empty")
	}
	for _, name := range names {
		rel := "configs/backends/" + name
		t.Run(rel, func(t *testing.T) {
			cfg, err := serve.Load(path(rel))
			if err == nil {
				err = cfg.Validate()
			}
			if err != nil {
				t.Errorf("%s: %v", rel, err)
			} else if len(cfg.Proxy.Nodes.Backends) == 0 {
				t.Errorf("%s: no nodes.backends", rel)
			}
		})
	}
}

// TestChecksCatchBadFiles: each check rejects a file that would not start or that points
// elsewhere than make run (the loaders are strict, and the checks add the cross-references).
func TestChecksCatchBadFiles(t *testing.T) {
	tests := []struct {
		name, body string
		check      func(string) error
	}{
		{"scorer model make run does not create", "model: models/small\n", checkScorer},
		{"scorer unknown key", "modle: models/small-qwen3_moe-seed1\n", checkScorer},
		{"proxy nodes make run does not start", "proxy: {nodes: {static: [127.0.0.1:1]}}\n", checkProxy},
		{"workload bad range", "items: {kind: uniform, min: 5, max: 1}\n", checkWorkload},
		{"cluster unknown key", "nodes: {count: 2, treads: 1}\n", checkCluster},
		{"cluster missing profile", "nodes: {engine: emulated, cost_profile: bench/results/nope.json}\n", checkCluster},
	}
	// The files live under the root (git-ignored .cache), since configs name root-relative paths.
	if err := os.MkdirAll(path(".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(path(".cache"), "configs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			abs := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
			if err := os.WriteFile(abs, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(root, abs)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.check(filepath.ToSlash(rel)); err == nil {
				t.Errorf("%q passed its check", tt.body)
			} else {
				t.Logf("rejected: %v", err)
			}
		})
	}
}
