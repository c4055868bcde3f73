package kernels

import "math"

// RMSNorm writes dst[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ weight for each of rows rows of
// len(weight) values. dst may alias x. The sum of squares is accumulated in f32 (as Hugging Face
// does after casting to f32); with AVX-512 in 32 partial sums.
func RMSNorm(dst, x, weight []float32, rows int, eps float32) {
	d := len(weight)
	for r := 0; r < rows; r++ {
		xr := x[r*d : (r+1)*d]
		dr := dst[r*d : (r+1)*d]
		if !rmsNormRowAsm(dr, xr, weight, eps) {
			rmsNormRowGeneric(dr, xr, weight, eps)
		}
	}
}

// rmsNormRowGeneric is the reference: the sum of squares in float64.
func rmsNormRowGeneric(dst, x, weight []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * inv * weight[i]
	}
}

// rmsInv is 1/sqrt(ss/n + eps), computed in float64 like the reference.
func rmsInv(ss float32, n int, eps float32) float32 {
	return float32(1 / math.Sqrt(float64(ss)/float64(n)+float64(eps)))
}
