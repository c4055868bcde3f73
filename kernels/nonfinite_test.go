//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxPropagatesNaN: a NaN activation must not become a finite softmax output on any
// implementation: the f32 reference (softmaxGeneric, math.Exp) gives NaN for the row.
func TestSoftmaxPropagatesNaN(t *testing.T) {
	for _, c := range availableImpls() {
		if c.dot {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			for _, pos := range []int{0, 5, 9} {
				x := make([]float32, 10)
				for i := range x {
					x[i] = float32(i) / 10
				}
				x[pos] = float32(math.NaN())
				Softmax(x)
				nan := 0
				for _, v := range x {
					if v != v {
						nan++
					}
				}
				if nan == 0 {
					t.Errorf("NaN at %d: softmax %v has no NaN (the reference gives all NaN)", pos, x)
				}
			}
		})
	}
}

// TestAttentionNaNKeyIsNotDropped: a NaN in one prefix key (an overflowed activation at one
// position) must reach the rows that attend it, on every implementation, as it does in the
// reference: a finite score from a broken pass would be silently wrong.
func TestAttentionNaNKeyIsNotDropped(t *testing.T) {
	for _, c := range availableImpls() {
		if c.dot {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(7, 8))
			a := randAttention(rng, 2, 1, 16, 9, []int{3})
			a.PrefixK[4*16+3] = float32(math.NaN()) // key of prefix position 4
			T := a.SeqStarts[len(a.SeqStarts)-1]
			want := make([]float32, T*2*16)
			attentionReference(want, a)
			got := make([]float32, len(want))
			Attention(got, a)
			for i := range got {
				if math.IsNaN(float64(want[i])) != math.IsNaN(float64(got[i])) {
					t.Fatalf("out[%d] = %v, reference %v", i, got[i], want[i])
				}
			}
		})
	}
}
