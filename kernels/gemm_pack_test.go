package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The packers are checked against the layouts as gemm_pack.go defines them, element by element:
// every source value at its place, and zeros everywhere else (the padding of the last panel and
// of a bf16 panel's k-pairs, which the AMX tiles and the ragged columns read).
func TestPackedPanelsFollowTheLayout(t *testing.T) {
	shapes := []struct{ n, k int }{
		{1, 1}, {1, 2}, {3, 5}, {31, 7}, {32, 16}, {33, 17}, {64, 32}, {65, 33}, {100, 31},
		{256, 64}, {300, 129}, {768, 512}, {512, 384}, {1, 1000},
	}
	rng := rand.New(rand.NewPCG(3, 9))
	for _, sh := range shapes {
		n, k := sh.n, sh.k
		t.Run(fmt.Sprintf("n=%d/k=%d", n, k), func(t *testing.T) {
			w32 := make([]float32, n*k)
			w16 := make([]uint16, n*k)
			for i := range w32 {
				w32[i] = float32(rng.IntN(1<<20) + 1) // nonzero: a misplaced value cannot hide as padding
				w16[i] = uint16(rng.IntN(1<<16-1) + 1)
			}
			p32 := packF32(w32, n, k)
			want32 := make([]float32, numPanels(n)*panelWidth*k)
			for j := 0; j < n; j++ {
				for kk := 0; kk < k; kk++ {
					want32[(j/panelWidth)*panelWidth*k+kk*panelWidth+j%panelWidth] = w32[j*k+kk]
				}
			}
			if i, ok := firstDiff(p32, want32); !ok {
				t.Fatalf("f32: %d values, want %d; first difference at %d", len(p32), len(want32), i)
			}
			p16 := packBF16(w16, n, k)
			kp := bf16PanelPairs(k)
			if kp%16 != 0 || 2*kp < k {
				t.Fatalf("bf16PanelPairs(%d) = %d: want ≥ ceil(k/2), a multiple of 16", k, kp)
			}
			want16 := make([]uint16, numPanels(n)*kp*2*panelWidth)
			for j := 0; j < n; j++ {
				for kk := 0; kk < k; kk++ {
					want16[(j/panelWidth)*kp*2*panelWidth+(kk/2)*2*panelWidth+2*(j%panelWidth)+kk%2] = w16[j*k+kk]
				}
			}
			if i, ok := firstDiff(p16, want16); !ok {
				t.Fatalf("bf16: %d values, want %d; first difference at %d", len(p16), len(want16), i)
			}
		})
	}
}

func firstDiff[E comparable](got, want []E) (int, bool) {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return i, false
		}
	}
	if len(got) != len(want) {
		return min(len(got), len(want)), false
	}
	return 0, true
}
