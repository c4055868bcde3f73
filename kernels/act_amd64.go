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
// the rest with the generic code. expScaleSum and max do all (tails under a mask), siluMul the
// multiple-of-16 head.

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

func siluMulAsm(dst, gate, up []float32) int {
	n := len(gate) &^ 15
	if n == 0 {
		return 0
	}
	_ = dst[n-1]
	_ = up[n-1]
	siluMulAVX512(&dst[0], &gate[0], &up[0], n)
	return n
}
