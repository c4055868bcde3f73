package node

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
)

// restoreMemoryLimit puts back the process's memory limit after a test that set it.
func restoreMemoryLimit(t *testing.T) {
	t.Helper()
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

func TestMemoryLimitRule(t *testing.T) {
	restoreMemoryLimit(t)
	cfg := testConfig()
	want := int64((256<<20+8192*64<<10)*5/4 + 256<<20) // the documented rule at the defaults
	if got := DeriveMemoryLimit(cfg, 0); got != want {
		t.Errorf("DeriveMemoryLimit(defaults) = %d, want %d", got, want)
	}
	if got := DeriveMemoryLimit(cfg, 200<<20); got != want+200<<20 {
		t.Errorf("DeriveMemoryLimit(defaults, 200 MiB model) = %d, want %d", got, want+200<<20)
	}
	for _, tc := range []struct {
		name       string
		limit      int64
		env        string
		wantLimit  int64
		wantSource string
	}{
		{name: "derived", limit: 0, wantLimit: want, wantSource: "derived"},
		{name: "config", limit: 3 << 30, wantLimit: 3 << 30, wantSource: "config"},
		{name: "off", limit: -1, wantLimit: 0, wantSource: "off"},
		{name: "environment wins", limit: 3 << 30, env: "1GiB", wantLimit: 1 << 30, wantSource: "GOMEMLIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
				debug.SetMemoryLimit(1 << 30) // what the runtime read from it at start-up
			} else if os.Getenv("GOMEMLIMIT") != "" {
				t.Skip("GOMEMLIMIT is set for this test process")
			}
			c := cfg
			c.MemoryLimit = tc.limit
			l, src := applyMemoryLimit(c, 0)
			if l != tc.wantLimit || src != tc.wantSource {
				t.Errorf("applyMemoryLimit = %d, %q; want %d, %q", l, src, tc.wantLimit, tc.wantSource)
			}
			if tc.wantLimit > 0 {
				if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
					t.Errorf("runtime limit %d, want %d", got, tc.wantLimit)
				}
			}
		})
	}
	c := cfg
	c.MemoryLimit = -2
	if err := c.Validate(); err == nil {
		t.Error("memory_limit -2 accepted")
	}
}

// TestMemoryReported: a node of a loaded (tiny) model reports its memory by part, and the parts
// add up: the weights are mapped and partly resident, the prefix cache's charge is within the Go
// heap, working is the rest of the heap, RSS holds the resident weights and the heap.
func TestMemoryReported(t *testing.T) {
	restoreMemoryLimit(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate(dir, model.GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Model = dir
	cfg.PrefixCacheBytes = 64 << 20
	h := start(t, cfg, func(context.Context) (scorer.Engine, error) {
		return model.Load(dir, model.Options{MoEPolicy: "fixed:16", PrefixCacheBytes: cfg.PrefixCacheBytes})
	}, true)
	for _, q := range []string{"espresso at home", "river city history", "best player"} {
		if _, err := h.client.ScoreBatch(ctxT(t), batch(q, "a short item", "another item about coffee")); err != nil {
			t.Fatal(err)
		}
	}
	h.n.mem.mu.Lock()
	h.n.mem.at = h.n.mem.at.Add(-memorySampleInterval) // read now, not the load's sample
	h.n.mem.mu.Unlock()
	_, body := get(t, h, "/v1/status")
	var s Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	m := s.Memory
	t.Logf("memory %+v", m)
	if m.WeightsMapped < st.Size() || m.WeightsMapped > st.Size()+1<<20 {
		t.Errorf("weights mapped %d, want the file's %d bytes (page-rounded)", m.WeightsMapped, st.Size())
	}
	// The mapped pages are evicted once the kernels hold packed weights: few stay resident.
	if m.WeightsResident < 0 || m.WeightsResident > m.WeightsMapped {
		t.Errorf("weights resident %d, want in [0, %d]", m.WeightsResident, m.WeightsMapped)
	}
	if s.PrefixCache == nil || m.PrefixCache != s.PrefixCache.Bytes || m.PrefixCache <= 0 {
		t.Errorf("memory prefix cache %d, cache stats %+v", m.PrefixCache, s.PrefixCache)
	}
	if m.GoHeapInUse < m.PrefixCache || m.Working != m.GoHeapInUse-m.PrefixCache {
		t.Errorf("heap in use %d = prefix cache %d + working %d does not add up", m.GoHeapInUse, m.PrefixCache, m.Working)
	}
	if m.GoRuntime < m.GoHeapInUse {
		t.Errorf("Go runtime total %d below its heap in use %d", m.GoRuntime, m.GoHeapInUse)
	}
	if m.RSS < m.WeightsResident || m.RSS <= 0 {
		t.Errorf("RSS %d below the resident weights %d", m.RSS, m.WeightsResident)
	}
	// Re-derived after the load with the model's heap on top.
	if m.LimitSource != "derived" || m.Limit <= DeriveMemoryLimit(cfg, 0) {
		t.Errorf("limit %d from %q, want the derived rule plus the loaded model's heap (> %d)", m.Limit, m.LimitSource, DeriveMemoryLimit(cfg, 0))
	}
	if got := testutil.CollectAndCount(h.reg, "relevance_scorer_memory_bytes"); got != 8 {
		t.Errorf("relevance_scorer_memory_bytes has %d series, want 8 parts", got)
	}
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

// TestGOMEMLIMITOffReportsNoLimit: GOMEMLIMIT=off is "no limit" (the runtime's limit is then
// math.MaxInt64). /v1/status memory.limit_bytes and relevance_scorer_memory_bytes{part="limit"}
// document 0 for none; they must not report 9.2 EB.
func TestGOMEMLIMITOffReportsNoLimit(t *testing.T) {
	restoreMemoryLimit(t)
	t.Setenv("GOMEMLIMIT", "off")
	debug.SetMemoryLimit(math.MaxInt64) // what the runtime read from it at start-up
	l, src := applyMemoryLimit(testConfig(), 0)
	if l != 0 || src != "GOMEMLIMIT" {
		t.Errorf("applyMemoryLimit with GOMEMLIMIT=off = %d, %q; want 0 (none), \"GOMEMLIMIT\"", l, src)
	}
}
