package route_test

import (
	"math"
	"testing"

	"github.com/relevance-scoring/relevance/proxy/route"
)

// A node whose projected finish is NaN (a poisoned cost model) must not win every pick because
// it happens to be first: NaN compares false both ways.
func TestArgMinDoesNotPickNaNFirst(t *testing.T) {
	loads := []float64{math.NaN(), 5, 0.1, 3}
	for range 50 {
		if got := route.ArgMin(len(loads), func(i int) float64 { return loads[i] }, route.DefaultRand, 64); got != 2 {
			t.Fatalf("ArgMin(%v) = %d, want 2 (the least finite load)", loads, got)
		}
	}
}
