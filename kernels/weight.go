package kernels

import (
	"fmt"
	"math"
)

// DType is the element type a Weight is stored in.
type DType uint8

const (
	F32 DType = iota
	BF16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Weight is a linear layer's matrix in the Hugging Face layout: N rows (output features) of K
// values (input features), so y = x·Wᵀ. Implementations may keep a packed copy tuned for their
// micro-kernel; the row-major source is kept for the reference path and for Row.
//
// With the assembly kernels (amd64, not purego) the constructors also pack the matrix once into
// panels of 32 output features (see packF32 and packBF16): f32 stays f32, bf16 stays bf16, so a
// bf16 checkpoint is never widened in memory. The packed copy is held beside the retained
// source (PackedBytes reports it): a bf16 source that points into a memory-mapped file costs
// only page cache, an f32 source doubles the weight's memory.
type Weight struct {
	N, K  int
	DType DType
	f32   []float32 // N*K, when DType == F32
	bf16  []uint16  // N*K raw bf16 bits, when DType == BF16
	p32   []float32 // packed f32 panels, when DType == F32 and packWeights
	p16   []uint16  // packed bf16 k-pair panels, when DType == BF16 and packWeights
	// kStride is the K the f32 values are stored with, when this Weight is a view of the first K
	// of a wider matrix (firstK); 0 means K. A row of f32 starts at i·kStride, a panel of p32
	// spans kStride rows of 32.
	kStride int
}

// storedK is the K of w's storage: kStride for a view made by firstK, else K.
func (w *Weight) storedK() int {
	if w.kStride > 0 {
		return w.kStride
	}
	return w.K
}

// firstK returns a view of an f32 weight that multiplies only the first k inputs of each row:
// the product of x with it is the product with the whole weight when x's inputs past k are
// zero, bit for bit (a reduction in k order adds only exact zeros after them), at k/K of the
// work. Attention's value product uses it to skip the keys past a causal block's last row.
func (w *Weight) firstK(k int) Weight {
	if w.DType != F32 || k < 0 || k > w.K {
		panic(fmt.Sprintf("kernels: firstK(%d) of a %v weight with K %d", k, w.DType, w.K))
	}
	v := *w
	v.K, v.kStride = k, w.storedK()
	return v
}

// NewWeightF32 wraps a row-major [n, k] f32 matrix. The slice is retained, not copied.
func NewWeightF32(w []float32, n, k int) *Weight {
	if len(w) != n*k {
		panic(fmt.Sprintf("kernels: NewWeightF32: len %d != %d×%d", len(w), n, k))
	}
	wt := &Weight{N: n, K: k, DType: F32, f32: w}
	if packWeights {
		wt.p32 = packF32(w, n, k)
	}
	return wt
}

// NewWeightBF16 wraps a row-major [n, k] matrix of raw bf16 bits. The slice is retained (it may
// point into a memory-mapped checkpoint): weights stay in bf16 in memory.
func NewWeightBF16(w []uint16, n, k int) *Weight {
	if len(w) != n*k {
		panic(fmt.Sprintf("kernels: NewWeightBF16: len %d != %d×%d", len(w), n, k))
	}
	wt := &Weight{N: n, K: k, DType: BF16, bf16: w}
	if packWeights {
		wt.p16 = packBF16(w, n, k)
	}
	return wt
}

// Row copies row i of the weight, converted to f32, into dst (len K).
func (w *Weight) Row(dst []float32, i int) {
	switch w.DType {
	case F32:
		r := i * w.storedK()
		copy(dst[:w.K], w.f32[r:r+w.K])
	case BF16:
		BF16ToF32(dst[:w.K], w.bf16[i*w.K:(i+1)*w.K])
	}
}

// Rows returns a new Weight made of the given rows (used for the two head rows of the score).
func (w *Weight) Rows(idx ...int) *Weight {
	switch w.DType {
	case BF16:
		out := make([]uint16, 0, len(idx)*w.K)
		for _, i := range idx {
			out = append(out, w.bf16[i*w.K:(i+1)*w.K]...)
		}
		return NewWeightBF16(out, len(idx), w.K)
	default:
		out := make([]float32, 0, len(idx)*w.K)
		for _, i := range idx {
			r := i * w.storedK()
			out = append(out, w.f32[r:r+w.K]...)
		}
		return NewWeightF32(out, len(idx), w.K)
	}
}

// Bytes is the memory the weight's values take (the row-major source; see PackedBytes).
func (w *Weight) Bytes() int64 {
	if w.DType == BF16 {
		return int64(len(w.bf16)) * 2
	}
	return int64(len(w.f32)) * 4
}

// PackedBytes is the memory of the packed copy the assembly kernels read (0 without one).
func (w *Weight) PackedBytes() int64 {
	return int64(len(w.p32))*4 + int64(len(w.p16))*2
}

// BF16ToF32 widens raw bf16 bits to f32 (exact).
func BF16ToF32(dst []float32, src []uint16) {
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

// F32ToBF16 narrows f32 to bf16 bits with round-to-nearest-even (NaN stays NaN).
func F32ToBF16(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = RoundBF16(f)
	}
}

// RoundBF16 converts one f32 to bf16 bits, rounding to nearest even as PyTorch does.
func RoundBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// PacksWeights reports whether the kernels multiply from packed copies of the weights (the
// assembly kernels): a weight's source is then read only at construction and by Row.
func PacksWeights() bool { return packWeights }
