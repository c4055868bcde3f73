package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// topKReference sorts all indices by value (descending, ties by index) and keeps k.
func topKReference(probs []float32, k int) ([]int32, []float32) {
	ix := make([]int32, 0, len(probs))
	for i, p := range probs {
		if p == p {
			ix = append(ix, int32(i))
		}
	}
	slices.SortStableFunc(ix, func(a, b int32) int {
		switch {
		case probs[a] > probs[b]:
			return -1
		case probs[a] < probs[b]:
			return 1
		}
		return 0
	})
	for i, p := range probs {
		if p != p {
			ix = append(ix, int32(i))
		}
	}
	ix = ix[:min(k, len(ix))]
	w := make([]float32, len(ix))
	for i, j := range ix {
		w[i] = probs[j]
	}
	return ix, w
}

func TestTopK(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name  string
		probs []float32
		k     int
	}{
		{"empty", nil, 3},
		{"k zero", []float32{1, 2}, 0},
		{"k larger than n", []float32{0.1, 0.5, 0.2}, 8},
		{"ties keep index order", []float32{0.2, 0.3, 0.3, 0.1, 0.3}, 2},
		{"all equal", []float32{1, 1, 1, 1}, 3},
		{"descending", []float32{5, 4, 3, 2, 1}, 2},
		{"ascending", []float32{1, 2, 3, 4, 5}, 2},
		{"nan skipped", []float32{0.1, nan, 0.7, 0.2}, 2},
		{"nan only when short", []float32{nan, 0.3, nan}, 3},
		{"negative", []float32{-3, -1, -2}, 1},
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{60, 128} {
		for _, k := range []int{1, 4, 8} {
			p := make([]float32, n)
			for i := range p {
				p[i] = float32(rng.IntN(20)) / 20 // many ties
			}
			tests = append(tests, struct {
				name  string
				probs []float32
				k     int
			}{"random", p, k})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := make([]int32, max(tc.k, 0))
			w := make([]float32, max(tc.k, 0))
			n := TopK(tc.probs, tc.k, idx, w)
			wantIdx, wantW := topKReference(tc.probs, tc.k)
			if diff := cmp.Diff(wantIdx, idx[:n]); diff != "" {
				t.Errorf("idx (-want +got):\n%s", diff)
			}
			for i := range wantW {
				if math.Float32bits(wantW[i]) != math.Float32bits(w[i]) && !(wantW[i] != wantW[i] && w[i] != w[i]) {
					t.Errorf("w[%d] = %v, want %v", i, w[i], wantW[i])
				}
			}
		})
	}
}

func BenchmarkTopK(b *testing.B) {
	for _, c := range []struct{ n, k int }{{128, 8}, {60, 4}} {
		rng := rand.New(rand.NewPCG(1, 1))
		p := make([]float32, c.n)
		for i := range p {
			p[i] = rng.Float32()
		}
		idx := make([]int32, c.k)
		w := make([]float32, c.k)
		b.Run(fmt.Sprintf("n%d_k%d", c.n, c.k), func(b *testing.B) {
			for b.Loop() {
				TopK(p, c.k, idx, w)
			}
		})
	}
}
