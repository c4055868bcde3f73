//go:build !purego

package kernels

//go:noescape
func expScaleSumAVX512(x *float32, n int, scale, sub float32, sum *[16]float32)

//go:noescape
func maxAVX512(x *float32, n int, out *[16]float32)

//go:noescape
func siluMulAVX512(dst, gate, up *float32, n int)

//go:noescape
func expScaleSumAVX2(x *float32, n int, scale, sub float32, sum *[8]float32)

//go:noescape
func maxAVX2(x *float32, n int) float32

//go:noescape
func siluMulAVX2(dst, gate, up *float32, n int)

// haveActAsm reports whether the elementwise kernels (exp, max, SiLU) have assembly now: AVX-512
// or AVX2 with FMA. Without it SiLU·mul costs a math.Exp per value, which was 16 % of a dense
// model's forward pass on an AVX2-only CPU.
func haveActAsm() bool { return activeISA() >= isaAVX2 }

// haveAVX512Elementwise reports whether the AVX-512 kernels of RMSNorm and RoPE may run now.
func haveAVX512Elementwise() bool { return activeISA() >= isaAVX512 }

// The *Asm functions run the assembly and return how many elements they did; the callers finish
// the rest with the generic code. All three do all (expScaleSum and max with tails under a mask,
// siluMul through a padded copy), so a value's bits never depend on its place in the slice. The
// two widths give different bits (the sums add lanes in another order; 2^n is made another way),
// but a process uses one width throughout.

func expScaleSumAsm(x []float32, scale, sub float32) (int, float32) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	if activeISA() >= isaAVX512 {
		var lanes [16]float32
		expScaleSumAVX512(&x[0], n, scale, sub, &lanes)
		var s float32
		for _, v := range lanes {
			s += v
		}
		return n, s
	}
	var lanes [8]float32
	expScaleSumAVX2(&x[0], n, scale, sub, &lanes)
	var s float32
	for _, v := range lanes {
		s += v
	}
	for _, v := range x[n&^7:] { // done under a mask, summed here in order
		s += v
	}
	return n, s
}

func maxAsm(x []float32) (int, float32) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	if activeISA() >= isaAVX512 {
		var lanes [16]float32
		maxAVX512(&x[0], n, &lanes)
		m := lanes[0]
		for _, v := range lanes[1:] {
			m = max(m, v)
		}
		return n, m
	}
	return n, maxAVX2(&x[0], n)
}

// siluMulAsm does all of gate: the multiple-of-lanes head in place, the tail of fewer than 16 (8)
// values through a zero-padded copy, so that every value takes the same polynomial. Handing the
// tail to the generic math.Exp made a value's bits depend on where it fell in the slice, and
// callers pass several rows (or a column block of one) at once: with widths that are not a
// multiple of the lanes (a Qwen2-MoE shared expert of 40) a row's activations depended on how
// many rows shared the call. (The two widths are spelled out: through a func value the
// assembly's noescape is lost and the padded arrays would move to the heap on every call.)
func siluMulAsm(dst, gate, up []float32) int {
	n := len(gate)
	if activeISA() >= isaAVX512 {
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
	h := n &^ 7
	if h > 0 {
		_ = dst[h-1]
		_ = up[h-1]
		siluMulAVX2(&dst[0], &gate[0], &up[0], h)
	}
	if h < n {
		var g, u [8]float32
		copy(g[:], gate[h:n])
		copy(u[:], up[h:n])
		siluMulAVX2(&g[0], &g[0], &u[0], 8)
		copy(dst[h:n], g[:n-h])
	}
	return n
}

//go:noescape
func mixAVX2(dst, x *float32, n int, a, b float32)

//go:noescape
func scaleAVX2(dst, x *float32, n int, s float32)

// mixAsm does the multiple-of-8 head of mixF32 and returns its length; the generic code does
// the tail with the same arithmetic, value by value, so the split changes no bits.
func mixAsm(dst, x []float32, a, b float32) int {
	h := len(dst) &^ 7
	if h > 0 {
		_ = x[h-1]
		mixAVX2(&dst[0], &x[0], h, a, b)
	}
	return h
}

// scaleAsm does the multiple-of-8 head of scaleF32 and returns its length.
func scaleAsm(dst, x []float32, s float32) int {
	h := len(dst) &^ 7
	if h > 0 {
		_ = x[h-1]
		scaleAVX2(&dst[0], &x[0], h, s)
	}
	return h
}
