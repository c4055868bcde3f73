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
	x, w, dst := gemmProblem(m, n, k, dt)
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

// GemmEfficiency measures the one-thread f32 Linear on an m×k activation and an n×k weight
// (GemmGFLOPS's operands) against the one-core FMA peak, for about d, in interleaved pairs: a
// short run of the peak chains (about half a call long), then one GEMM call, repeated, both
// timed on the thread's CPU time (Linux). A change of clock or a share of the core lost to the
// hypervisor hits both halves of a pair alike, so eff, the median of the per-pair ratios
// GEMM rate / peak rate, is the kernel's efficiency even on a noisy VM; peak and gemm are the
// medians of the two rates in GFLOP/s. It sets the package thread count to 1 for the duration
// and restores it, so it must not run beside other kernel calls. Without FMA chains (the
// generic build) eff and peak are 0.
func GemmEfficiency(m, n, k int, d time.Duration) (eff, peak, gemm float64) {
	x, w, dst := gemmProblem(m, n, k, F32)
	prev := Threads()
	SetThreads(1)
	defer SetThreads(prev)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	flops := 2 * float64(m) * float64(n) * float64(k)
	r := measurePairs(func() { linear(dst, x, m, w) }, flops, d)
	return r.eff, r.peak, r.gemm
}

// pairResult is what measurePairs reports: medians of the per-pair ratio and of both rates.
type pairResult struct{ eff, peak, gemm float64 }

// measurePairs times call (flops each) against bursts of the FMA peak chains in interleaved
// pairs for about d (at least 5 pairs), on the calling goroutine, which must be locked to its
// thread. See GemmEfficiency.
func measurePairs(call func(), flops float64, d time.Duration) pairResult {
	isa := activeISA()
	clk := newStopwatch(true)
	call() // warm caches and pools
	clk.start()
	call()
	tCall := clk.seconds()
	perIter := peakRun(isa, false, 1)
	iters := 0
	if perIter > 0 {
		// Size a burst to about half a call (at least 50 µs) from a short calibration run.
		const probe = 1 << 12
		clk.start()
		peakRun(isa, false, probe)
		tProbe := max(clk.seconds(), 1e-7)
		iters = int(max(tCall/2, 50e-6) / tProbe * probe)
		iters = min(max(iters, probe), 1<<24)
	}
	var effs, peaks, gemms []float64
	deadline := time.Now().Add(d)
	for len(gemms) < 5 || time.Now().Before(deadline) {
		var p float64
		if iters > 0 {
			clk.start()
			peakRun(isa, false, iters)
			p = perIter * float64(iters) / clk.seconds() / 1e9
		}
		clk.start()
		call()
		g := flops / clk.seconds() / 1e9
		gemms = append(gemms, g)
		if iters > 0 {
			peaks = append(peaks, p)
			effs = append(effs, g/p)
		}
		if len(gemms) >= 10000 {
			break
		}
	}
	r := pairResult{gemm: gemmMedian(gemms)}
	if iters > 0 {
		r.eff, r.peak = gemmMedian(effs), gemmMedian(peaks)
	}
	return r
}

// GemmSpeedup measures the f32 Linear of GemmGFLOPS on threads threads against one thread, for
// about d, in interleaved pairs of calls (one on one thread, one on threads), both timed on the
// wall clock: speedup is the median of the per-pair time ratios, g1 and gN the medians of the
// two rates in GFLOP/s. Other load on the machine eats into gN (that is what a parallel
// speed-up on a shared machine is). It sets the package thread count for the duration and
// restores it, so it must not run beside other kernel calls.
func GemmSpeedup(m, n, k, threads int, d time.Duration) (speedup, g1, gN float64) {
	x, w, dst := gemmProblem(m, n, k, F32)
	prev := Threads()
	defer SetThreads(prev)
	flops := 2 * float64(m) * float64(n) * float64(k)
	run := func(t int) float64 {
		SetThreads(t)
		t0 := time.Now()
		linear(dst, x, m, w)
		return time.Since(t0).Seconds()
	}
	run(threads) // warm caches, pools and the workers' stacks
	run(1)
	var ratios, r1, rN []float64
	deadline := time.Now().Add(d)
	for len(ratios) < 5 || time.Now().Before(deadline) {
		t1 := run(1)
		tN := run(threads)
		ratios = append(ratios, t1/tN)
		r1 = append(r1, flops/t1/1e9)
		rN = append(rN, flops/tN/1e9)
		if len(ratios) >= 10000 {
			break
		}
	}
	return gemmMedian(ratios), gemmMedian(r1), gemmMedian(rN)
}

// gemmProblem builds the operands of the measurements: an m×k activation, an n×k weight of type
// dt (random, fixed seed) and an m×n destination.
func gemmProblem(m, n, k int, dt DType) (x []float32, w *Weight, dst []float32) {
	rng := rand.New(rand.NewPCG(uint64(m*n), uint64(k)))
	x = make([]float32, m*k)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	wf := make([]float32, n*k)
	for i := range wf {
		wf[i] = (rng.Float32()*2 - 1) / 32
	}
	if dt == BF16 {
		wb := make([]uint16, n*k)
		F32ToBF16(wb, wf)
		w = NewWeightBF16(wb, n, k)
	} else {
		w = NewWeightF32(wf, n, k)
	}
	return x, w, make([]float32, m*n)
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
