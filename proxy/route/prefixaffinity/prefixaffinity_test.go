package prefixaffinity

import (
	"testing"

	"github.com/relevance-scoring/relevance/proxy/route"
)

func TestPickEarliestFinish(t *testing.T) {
	first := func(n int) int { return 0 }
	tests := []struct {
		name string
		c    route.Candidates
		want int
	}{
		{"holder wins at equal load", route.Costs{Loads: []float64{0.1, 0.1}, Costs: []float64{0.2, 0.12}}, 1},
		{"holder wins while its queue costs less than the prefix", route.Costs{Loads: []float64{0.1, 0.15}, Costs: []float64{0.2, 0.12}}, 1},
		{"holder loses when its queue costs more than the prefix saves", route.Costs{Loads: []float64{0.1, 0.3}, Costs: []float64{0.2, 0.12}}, 0},
		{"faster node wins at equal load", route.Costs{Loads: []float64{0, 0}, Costs: []float64{0.4, 0.2}}, 1},
		{"without costs it is least-loaded", route.Slice{0.3, 0.1, 0.2}, 1},
		{"empty", route.Slice{}, -1},
	}
	for _, tt := range tests {
		if got := New(0, first).Pick(tt.c); got != tt.want {
			t.Errorf("%s: picked %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestTwoChoicesAboveFullScan: beyond FullScanMax it compares two random candidates on the same
// projected finish.
func TestTwoChoicesAboveFullScan(t *testing.T) {
	seq := []int{0, 0} // i = 0, j = 0 → 1
	k := 0
	rnd := func(n int) int { v := seq[k%len(seq)]; k++; return v % n }
	c := route.Costs{Loads: []float64{0.5, 0.1, 0}, Costs: []float64{0.1, 0.1, 0.1}}
	if got := New(2, rnd).Pick(c); got != 1 {
		t.Errorf("picked %d, want 1 (the better of candidates 0 and 1)", got)
	}
}
