package kernels

import "math"

// RoPETable holds cos/sin of the rotary embedding for positions [0, maxPos) and head dim hd.
type RoPETable struct {
	HeadDim  int
	Cos, Sin []float32 // [maxPos][hd/2]
}

// NewRoPETable precomputes the rotation for positions below maxPos with base theta, the way
// Hugging Face does: inv_freq[i] = 1 / theta^(2i/hd), angle = pos·inv_freq[i], in f32.
func NewRoPETable(maxPos, hd int, theta float64) *RoPETable {
	half := hd / 2
	t := &RoPETable{HeadDim: hd, Cos: make([]float32, maxPos*half), Sin: make([]float32, maxPos*half)}
	for i := 0; i < half; i++ {
		inv := float32(1 / math.Pow(theta, float64(2*i)/float64(hd)))
		for p := 0; p < maxPos; p++ {
			a := float32(p) * inv
			t.Cos[p*half+i] = float32(math.Cos(float64(a)))
			t.Sin[p*half+i] = float32(math.Sin(float64(a)))
		}
	}
	return t
}

// MaxPos is the number of positions the table covers.
func (t *RoPETable) MaxPos() int { return len(t.Cos) / (t.HeadDim / 2) }

// ApplyRoPE rotates, in place, every head of every row of x ([rows][heads·hd]) by the angle of
// that row's position, rotating halves (x[i], x[i+hd/2]) as Qwen does (not interleaved pairs).
func ApplyRoPE(x []float32, positions []int32, heads int, t *RoPETable) {
	hd := t.HeadDim
	half := hd / 2
	for r, p := range positions {
		c := t.Cos[int(p)*half : (int(p)+1)*half]
		s := t.Sin[int(p)*half : (int(p)+1)*half]
		if !ropeRowAsm(x[r*heads*hd:(r+1)*heads*hd], c, s, heads, half) {
			ropeRowGeneric(x[r*heads*hd:(r+1)*heads*hd], c, s, heads, half)
		}
	}
}

// ropeRowGeneric is the reference rotation of one row's heads.
func ropeRowGeneric(row, c, s []float32, heads, half int) {
	hd := 2 * half
	for h := 0; h < heads; h++ {
		v := row[h*hd : (h+1)*hd]
		for i := 0; i < half; i++ {
			a, b := v[i], v[i+half]
			v[i] = a*c[i] - b*s[i]
			v[i+half] = b*c[i] + a*s[i]
		}
	}
}
