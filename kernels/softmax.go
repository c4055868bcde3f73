package kernels

import "math"

// Softmax normalises x in place (numerically stable: the maximum is subtracted first).
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := maxF32(x)
	inv := 1 / expScaleSum(x, 1, m)
	for i := range x {
		x[i] *= inv
	}
}

// softmaxGeneric is the reference softmax (float64 exponentials).
func softmaxGeneric(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	var s float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		s += e
	}
	inv := 1 / s
	for i := range x {
		x[i] *= inv
	}
}
