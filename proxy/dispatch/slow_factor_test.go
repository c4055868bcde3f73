package dispatch

import (
	"math"
	"testing"
	"time"
)

// TestHugeSlowFactorDoesNotMarkEveryBatchSlow: outlier.slow_factor validates as any value ≥ 1,
// and an operator who wants slow detection out of the way writes a huge one (1e9, or .inf in
// YAML). slow_factor × the projected finish in nanoseconds then overflows time.Duration, and on
// amd64 the float→int64 conversion gives the most negative Duration: max(that, slow_min) made
// every batch slow 50 ms after it was sent — each counted against its node (ejections) and
// rescued on another (the cluster's work doubled) — the opposite of what was asked.
func TestHugeSlowFactorDoesNotMarkEveryBatchSlow(t *testing.T) {
	for _, f := range []float64{1e9, math.Inf(1)} {
		d := &Dispatcher{cfg: Config{SlowFactor: f, SlowMin: 50 * time.Millisecond}}
		at, on := d.slowAfter(10) // a batch projected to finish in 10 s
		if !on {
			t.Fatalf("slow_factor %v: slow detection off", f)
		}
		if at < 10*time.Second {
			t.Errorf("slow_factor %v, projected 10 s: slow after %v, want at least the projection", f, at)
		}
	}
}
