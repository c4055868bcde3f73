package node

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/emulated"
)

// truth is the fake engine's real speed in these tests; its shape guess is 5× too slow.
var (
	truth     = costmodel.Coeffs{A: 1e-3, B: 1e-6, C: 0.05}
	slowGuess = scorer.CostPrior{Coeffs: costmodel.Coeffs{A: 5 * truth.A, B: 5 * truth.B, C: 5 * truth.C}, Source: scorer.CostSourceShape}
)

// knownSpeed is a fake engine that takes truth's time (reported, not slept) and guesses 5× more.
func knownSpeed() *fakeEngine {
	f := newFake()
	f.started = nil
	f.maxTokens = 8192
	f.prior, f.truth = slowGuess, truth
	return f
}

// fitsBatch takes about 0.9 s at truth's speed and 4.6 s by the guess: it fits a 3 s deadline
// only once the node knows its speed.
func fitsBatch() *pb.ScoreBatchRequest {
	docs := make([]string, 8)
	for i := range docs {
		docs[i] = strings.Repeat("x", 100)
	}
	return batch("q", docs...)
}

func tightCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func nodeStatus(t *testing.T, h *harness) Status {
	t.Helper()
	code, body := get(t, h, "/v1/status")
	if code != 200 {
		t.Fatalf("/v1/status: %d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	for _, key := range []string{`"cost_model"`, `"a"`, `"b"`, `"c"`, `"samples"`, `"source"`, `"calibration_seconds"`} {
		if !strings.Contains(body, key) {
			t.Errorf("status JSON lacks %s", key)
		}
	}
	if st.CostModel == nil {
		t.Fatalf("status has no cost model: %s", body)
	}
	return st
}

func relErr(got, want costmodel.Coeffs, f costmodel.Features) float64 {
	return math.Abs(got.Seconds(f)/want.Seconds(f) - 1)
}

// TestCalibrationReplacesShapeGuess: a node whose engine only guesses its speed (5× too slow)
// times passes at start-up, so it accepts a batch that fits its deadline, and reports the speed
// it measured in /v1/status and in every reply's load.
func TestCalibrationReplacesShapeGuess(t *testing.T) {
	tests := []struct {
		name      string
		calibrate bool
		source    string
		wantCode  codes.Code
	}{
		{"calibrated", true, CostSourceCalibrated, codes.OK},
		{"calibration off keeps the guess", false, scorer.CostSourceShape, codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := knownSpeed()
			cfg := testConfig()
			cfg.Calibrate = tt.calibrate
			h := start(t, cfg, loadEngine(f), true)
			st := nodeStatus(t, h)
			cm := st.CostModel
			// The calibration's passes count as samples; a guess rests on none.
			wantSamples := 0
			if tt.calibrate {
				wantSamples = calRounds * len(calShapes)
			}
			if cm.Source != tt.source || cm.Samples != wantSamples {
				t.Errorf("cost model %+v, want source %s and %d samples", cm, tt.source, wantSamples)
			}
			got := costmodel.Coeffs{A: cm.A, B: cm.B, C: cm.C}
			if tt.calibrate {
				if want := calRounds * len(calShapes); cm.CalibrationPasses != want || !(cm.CalibrationSeconds > 0) || cm.CalibrationError != "" {
					t.Errorf("calibration: %d passes in %vs (err %q), want %d", cm.CalibrationPasses, cm.CalibrationSeconds, cm.CalibrationError, want)
				}
				if e := relErr(got, truth, costmodel.RefFeatures); e > 0.01 {
					t.Errorf("calibrated %+v, truth %+v: %.1f%% off on the reference batch", got, truth, 100*e)
				}
			} else if got != slowGuess.Coeffs || cm.CalibrationSeconds != 0 {
				t.Errorf("cost model %+v, want the guess %+v and no calibration", cm, slowGuess.Coeffs)
			}

			resp, err := h.client.ScoreBatch(tightCtx(t), fitsBatch())
			if status.Code(err) != tt.wantCode {
				t.Fatalf("err = %v, want %v", err, tt.wantCode)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "cannot finish before its deadline") {
					t.Errorf("err = %v, want the early deadline check", err)
				}
				return
			}
			lc := resp.GetLoad().GetCostModel()
			if lc.GetSource() != CostSourceCalibrated || lc.GetSamples() != uint64(wantSamples+1) {
				t.Errorf("reply's cost model %+v, want calibrated with %d samples (calibration and this pass)", lc, wantSamples+1)
			}
			if e := relErr(costmodel.Coeffs{A: lc.GetA(), B: lc.GetB(), C: lc.GetC()}, truth, costmodel.RefFeatures); e > 0.01 {
				t.Errorf("reply's cost model %+v: %.1f%% off truth", lc, 100*e)
			}
		})
	}
}

// histogram reads a histogram's cumulative bucket counts from the registry.
func histogram(t *testing.T, h *harness, name string) *dto.Histogram {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// countIn is how many observations fell in (lo, hi], both bucket bounds.
func countIn(t *testing.T, hist *dto.Histogram, lo, hi float64) uint64 {
	t.Helper()
	var below, upto uint64
	found := 0
	if math.IsInf(hi, 1) {
		upto, found = hist.GetSampleCount(), 1
	}
	for _, b := range hist.GetBucket() {
		if math.Abs(b.GetUpperBound()-lo) < 1e-9 {
			below, found = b.GetCumulativeCount(), found+1
		}
		if math.Abs(b.GetUpperBound()-hi) < 1e-9 {
			upto, found = b.GetCumulativeCount(), found+1
		}
	}
	if found != 2 {
		t.Fatalf("bounds %v, %v are not bucket bounds", lo, hi)
	}
	return upto - below
}

// TestLearnsFromPasses: with calibration off, a node that starts 5× too slow learns its speed
// from the passes it runs (timing noise σ = 0.1 included): the estimate ratio converges to 1
// and a batch that fits its deadline is accepted.
func TestLearnsFromPasses(t *testing.T) {
	f := knownSpeed()
	rng := rand.New(rand.NewPCG(3, 4))
	f.noise = func() float64 { return math.Exp(0.1 * rng.NormFloat64()) }
	cfg := testConfig()
	cfg.Calibrate = false
	h := start(t, cfg, loadEngine(f), true)
	if _, err := h.client.ScoreBatch(tightCtx(t), fitsBatch()); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("before learning: err = %v, want DeadlineExceeded", err)
	}

	shapes := rand.New(rand.NewPCG(5, 6))
	const passes = 80
	for i := range passes {
		docs := make([]string, 1+shapes.IntN(8))
		for j := range docs {
			docs[j] = strings.Repeat("y", 10+shapes.IntN(300))
		}
		if _, err := h.client.ScoreBatch(ctxT(t), batch(strings.Repeat("q", 1+shapes.IntN(80)), docs...)); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
	}
	hist := histogram(t, h, "relevance_scorer_estimate_ratio")
	if hist.GetSampleCount() != passes {
		t.Fatalf("%d ratios observed, want %d", hist.GetSampleCount(), passes)
	}
	if n := countIn(t, hist, 4, math.Inf(1)); n < 1 {
		t.Error("no pass estimated > 4× its time: the first should have been (the guess is 5× slow)")
	}
	// 0.841 … 1.189 is one bucket either side of 1; noise alone puts ~90% of passes there.
	if n := countIn(t, hist, 0.25*math.Pow(2, 7.0/4), 0.25*math.Pow(2, 9.0/4)); n < passes*3/4 {
		t.Errorf("%d of %d passes estimated within ±19%%, want ≥ 75%%", n, passes)
	}
	cm := nodeStatus(t, h).CostModel
	if cm.Samples != passes || cm.Source != scorer.CostSourceShape {
		t.Errorf("cost model %+v, want %d samples from the shape guess", cm, passes)
	}
	if e := relErr(costmodel.Coeffs{A: cm.A, B: cm.B, C: cm.C}, truth, costmodel.RefFeatures); e > 0.15 {
		t.Errorf("learned %+v: %.0f%% off truth on the reference batch", cm, 100*e)
	}
	if _, err := h.client.ScoreBatch(tightCtx(t), fitsBatch()); err != nil {
		t.Errorf("after learning: %v", err)
	}
}

// TestEmulatedNodeLearns: an emulated node starts from its profile (no calibration) and learns
// from its passes like a real one; the profile is exact, so every estimate is. The profile's
// measured passes count as samples, as a real node's calibration passes do, so that a proxy
// trusts an emulated node's projections from its first reply as it does a calibrated one's.
func TestEmulatedNodeLearns(t *testing.T) {
	cfg := testConfig()
	cfg.Engine, cfg.CostProfile, cfg.Model = EngineEmulated, "profile.json", "small"
	prof := costmodel.Profile{Coeffs: costmodel.Coeffs{A: 2e-4, B: 1e-7, C: 0.01}, Samples: 27}
	h := start(t, cfg, func(context.Context) (scorer.Engine, error) {
		return emulated.New(emulated.Options{
			Profile:  &prof,
			Tokenize: newFake().Tokenize, // the shipped tokenizer takes seconds to load under -race
			Sleep:    func(ctx context.Context, d time.Duration) error { return ctx.Err() },
		})
	}, true)
	for i := range 5 {
		if _, err := h.client.ScoreBatch(ctxT(t), batch("red shoes "+strings.Repeat("x", i), "Red running shoes", "Kettle")); err != nil {
			t.Fatal(err)
		}
	}
	cm := nodeStatus(t, h).CostModel
	if cm.Source != scorer.CostSourceProfile || cm.Samples != 27+5 || cm.CalibrationSeconds != 0 {
		t.Errorf("cost model %+v, want the profile's 27 samples and 5 passes, no calibration", cm)
	}
	if e := relErr(costmodel.Coeffs{A: cm.A, B: cm.B, C: cm.C}, prof.Coeffs, costmodel.RefFeatures); e > 1e-3 {
		t.Errorf("learned %+v from an exact profile %+v", cm, prof.Coeffs)
	}
	hist := histogram(t, h, "relevance_scorer_estimate_ratio")
	if n := countIn(t, hist, 0.25*math.Pow(2, 7.0/4), 0.25*math.Pow(2, 9.0/4)); n != 5 {
		t.Errorf("%d of 5 estimates in (0.84, 1.19], want all", n)
	}
}

// clockEngine advances a fake clock by each pass's time: calibrate's budget is in that clock. A
// pass that would end after deadline is cancelled there, as the real clock's context would.
type clockEngine struct {
	*fakeEngine
	now, deadline time.Time
}

func (c *clockEngine) forward(ctx context.Context, gs []*scorer.Group) (scorer.ForwardStats, error) {
	st, err := c.Forward(ctx, gs)
	if c.now.Add(st.Duration).After(c.deadline) {
		c.now = c.deadline
		return scorer.ForwardStats{}, context.DeadlineExceeded
	}
	c.now = c.now.Add(st.Duration)
	return st, err
}

func runCalibrate(budget time.Duration) calibration {
	t0 := time.Unix(1e9, 0)
	c := &clockEngine{fakeEngine: knownSpeed(), now: t0, deadline: t0.Add(budget)}
	return calibrate(context.Background(), c, budget, func() time.Time { return c.now }, c.forward)
}

// TestCalibrateBudget: calibration ends within its budget (the pass running at its end is
// cancelled), fits what it measured, and keeps the prior when the budget holds too few passes.
func TestCalibrateBudget(t *testing.T) {
	all := runCalibrate(time.Hour).Took // the whole design at truth's speed
	tests := []struct {
		name       string
		budget     time.Duration
		wantPasses int // 0: check only that some, but not all, passes ran
		wantErr    string
	}{
		{"ample", time.Hour, calRounds * len(calShapes), ""},
		{"cut short", all / 2, 0, ""},
		{"too small", all / calRounds / 2, -1, "want at least 4 of 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cal := runCalibrate(tt.budget)
			if cal.Took > tt.budget {
				t.Errorf("took %v, over the budget %v", cal.Took, tt.budget)
			}
			switch {
			case tt.wantErr != "":
				if cal.Err == nil || !strings.Contains(cal.Err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", cal.Err, tt.wantErr)
				}
				if got, src := startCost(cal, slowGuess); got != slowGuess.Coeffs || src != scorer.CostSourceShape {
					t.Errorf("failed calibration starts from %+v (%s), want the guess", got, src)
				}
				return
			case cal.Err != nil:
				t.Fatal(cal.Err)
			case tt.wantPasses > 0 && cal.Passes != tt.wantPasses:
				t.Errorf("%d passes, want %d", cal.Passes, tt.wantPasses)
			case tt.wantPasses == 0 && (cal.Passes < len(calShapes) || cal.Passes >= calRounds*len(calShapes)):
				t.Errorf("%d passes, want some but not all", cal.Passes)
			}
			if got, src := startCost(cal, slowGuess); relErr(got, truth, costmodel.RefFeatures) > 1e-6 || src != CostSourceCalibrated {
				t.Errorf("calibration starts from %+v (%s), want truth %+v", got, src, truth)
			}
		})
	}
}

// TestCalibrationEngineFailure: an engine that fails or panics during calibration. A failing
// pass keeps the guess; a panic is a failed load (the engine cannot be trusted).
func TestCalibrationEngineFailure(t *testing.T) {
	f := knownSpeed()
	f.err = errors.New("out of memory")
	h := start(t, testConfig(), loadEngine(f), true)
	cm := nodeStatus(t, h).CostModel
	if cm.Source != scorer.CostSourceShape || !strings.Contains(cm.CalibrationError, "out of memory") {
		t.Errorf("cost model %+v, want the guess and the calibration's error", cm)
	}

	pe := &panicEngine{fakeEngine: knownSpeed()}
	pe.forward.Store(true)
	h = start(t, testConfig(), loadEngine(pe), false)
	<-h.n.Loaded()
	if err := h.n.LoadErr(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("load error %v, want the calibration's panic", err)
	}
}

// pairTimingEngine is clockEngine with an attention timing of its own (pairTimer).
type pairTimingEngine struct {
	*clockEngine
	b float64
}

func (p *pairTimingEngine) PairSeconds(context.Context) (float64, error) { return p.b, nil }

// TestCalibrationKeepsTheMeasuredPairSeconds: an engine that times its attention alone gives the
// calibration its b; a and c are fitted around it (costmodel.FitWithB), so with the true b the
// fit is the truth, and with another b the fit keeps that b rather than fitting one.
func TestCalibrationKeepsTheMeasuredPairSeconds(t *testing.T) {
	for _, b := range []float64{truth.B, 3 * truth.B} {
		t0 := time.Unix(1e9, 0)
		c := &clockEngine{fakeEngine: knownSpeed(), now: t0, deadline: t0.Add(time.Hour)}
		e := &pairTimingEngine{clockEngine: c, b: b}
		cal := calibrate(context.Background(), e, time.Hour, func() time.Time { return c.now }, c.forward)
		if cal.Err != nil {
			t.Fatal(cal.Err)
		}
		if cal.PairSeconds != b || cal.Fit.Coeffs.B != b {
			t.Errorf("b measured %g: calibration kept %g, fit b %g", b, cal.PairSeconds, cal.Fit.Coeffs.B)
		}
		if b == truth.B {
			if got, _ := startCost(cal, slowGuess); relErr(got, truth, costmodel.RefFeatures) > 1e-6 {
				t.Errorf("with the true b: %+v, want truth %+v", got, truth)
			}
		}
	}
}
