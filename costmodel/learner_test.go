package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestLearnerConverges(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	prior := Coeffs{A: 2e-5, B: 2e-9, C: 1e-3}
	tests := []struct {
		name     string
		noise    float64 // σ of multiplicative log-normal noise
		outliers float64 // share of samples ×10 slower (GC pause, noisy neighbour)
		tol      float64 // relative error allowed on a reference batch
	}{
		{"exact", 0, 0, 0.02},
		{"noisy", 0.1, 0, 0.08},
		{"outliers", 0.05, 0.05, 0.12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			l := NewLearner(prior, 0.99)
			for range 400 {
				p := 20 + r.IntN(200)
				items := make([]int, 1+r.IntN(40))
				for i := range items {
					items[i] = 30 + r.IntN(800)
				}
				f := BatchFeatures(p, items, r.IntN(3) == 0)
				y := truth.Seconds(f) * math.Exp(tt.noise*r.NormFloat64())
				if r.Float64() < tt.outliers {
					y *= 10
				}
				l.Observe(f, y)
			}
			for _, f := range []Features{RefFeatures, BatchFeatures(100, []int{500, 500, 500, 500}, false), BatchFeatures(30, []int{40}, false)} {
				got, want := l.Coeffs().Seconds(f), truth.Seconds(f)
				if math.Abs(got/want-1) > tt.tol {
					t.Errorf("prediction %.4gs, truth %.4gs (coeffs %+v)", got, want, l.Coeffs())
				}
			}
		})
	}
}

func TestLearnerIgnoresGarbage(t *testing.T) {
	prior := Coeffs{A: 2e-5, B: 2e-9, C: 1e-3}
	l := NewLearner(prior, 0.99)
	for _, y := range []float64{math.NaN(), math.Inf(1), -1} {
		l.Observe(RefFeatures, y)
	}
	l.Observe(Features{}, 1)
	if l.Coeffs() != prior || l.n != 0 {
		t.Errorf("garbage moved the estimate: %+v after %d samples", l.Coeffs(), l.n)
	}
}

// TestLearnerZeroPrior: a zero prior coefficient (a non-negative fit may return one) starts the
// estimate at zero for it and is still learned when the node's times show it.
func TestLearnerZeroPrior(t *testing.T) {
	truth := Coeffs{A: 6e-4, B: 4e-7, C: 0.14}
	l := NewLearner(Coeffs{A: 6e-4, B: 0, C: 0.14}, 0.99)
	if got := l.Coeffs(); got.B != 0 || got.A != 6e-4 || got.C != 0.14 {
		t.Fatalf("start %+v, want the prior", got)
	}
	r := rand.New(rand.NewPCG(9, 10))
	for range 400 {
		items := make([]int, 1+r.IntN(16))
		for i := range items {
			items[i] = 20 + r.IntN(600)
		}
		f := BatchFeatures(20+r.IntN(200), items, false)
		l.Observe(f, truth.Seconds(f))
	}
	got := l.Coeffs()
	if math.Abs(got.B/truth.B-1) > 0.1 {
		t.Errorf("learned b = %.3g, truth %.3g (coeffs %+v)", got.B, truth.B, got)
	}
}

// TestLearnerFollowsALevelShift: a node that becomes 10× slower (or 4× faster) is priced at its
// new speed within a few batches, though Huber weights would treat each of them as an outlier;
// isolated outliers still do not move it.
func TestLearnerFollowsALevelShift(t *testing.T) {
	truth := Coeffs{A: 6e-5, B: 1e-9, C: 4e-3}
	r := rand.New(rand.NewPCG(3, 4))
	batch := func() Features {
		items := make([]int, 1+r.IntN(16))
		for i := range items {
			items[i] = 20 + r.IntN(200)
		}
		return BatchFeatures(40+r.IntN(80), items, false)
	}
	l := NewLearner(truth, 0.99)
	for range 200 {
		f := batch()
		l.Observe(f, truth.Seconds(f)*math.Exp(0.05*r.NormFloat64()))
	}
	ref := func(c Coeffs) float64 { return c.Seconds(RefFeatures) }
	// Isolated outliers (one in ten, ×10) leave it near the truth.
	for i := range 50 {
		f := batch()
		y := truth.Seconds(f)
		if i%10 == 0 {
			y *= 10
		}
		l.Observe(f, y)
	}
	if got := ref(l.Coeffs()) / ref(truth); got < 0.85 || got > 1.25 {
		t.Fatalf("after isolated outliers: %.2f× the truth", got)
	}
	for _, factor := range []float64{10, 0.25} {
		now := Coeffs{A: truth.A * factor, B: truth.B * factor, C: truth.C * factor}
		for range 5 {
			f := batch()
			l.Observe(f, now.Seconds(f)*math.Exp(0.05*r.NormFloat64()))
		}
		if got := ref(l.Coeffs()) / ref(now); got < 0.7 || got > 1.4 {
			t.Errorf("5 batches after the node became %v× as slow: priced at %.2f× its new speed", factor, got)
		}
	}
}
