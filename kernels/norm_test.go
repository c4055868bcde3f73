package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRMSNorm compares every implementation the CPU runs (generic, AVX2, AVX-512) with the
// float64 reference on every length class around the 8- and 16-lane blocks, rows alone and
// several at once, in place and not.
func TestRMSNorm(t *testing.T) { forEachActWidth(t, testRMSNorm) }

func testRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, d := range []int{1, 7, 8, 9, 15, 16, 17, 24, 33, 64, 100, 128, 2048} {
		for _, rows := range []int{1, 3} {
			t.Run(fmt.Sprintf("d%d_rows%d", d, rows), func(t *testing.T) {
				x := randVec(rng, rows*d)
				w := randVec(rng, d)
				want := make([]float32, len(x))
				for r := range rows {
					rmsNormRowGeneric(want[r*d:(r+1)*d], x[r*d:(r+1)*d], w, 1e-6)
				}
				got := make([]float32, len(x))
				RMSNorm(got, x, w, rows, 1e-6)
				if i := closeTo(got, want, 1e-6); i >= 0 {
					t.Fatalf("[%d] = %v, want %v", i, got[i], want[i])
				}
				RMSNorm(x, x, w, rows, 1e-6) // in place
				if i := closeTo(x, got, 0); i >= 0 {
					t.Fatalf("in place [%d] = %v, want %v", i, x[i], got[i])
				}
			})
		}
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	requireAsm(b)
	rng := rand.New(rand.NewPCG(1, 1))
	const d, rows = 1024, 64
	x := randVec(rng, rows*d)
	w := randVec(rng, d)
	dst := make([]float32, len(x))
	b.Run("dispatch", func(b *testing.B) {
		for b.Loop() {
			RMSNorm(dst, x, w, rows, 1e-6)
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			for r := range rows {
				rmsNormRowGeneric(dst[r*d:(r+1)*d], x[r*d:(r+1)*d], w, 1e-6)
			}
		}
	})
}
