package kernels

import (
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// implCase is one implementation this machine can run: an ISA cap and the bf16 mode.
type implCase struct {
	name string
	isa  isaLevel
	dot  bool // bf16 weights × bf16-rounded activations (VDPBF16PS)
}

// availableImpls lists every implementation the CPU (and build) can run, generic first.
func availableImpls() []implCase {
	all := []implCase{
		{"generic", isaGeneric, false},
		{"avx2", isaAVX2, false},
		{"avx512", isaAVX512, false},
		{"avx512-bf16dot", isaAVX512BF16, true},
		{"amx-bf16", isaAMX, true},
		{"avx512-amx", isaAMX, false}, // bf16 weights on AMX with split activations, f32 accuracy
	}
	top := setISA(isaAMX)
	setISA(top)
	var out []implCase
	for _, c := range all {
		if c.isa <= top {
			out = append(out, c)
		}
	}
	return out
}

// implDTypes yields every available implementation with each weight type it computes: the
// bf16-dot implementations take bf16 weights only.
func implDTypes() iter.Seq2[implCase, DType] {
	return func(yield func(implCase, DType) bool) {
		for _, c := range availableImpls() {
			for _, dt := range []DType{F32, BF16} {
				if c.dot && dt == F32 {
					continue
				}
				if !yield(c, dt) {
					return
				}
			}
		}
	}
}

// useImpl switches to c until the test ends.
func useImpl(tb testing.TB, c implCase) {
	tb.Helper()
	prev := setISA(c.isa)
	prevDot := bf16Dot.Load()
	SetBF16DotProducts(c.dot)
	tb.Cleanup(func() {
		setISA(prev)
		bf16Dot.Store(prevDot)
	})
	if got := activeISA(); got != c.isa {
		tb.Fatalf("setISA(%v) gave %v", c.isa, got)
	}
}

// problem is one random product: x (m rows at stride ldX), W as f32 and, for bf16, its bits.
type problem struct {
	m, n, k, ldX int
	x            []float32
	wf           []float32 // the weight values (bf16-exact when dt is BF16)
	w            *Weight
}

func newProblem(tb testing.TB, rng *rand.Rand, m, n, k, ldX int, dt DType) *problem {
	tb.Helper()
	p := &problem{m: m, n: n, k: k, ldX: ldX}
	p.x = make([]float32, max(0, (m-1)*ldX+k))
	for i := range p.x {
		p.x[i] = rng.Float32()*2 - 1
	}
	p.wf = make([]float32, n*k)
	for i := range p.wf {
		p.wf[i] = rng.Float32()*2 - 1
	}
	if dt == BF16 {
		wb := make([]uint16, n*k)
		F32ToBF16(wb, p.wf)
		BF16ToF32(p.wf, wb)
		p.w = NewWeightBF16(wb, n, k)
	} else {
		p.w = NewWeightF32(p.wf, n, k)
	}
	return p
}

// check compares dst (rows [0,m), columns [n0,n1), stride ldDst) with the float64 product,
// allowing tol·Σ|x||w| per element. When bf16Act, the reference rounds x to bf16 first.
func (p *problem) check(tb testing.TB, dst []float32, ldDst, m, n0, n1 int, tol float64, bf16Act bool) {
	tb.Helper()
	bad := 0
	for i := 0; i < m; i++ {
		for j := n0; j < n1; j++ {
			var s, mag float64
			for kk := 0; kk < p.k; kk++ {
				a := p.x[i*p.ldX+kk]
				if bf16Act {
					a = math.Float32frombits(uint32(RoundBF16(a)) << 16)
				}
				b := p.wf[j*p.k+kk]
				s += float64(a) * float64(b)
				mag += math.Abs(float64(a) * float64(b))
			}
			got := float64(dst[i*ldDst+j])
			if math.Abs(got-s) > tol*mag+1e-30 || math.IsNaN(got) {
				if bad < 5 {
					tb.Errorf("m=%d n=%d k=%d: dst[%d,%d] = %g, want %g (Σ|ab| %g)", p.m, p.n, p.k, i, j, got, s, mag)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		tb.Errorf("%d elements wrong", bad)
	}
}

// tolerance is relative to Σ|x||w|: f32 accumulation, or bf16 rounding of the activations.
func tolerance(c implCase, dt DType) (tol float64, bf16Act bool) {
	if c.dot && dt == BF16 {
		return 1e-5, true
	}
	return 1e-5, false
}

var (
	// Sizes around the micro-tile heights (6, 12; AMX 16, 32), the panel and half-panel widths
	// (16, 32), the kernels' k unrolling, AMX's 32-k steps and the cache blocks (128 f32, 256 bf16
	// per k block).
	edgeM = []int{1, 2, 5, 6, 7, 11, 12, 13, 16, 17, 24, 25, 31, 32, 33, 37}
	edgeN = []int{1, 15, 16, 17, 31, 32, 33, 65, 97}
	edgeK = []int{1, 2, 3, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 513, 1025}
)

func TestGemmRowsAllImplementations(t *testing.T) {
	for c, dt := range implDTypes() {
		t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
			useImpl(t, c)
			tol, act := tolerance(c, dt)
			rng := rand.New(rand.NewPCG(1, uint64(c.isa)))
			for _, k := range edgeK {
				for _, m := range edgeM {
					for _, n := range edgeN {
						if k > 64 && (m%6 != 1 || n%16 != 1) && !(m == 12 && n == 32) {
							continue // big K on the ragged shapes and one whole tile only
						}
						if (testing.Short() || raceEnabled) && k > 64 && m*n > 64 {
							continue
						}
						p := newProblem(t, rng, m, n, k, k, dt)
						dst := make([]float32, m*n)
						for i := range dst {
							dst[i] = float32(math.NaN())
						}
						gemmRows(dst, n, p.x, k, m, p.w, 0, n, 0, false)
						p.check(t, dst, n, m, 0, n, tol, act)
						if t.Failed() {
							t.Fatalf("stopping at m=%d n=%d k=%d", m, n, k)
						}
					}
				}
			}
		})
	}
}

// TestGemmRowsSubRanges covers strides wider than the shapes, column ranges that start and end
// inside panels, requested tile heights and padded tiles, and that nothing outside the
// requested rows and columns is written.
func TestGemmRowsSubRanges(t *testing.T) {
	tests := []struct {
		name            string
		m, n, k         int
		n0, n1          int
		tileM           int
		padRows         bool
		extraLdX, extra int
	}{
		{name: "inside one panel", m: 5, n: 32, k: 40, n0: 3, n1: 29},
		{name: "across panels", m: 13, n: 100, k: 70, n0: 17, n1: 81, extraLdX: 3, extra: 5},
		{name: "empty range", m: 4, n: 40, k: 8, n0: 20, n1: 20},
		{name: "tile 4", m: 10, n: 64, k: 300, n0: 0, n1: 64, tileM: 4},
		{name: "tile 16", m: 37, n: 65, k: 129, n0: 1, n1: 65, tileM: 16},
		{name: "tile 16 padded", m: 37, n: 65, k: 129, n0: 0, n1: 65, tileM: 16, padRows: true},
		{name: "tile 128 padded", m: 3, n: 33, k: 520, n0: 0, n1: 33, tileM: 128, padRows: true},
		{name: "tile 64", m: 70, n: 40, k: 33, n0: 5, n1: 40, tileM: 64, extraLdX: 16},
		{name: "wide n", m: 3, n: 1100, k: 24, n0: 7, n1: 1099},
	}
	for c, dt := range implDTypes() {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s/%s", c.name, dt, tc.name), func(t *testing.T) {
				useImpl(t, c)
				tol, act := tolerance(c, dt)
				rng := rand.New(rand.NewPCG(2, 3))
				rows := tc.m
				if tc.padRows {
					rows = (tc.m + tc.tileM - 1) / tc.tileM * tc.tileM
				}
				ldX, ldDst := tc.k+tc.extraLdX, tc.n+tc.extra
				p := newProblem(t, rng, rows, tc.n, tc.k, ldX, dt)
				const sentinel = 12345
				dst := make([]float32, rows*ldDst+tc.extra)
				for i := range dst {
					dst[i] = sentinel
				}
				gemmRows(dst, ldDst, p.x, ldX, tc.m, p.w, tc.n0, tc.n1, tc.tileM, tc.padRows)
				p.check(t, dst, ldDst, rows, tc.n0, tc.n1, tol, act)
				for i := range dst {
					r, col := i/ldDst, i%ldDst
					if r < rows && col >= tc.n0 && col < tc.n1 {
						continue
					}
					if dst[i] != sentinel {
						t.Fatalf("dst[%d] (row %d, column %d) written outside the range: %g", i, r, col, dst[i])
					}
				}
			})
		}
	}
}

func TestLinearThreads(t *testing.T) {
	shapes := []struct{ m, n, k int }{
		{1, 1, 1}, {1, 2, 512}, {1, 300, 200}, {7, 64, 64}, {12, 1000, 96}, {150, 70, 130}, {500, 40, 33}, {130, 200, 260},
	}
	for c, dt := range implDTypes() {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/%s/t%d", c.name, dt, threads), func(t *testing.T) {
				useImpl(t, c)
				prev := Threads()
				SetThreads(threads)
				t.Cleanup(func() { SetThreads(prev) })
				tol, act := tolerance(c, dt)
				rng := rand.New(rand.NewPCG(4, uint64(threads)))
				for _, s := range shapes {
					if raceEnabled && s.m*s.n*s.k > 1<<21 {
						continue // the race run checks the threading, not every size
					}
					p := newProblem(t, rng, s.m, s.n, s.k, s.k, dt)
					dst := make([]float32, s.m*s.n)
					Linear(dst, p.x, s.m, p.w)
					p.check(t, dst, s.n, s.m, 0, s.n, tol, act)
				}
			})
		}
	}
}

// TestBF16DotModeIsOptIn pins the default: bf16 weights multiply f32 activations, which the
// bf16-rounding reference does not match within f32 tolerance when activations are not bf16.
func TestBF16DotModeIsOptIn(t *testing.T) {
	if bf16Dot.Load() {
		t.Skip("KERNELS_BF16_DOT is set")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	p := newProblem(t, rng, 12, 64, 256, 256, BF16)
	dst := make([]float32, 12*64)
	Linear(dst, p.x, 12, p.w)
	p.check(t, dst, 64, 12, 0, 64, 1e-5, false)
}

// TestBF16ActivationRoundingError pins the accuracy that the bf16 modes trade (gemm.go): against
// the float64 product of the same bf16 weights and f32 activations, the RMS error relative to
// the RMS output is about 4e-7 on the paths that keep f32 activations and about 1.5e-3 where
// activations are rounded to bf16 (bf16 dot products, AMX one-term).
func TestBF16ActivationRoundingError(t *testing.T) {
	const m, n, k = 16, 128, 2048
	p := newProblem(t, rand.New(rand.NewPCG(3, 4)), m, n, k, k, BF16)
	want := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for kk := range k {
				s += float64(p.x[i*k+kk]) * float64(p.wf[j*k+kk])
			}
			want[i*n+j] = s
		}
	}
	for _, c := range availableImpls() {
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			dst := make([]float32, m*n)
			Linear(dst, p.x, m, p.w)
			var errSq, sumSq float64
			for i, s := range want {
				e := float64(dst[i]) - s
				errSq += e * e
				sumSq += s * s
			}
			rel := math.Sqrt(errSq / sumSq)
			lo, hi := 0.0, 1e-5
			if c.dot {
				lo, hi = 5e-4, 3e-3
			}
			if !(rel >= lo && rel <= hi) {
				t.Errorf("RMS error / RMS output = %.2e, want in [%.0e, %.0e]", rel, lo, hi)
			}
		})
	}
}

func TestGemmRowsBadShapesPanicWithReason(t *testing.T) {
	w := NewWeightF32(make([]float32, 4*8), 4, 8)
	tests := []struct {
		name      string
		dst, x    []float32
		m, n0, n1 int
		ldX       int
	}{
		{name: "short x", dst: make([]float32, 8), x: make([]float32, 15), m: 2, n1: 4, ldX: 8},
		{name: "short dst", dst: make([]float32, 7), x: make([]float32, 16), m: 2, n1: 4, ldX: 8},
		{name: "columns past N", dst: make([]float32, 10), x: make([]float32, 16), m: 2, n1: 5, ldX: 8},
		{name: "ldX below K", dst: make([]float32, 8), x: make([]float32, 16), m: 2, n1: 4, ldX: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				if s, ok := r.(string); !ok || len(s) < len("kernels: gemmRows: x") {
					t.Fatalf("panic %v does not say why", r)
				}
			}()
			gemmRows(tc.dst, 4, tc.x, tc.ldX, tc.m, w, tc.n0, tc.n1, 0, false)
		})
	}
}

func TestPackedRowsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := newProblem(t, rng, 1, 37, 9, 9, BF16)
	row := make([]float32, 9)
	for j := 0; j < 37; j++ {
		p.w.Row(row, j)
		for kk, v := range row {
			if v != p.wf[j*9+kk] {
				t.Fatalf("Row(%d)[%d] = %g, want %g", j, kk, v, p.wf[j*9+kk])
			}
		}
	}
	sub := p.w.Rows(3, 36)
	if sub.N != 2 || (packWeights && sub.p16 == nil) {
		t.Fatalf("Rows: N %d, packed %v", sub.N, sub.p16 != nil)
	}
}

func FuzzGemm(f *testing.F) {
	f.Add(uint8(13), uint8(33), uint16(257), uint8(0), uint8(33), uint8(0), false, uint64(1))
	f.Add(uint8(1), uint8(1), uint16(1), uint8(0), uint8(1), uint8(16), true, uint64(2))
	f.Add(uint8(25), uint8(65), uint16(513), uint8(7), uint8(60), uint8(4), false, uint64(3))
	impls := availableImpls()
	f.Fuzz(func(t *testing.T, m8, n8 uint8, k16 uint16, n0, n1, tile uint8, bf16 bool, seed uint64) {
		m, n, k := int(m8%40)+1, int(n8%100)+1, int(k16%1100)+1
		lo, hi := int(n0)%n, int(n1)%(n+1)
		if lo > hi {
			lo, hi = hi, lo
		}
		tileM := int(tile % 130)
		dt := F32
		if bf16 {
			dt = BF16
		}
		c := impls[int(seed%uint64(len(impls)))]
		if c.dot && !bf16 {
			c = impls[len(impls)-2]
		}
		useImpl(t, c)
		tol, act := tolerance(c, dt)
		rng := rand.New(rand.NewPCG(seed, 9))
		p := newProblem(t, rng, m, n, k, k, dt)
		dst := make([]float32, m*n)
		gemmRows(dst, n, p.x, k, m, p.w, lo, hi, tileM, false)
		p.check(t, dst, n, m, lo, hi, tol, act)
	})
}

// requireAsm fails a benchmark when KERNELS_REQUIRE_ASM=1 and the assembly is not in use, so a
// benchmark run never reports reference numbers as kernel numbers.
func requireAsm(b *testing.B) {
	b.Helper()
	if os.Getenv("KERNELS_REQUIRE_ASM") == "1" && Implementation() == "generic" {
		b.Fatalf("KERNELS_REQUIRE_ASM=1 but the kernels run %q", Implementation())
	}
}

func BenchmarkPeak(b *testing.B) {
	requireAsm(b)
	for _, dot := range []bool{false, true} {
		name := "f32"
		if dot {
			name = "bf16dot"
		}
		b.Run(name, func(b *testing.B) {
			var g float64
			for b.Loop() {
				g = peakGFLOPS(dot, 50*time.Millisecond)
			}
			b.ReportMetric(g, "GFLOP/s")
		})
	}
}

func BenchmarkGemm(b *testing.B) {
	requireAsm(b)
	shapes := []struct{ m, n, k int }{{144, 1536, 2048}, {36, 1536, 2048}, {576, 768, 2048}, {1, 1536, 2048}}
	modes := []struct {
		name string
		dt   DType
		dot  bool
	}{{"f32", F32, false}, {"bf16", BF16, false}, {"bf16dot", BF16, true}}
	for _, s := range shapes {
		for _, md := range modes {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%dx%dx%d/%s/t%d", s.m, s.n, s.k, md.name, threads), func(b *testing.B) {
					if md.dot && !dotAvailable() {
						b.Skip("no AVX512_BF16")
					}
					prevDot := bf16Dot.Load()
					bf16Dot.Store(md.dot)
					defer bf16Dot.Store(prevDot)
					prev := Threads()
					SetThreads(threads)
					defer SetThreads(prev)
					rng := rand.New(rand.NewPCG(1, 2))
					p := newProblem(b, rng, s.m, s.n, s.k, s.k, md.dt)
					dst := make([]float32, s.m*s.n)
					Linear(dst, p.x, s.m, p.w)
					// One thread: also report the rate on the thread's CPU time, comparable with
					// BenchmarkPeak on a machine shared with other work.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					clk := newStopwatch(true)
					clk.start()
					for b.Loop() {
						Linear(dst, p.x, s.m, p.w)
					}
					flop := 2 * float64(s.m*s.n*s.k) * float64(b.N)
					if threads == 1 && clk.cpu {
						b.ReportMetric(flop/clk.seconds()/1e9, "cpu-GFLOP/s")
					}
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestLinearLeavesNoGoroutines: Linear's helpers end with the call (no pool survives it), so
// goleak checks elsewhere never see them.
func TestLinearLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	prev := Threads()
	SetThreads(4)
	defer SetThreads(prev)
	rng := rand.New(rand.NewPCG(9, 9))
	p := newProblem(t, rng, 64, 256, 256, 256, F32)
	dst := make([]float32, 64*256)
	for range 3 {
		Linear(dst, p.x, 64, p.w)
	}
}

// BenchmarkLinearSmall shows the fixed cost of a call (dispatch, task grid, helper goroutines)
// on shapes where the arithmetic is tiny.
func BenchmarkLinearSmall(b *testing.B) {
	requireAsm(b)
	for _, s := range []struct{ m, n, k int }{{1, 2, 512}, {1, 64, 64}, {16, 512, 512}, {64, 1536, 512}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%dx%dx%d/t%d", s.m, s.n, s.k, threads), func(b *testing.B) {
				prev := Threads()
				SetThreads(threads)
				defer SetThreads(prev)
				rng := rand.New(rand.NewPCG(1, 2))
				p := newProblem(b, rng, s.m, s.n, s.k, s.k, F32)
				dst := make([]float32, s.m*s.n)
				b.ReportAllocs()
				for b.Loop() {
					Linear(dst, p.x, s.m, p.w)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestGemmAllocs checks that Linear and gemmRows on one thread allocate nothing per call (the
// prepared product used to escape to the heap on every Linear call).
func TestGemmAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	if activeISA() == isaGeneric {
		t.Skip("the generic reference GEMM allocates a row buffer per call")
	}
	defer SetThreads(Threads())
	SetThreads(1)
	rng := rand.New(rand.NewPCG(7, 8))
	const m, n, k = 25, 96, 80
	x := randVec(rng, m*k)
	dst := make([]float32, m*n)
	for _, w := range []*Weight{NewWeightF32(randVec(rng, n*k), n, k), NewWeightBF16(bf16Vec(randVec(rng, n*k)), n, k)} {
		Linear(dst, x, m, w)
		if a := testing.AllocsPerRun(10, func() { Linear(dst, x, m, w) }); a > 0 {
			t.Errorf("%v Linear allocates %.1f objects per call, want 0", w.DType, a)
		}
		if a := testing.AllocsPerRun(10, func() { gemmRows(dst, n, x, k, m, w, 0, n, 0, false) }); a > 0 {
			t.Errorf("%v gemmRows allocates %.1f objects per call, want 0", w.DType, a)
		}
	}
}

func bf16Vec(v []float32) []uint16 {
	out := make([]uint16, len(v))
	F32ToBF16(out, v)
	return out
}

// TestAMXSplitNonFinite: an infinite or NaN activation gives what the f32 paths give (±Inf,
// NaN), in the vector bulk of a row and in its scalar tail — the low part must not turn Inf − Inf
// into a NaN that poisons an infinite result.
func TestAMXSplitNonFinite(t *testing.T) {
	if activeISA() < isaAMX {
		t.Skip("no AMX")
	}
	const n, k = 33, 37 // 32 columns in the vector bulk, 5 in the tail
	wb := make([]uint16, n*k)
	wf := make([]float32, n*k)
	for i := range wf {
		wf[i] = 0.25 + float32(i%7)/8 // positive, so an infinite sum has one sign
	}
	F32ToBF16(wb, wf)
	w := NewWeightBF16(wb, n, k)
	for _, pos := range []int{3, 35} {
		for _, v := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
			x := make([]float32, k)
			for i := range x {
				x[i] = float32(i%5) - 2
			}
			x[pos] = v
			got, want := make([]float32, n), make([]float32, n)
			useImpl(t, implCase{"avx512", isaAVX512, false})
			Linear(want, x, 1, w)
			useImpl(t, implCase{"avx512-amx", isaAMX, false})
			Linear(got, x, 1, w)
			for j := range got {
				g, e := float64(got[j]), float64(want[j])
				if math.IsNaN(e) != math.IsNaN(g) || (math.IsInf(e, 0) && g != e) {
					t.Fatalf("x[%d] = %v: column %d = %v, f32 path %v", pos, v, j, g, e)
				}
			}
		}
	}
}

// TestSetBF16Matmul: each mode selects the path it names (on this CPU), and a bad name is an
// error that leaves the mode alone.
func TestSetBF16Matmul(t *testing.T) {
	prevDot, prevAMX := bf16Dot.Load(), amxSplit.Load()
	t.Cleanup(func() { bf16Dot.Store(prevDot); amxSplit.Store(prevAMX) })
	isa := activeISA()
	want := map[string]string{BF16MatmulWiden: "avx512", BF16MatmulAuto: "avx512", BF16MatmulBF16: "avx512"}
	switch {
	case isa >= isaAMX:
		want[BF16MatmulAuto], want[BF16MatmulBF16] = "avx512-amx", "amx-bf16"
	case isa >= isaAVX512BF16:
		want[BF16MatmulBF16] = "avx512-bf16dot"
	case isa < isaAVX512:
		t.Skip("no AVX-512")
	}
	for mode, impl := range want {
		if err := SetBF16Matmul(mode); err != nil {
			t.Fatal(err)
		}
		if got := Implementation(); got != impl {
			t.Errorf("SetBF16Matmul(%q): Implementation() = %q, want %q", mode, got, impl)
		}
	}
	if err := SetBF16Matmul("fp8"); err == nil || !strings.Contains(err.Error(), `"fp8"`) {
		t.Errorf("SetBF16Matmul(fp8) = %v, want an error naming the mode", err)
	}
}
