package kernels

import "math"

// SiLUMul writes dst[i] = silu(gate[i]) · up[i] = gate[i]·up[i] / (1 + exp(-gate[i])). dst may
// alias gate or up. With AVX-512 the exponential is a polynomial within 2 ulp (act_amd64.s) for
// every value; the reference uses math.Exp.
func SiLUMul(dst, gate, up []float32) {
	n := len(gate)
	if n == 0 {
		return
	}
	_, _ = dst[n-1], up[n-1]
	i := 0
	if haveActAsm() {
		i = siluMulAsm(dst, gate, up)
	}
	siluMulGeneric(dst[i:n], gate[i:], up[i:n])
}

// expScaleSum sets x[i] = exp(x[i]·scale - sub) and returns Σ x[i]: the exponentials of a
// softmax row after its maximum is known.
func expScaleSum(x []float32, scale, sub float32) float32 {
	i, s := 0, float32(0)
	if haveActAsm() {
		i, s = expScaleSumAsm(x, scale, sub)
	}
	for j := i; j < len(x); j++ {
		e := float32(math.Exp(float64(x[j]*scale - sub)))
		x[j] = e
		s += e
	}
	return s
}

// maxF32 returns the largest value of x (-Inf for an empty slice).
func maxF32(x []float32) float32 {
	m := float32(math.Inf(-1))
	i := 0
	if haveActAsm() {
		if n, v := maxAsm(x); n > 0 {
			i, m = n, v
		}
	}
	for _, v := range x[i:] {
		m = max(m, v)
	}
	return m
}

// mixF32 sets dst[i] = a·dst[i] + b·x[i]: attention's merge of a row's prefix part with its own
// part. Two products and a sum, each rounded to f32 and never fused, so the assembly (8 lanes at
// a time) and the reference give the same bits and a value's bits do not depend on its place in
// the slice.
func mixF32(dst, x []float32, a, b float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	_ = x[n-1]
	i := 0
	if haveActAsm() {
		i = mixAsm(dst, x, a, b)
	}
	mixGeneric(dst[i:], x[i:n], a, b)
}

// mixGeneric is mixF32's reference. The conversions keep the compiler from fusing a product
// into the sum (the Go spec allows it without them), which would change the bits.
func mixGeneric(dst, x []float32, a, b float32) {
	for i := range dst {
		dst[i] = float32(a*dst[i]) + float32(b*x[i])
	}
}

// AddTo sets dst[i] += src[i] for i < len(dst) (the residual adds of the forward pass), 8 lanes
// at a time where the CPU has AVX2. The bits are the scalar sum's: it is mixF32 with both
// factors 1, and 1·x is x exactly.
func AddTo(dst, src []float32) { mixF32(dst, src, 1, 1) }

// scaleF32 sets dst[i] = s·x[i].
func scaleF32(dst, x []float32, s float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	_ = x[n-1]
	i := 0
	if haveActAsm() {
		i = scaleAsm(dst, x, s)
	}
	for ; i < n; i++ {
		dst[i] = s * x[i]
	}
}
