//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"unsafe"
)

// The benchmarks in this file measure choices the package does not make at run time — the
// cache blocking and the micro-kernels on their own — to tune the constants in gemm_amd64.go.
// BenchmarkPeak, BenchmarkGemm and BenchmarkLinearSmall measure the code as it runs; their
// results, with the commands, belong in bench/results/.

// BenchmarkTuneBlocking compares cache-blocking choices (nc columns, kc depth; kc for bf16 is
// 2·kc) for Linear on one thread, on 144×1536×2048 (KERNELS_TUNE_M sets m). Each iteration runs
// the peak FMA chains for about half a call and then one call, both timed on the thread's CPU
// time, so that a change of clock or other load on a shared machine hits a call and its peak
// alike. It reports the median of the per-iteration ratios call rate / peak rate (%peak) with
// its quartiles (%peak-q1, %peak-q3), and the median call rate (GFLOP/s).
func BenchmarkTuneBlocking(b *testing.B) {
	requireAsm(b)
	m, n, k := 144, 1536, 2048
	if s := os.Getenv("KERNELS_TUNE_M"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("KERNELS_TUNE_M: want a positive integer, got %q", s)
		}
		m = v
	}
	isa := activeISA()
	if peakRun(isa, false, 1) == 0 {
		b.Skip("no FMA chains to pair the calls with")
	}
	flop := 2 * float64(m*n*k)
	for _, dt := range []DType{F32, BF16} {
		for _, nc := range []int{256, 512, 1024} {
			for _, kc := range []int{128, 256, 384} {
				b.Run(fmt.Sprintf("%s/nc=%d/kc=%d", dt, nc, kc), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					prevThreads := Threads()
					SetThreads(1)
					defer SetThreads(prevThreads)
					prevKC, prevKC16, prevNC := kcF32, kcBF16, ncMax
					kcF32, kcBF16, ncMax = kc, 2*kc, nc
					defer func() { kcF32, kcBF16, ncMax = prevKC, prevKC16, prevNC }()
					p := newProblem(b, rand.New(rand.NewPCG(1, 2)), m, n, k, k, dt)
					dst := make([]float32, m*n)
					clk := newStopwatch(true)
					linear(dst, p.x, m, p.w) // warm caches and pools
					clk.start()
					linear(dst, p.x, m, p.w)
					tCall := clk.seconds()
					// Size the peak burst to about half a call.
					const probe = 1 << 12
					clk.start()
					perIter := peakRun(isa, false, probe)
					iters := max(1, int(tCall/2/clk.seconds()*probe))
					var effs, rates []float64
					for b.Loop() {
						clk.start()
						peakRun(isa, false, iters)
						peak := perIter * float64(iters) / clk.seconds()
						clk.start()
						linear(dst, p.x, m, p.w)
						r := flop / clk.seconds()
						effs = append(effs, r/peak)
						rates = append(rates, r/1e9)
					}
					slices.Sort(effs)
					slices.Sort(rates)
					q := len(effs)
					b.ReportMetric(100*effs[q/2], "%peak")
					b.ReportMetric(100*effs[q/4], "%peak-q1")
					b.ReportMetric(100*effs[3*q/4], "%peak-q3")
					b.ReportMetric(rates[q/2], "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkTuneMicro measures one AVX-512 micro-kernel (mr rows × 32 columns, depth kc) on
// L1-resident operands: f32 weights (f32) and bf16 weights widened in registers (w16). It
// reports GFLOP/s on the thread's CPU time (cpu-GFLOP/s) and on the wall clock.
func BenchmarkTuneMicro(b *testing.B) {
	requireAsm(b)
	if activeISA() < isaAVX512 {
		b.Skip("no AVX-512")
	}
	for _, kc := range []int{128, 256} {
		for _, mr := range []int{1, 2, 4, 5, 12} {
			// The kernels read a as a packed micro-panel and b as one panel: the values do not
			// matter here, only that they stay in L1.
			a := make([]float32, 12*kc)
			bp := make([]float32, kc*32)
			c := make([]float32, 12*32)
			kf := f32Avx512[mr]
			kernels := []struct {
				name string
				call func()
			}{
				{"f32", func() {
					kf(unsafe.Pointer(&a[0]), unsafe.Pointer(&bp[0]), kc, unsafe.Pointer(&c[0]), 128, 0xffffffff, 1, unsafe.Pointer(&bp[0]))
				}},
				{"w16", func() {
					w16Avx512[mr](unsafe.Pointer(&a[0]), uintptr(kc*4), unsafe.Pointer(&bp[0]), kc, unsafe.Pointer(&c[0]), 128, 0xffffffff, 1, unsafe.Pointer(&bp[0]))
				}},
			}
			for _, kern := range kernels {
				b.Run(fmt.Sprintf("kc=%d/mr=%d/%s", kc, mr, kern.name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					clk := newStopwatch(true)
					clk.start()
					for b.Loop() {
						kern.call()
					}
					flop := 2 * float64(mr*32*kc) * float64(b.N)
					if clk.cpu {
						b.ReportMetric(flop/clk.seconds()/1e9, "cpu-GFLOP/s")
					}
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
