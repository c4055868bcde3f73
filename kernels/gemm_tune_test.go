//go:build linux && amd64 && !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time of the calling OS thread: on a shared machine it counts only the
// time this thread ran, so single-thread rates are comparable while other work competes.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// TestTuneReport prints one-thread rates measured on thread CPU time (KERNELS_TUNE=1 only):
// peak FMA chains and the GEMM shapes of the issue, medians of repeated runs, and for f32 the
// efficiency from interleaved pairs (GemmEfficiency).
func TestTuneReport(t *testing.T) {
	if os.Getenv("KERNELS_TUNE") != "1" {
		t.Skip("KERNELS_TUNE=1 to run")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := Threads()
	SetThreads(1)
	defer SetThreads(prev)
	med := func(f func() float64) float64 {
		var v []float64
		for range 9 {
			v = append(v, f())
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, dot := range []bool{false, true} {
		g := med(func() float64 {
			t0 := threadCPU()
			f := peakRun(activeISA(), dot, 1<<18)
			return f * (1 << 18) / (threadCPU() - t0).Seconds() / 1e9
		})
		fmt.Printf("peak dot=%v: %.1f GFLOP/s (thread CPU time)\n", dot, g)
	}
	shapes := [][3]int{{144, 1536, 2048}, {36, 1536, 2048}, {576, 768, 2048}, {1, 1536, 2048}}
	for _, s := range shapes {
		eff, peak, gemm := GemmEfficiency(s[0], s[1], s[2], time.Second)
		fmt.Printf("%dx%dx%d f32: %.1f %% of peak in pairs (peak %.1f, GEMM %.1f GFLOP/s)\n", s[0], s[1], s[2], 100*eff, peak, gemm)
		for _, md := range []struct {
			dt  DType
			dot bool
		}{{F32, false}, {BF16, false}, {BF16, true}} {
			bf16Dot.Store(md.dot)
			rng := rand.New(rand.NewPCG(1, 2))
			p := newProblem(t, rng, s[0], s[1], s[2], s[2], md.dt)
			dst := make([]float32, s[0]*s[1])
			linear(dst, p.x, s[0], p.w)
			g := med(func() float64 {
				t0 := threadCPU()
				linear(dst, p.x, s[0], p.w)
				return 2 * float64(s[0]*s[1]*s[2]) / (threadCPU() - t0).Seconds() / 1e9
			})
			fmt.Printf("%dx%dx%d %s dot=%v: %.1f GFLOP/s\n", s[0], s[1], s[2], md.dt, md.dot, g)
		}
	}
	bf16Dot.Store(false)
}

// TestTuneAB compares blocking choices on one thread (KERNELS_TUNE=1 only): per round, each
// variant runs a burst of the peak FMA chains and then one call, so that the machine's clock and
// other load hit a variant's call and its peak alike; it prints each variant's median and
// quartiles of the per-pair ratio call rate / peak rate, and its median rate. KERNELS_TUNE_M
// sets m (default 144 of 144×1536×2048).
func TestTuneAB(t *testing.T) {
	if os.Getenv("KERNELS_TUNE") != "1" {
		t.Skip("KERNELS_TUNE=1 to run")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := Threads()
	SetThreads(1)
	defer SetThreads(prev)
	type variant struct {
		name     string
		kc, kc16 int
		nc       int
	}
	var vs []variant
	for _, nc := range []int{256, 512, 1024} {
		for _, kc := range []int{128, 256, 384} {
			vs = append(vs, variant{fmt.Sprintf("nc=%d kc=%d", nc, kc), kc, 2 * kc, nc})
		}
	}
	shape := [3]int{144, 1536, 2048}
	if s := os.Getenv("KERNELS_TUNE_M"); s != "" {
		fmt.Sscan(s, &shape[0])
	}
	defer func() { kcF32, kcBF16, ncMax = 256, 256, 512 }()
	isa := activeISA()
	flops := 2 * float64(shape[0]*shape[1]*shape[2])
	for _, dt := range []DType{F32, BF16} {
		rng := rand.New(rand.NewPCG(1, 2))
		p := newProblem(t, rng, shape[0], shape[1], shape[2], shape[2], dt)
		dst := make([]float32, shape[0]*shape[1])
		// A peak burst of about half a call.
		linear(dst, p.x, shape[0], p.w)
		t0 := threadCPU()
		linear(dst, p.x, shape[0], p.w)
		tCall := (threadCPU() - t0).Seconds()
		t0 = threadCPU()
		perIter := peakRun(isa, false, 1<<12)
		iters := int(tCall / 2 / (threadCPU() - t0).Seconds() * (1 << 12))
		effs := make([][]float64, len(vs))
		rates := make([][]float64, len(vs))
		for range 41 {
			for i, v := range vs {
				kcF32, kcBF16, ncMax = v.kc, v.kc16, v.nc
				linear(dst, p.x, shape[0], p.w)
				t0 := threadCPU()
				peakRun(isa, false, iters)
				peak := perIter * float64(iters) / (threadCPU() - t0).Seconds()
				t0 = threadCPU()
				linear(dst, p.x, shape[0], p.w)
				r := flops / (threadCPU() - t0).Seconds()
				effs[i] = append(effs[i], r/peak)
				rates[i] = append(rates[i], r/1e9)
			}
		}
		for i, v := range vs {
			e, r := effs[i], rates[i]
			slices.Sort(e)
			slices.Sort(r)
			n := len(e)
			fmt.Printf("%v %s %s: %.1f %% of peak (quartiles %.1f-%.1f), median %.1f GFLOP/s\n", shape, dt, v.name,
				100*e[n/2], 100*e[n/4], 100*e[3*n/4], r[n/2])
		}
	}
}

// TestTuneMicro measures one micro-kernel on L1-resident operands (KERNELS_TUNE=1 only).
func TestTuneMicro(t *testing.T) {
	if os.Getenv("KERNELS_TUNE") != "1" {
		t.Skip("KERNELS_TUNE=1 to run")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, kc := range []int{128, 256} {
		for _, mr := range []int{1, 2, 4, 5, 12} {
			a := make([]float32, 12*kc)
			b := make([]float32, kc*32)
			c := make([]float32, 12*32)
			b16 := make([]uint16, kc*32)
			const reps = 4000
			run := func(k kern512) float64 {
				var v []float64
				for range 15 {
					t0 := threadCPU()
					for range reps {
						k(unsafe.Pointer(&a[0]), uintptr(kc*4), unsafe.Pointer(&b[0]), kc, unsafe.Pointer(&c[0]), 128, 0xffffffff, 1)
					}
					v = append(v, 2*float64(mr*32*kc*reps)/(threadCPU()-t0).Seconds()/1e9)
				}
				slices.Sort(v)
				return v[len(v)-1]
			}
			_ = b16
			kf := f32Avx512[mr] // reads a as a packed micro-panel: the values do not matter here
			f := run(func(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int) {
				kf(a, b, kc, c, ldc, mask, acc, b)
			})
			w := run(w16Avx512[mr])
			fmt.Printf("micro kc=%d mr=%d: f32 %.1f  w16 %.1f GFLOP/s\n", kc, mr, f, w)
		}
	}
}

// TestTuneThreads compares wall time on one and two threads, interleaved (KERNELS_TUNE=1 only).
func TestTuneThreads(t *testing.T) {
	if os.Getenv("KERNELS_TUNE") != "1" {
		t.Skip("KERNELS_TUNE=1 to run")
	}
	prev := Threads()
	defer SetThreads(prev)
	for _, s := range [][3]int{{144, 1536, 2048}, {1, 1536, 2048}, {36, 1536, 2048}, {576, 768, 2048}, {16, 512, 512}} {
		rng := rand.New(rand.NewPCG(1, 2))
		p := newProblem(t, rng, s[0], s[1], s[2], s[2], F32)
		dst := make([]float32, s[0]*s[1])
		res := [3][]float64{}
		for range 21 {
			for th := 1; th <= 2; th++ {
				SetThreads(th)
				linear(dst, p.x, s[0], p.w)
				t0 := time.Now()
				linear(dst, p.x, s[0], p.w)
				res[th] = append(res[th], 2*float64(s[0]*s[1]*s[2])/time.Since(t0).Seconds()/1e9)
			}
		}
		for th := 1; th <= 2; th++ {
			slices.Sort(res[th])
		}
		fmt.Printf("%v f32: t1 median %.1f best %.1f | t2 median %.1f best %.1f GFLOP/s\n", s,
			res[1][10], res[1][20], res[2][10], res[2][20])
	}
}

// TestTuneDotError reports how far the VDPBF16PS path (bf16-rounded activations) lands from the
// float64 product of the same bf16 weights and f32 activations (KERNELS_TUNE=1 only).
func TestTuneDotError(t *testing.T) {
	if os.Getenv("KERNELS_TUNE") != "1" || !dotAvailable() {
		t.Skip("KERNELS_TUNE=1 and AVX512_BF16 to run")
	}
	m, n, k := 64, 256, 2048
	rng := rand.New(rand.NewPCG(3, 4))
	p := newProblem(t, rng, m, n, k, k, BF16)
	for _, dot := range []bool{false, true} {
		bf16Dot.Store(dot)
		dst := make([]float32, m*n)
		linear(dst, p.x, m, p.w)
		var maxRel, sumSq, errSq float64
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for kk := 0; kk < k; kk++ {
					s += float64(p.x[i*k+kk]) * float64(p.wf[j*k+kk])
				}
				e := float64(dst[i*n+j]) - s
				sumSq += s * s
				errSq += e * e
				maxRel = max(maxRel, math.Abs(e)/math.Abs(s))
			}
		}
		fmt.Printf("dot=%v: rms error / rms output = %.2e\n", dot, math.Sqrt(errSq/sumSq))
		_ = maxRel
	}
	bf16Dot.Store(false)
}
