package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Every reply has the same shape (one batch, fixed item lengths: tokens, pairs and batches are
// collinear). The split between a, b and c is then unidentifiable and must stay at the prior;
// only the level of that shape is learned. The prior is the truth here.
func TestLearnerUnexcitedDirectionsStayAtPriorUnderFixedShape(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	fixed := BatchFeatures(64, []int{200, 200, 200, 200}, false)
	big := BatchFeatures(4000, []int{4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000}, false)
	r := rand.New(rand.NewPCG(1, 2))
	l := NewLearner(truth, 0.99)
	for range 5000 {
		l.Observe(fixed, truth.Seconds(fixed)*math.Exp(0.05*r.NormFloat64()))
	}
	rel := func(f Features) float64 { return l.Coeffs().Seconds(f) / truth.Seconds(f) }
	if g := rel(fixed); math.Abs(g-1) > 0.05 {
		t.Errorf("the trained shape itself priced at %.3f× its time", g)
	}
	if g := rel(big); math.Abs(g-1) > 0.25 {
		t.Errorf("a large batch priced at %.3f× its time (coeffs %+v, prior = truth %+v)", g, l.Coeffs(), truth)
	}
}

// Huber weights promise that one GC pause moves the estimate by a bounded amount. On a fresh
// learner (a node just seeded, or just after a level shift reset P) it does not.
func TestLearnerOneOutlierOnFreshLearnerMovesEstimateBoundedly(t *testing.T) {
	prior := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	l := NewLearner(prior, 0.99)
	l.Observe(RefFeatures, prior.Seconds(RefFeatures)*300) // one 300× stall
	if g := l.Coeffs().Seconds(RefFeatures) / prior.Seconds(RefFeatures); g > 2 {
		t.Errorf("one outlier made the node %.1f× dearer (coeffs %+v)", g, l.Coeffs())
	}
}

// TestLevelShiftNotTriggeredByOneStalledMergedPass: the three batches of one merged pass that hit
// a 20× stall are one piece of evidence, not a run of three: the node is not made 20× dearer.
// Three slow passes are a shift.
func TestLevelShiftNotTriggeredByOneStalledMergedPass(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	f := BatchFeatures(64, []int{200, 200, 200, 200}, false)
	r := rand.New(rand.NewPCG(3, 4))
	l := NewLearner(truth, 0.99)
	for range 500 {
		l.Observe(f, truth.Seconds(f)*math.Exp(0.05*r.NormFloat64()))
	}
	for range 3 {
		l.ObservePass(f, truth.Seconds(f)*20, 42)
	}
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g > 2 {
		t.Errorf("one stalled pass left the node priced %.1f× its speed", g)
	}
	for pass := range uint64(3) {
		l.ObservePass(f, truth.Seconds(f)*20, 100+pass)
	}
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g < 5 {
		t.Errorf("three slow passes in a row left the node priced %.1f× its speed; want the shift", g)
	}
}

// TestLearnerRecoversFromAbsurdlyCheapStart: started 10⁴× too cheap (a node's report), the learner
// reaches the truth from the replies: its multipliers move their basis past 1e3 instead of
// stopping there (it stayed at a tenth of the time).
func TestLearnerRecoversFromAbsurdlyCheapStart(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	l := NewLearner(Coeffs{A: truth.A * 1e-4, B: truth.B * 1e-4, C: truth.C * 1e-4}, 0.99)
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		f := BatchFeatures(20+r.IntN(200), []int{30 + r.IntN(800), 30 + r.IntN(800)}, false)
		l.Observe(f, truth.Seconds(f))
	}
	if g := l.Coeffs().Seconds(RefFeatures) / truth.Seconds(RefFeatures); g < 0.5 || g > 2 {
		t.Errorf("after 2000 true replies the node is priced at %.2g× its time", g)
	}
}
