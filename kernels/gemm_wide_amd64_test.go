//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// shortTileCase is one AVX2 micro-kernel call's operands: mr rows of A (lda floats apart), one
// packed 32-column panel of B over kc values of k (f32: [kc][32]; bf16: [ceil(kc/2)][32][2]),
// and C (mr rows of 32, ldc 32).
type shortTileCase struct {
	mr, kc, lda int
	a           []float32
	b32         []float32
	b16         []uint16
	c           []float32
}

func newShortTileCase(rng *rand.Rand, mr, kc int) *shortTileCase {
	tc := &shortTileCase{mr: mr, kc: kc, lda: kc + 3}
	tc.a = randVec(rng, mr*tc.lda)
	tc.b32 = randVec(rng, kc*32)
	tc.b16 = make([]uint16, (kc+1)/2*64)
	for i := range tc.b16 {
		tc.b16[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
	}
	tc.c = randVec(rng, mr*32)
	return tc
}

// run computes the tile into c (mr rows of 32) with the whole-panel kernel (wide) or the two
// half-panel calls.
func (tc *shortTileCase) run(c []float32, bf16, wide bool, acc int) {
	a := unsafe.Pointer(&tc.a[0])
	lda := uintptr(tc.lda) * 4
	b := unsafe.Pointer(&tc.b32[0])
	half, whole := f32Avx2[tc.mr], f32Avx2Wide[min(tc.mr, len(f32Avx2Wide)-1)]
	if bf16 {
		b = unsafe.Pointer(&tc.b16[0])
		half, whole = w16Avx2[tc.mr], w16Avx2Wide[min(tc.mr, len(w16Avx2Wide)-1)]
	}
	if wide {
		whole(a, lda, b, tc.kc, unsafe.Pointer(&c[0]), 128, acc, b, 64)
		return
	}
	for h := range 2 {
		half(a, lda, unsafe.Add(b, 64*h), tc.kc, unsafe.Pointer(&c[16*h]), 128, acc, unsafe.Add(b, 64*h))
	}
}

// The whole-panel kernels exist for speed only: a row's every value must be the one the
// half-panel kernels give, bit for bit (a row's result may not depend on its tile's height,
// issue 14), for every height they serve, odd and even k, a lone k block and an accumulated one.
func TestAvx2WholePanelKernelsMatchHalfPanels(t *testing.T) {
	if activeISA() < isaAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(3, 21))
	for _, bf16 := range []bool{false, true} {
		for mr := 1; mr < len(w16Avx2Wide); mr++ {
			for _, kc := range []int{1, 2, 3, 4, 5, 7, 16, 33, 255, 256} {
				tc := newShortTileCase(rng, mr, kc)
				for acc := range 2 {
					want, got := append([]float32(nil), tc.c...), append([]float32(nil), tc.c...)
					tc.run(want, bf16, false, acc)
					tc.run(got, bf16, true, acc)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("bf16=%v mr=%d kc=%d acc=%d: C[%d][%d] = %v whole-panel, %v half-panel",
								bf16, mr, kc, acc, i/32, i%32, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkAvx2ShortTiles measures one micro-kernel call on a whole 32-column panel in L1 (kc
// 256): two half-panel calls (half) against one whole-panel call (wide) for the heights that
// have one, and the half-panel calls of the taller heights for scale, in GFLOP/s.
//
//	go test -run '^$' -bench Avx2ShortTiles ./kernels/
func BenchmarkAvx2ShortTiles(b *testing.B) {
	requireAsm(b)
	if activeISA() < isaAVX2 {
		b.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const kc = 256
	for _, dtype := range []string{"f32", "bf16"} {
		for mr := 1; mr <= 6; mr++ {
			tc := newShortTileCase(rng, mr, kc)
			for _, wide := range []bool{false, true} {
				if wide && mr >= len(w16Avx2Wide) {
					continue
				}
				name := "half"
				if wide {
					name = "wide"
				}
				b.Run(fmt.Sprintf("%s/mr=%d/%s", dtype, mr, name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c := append([]float32(nil), tc.c...)
					for b.Loop() {
						tc.run(c, dtype == "bf16", wide, 1)
					}
					b.ReportMetric(2*float64(mr*32*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
