//go:build !purego

package kernels

//go:noescape
func sumSquaresAVX512(x *float32, n int, lanes *[16]float32)

//go:noescape
func scaleMulAVX512(dst, x, w *float32, n int, s float32)

//go:noescape
func sumSquaresAVX2(x *float32, n int, lanes *[8]float32)

//go:noescape
func scaleMulAVX2(dst, x, w *float32, n int, s float32)

// rmsNormRowAsm normalises one row with AVX-512 or AVX2; false when neither is available. A
// row's bits depend on its values and length only: AVX2 sums the squares of its multiple-of-8
// head in two 8-lane chains and adds the rest one by one, then scales every value as
// (x·inv)·w, the head 8 lanes at a time and the rest in Go with the same two rounded products.
// (On an AVX2 CPU the reference's float64 sum was 3 % of a small MoE model's pass.)
func rmsNormRowAsm(dst, x, w []float32, eps float32) bool {
	n := len(w)
	if n == 0 || !haveActAsm() {
		return false
	}
	_, _ = dst[n-1], x[n-1]
	if haveAVX512Elementwise() {
		var lanes [16]float32
		sumSquaresAVX512(&x[0], n, &lanes)
		var ss float32
		for _, v := range lanes {
			ss += v
		}
		scaleMulAVX512(&dst[0], &x[0], &w[0], n, rmsInv(ss, n, eps))
		return true
	}
	h := n &^ 7
	var lanes [8]float32
	if h > 0 {
		sumSquaresAVX2(&x[0], h, &lanes)
	}
	var ss float32
	for _, v := range lanes {
		ss += v
	}
	for _, v := range x[h:n] {
		ss += float32(v * v) // the conversion keeps the compiler from fusing: one order per row
	}
	inv := rmsInv(ss, n, eps)
	if h > 0 {
		scaleMulAVX2(&dst[0], &x[0], &w[0], h, inv)
	}
	for i := h; i < n; i++ {
		dst[i] = float32(x[i]*inv) * w[i]
	}
	return true
}
