package kernels

import (
	"runtime"
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
