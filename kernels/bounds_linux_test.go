//go:build !purego && linux

package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// guardF32 returns a slice of n float32 that ends exactly at a PROT_NONE page: any read or
// write one element past it faults.
func guardF32(tb testing.TB, n int) []float32 {
	tb.Helper()
	ps := unix.Getpagesize()
	bytes := (n*4 + ps - 1) / ps * ps
	mem, err := unix.Mmap(-1, 0, bytes+ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mprotect(mem[bytes:], unix.PROT_NONE); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Munmap(mem) })
	base := unsafe.Pointer(&mem[bytes-n*4])
	return unsafe.Slice((*float32)(base), n)
}

// TestKernelsStayInsideTheirSlices: every assembly path must neither read nor write past the
// slices it is given (each ends at a page that faults on access).
func TestKernelsStayInsideTheirSlices(t *testing.T) {
	for _, c := range availableImpls() {
		if c.dot {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(3, 4))
			for _, dt := range []DType{F32, BF16} {
				for _, k := range []int{1, 2, 3, 5, 7, 15, 17, 33, 257} {
					for _, m := range []int{1, 2, 5, 7, 13} {
						for _, n := range []int{1, 17, 33} {
							p := newProblem(t, rng, m, n, k, k, dt)
							x := guardF32(t, len(p.x))
							copy(x, p.x)
							dst := guardF32(t, m*n)
							gemmRows(dst, n, x, k, m, p.w, 0, n, 0, false)
							p.check(t, dst, n, m, 0, n, 1e-5, false)
							Linear(dst, x, m, p.w)
							p.check(t, dst, n, m, 0, n, 1e-5, false)
						}
					}
				}
			}
			for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 40, 129} {
				g, u, d := guardF32(t, n), guardF32(t, n), guardF32(t, n)
				for i := range g {
					g[i], u[i] = rng.Float32()*8-4, rng.Float32()
				}
				SiLUMul(d, g, u)
				Softmax(g)
				_ = maxF32(u)
				AddTo(d, u)
				scaleF32(d, u, 0.5)
				w := guardF32(t, n)
				for i := range w {
					w[i] = 1
				}
				RMSNorm(d, u, w, 1, 1e-6)
			}
			for _, hd := range []int{2, 8, 16, 64, 128} {
				tab := NewRoPETable(4, hd, 10000)
				x := guardF32(t, 3*hd)
				ApplyRoPE(x, []int32{1}, 3, tab)
			}
		})
	}
}
