//go:build !purego

package kernels

//go:noescape
func sumSquaresAVX512(x *float32, n int, lanes *[16]float32)

//go:noescape
func scaleMulAVX512(dst, x, w *float32, n int, s float32)

// rmsNormRowAsm normalises one row with AVX-512; false when it is not available.
func rmsNormRowAsm(dst, x, w []float32, eps float32) bool {
	if !haveAVX512Elementwise() || len(w) == 0 {
		return false
	}
	n := len(w)
	_, _ = dst[n-1], x[n-1]
	var lanes [16]float32
	sumSquaresAVX512(&x[0], n, &lanes)
	var ss float32
	for _, v := range lanes {
		ss += v
	}
	scaleMulAVX512(&dst[0], &x[0], &w[0], n, rmsInv(ss, n, eps))
	return true
}
