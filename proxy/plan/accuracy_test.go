package plan

import "testing"

// TestAccuracyQuantile: quantiles come from the published window (rebuilt every 16 samples),
// nearest rank; bad ratios are ignored.
func TestAccuracyQuantile(t *testing.T) {
	var a Accuracy
	if _, n := a.Quantile(0.9); n != 0 {
		t.Fatalf("empty tracker has %d samples", n)
	}
	for i := range 100 {
		a.Add(float64(100 - i)) // 100 down to 1
	}
	a.Add(-1) // ignored
	// Published every 16 samples: the last publication saw 100..5, whose nearest-rank p90 is
	// the 87th smallest of 96 values, 91 (the window holds 256).
	if q, n := a.Quantile(0.9); q != 91 || n != 96 {
		t.Errorf("p90 = %v after %d samples, want 91 after 96", q, n)
	}
	if q, _ := a.Quantile(0.5); q != 52 {
		t.Errorf("p50 = %v, want 52", q)
	}
}
