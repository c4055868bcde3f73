package node

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
)

// CostSourceCalibrated is the cost model's source after the node timed passes of its own at
// start-up (the others are the engine's: scorer.CostSourceProfile, …Config, …Shape).
const CostSourceCalibrated = "calibrated"

// learnForgetting is the learner's forgetting factor: about the last 100 passes count.
const learnForgetting = 0.99

// costModel is the node's speed: the coefficients of costmodel's formula, started from the
// engine's prior or the start-up calibration and learned from every forward pass
// (costmodel.Learner). It is the one price of work on the node: the deadline check, the queued
// and running cost it reports, its merge decision and /v1/status all read it.
//
// Safe for concurrent use: estimates read an immutable snapshot without locking; observe
// serialises on mu (the learner is not safe for concurrent use).
type costModel struct {
	snap atomic.Pointer[costSnapshot]

	mu sync.Mutex // guards l
	l  *costmodel.Learner
	// base is the passes the start was measured on (the calibration's), counted in Samples: a
	// proxy trusts a node's projections once its model rests on enough measured passes.
	base int
	// errs holds the last passes' measured ÷ estimated seconds (guarded by mu): the model's own
	// error, whose high quantile is the merge decision's margin.
	errs  [64]float64
	errN  int
	errBy []float64 // scratch for the quantile
}

// costSnapshot is the cost model at one moment.
type costSnapshot struct {
	Coeffs      costmodel.Coeffs
	Source      string // CostSourceCalibrated or the engine's prior source
	Samples     int    // passes measured since start-up: calibration passes, then every pass
	Calibration calibration
	// Margin is what an estimate is stretched by where a late finish costs a deadline: the 95th
	// percentile of the last passes' measured ÷ estimated seconds, in [1, 2]; 1 until
	// marginMinPasses passes were measured.
	Margin float64
}

// marginMinPasses is how many passes the error window needs before its quantile is used.
const marginMinPasses = 16

// newCostModel starts a cost model from the calibration when it gave one, else from the
// engine's prior (startCost), counting the passes that start was measured on.
func newCostModel(cal calibration, prior scorer.CostPrior) *costModel {
	start, source := startCost(cal, prior)
	m := &costModel{l: costmodel.NewLearner(start, learnForgetting), base: max(0, prior.Samples)}
	if source == CostSourceCalibrated {
		m.base = cal.Passes
	}
	m.snap.Store(&costSnapshot{Coeffs: start, Source: source, Samples: m.base, Calibration: cal, Margin: 1})
	return m
}

// seconds prices work with the current coefficients.
func (m *costModel) seconds(f costmodel.Features) float64 { return m.snap.Load().Coeffs.Seconds(f) }

// snapshot is the current state.
func (m *costModel) snapshot() costSnapshot { return *m.snap.Load() }

// margin is the current Margin (see costSnapshot).
func (m *costModel) margin() float64 { return m.snap.Load().Margin }

// observe learns from one forward pass that did f's work in seconds, estimated at est seconds
// when it was taken (≤ 0: no estimate, the error window is left alone).
func (m *costModel) observe(f costmodel.Features, seconds, est float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.l.Observe(f, seconds)
	s := *m.snap.Load()
	s.Coeffs, s.Samples = m.l.Coeffs(), m.base+m.l.Samples()
	if est > 0 && seconds > 0 {
		m.errs[m.errN%len(m.errs)] = seconds / est
		m.errN++
		if m.errN >= marginMinPasses {
			m.errBy = append(m.errBy[:0], m.errs[:min(m.errN, len(m.errs))]...)
			slices.Sort(m.errBy)
			q := m.errBy[int(math.Ceil(0.95*float64(len(m.errBy))))-1]
			s.Margin = min(2, max(1, q))
		}
	}
	m.snap.Store(&s)
}

// proto is the model as NodeLoad.cost_model reports it.
func (s costSnapshot) proto() *pb.CostModel {
	return &pb.CostModel{A: s.Coeffs.A, B: s.Coeffs.B, C: s.Coeffs.C, Samples: uint64(s.Samples), Source: s.Source}
}

// CostModelStatus is the node's cost model in /v1/status: seconds ≈ a·tokens + b·pairs +
// c·batches (package costmodel).
type CostModelStatus struct {
	A float64 `json:"a"` // seconds per computed token
	B float64 `json:"b"` // seconds per attended (query, key) pair
	C float64 `json:"c"` // seconds per batch
	// Source is where the model started: calibrated (timed at start-up), profile, config or shape
	// (the engine's guess from the model's shape; calibration disabled or failed).
	Source string `json:"source"`
	// Samples is the forward passes the model was measured on: the calibration's, then every
	// pass since start-up.
	Samples int `json:"samples"`
	// RefBatchSeconds is the estimate for costmodel.RefFeatures (a 64-token prefix and 16 items
	// of 256 tokens): the node's speed as one number.
	RefBatchSeconds float64 `json:"ref_batch_seconds"`
	// CalibrationSeconds is how long the start-up calibration took (0: none ran); for one kept
	// from an earlier start (CalibrationKeptFrom), how long it took then: this start spent only
	// its warm-up pass.
	CalibrationSeconds float64 `json:"calibration_seconds"`
	// CalibrationPasses is how many timed passes it fitted (the warm-up pass not counted).
	CalibrationPasses int `json:"calibration_passes"`
	// CalibrationMaxRelErr is the fit's largest |measured/predicted − 1| over those passes.
	CalibrationMaxRelErr float64 `json:"calibration_max_rel_err,omitempty"`
	// CalibrationError says why the calibration's fit was not used, if it was not.
	CalibrationError string `json:"calibration_error,omitempty"`
	// CalibrationKeptFrom is when the calibration was measured, when it was reused from
	// calibration_cache rather than measured at this start (RFC 3339; "": measured now).
	CalibrationKeptFrom string `json:"calibration_kept_from,omitempty"`
	// MergeMargin is what the merge decision stretches estimates by: the 95th percentile of the
	// last passes' measured ÷ estimated seconds, in [1, 2].
	MergeMargin float64 `json:"merge_margin"`
}

func (s costSnapshot) status() *CostModelStatus {
	st := &CostModelStatus{
		A: s.Coeffs.A, B: s.Coeffs.B, C: s.Coeffs.C, Source: s.Source, Samples: s.Samples,
		RefBatchSeconds:      s.Coeffs.Seconds(costmodel.RefFeatures),
		CalibrationSeconds:   s.Calibration.Took.Seconds(),
		CalibrationPasses:    s.Calibration.Passes,
		CalibrationMaxRelErr: s.Calibration.Fit.MaxRelErr,
		MergeMargin:          s.Margin,
	}
	if s.Calibration.Err != nil {
		st.CalibrationError = s.Calibration.Err.Error()
	}
	if !s.Calibration.KeptFrom.IsZero() {
		st.CalibrationKeptFrom = s.Calibration.KeptFrom.UTC().Format(time.RFC3339)
	}
	return st
}

// startCost is where an engine's cost model starts: its prior, or (when the prior is only a
// guess from the model's shape and calibration is on) a fit of passes timed now.
func startCost(cal calibration, prior scorer.CostPrior) (costmodel.Coeffs, string) {
	if cal.Err == nil && cal.Passes > 0 {
		return cal.Fit.Coeffs, CostSourceCalibrated
	}
	return prior.Coeffs, prior.Source
}

// passSeconds is the time a pass is learned from: the engine's own measure of it (the real
// engine's wall time around the pass; the emulated engine's modelled time), else the wall time
// the scheduler saw.
func passSeconds(st scorer.ForwardStats, wall time.Duration) float64 {
	if st.Duration > 0 {
		return st.Duration.Seconds()
	}
	return wall.Seconds()
}
