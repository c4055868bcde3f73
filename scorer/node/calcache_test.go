package node

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// fingerprinted is a known-speed fake engine that says which model it runs: only such an
// engine's calibration may be kept.
type fingerprinted struct {
	*fakeEngine
	fp string
}

func (f fingerprinted) Info() scorer.Info {
	in := f.fakeEngine.Info()
	in.Fingerprint = f.fp
	return in
}

// startCalibrating starts a node on a fresh known-speed engine of fingerprint fp that keeps its
// calibration in dir, and returns the engine's passes during the start and the cost model.
func startCalibrating(t *testing.T, dir, fp string) ([]int, *CostModelStatus) {
	t.Helper()
	f := knownSpeed()
	cfg := testConfig()
	cfg.CalibrationCache = dir
	h := start(t, cfg, loadEngine(fingerprinted{f, fp}), true)
	passes := f.passCounts()
	return passes, nodeStatus(t, h).CostModel
}

// TestCalibrationIsKeptAndReused: a node that calibrated keeps the fit; the next start of the
// same model and settings runs only a warm-up pass before it is ready and starts from the same coefficients,
// saying when they were measured; another model measures its own.
func TestCalibrationIsKeptAndReused(t *testing.T) {
	dir := t.TempDir()
	passes, first := startCalibrating(t, dir, "model-a")
	if len(passes) == 0 || first.Source != CostSourceCalibrated || first.CalibrationKeptFrom != "" {
		t.Fatalf("first start: %d passes, cost model %+v; want a calibration measured now", len(passes), first)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "calibration-*.json"))
	if len(files) != 1 {
		t.Fatalf("kept files %v, want one", files)
	}

	passes, second := startCalibrating(t, dir, "model-a")
	if len(passes) != 1 {
		t.Errorf("second start ran %d passes before ready, want the warm-up alone (the kept calibration)", len(passes))
	}
	if second.Source != CostSourceCalibrated || second.A != first.A || second.B != first.B || second.C != first.C ||
		second.CalibrationPasses != first.CalibrationPasses || second.CalibrationKeptFrom == "" {
		t.Errorf("second start's cost model %+v, want the first's %+v, kept", second, first)
	}

	passes, other := startCalibrating(t, dir, "model-b")
	if len(passes) == 0 || other.CalibrationKeptFrom != "" {
		t.Errorf("another model: %d passes, cost model %+v; want its own calibration", len(passes), other)
	}
}

// TestKeptCalibrationMeasuredAgain: a kept calibration past calibration_cache_max_age, or a file
// that is not a calibration, is measured again and replaced.
func TestKeptCalibrationMeasuredAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, path string)
	}{
		{"too old", func(t *testing.T, path string) {
			var e calEntry
			b, _ := os.ReadFile(path)
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			e.MeasuredAt = e.MeasuredAt.Add(-25 * time.Hour)
			b, _ = json.Marshal(e)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"not JSON", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("{\"key\":"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			startCalibrating(t, dir, "m")
			files, _ := filepath.Glob(filepath.Join(dir, "calibration-*.json"))
			if len(files) != 1 {
				t.Fatalf("kept files %v, want one", files)
			}
			tc.spoil(t, files[0])
			passes, cm := startCalibrating(t, dir, "m")
			if len(passes) == 0 || cm.Source != CostSourceCalibrated || cm.CalibrationKeptFrom != "" {
				t.Fatalf("%d passes, cost model %+v; want a calibration measured again", len(passes), cm)
			}
			b, _ := os.ReadFile(files[0])
			var e calEntry
			if err := json.Unmarshal(b, &e); err != nil || time.Since(e.MeasuredAt) > time.Hour {
				t.Errorf("kept file after measuring again: %s (err %v); want the new calibration", b, err)
			}
		})
	}
}

// TestKeptCalibrationRoundTrip: what is kept for a key reads back for that key alone (another
// model, thread count, kernels, binary, budget or CPU count reads nothing).
func TestKeptCalibrationRoundTrip(t *testing.T) {
	dir := t.TempDir()
	k := calKey{Fingerprint: "f", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", Arch: "amd64", Design: "d"}
	now := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	cal := calibration{Passes: 20, Took: 3 * time.Second,
		Fit: costmodel.FitResult{Coeffs: costmodel.Coeffs{A: 6e-4, B: 1.4e-6, C: 0.018}, Sigma: 0.07, R2: 0.99, MaxRelErr: 0.4}}
	if _, _, err := loadCalibration(dir, k, 0, now); !errors.Is(err, errNoCalibration) {
		t.Fatalf("empty folder: %v, want errNoCalibration", err)
	}
	if err := saveCalibration(dir, k, cal, now); err != nil {
		t.Fatal(err)
	}
	got, at, err := loadCalibration(dir, k, time.Hour, now.Add(59*time.Minute))
	if err != nil || !at.Equal(now) || got.Passes != cal.Passes || got.Took != cal.Took || got.Fit != cal.Fit {
		t.Errorf("read back %+v at %v (err %v), want %+v at %v", got, at, err, cal, now)
	}
	if _, _, err := loadCalibration(dir, k, time.Hour, now.Add(61*time.Minute)); !errors.Is(err, errCalibrationTooOld) {
		t.Errorf("61 minutes later with a 1 h maximum: %v, want errCalibrationTooOld", err)
	}
	for _, other := range []calKey{
		{Fingerprint: "g", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", Arch: "amd64", Design: "d"},
		{Fingerprint: "f", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 2, CPU: "cpu", Arch: "amd64", Design: "d"},
		{Fingerprint: "f", Kernels: "avx512", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", Arch: "amd64", Design: "d"},
		{Fingerprint: "f", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", Arch: "amd64", Design: "d", Build: "another binary"},
		{Fingerprint: "f", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", Arch: "amd64", Design: "d", Budget: "10s"},
		{Fingerprint: "f", Kernels: "avx2", BF16Matmul: "auto", MoEPolicy: "auto", Threads: 1, CPU: "cpu", CPUs: 64, Arch: "amd64", Design: "d"},
	} {
		if _, _, err := loadCalibration(dir, other, 0, now); !errors.Is(err, errNoCalibration) {
			t.Errorf("key %+v: %v, want errNoCalibration (not the other key's)", other, err)
		}
	}
}

func TestKeptMoECostTablesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	s := NewKeptMoECostTables(dir, time.Hour, nil)
	s.now = func() time.Time { return now }
	shape := kernels.MoEShape{Hidden: 1024, Inter: 768, DType: kernels.BF16, Experts: 128}
	table := kernels.MoECostTable{ItemSeconds: 2e-4, RowSeconds: 3e-6, RowGranule: 1, ItemRows: 32}
	for v := range table.TileSeconds {
		table.TileSeconds[v] = float64(v+1) * 1e-3
	}
	if _, ok := s.Load(shape); ok {
		t.Fatal("an empty folder gave a table")
	}
	s.Save(shape, table)
	if got, ok := s.Load(shape); !ok || got != table {
		t.Fatalf("read back %+v (%v), want %+v", got, ok, table)
	}
	for _, other := range []kernels.MoEShape{{Hidden: 1024, Inter: 512, DType: kernels.BF16, Experts: 128}, {Hidden: 1024, Inter: 768, DType: kernels.BF16, Experts: 64}} {
		if _, ok := s.Load(other); ok {
			t.Errorf("layer %+v got the table of %+v", other, shape)
		}
	}
	// The kernels' thread count is process-wide: safe here as no test of this package runs in
	// parallel with another.
	defer kernels.SetThreads(kernels.Threads())
	kernels.SetThreads(kernels.Threads() + 1)
	if _, ok := s.Load(shape); ok {
		t.Error("another thread count got the table")
	}
	kernels.SetThreads(kernels.Threads() - 1)
	other := NewKeptMoECostTables(dir, time.Hour, nil)
	other.now, other.build = s.now, "another binary"
	if _, ok := other.Load(shape); ok {
		t.Error("another build got the table")
	}
	s.now = func() time.Time { return now.Add(61 * time.Minute) }
	if _, ok := s.Load(shape); ok {
		t.Error("a table older than the maximum age was used")
	}
	s.now = func() time.Time { return now }
	path := s.key(shape).path(dir)
	for name, body := range map[string]string{
		"not JSON":      "{",
		"invalid table": strings.Replace(mustRead(t, path), `"ItemSeconds": 0.0002`, `"ItemSeconds": -1`, 1),
		"another's key": strings.Replace(mustRead(t, path), `"hidden": 1024`, `"hidden": 2048`, 1),
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, ok := s.Load(shape); ok {
			t.Errorf("%s: used %+v", name, got)
		}
		s.Save(shape, table) // restore for the next case
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
