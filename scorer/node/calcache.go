package node

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/atomicfile"
	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// Kept calibrations (Config.CalibrationCache). A calibration times a few seconds of forward
// passes before the node reports ready; a node restarted on the same machine with the same model
// and settings would measure the same thing again, while the cluster runs a node short. So a
// successful fit is written to the cache folder under a key of everything its timings depend on,
// and the next start with an equal key, within the maximum age, starts from it instead. The
// node's cost model learns from every pass after that either way, as it does after a fresh
// calibration.

// calKey is what a calibration's timings depend on. Two nodes with equal keys run the same
// kernels on the same model, on the same kind of CPU, with as many threads.
type calKey struct {
	Fingerprint string `json:"fingerprint"` // model weights, config, tokenizer, template, result-changing settings
	Kernels     string `json:"kernels"`
	BF16Matmul  string `json:"bf16_matmul"`
	MoEPolicy   string `json:"moe_policy"`
	Threads     int    `json:"threads"`
	CPU         string `json:"cpu"`
	CPUs        int    `json:"cpus"` // logical CPUs this process may use
	Arch        string `json:"arch"`
	// Build identifies the binary (buildID): new kernels in a new build are measured again.
	Build string `json:"build"`
	// Budget is calibration_budget: a longer budget times more passes, a better fit.
	Budget string `json:"budget"`
	// Design names the synthetic passes timed (calShapes, calRounds): a different design is a
	// different measurement.
	Design string `json:"design"`
}

// calEntry is one kept calibration, as written to its file.
type calEntry struct {
	Key         calKey           `json:"key"`
	Coeffs      costmodel.Coeffs `json:"coeffs"`
	Sigma       float64          `json:"sigma"`
	R2          float64          `json:"r2"`
	MaxRelErr   float64          `json:"max_rel_err"`
	Passes      int              `json:"passes"`
	TookSeconds float64          `json:"took_seconds"`
	MeasuredAt  time.Time        `json:"measured_at"`
}

// errNoCalibration: nothing kept for the key (a first start).
var errNoCalibration = errors.New("no calibration kept for this model and settings")

// errCalibrationTooOld: the kept calibration is past the maximum age.
var errCalibrationTooOld = errors.New("kept calibration is older than calibration_cache_max_age")

// startCalibration is eng's start-up calibration: the one kept in calibration_cache for eng on
// this machine when there is one young enough, else passes timed now, kept for the next start
// when they gave a fit. The error is ctx's, or an engine panic's (the node must not serve).
func (n *Node) startCalibration(ctx context.Context, eng scorer.Engine) (calibration, error) {
	forward := func(ctx context.Context, gs []*scorer.Group) (scorer.ForwardStats, error) {
		return n.sched.forward(ctx, eng, gs)
	}
	key, keyed := calibrationKey(eng, n.cfg.CalibrationBudget)
	keep := keyed && n.cfg.CalibrationCache != ""
	if keep {
		cal, at, err := loadCalibration(n.cfg.CalibrationCache, key, n.cfg.CalibrationCacheMaxAge, n.sched.now())
		switch {
		case err == nil:
			werr := warmUp(ctx, eng, forward)
			if err := ctx.Err(); err != nil {
				return cal, err
			}
			if pe := (*enginePanic)(nil); errors.As(werr, &pe) {
				return cal, werr
			}
			if werr == nil {
				cal.KeptFrom = at
				return cal, nil
			}
			n.log.Warn("warm-up pass failed; measuring again", "node_id", n.nodeID, "err", werr)
		case errors.Is(err, errCalibrationTooOld):
			n.log.Info("kept calibration too old; measuring again", "node_id", n.nodeID, "measured_at", at, "max_age", n.cfg.CalibrationCacheMaxAge)
		case !errors.Is(err, errNoCalibration):
			n.log.Warn("kept calibration not used; measuring again", "node_id", n.nodeID, "err", err)
		}
	}
	cal := calibrate(ctx, eng, n.cfg.CalibrationBudget, n.sched.now, forward)
	if err := ctx.Err(); err != nil {
		return cal, err
	}
	if pe := (*enginePanic)(nil); errors.As(cal.Err, &pe) {
		return cal, cal.Err
	}
	if keep && cal.Err == nil && cal.Passes > 0 {
		if err := saveCalibration(n.cfg.CalibrationCache, key, cal, n.sched.now()); err != nil {
			n.log.Warn("calibration not kept", "node_id", n.nodeID, "err", err)
		}
	}
	return cal, nil
}

// calibrationKey is eng's key on this machine now; ok is false when the engine cannot say what
// model it runs (no fingerprint), and nothing may then be kept or reused.
func calibrationKey(eng scorer.Engine, budget time.Duration) (calKey, bool) {
	in := eng.Info()
	k := calKey{
		Fingerprint: in.Fingerprint,
		Kernels:     in.Kernels,
		BF16Matmul:  kernels.BF16MatmulMode(),
		MoEPolicy:   in.MoEPolicy,
		Threads:     kernels.Threads(),
		CPU:         cpuName(),
		CPUs:        runtime.NumCPU(),
		Arch:        runtime.GOARCH,
		Build:       buildID(),
		Budget:      budget.String(),
		Design:      fmt.Sprint(calShapes, calRounds),
	}
	return k, k.Fingerprint != ""
}

// path is where k's calibration is kept in dir.
func (k calKey) path(dir string) string { return keptPath(dir, "calibration-", k) }

// keptPath is the file in dir for what is kept under key (a struct of plain strings and ints):
// prefix and a hash of the key.
func keptPath(dir, prefix string, key any) string {
	b, _ := json.Marshal(key) // plain strings and ints: cannot fail
	h := sha256.Sum256(b)
	return filepath.Join(dir, prefix+hex.EncodeToString(h[:8])+".json")
}

// writeKept writes v as indented JSON to path in dir (created if need be), atomically: nodes
// starting together never read half a file.
func writeKept(dir, path string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// loadCalibration returns the calibration kept in dir for k, measured at most maxAge before now
// (0: any age), as calibrate would have returned it. errNoCalibration when there is none,
// errCalibrationTooOld when it is too old; another error for a file that cannot be read or is
// not a calibration of k.
func loadCalibration(dir string, k calKey, maxAge time.Duration, now time.Time) (calibration, time.Time, error) {
	b, err := os.ReadFile(k.path(dir))
	if errors.Is(err, os.ErrNotExist) {
		return calibration{}, time.Time{}, errNoCalibration
	}
	if err != nil {
		return calibration{}, time.Time{}, fmt.Errorf("read kept calibration: %w", err)
	}
	var e calEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return calibration{}, time.Time{}, fmt.Errorf("kept calibration %s: %w", k.path(dir), err)
	}
	switch {
	case e.Key != k:
		return calibration{}, time.Time{}, fmt.Errorf("kept calibration %s: its key %+v is not this node's %+v", k.path(dir), e.Key, k)
	case e.Passes <= 0 || e.Coeffs.Validate() != nil:
		return calibration{}, time.Time{}, fmt.Errorf("kept calibration %s: not a fit (%d passes, coefficients %+v)", k.path(dir), e.Passes, e.Coeffs)
	case maxAge > 0 && now.Sub(e.MeasuredAt) > maxAge:
		return calibration{}, e.MeasuredAt, errCalibrationTooOld
	}
	cal := calibration{
		Passes: e.Passes,
		Took:   time.Duration(e.TookSeconds * float64(time.Second)),
		Fit:    costmodel.FitResult{Coeffs: e.Coeffs, Sigma: e.Sigma, R2: e.R2, MaxRelErr: e.MaxRelErr},
	}
	return cal, e.MeasuredAt, nil
}

// saveCalibration keeps cal, measured at now, in dir for k, atomically: nodes starting together
// never read half a file.
func saveCalibration(dir string, k calKey, cal calibration, now time.Time) error {
	e := calEntry{Key: k, Coeffs: cal.Fit.Coeffs, Sigma: cal.Fit.Sigma, R2: cal.Fit.R2,
		MaxRelErr: cal.Fit.MaxRelErr, Passes: cal.Passes, TookSeconds: cal.Took.Seconds(), MeasuredAt: now.UTC()}
	if err := writeKept(dir, k.path(dir), e); err != nil {
		return fmt.Errorf("keep calibration: %w", err)
	}
	return nil
}

// buildID identifies the running binary: its Go version, module version and VCS revision, and,
// for a build of modified sources or one without a revision, a hash of the executable itself
// (tens of milliseconds for a binary of tens of MB, once per start).
var buildID = sync.OnceValue(func() string {
	var id []string
	clean := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		id = append(id, bi.GoVersion, bi.Main.Version)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				id = append(id, s.Value)
			case "vcs.modified":
				clean = s.Value == "false"
			}
		}
	}
	if !clean {
		if exe, err := os.Executable(); err == nil {
			if f, err := os.Open(exe); err == nil {
				h := sha256.New()
				if _, err := io.Copy(h, f); err == nil {
					id = append(id, hex.EncodeToString(h.Sum(nil)[:8]))
				}
				f.Close()
			}
		}
	}
	return strings.Join(id, " ")
})

// cpuName is the CPU's model name (Linux: /proc/cpuinfo), or "" where it cannot be read; the
// key's kernels and thread count still tell machines apart then.
func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}

// Kept MoE cost tables. A MoE model's auto kernel policy times its expert GEMM variants when the
// model loads, before any calibration (a sizeable share of a restart that reuses its calibration:
// bench/results/README.md §19). The table depends on the machine, the kernels, the thread count
// and the layer's shape and number of experts, not on the weights' values, so it is kept in the
// same folder as calibrations under a key of those, and expires with them
// (calibration_cache_max_age).

// moeKey is what a MoE cost table's timings depend on.
type moeKey struct {
	Hidden     int    `json:"hidden"`
	Inter      int    `json:"inter"`
	DType      string `json:"dtype"`
	Experts    int    `json:"experts"`
	Kernels    string `json:"kernels"`
	BF16Matmul string `json:"bf16_matmul"`
	Threads    int    `json:"threads"`
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`
	Arch       string `json:"arch"`
	Build      string `json:"build"`
}

// moeEntry is one kept MoE cost table, as written to its file.
type moeEntry struct {
	Key        moeKey               `json:"key"`
	Table      kernels.MoECostTable `json:"table"`
	MeasuredAt time.Time            `json:"measured_at"`
}

var _ kernels.MoECostTableStore = (*KeptMoECostTables)(nil)

// KeptMoECostTables is a kernels.MoECostTableStore over a calibration_cache folder: model.Load
// takes a table kept there for this machine, kernels, thread count and build, at most maxAge old
// (0: any age), instead of measuring one, and keeps the one it measures. Safe for concurrent use
// (each call reads or writes its own file, atomically).
type KeptMoECostTables struct {
	dir    string
	maxAge time.Duration
	log    *slog.Logger
	now    func() time.Time
	build  string
}

// NewKeptMoECostTables returns the store for dir; log (nil: none) hears of tables not used.
func NewKeptMoECostTables(dir string, maxAge time.Duration, log *slog.Logger) *KeptMoECostTables {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KeptMoECostTables{dir: dir, maxAge: maxAge, log: log, now: time.Now, build: buildID()}
}

// key is shape's key on this machine now (threads and bf16 mode as the kernels are set).
func (s *KeptMoECostTables) key(shape kernels.MoEShape) moeKey {
	return moeKey{Hidden: shape.Hidden, Inter: shape.Inter, DType: shape.DType.String(), Experts: shape.Experts,
		Kernels: kernels.Implementation(), BF16Matmul: kernels.BF16MatmulMode(), Threads: kernels.Threads(),
		CPU: cpuName(), CPUs: runtime.NumCPU(), Arch: runtime.GOARCH, Build: s.build}
}

func (k moeKey) path(dir string) string { return keptPath(dir, "moe-costs-", k) }

// Load returns the table kept for shape, if there is one for this key, young enough and valid.
func (s *KeptMoECostTables) Load(shape kernels.MoEShape) (kernels.MoECostTable, bool) {
	k := s.key(shape)
	b, err := os.ReadFile(k.path(s.dir))
	if errors.Is(err, os.ErrNotExist) {
		return kernels.MoECostTable{}, false
	}
	var e moeEntry
	if err == nil {
		err = json.Unmarshal(b, &e)
	}
	switch {
	case err != nil:
	case e.Key != k:
		err = fmt.Errorf("its key %+v is not this node's %+v", e.Key, k)
	case s.maxAge > 0 && s.now().Sub(e.MeasuredAt) > s.maxAge:
		err = fmt.Errorf("measured at %s, older than %s", e.MeasuredAt.Format(time.RFC3339), s.maxAge)
	default:
		err = e.Table.Validate()
	}
	if err != nil {
		s.log.Info("kept MoE cost table not used; measuring again", "file", k.path(s.dir), "err", err)
		return kernels.MoECostTable{}, false
	}
	s.log.Info("MoE cost table kept from an earlier start", "file", k.path(s.dir), "measured_at", e.MeasuredAt.Format(time.RFC3339))
	return e.Table, true
}

// Save keeps c for shape; a failure is logged (the next start measures again).
func (s *KeptMoECostTables) Save(shape kernels.MoEShape, c kernels.MoECostTable) {
	k := s.key(shape)
	if err := writeKept(s.dir, k.path(s.dir), moeEntry{Key: k, Table: c, MeasuredAt: s.now().UTC()}); err != nil {
		s.log.Warn("MoE cost table not kept", "err", err)
	}
}
