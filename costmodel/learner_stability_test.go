package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLearnerPStaysSymmetricPositiveDefiniteOver1e5OneShape: 100,000 replies of one shape leave
// the confidence matrix symmetric and positive definite, and other shapes priced near the prior.
func TestLearnerPStaysSymmetricPositiveDefiniteOver1e5OneShape(t *testing.T) {
	prior := Coeffs{A: 1e-5, B: 1e-3, C: 5e-3}
	l := NewLearner(prior, 0.99)
	rnd := rand.New(rand.NewPCG(1, 2))
	f := Features{Tokens: 4000, Pairs: 16, Batches: 1}
	for i := 0; i < 100000; i++ {
		y := prior.Seconds(f) * (1 + 0.05*rnd.NormFloat64())
		l.Observe(f, y)
	}
	p := l.p
	for i := range 3 {
		for j := range 3 {
			if d := math.Abs(p[i][j] - p[j][i]); d > 1e-6*math.Max(math.Abs(p[i][j]), 1) {
				t.Errorf("P not symmetric at %d,%d: %g vs %g", i, j, p[i][j], p[j][i])
			}
		}
	}
	d1 := p[0][0]
	d2 := p[0][0]*p[1][1] - p[0][1]*p[1][0]
	d3 := p[0][0]*(p[1][1]*p[2][2]-p[1][2]*p[2][1]) - p[0][1]*(p[1][0]*p[2][2]-p[1][2]*p[2][0]) + p[0][2]*(p[1][0]*p[2][1]-p[1][1]*p[2][0])
	t.Logf("P=%v minors %g %g %g m=%v coeffs=%+v", p, d1, d2, d3, l.m, l.Coeffs())
	if !(d1 > 0 && d2 > 0 && d3 > 0) {
		t.Errorf("P not PD: minors %g %g %g", d1, d2, d3)
	}
	for _, g := range []Features{{Tokens: 100, Pairs: 1, Batches: 1}, {Tokens: 100000, Pairs: 256, Batches: 1}} {
		r := l.Coeffs().Seconds(g) / prior.Seconds(g)
		t.Logf("other shape %+v ratio %g", g, r)
		if r < 0.5 || r > 2 {
			t.Errorf("other shape %+v priced %gx prior", g, r)
		}
	}
}

// BenchmarkLearnerObserve: one reply learned (it runs under the node's lock on every reply).
func BenchmarkLearnerObserve(b *testing.B) {
	prior := Coeffs{A: 1e-5, B: 1e-3, C: 5e-3}
	l := NewLearner(prior, 0.99)
	rnd := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f := Features{Tokens: float64(500 + rnd.IntN(8000)), Pairs: float64(1 + rnd.IntN(64)), Batches: 1}
		l.Observe(f, prior.Seconds(f)*(1+0.05*rnd.NormFloat64()))
	}
}
