package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestApplyRoPE compares every implementation the CPU runs with the reference, on head dims
// whose half is and is not a multiple of the 8 and 16 lanes.
func TestApplyRoPE(t *testing.T) { forEachActWidth(t, testApplyRoPE) }

func testApplyRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, hd := range []int{2, 16, 32, 40, 48, 64, 128} {
		for _, heads := range []int{1, 3, 8} {
			t.Run(fmt.Sprintf("hd%d_heads%d", hd, heads), func(t *testing.T) {
				tab := NewRoPETable(300, hd, 1e6)
				pos := []int32{0, 1, 17, 299, 5}
				x := randVec(rng, len(pos)*heads*hd)
				want := append([]float32(nil), x...)
				for r, p := range pos {
					half := hd / 2
					ropeRowGeneric(want[r*heads*hd:(r+1)*heads*hd], tab.Cos[int(p)*half:(int(p)+1)*half], tab.Sin[int(p)*half:(int(p)+1)*half], heads, half)
				}
				ApplyRoPE(x, pos, heads, tab)
				if i := closeTo(x, want, 1e-6); i >= 0 {
					t.Fatalf("[%d] = %v, want %v", i, x[i], want[i])
				}
			})
		}
	}
}

func BenchmarkApplyRoPE(b *testing.B) {
	requireAsm(b)
	rng := rand.New(rand.NewPCG(1, 1))
	const hd, heads, rows = 64, 8, 256
	tab := NewRoPETable(rows, hd, 1e6)
	pos := make([]int32, rows)
	for i := range pos {
		pos[i] = int32(i)
	}
	x := randVec(rng, rows*heads*hd)
	b.Run("dispatch", func(b *testing.B) {
		for b.Loop() {
			ApplyRoPE(x, pos, heads, tab)
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			for r, p := range pos {
				ropeRowGeneric(x[r*heads*hd:(r+1)*heads*hd], tab.Cos[int(p)*hd/2:(int(p)+1)*hd/2], tab.Sin[int(p)*hd/2:(int(p)+1)*hd/2], heads, hd/2)
			}
		}
	})
}
