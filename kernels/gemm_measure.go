package kernels

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"time"
)

// PeakF32GFLOPS measures the one-core FP32 peak: 12 independent register-resident FMA chains
// in assembly (AVX-512, else AVX2) on a goroutine locked to its thread, for about d; the median
// of several runs, each timed on the thread's CPU time (Linux) so that other load on a shared
// machine does not count against it. It reports 0 for the generic build.
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
	clk := newStopwatch(true)
	for len(rates) < 5 || time.Now().Before(deadline) {
		clk.start()
		f := peakRun(isa, dot, iters)
		rates = append(rates, f*iters/clk.seconds()/1e9)
		if len(rates) >= 1000 {
			break
		}
	}
	return gemmMedian(rates)
}

// GemmGFLOPS measures Linear on an m×k activation and an n×k weight of type dt (random data,
// fixed seed) with the given thread count, for about d: 2·m·n·k / median call time, in GFLOP/s.
// With one thread a call is timed on the thread's CPU time (Linux), as PeakF32GFLOPS is, so the
// ratio of the two is the kernel's efficiency even on a shared machine; with more threads it
// is wall time, which is what a parallel speed-up means (and what other load on the machine
// eats into). It sets the package thread count for the duration of the measurement and
// restores it, so it must not run beside other kernel calls. bf16 weights use the mode
// SetBF16DotProducts chose.
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
	if threads == 1 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	clk := newStopwatch(threads == 1)
	linear(dst, x, m, w) // warm caches and pools
	var times []float64
	deadline := time.Now().Add(d)
	for len(times) < 3 || time.Now().Before(deadline) {
		clk.start()
		linear(dst, x, m, w)
		times = append(times, clk.seconds())
	}
	return 2 * float64(m) * float64(n) * float64(k) / gemmMedian(times) / 1e9
}

func gemmMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// stopwatch times on the calling thread's CPU time when asked and available (the goroutine
// must then be locked to its thread), else on the wall clock.
type stopwatch struct {
	cpu  bool
	wall time.Time
	t0   time.Duration
}

func newStopwatch(threadCPU bool) *stopwatch {
	_, ok := gemmThreadCPU()
	return &stopwatch{cpu: threadCPU && ok}
}

func (s *stopwatch) start() {
	if s.cpu {
		s.t0, _ = gemmThreadCPU()
		return
	}
	s.wall = time.Now()
}

func (s *stopwatch) seconds() float64 {
	if s.cpu {
		t, _ := gemmThreadCPU()
		return (t - s.t0).Seconds()
	}
	return time.Since(s.wall).Seconds()
}
