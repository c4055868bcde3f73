package costmodel

import (
	"math"
	"testing"
)

// A node that reports an absurd but finite compute time (Observe only rejects ±Inf) must not
// leave the learner with non-finite coefficients: every projection on the node would be NaN.
func TestLearnerStaysFiniteOnAbsurdFiniteSample(t *testing.T) {
	l := NewLearner(Coeffs{A: 2e-5, B: 2e-9, C: 1e-3}, 0.99)
	f := BatchFeatures(64, []int{100, 100}, false)
	l.Observe(f, 1e308)
	if err := l.Coeffs().Validate(); err != nil {
		t.Fatalf("after one sample of 1e308 s: %v (coeffs %+v)", err, l.Coeffs())
	}
	l.Observe(f, 0.01)
	if c := l.Coeffs(); math.IsNaN(c.Seconds(f)) {
		t.Fatalf("NaN stays: %+v", c)
	}
}
