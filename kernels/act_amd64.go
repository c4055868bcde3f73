//go:build !purego

package kernels

//go:noescape
func expScaleSumAVX512(x *float32, n int, scale, sub float32, sum *[16]float32)

//go:noescape
func maxAVX512(x *float32, n int, out *[16]float32)

//go:noescape
func siluMulAVX512(dst, gate, up *float32, n int)

// haveActAsm reports whether the AVX-512 elementwise kernels may run now.
func haveActAsm() bool { return activeISA() >= isaAVX512 }

// The *Asm functions run the assembly and return how many elements they did; the callers finish
// the rest with the generic code. All three do all (expScaleSum and max with tails under a mask,
// siluMul through a padded copy), so a value's bits never depend on its place in the slice.

func expScaleSumAsm(x []float32, scale, sub float32) (int, float32) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	var lanes [16]float32
	expScaleSumAVX512(&x[0], n, scale, sub, &lanes)
	var s float32
	for _, v := range lanes {
		s += v
	}
	return n, s
}

func maxAsm(x []float32) (int, float32) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	var lanes [16]float32
	maxAVX512(&x[0], n, &lanes)
	m := lanes[0]
	for _, v := range lanes[1:] {
		m = max(m, v)
	}
	return n, m
}

// siluMulAsm does all of gate: the multiple-of-16 head in place, the tail of fewer than 16 values
// through a zero-padded copy, so that every value takes the same polynomial. Handing the tail to
// the generic math.Exp made a value's bits depend on where it fell in the slice, and callers pass
// several rows (or a column block of one) at once: with widths that are not a multiple of 16
// (a Qwen2-MoE shared expert of 40) a row's activations depended on how many rows shared the call.
func siluMulAsm(dst, gate, up []float32) int {
	n := len(gate)
	h := n &^ 15
	if h > 0 {
		_ = dst[h-1]
		_ = up[h-1]
		siluMulAVX512(&dst[0], &gate[0], &up[0], h)
	}
	if h < n {
		var g, u [16]float32
		copy(g[:], gate[h:n])
		copy(u[:], up[h:n])
		siluMulAVX512(&g[0], &g[0], &u[0], 16)
		copy(dst[h:n], g[:n-h])
	}
	return n
}
