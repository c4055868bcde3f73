package kernels

import (
	"runtime"
	"sync"
)

// Linear computes dst[m×N] = x[m×K] · Wᵀ for the weight w (N×K). dst is overwritten.
// It may use several threads (see SetThreads).
// The body lives in linear.go (owned with the GEMM kernels).
func Linear(dst, x []float32, m int, w *Weight) { linear(dst, x, m, w) }

func dotF32(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

var threads = runtime.GOMAXPROCS(0)

// SetThreads sets how many goroutines the kernels split one call across (≥ 1).
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	threads = n
}

// Threads reports the current thread count for kernel calls.
func Threads() int { return threads }

// parallelRows splits [0, m) into contiguous chunks, one per thread, and waits for all.
func parallelRows(m int, f func(r0, r1 int)) {
	t := threads
	if t > m {
		t = m
	}
	if t <= 1 {
		f(0, m)
		return
	}
	var wg sync.WaitGroup
	chunk := (m + t - 1) / t
	for r0 := 0; r0 < m; r0 += chunk {
		r1 := min(r0+chunk, m)
		wg.Add(1)
		go func() { defer wg.Done(); f(r0, r1) }()
	}
	wg.Wait()
}
