package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ulpDiff is the distance in units of the last place between two finite float32 of one sign.
func ulpDiff(a, b float32) int64 {
	if a == b {
		return 0
	}
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if (ia < 0) != (ib < 0) || math.Signbit(float64(a)) != math.Signbit(float64(b)) {
		return math.MaxInt64
	}
	if ia > ib {
		return ia - ib
	}
	return ib - ia
}

// actInputs are vectors of every length class around the 16-lane blocks, plus extreme values.
func actInputs() [][]float32 {
	rng := rand.New(rand.NewPCG(5, 5))
	var out [][]float32
	for _, n := range []int{0, 1, 2, 3, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1408} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 4)
		}
		out = append(out, v)
	}
	ext := []float32{-200, -88, -87.5, -50, -1e-30, 0, 1e-30, 1e-3, 20, 50, 88, 88.8, 200, -0.5, 0.5, 3}
	return append(out, ext)
}

// forEachActWidth runs f once per elementwise implementation this CPU (and build) can run:
// generic, AVX2 and AVX-512, each as the dispatch would pick it on a CPU of that level.
func forEachActWidth(t *testing.T, f func(t *testing.T)) {
	for _, c := range availableImpls() {
		if c.dot || c.isa > isaAVX512 {
			continue // the elementwise kernels have no bf16 or AMX variant
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			f(t)
		})
	}
}

func TestSiLUMul(t *testing.T) { forEachActWidth(t, testSiLUMul) }

func testSiLUMul(t *testing.T) {
	for _, g := range actInputs() {
		u := make([]float32, len(g))
		for i := range u {
			u[i] = float32(i%7) - 3.25
		}
		want := make([]float32, len(g))
		siluMulGeneric(want, g, u)
		got := make([]float32, len(g))
		SiLUMul(got, g, u)
		for i := range want {
			// Tiny results (silu of very negative gates) only need to be tiny.
			if ulpDiff(got[i], want[i]) > 4 && math.Abs(float64(got[i]-want[i])) > 1e-30 {
				t.Fatalf("n=%d: silu(%v)·%v = %v, want %v", len(g), g[i], u[i], got[i], want[i])
			}
		}
		// In place (dst aliases gate).
		inPlace := append([]float32(nil), g...)
		SiLUMul(inPlace, inPlace, u)
		for i := range got {
			if inPlace[i] != got[i] {
				t.Fatalf("n=%d: in place [%d] = %v, want %v", len(g), i, inPlace[i], got[i])
			}
		}
	}
}

// TestMixAndScaleAreTheScalarArithmetic wants the vector merge and scale of attention's rows, and the residual add, to
// give exactly the bits of the scalar reference, for every length class: the lanes and the
// scalar tail must compute the same rounded products and sum.
func TestMixAndScaleAreTheScalarArithmetic(t *testing.T) {
	forEachActWidth(t, testMixAndScale)
}

func testMixAndScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, x := range actInputs() {
		n := len(x)
		d0 := make([]float32, n)
		for i := range d0 {
			d0[i] = float32(rng.NormFloat64() * 3)
		}
		for _, ab := range [][2]float32{{0.25, 0.75}, {0.3183099, 1.7320508}, {1, 0}, {1e-30, 3e30}} {
			a, b := ab[0], ab[1]
			got := append([]float32(nil), d0...)
			mixF32(got, x, a, b)
			want := append([]float32(nil), d0...)
			for i := range want {
				want[i] = float32(a*want[i]) + float32(b*x[i])
			}
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("mix n=%d a=%v b=%v: [%d] = %v, want %v", n, a, b, i, got[i], want[i])
			}
			got = append(got[:0], d0...)
			AddTo(got, x)
			for i := range want {
				want[i] = d0[i] + x[i]
			}
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("add n=%d: [%d] = %v, want %v", n, i, got[i], want[i])
			}
			scaleF32(got, x, b)
			for i := range want {
				want[i] = b * x[i]
			}
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("scale n=%d s=%v: [%d] = %v, want %v", n, b, i, got[i], want[i])
			}
		}
	}
}

func TestSoftmax(t *testing.T) { forEachActWidth(t, testSoftmax) }

func testSoftmax(t *testing.T) {
	for _, x := range actInputs() {
		for _, shift := range []float32{0, 1000, -1000} {
			in := make([]float32, len(x))
			for i := range x {
				in[i] = x[i] + shift
			}
			want := append([]float32(nil), in...)
			softmaxGeneric(want)
			got := append([]float32(nil), in...)
			Softmax(got)
			var sum float64
			for i := range want {
				sum += float64(got[i])
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*math.Max(float64(want[i]), 1e-3) {
					t.Fatalf("n=%d shift %v: [%d] = %v, want %v", len(x), shift, i, got[i], want[i])
				}
			}
			if len(x) > 0 && math.Abs(sum-1) > 1e-5 {
				t.Fatalf("n=%d: sums to %v", len(x), sum)
			}
		}
	}
}

func TestMaxF32(t *testing.T) { forEachActWidth(t, testMaxF32) }

func testMaxF32(t *testing.T) {
	for _, x := range actInputs() {
		want := float32(math.Inf(-1))
		for _, v := range x {
			want = max(want, v)
		}
		if got := maxF32(x); got != want {
			t.Errorf("n=%d: max %v, want %v", len(x), got, want)
		}
	}
}

// TestExpScaleSum: every exponential within 2 ulp of the float64 one (values that underflow
// only need to be tiny), the sum within float32 rounding of the float64 sum, on every length
// class around the lanes.
func TestExpScaleSum(t *testing.T) { forEachActWidth(t, testExpScaleSum) }

func testExpScaleSum(t *testing.T) {
	for _, x := range actInputs() {
		for _, c := range []struct{ scale, sub float32 }{{1, 0}, {0.125, 3}, {1, -2}} {
			got := append([]float32(nil), x...)
			s := expScaleSum(got, c.scale, c.sub)
			var want float64
			for i, v := range x {
				e := float32(math.Exp(float64(v*c.scale - c.sub)))
				want += float64(got[i])
				if math.IsInf(float64(e), 1) {
					continue // beyond the clamp: finite there, by design
				}
				if ulpDiff(got[i], e) > 2 && math.Abs(float64(got[i]-e)) > 1e-37 {
					t.Fatalf("n=%d scale %v sub %v: exp(%v) = %v, want %v", len(x), c.scale, c.sub, v*c.scale-c.sub, got[i], e)
				}
			}
			if d := math.Abs(float64(s) - want); d > 1e-5*math.Max(want, 1) {
				t.Fatalf("n=%d scale %v sub %v: sum %v, want %v", len(x), c.scale, c.sub, s, want)
			}
		}
	}
}

// TestElementwiseTailsStayInTheirSlice: the last values of a row that does not fill the lanes are
// done under a mask, so neither the exponentials nor the maximum read or write past the slice,
// and a value's exponential has the same bits wherever it falls (in the lanes or in the tail).
func TestElementwiseTailsStayInTheirSlice(t *testing.T) { forEachActWidth(t, testTailsInSlice) }

func testTailsInSlice(t *testing.T) {
	const sentinel = float32(1e30) // the maximum, and an infinite exponential, if ever read
	rng := rand.New(rand.NewPCG(9, 9))
	for n := 1; n <= 40; n++ {
		buf := make([]float32, n+16)
		for i := range buf {
			buf[i] = sentinel
		}
		want := float32(math.Inf(-1))
		for i := range n {
			buf[i] = float32(rng.NormFloat64() * 3)
			want = max(want, buf[i])
		}
		if got := maxF32(buf[:n]); got != want {
			t.Fatalf("n=%d: max %v, want %v (a value past the slice read)", n, got, want)
		}
		in := append([]float32(nil), buf[:n]...)
		expScaleSum(buf[:n], 0.5, want)
		for i, v := range buf[n:] {
			if v != sentinel {
				t.Fatalf("n=%d: buf[%d] = %v after expScaleSum of the first %d, want it untouched", n, n+i, v, n)
			}
		}
		for i, v := range in {
			one := []float32{v}
			expScaleSum(one, 0.5, want)
			if math.Float32bits(one[0]) != math.Float32bits(buf[i]) {
				t.Fatalf("n=%d: exp of x[%d] = %v in the row, %v alone", n, i, buf[i], one[0])
			}
		}
	}
}

func BenchmarkSiLUMul(b *testing.B) {
	requireAsm(b)
	for _, impl := range []struct {
		name string
		f    func(dst, g, u []float32)
	}{{"dispatch", SiLUMul}, {"generic", siluMulGeneric}} {
		g := make([]float32, 768*64)
		for i := range g {
			g[i] = float32(i%100)/10 - 5
		}
		u := append([]float32(nil), g...)
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(g)) * 4)
			for b.Loop() {
				impl.f(g, g, u)
				copy(g, u)
			}
		})
	}
}

func BenchmarkSoftmax(b *testing.B) {
	requireAsm(b)
	for _, impl := range []struct {
		name string
		f    func(x []float32)
	}{{"dispatch", Softmax}, {"generic", softmaxGeneric}} {
		x := make([]float32, 128)
		b.Run(impl.name, func(b *testing.B) {
			for b.Loop() {
				for i := range x {
					x[i] = float32(i % 13)
				}
				impl.f(x)
			}
		})
	}
}
