package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

var learnerTruth = Coeffs{A: 6.7e-4, B: 3.8e-7, C: 0.14}

// TestLearnerSeededFarTooDearLearnsDownToItsTime: the mirror of the too-cheap seed:
// a node's reported model 10⁴× too dear is learned down from its replies, not stuck at the
// 1e-3 lower clamp (10× its time: the node gets almost no traffic, for good).
func TestLearnerSeededFarTooDearLearnsDownToItsTime(t *testing.T) {
	lie := Coeffs{A: learnerTruth.A * 1e4, B: learnerTruth.B * 1e4, C: learnerTruth.C * 1e4}
	l := NewLearner(lie, 0.99)
	for i := range 300 {
		f := BatchFeatures(60, []int{40 + i%200, 80}, false)
		l.Observe(f, learnerTruth.Seconds(f))
	}
	if g := l.Coeffs().Seconds(RefFeatures) / learnerTruth.Seconds(RefFeatures); g > 2 {
		t.Errorf("after 300 true replies priced at %.3g× its time, want ≤ 2×", g)
	}
}

// TestLearnerStaysFiniteAndPositiveUnderAbsurdReplies: any finite reply, however absurd, leaves
// the coefficients finite and positive.
func TestLearnerStaysFiniteAndPositiveUnderAbsurdReplies(t *testing.T) {
	for _, hi := range []float64{math.Log10(86400), 308} {
		for seed := range uint64(200) {
			rng := rand.New(rand.NewPCG(seed, 3))
			l := NewLearner(learnerTruth, 0.99)
			for i := range 500 {
				f := BatchFeatures(rng.IntN(300), []int{1 + rng.IntN(500), 1 + rng.IntN(500)}, rng.IntN(2) == 0)
				y := math.Pow(10, rng.Float64()*(hi+12)-12)
				if rng.IntN(4) == 0 {
					y = learnerTruth.Seconds(f)
				}
				l.ObservePass(f, y, uint64(rng.IntN(3)))
				c := l.Coeffs()
				for _, v := range []float64{c.A, c.B, c.C} {
					if !(v > 0) || math.IsInf(v, 0) {
						t.Fatalf("y up to 1e%.1f, seed %d step %d (y %g): coeffs %+v", hi, seed, i, y, c)
					}
				}
			}
		}
	}
}
