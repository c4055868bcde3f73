package kernels

import "math"

// siluMulGeneric is the reference SiLU·mul: dst[i] = gate[i]·sigmoid(gate[i])·up[i], with the
// exponential in float64 as PyTorch's f32 silu is accurate to the last bit or so.
func siluMulGeneric(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}
