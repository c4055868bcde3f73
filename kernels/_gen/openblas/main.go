//go:build cgo

// Command openblas compares the kernels' Linear with OpenBLAS sgemm side by side in one run
// (benchmark only; needs Debian's libopenblas-dev). It lives in the generator's module because
// a package with cgo cannot hold Go assembly, and so the main module never links OpenBLAS.
//
//	cd kernels/_gen && OPENBLAS_CORETYPE=SKYLAKEX go run ./openblas -d 2s
//
// Debian's OpenBLAS 0.3.21 does not recognise newer Xeons (it falls back to its "Prescott" SSE3
// kernels): OPENBLAS_CORETYPE=SKYLAKEX selects its AVX-512 kernels. One-thread rates of both are
// timed on the thread's CPU time (as kernels.GemmGFLOPS does), two-thread rates on wall time.
package main

// #cgo LDFLAGS: -lopenblas
// #include <cblas.h>
// void openblas_set_num_threads(int);
import "C"

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/relevance-scoring/relevance/kernels"
	"golang.org/x/sys/unix"
)

// sgemm computes dst[m×n] = x[m×k]·wᵀ (w row-major n×k) with cblas_sgemm on threads.
func sgemm(dst, x, w []float32, m, n, k, threads int) {
	C.openblas_set_num_threads(C.int(threads))
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasTrans, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(unsafe.Pointer(&x[0])), C.blasint(k), (*C.float)(unsafe.Pointer(&w[0])), C.blasint(k),
		0, (*C.float)(unsafe.Pointer(&dst[0])), C.blasint(n))
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func main() {
	d := flag.Duration("d", time.Second, "time per measurement")
	flag.Parse()
	fmt.Printf("kernels %s, peak f32 one core %.1f GFLOP/s\n", kernels.Implementation(), kernels.PeakF32GFLOPS(*d))
	for _, s := range [][3]int{{144, 1536, 2048}, {36, 1536, 2048}, {576, 768, 2048}, {1, 1536, 2048}} {
		m, n, k := s[0], s[1], s[2]
		rng := rand.New(rand.NewPCG(1, 2))
		x, w := make([]float32, m*k), make([]float32, n*k)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		for i := range w {
			w[i] = rng.Float32()*2 - 1
		}
		dst, ref := make([]float32, m*n), make([]float32, m*n)
		sgemm(ref, x, w, m, n, k, 1)
		kernels.Linear(dst, x, m, kernels.NewWeightF32(w, n, k))
		var diff float64
		for i := range dst {
			diff = math.Max(diff, math.Abs(float64(dst[i]-ref[i])))
		}
		for _, th := range []int{1, 2} {
			ours := kernels.GemmGFLOPS(m, n, k, kernels.F32, th, *d)
			var times []float64
			sgemm(dst, x, w, m, n, k, th)
			if th == 1 {
				runtime.LockOSThread()
			}
			for end := time.Now().Add(*d); len(times) < 3 || time.Now().Before(end); {
				t0, c0 := time.Now(), threadCPU()
				sgemm(dst, x, w, m, n, k, th)
				if th == 1 {
					times = append(times, (threadCPU() - c0).Seconds())
				} else {
					times = append(times, time.Since(t0).Seconds())
				}
			}
			runtime.UnlockOSThread()
			slices.Sort(times)
			blas := 2 * float64(m*n*k) / times[len(times)/2] / 1e9
			fmt.Printf("%dx%dx%d f32 t%d: kernels %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s (max |Δ| %.2g)\n", m, n, k, th, ours, blas, diff)
		}
	}
}
