package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestOneStalledMergedPassOnFreshLearnerIsOneOutlier: a node just seeded (its prime reply, or
// right after a level shift reset P) is where one outlier moves the estimate most. The three
// batches of one merged pass stalled 20× are one outlier, not three: the level-shift run already
// counted them once, but each still moved the estimate by its Huber step (1.66×, 2.30×, 3.12×).
func TestOneStalledMergedPassOnFreshLearnerIsOneOutlier(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	f := BatchFeatures(64, []int{200, 200, 200, 200}, false)
	one := NewLearner(truth, 0.99)
	one.ObservePass(f, truth.Seconds(f)*20, 0)
	l := NewLearner(truth, 0.99)
	for range 3 {
		l.ObservePass(f, truth.Seconds(f)*20, 42)
	}
	g, g1 := l.Coeffs().Seconds(f)/truth.Seconds(f), one.Coeffs().Seconds(f)/truth.Seconds(f)
	if g > 2 || g > g1*1.01 {
		t.Errorf("one stalled pass of three priced the fresh node %.2f× its speed; one stalled batch %.2f×", g, g1)
	}
	for pass := range uint64(3) {
		l.ObservePass(f, truth.Seconds(f)*20, 100+pass)
	}
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g < 5 {
		t.Errorf("three slow passes in a row left the node priced %.1f× its speed; want the shift", g)
	}
}

// TestLevelShiftNeedsDistinctPasses: the replies of a node's passes reach the learner in the
// order their calls' goroutines take the node's lock, so a stalled merged pass's batches may be
// interleaved with another pass's. Two stalled passes are two pieces of evidence however their
// replies are ordered (only the last counted pass was compared: A, B, A made a shift).
func TestLevelShiftNeedsDistinctPasses(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	f := BatchFeatures(64, []int{200, 200, 200, 200}, false)
	r := rand.New(rand.NewPCG(7, 8))
	l := NewLearner(truth, 0.99)
	for range 500 {
		l.Observe(f, truth.Seconds(f)*math.Exp(0.05*r.NormFloat64()))
	}
	for _, pass := range []uint64{42, 43, 42, 43} {
		l.ObservePass(f, truth.Seconds(f)*20, pass)
	}
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g > 2 {
		t.Errorf("two stalled passes, their replies interleaved, left the node priced %.1f× its speed", g)
	}
	l.ObservePass(f, truth.Seconds(f)*20, 44)
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g < 5 {
		t.Errorf("a third slow pass left the node priced %.1f× its speed; want the shift", g)
	}
}

// TestLevelShiftWithoutPassIDs: replies that name no pass (an older node, another kind of
// server) each count, as before: three slow ones in a row are a shift.
func TestLevelShiftWithoutPassIDs(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	f := BatchFeatures(64, []int{200, 200, 200, 200}, false)
	l := NewLearner(truth, 0.99)
	for range 200 {
		l.Observe(f, truth.Seconds(f))
	}
	for range 3 {
		l.Observe(f, truth.Seconds(f)*20)
	}
	if g := l.Coeffs().Seconds(f) / truth.Seconds(f); g < 5 {
		t.Errorf("three slow replies without a pass id left the node priced %.1f× its speed; want the shift", g)
	}
}
