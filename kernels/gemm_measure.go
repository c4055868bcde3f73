package kernels

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"time"
)

// PeakF32GFLOPS measures the one-core FP32 peak: 12 independent register-resident FMA chains
// in assembly (AVX-512, else AVX2) on a goroutine locked to its thread, for about d; the median
// of several runs. It reports 0 for the generic build.
func PeakF32GFLOPS(d time.Duration) float64 { return peakGFLOPS(false, d) }

// PeakBF16GFLOPS is PeakF32GFLOPS for VDPBF16PS chains (0 without AVX512_BF16).
func PeakBF16GFLOPS(d time.Duration) float64 { return peakGFLOPS(true, d) }

func peakGFLOPS(dot bool, d time.Duration) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	isa := activeISA()
	const iters = 1 << 16
	if peakRun(isa, dot, 1) == 0 {
		return 0
	}
	var rates []float64
	deadline := time.Now().Add(d)
	for len(rates) < 5 || time.Now().Before(deadline) {
		t0 := time.Now()
		f := peakRun(isa, dot, iters)
		el := time.Since(t0).Seconds()
		rates = append(rates, f*iters/el/1e9)
		if len(rates) >= 1000 {
			break
		}
	}
	return gemmMedian(rates)
}

// GemmGFLOPS measures Linear on an m×k activation and an n×k weight of type dt (random data,
// fixed seed) with the given thread count, for about d: 2·m·n·k / median call time, in GFLOP/s.
// It sets the package thread count for the duration of the measurement and restores it, so it
// must not run beside other kernel calls. bf16 weights use the mode SetBF16DotProducts chose.
func GemmGFLOPS(m, n, k int, dt DType, threads int, d time.Duration) float64 {
	rng := rand.New(rand.NewPCG(uint64(m*n), uint64(k)))
	x := make([]float32, m*k)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	wf := make([]float32, n*k)
	for i := range wf {
		wf[i] = (rng.Float32()*2 - 1) / 32
	}
	var w *Weight
	if dt == BF16 {
		wb := make([]uint16, n*k)
		F32ToBF16(wb, wf)
		w = NewWeightBF16(wb, n, k)
	} else {
		w = NewWeightF32(wf, n, k)
	}
	dst := make([]float32, m*n)
	prev := Threads()
	SetThreads(threads)
	defer SetThreads(prev)
	linear(dst, x, m, w) // warm caches and pools
	var times []float64
	deadline := time.Now().Add(d)
	for len(times) < 3 || time.Now().Before(deadline) {
		t0 := time.Now()
		linear(dst, x, m, w)
		times = append(times, time.Since(t0).Seconds())
	}
	return 2 * float64(m) * float64(n) * float64(k) / gemmMedian(times) / 1e9
}

func gemmMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
