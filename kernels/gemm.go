package kernels

import (
	"fmt"
	"os"
	"sync/atomic"
)

// The dense GEMM. Weights are packed once (NewWeight*) into panels of 32 output features; each
// call walks cache blocks of the weight (kc × ≤512 columns, about half of Zen 4's 1 MB L2) and,
// inside a block, row micro-tiles of up to 12 rows (AVX-512; 6 with AVX2) against every 32-column
// panel of the block. A is read in place (f32) or converted to bf16 pairs once per call (the
// VDPBF16PS path). Dispatch (gemm_amd64.go) picks the most capable implementation this CPU runs:
//
//	avx512-bf16dot  bf16 weights × bf16-rounded activations with VDPBF16PS (opt-in, see SetBF16DotProducts)
//	avx512          f32 weights, and bf16 weights widened to f32 in registers (exact), AVX-512F FMAs
//	avx2            the same on 6×16 tiles with AVX2+FMA
//	generic         the pure-Go reference (gemm_generic.go); the only path with -tags purego

// gemmRows is the tile-level entry point of the dense GEMM, shared by Linear and the grouped
// expert GEMM. It computes, on the calling goroutine only,
//
//	dst[i*ldDst + j] = Σ_k x[i*ldX + k] · W[j, k]   for i in [0, m), j in [n0, n1)
//
// tileM is the height of the row tile the caller wants the kernel to compute in: rows are
// processed in tiles of tileM, and when padRows is true the last tile is computed whole (rows
// m..ceil(m/tileM)·tileM-1 of x and dst must then exist; they are computed, as a GPU kernel
// computes padding rows). tileM 0 lets the implementation pick. The generic version ignores tiling.
//
// With the assembly kernels, a tile of tileM ≤ 12 rows (≤ 6 with AVX2) is one micro-tile of that
// height; a taller tile is cut into full-height micro-tiles plus one remainder (16 = 12+4,
// 64 = 5·12+4, 128 = 10·12+8), so the cost of a tile height is what the hardware pays for it.
// It panics, naming the problem, when the shapes do not fit the slices: the kernels are
// assembly and must never run past a slice.
func gemmRows(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int, tileM int, padRows bool) {
	if padRows && tileM > 0 {
		m = (m + tileM - 1) / tileM * tileM
	}
	if err := checkGemm(dst, ldDst, x, ldX, m, w, n0, n1); err != nil {
		panic("kernels: gemmRows: " + err.Error())
	}
	if m == 0 || n0 == n1 {
		return
	}
	gemmRowsImpl(dst, ldDst, x, ldX, m, w, n0, n1, tileM)
}

// checkGemm validates the shapes of one product against its slices.
func checkGemm(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int) error {
	switch {
	case w == nil:
		return fmt.Errorf("nil weight")
	case m < 0:
		return fmt.Errorf("m = %d < 0", m)
	case n0 < 0 || n1 < n0 || n1 > w.N:
		return fmt.Errorf("column range [%d, %d) outside [0, %d)", n0, n1, w.N)
	case ldX < w.K:
		return fmt.Errorf("ldX %d < K %d", ldX, w.K)
	case ldDst < n1:
		return fmt.Errorf("ldDst %d < column end %d", ldDst, n1)
	case m > 0 && len(x) < (m-1)*ldX+w.K:
		return fmt.Errorf("x has %d values, %d rows of K %d at stride %d need %d", len(x), m, w.K, ldX, (m-1)*ldX+w.K)
	case m > 0 && n1 > n0 && len(dst) < (m-1)*ldDst+n1:
		return fmt.Errorf("dst has %d values, %d rows to column %d at stride %d need %d", len(dst), m, n1, ldDst, (m-1)*ldDst+n1)
	}
	return nil
}

// bf16Dot selects the VDPBF16PS path for bf16 weights (see SetBF16DotProducts).
var bf16Dot atomic.Bool

func init() {
	if os.Getenv("KERNELS_BF16_DOT") == "1" {
		bf16Dot.Store(true)
	}
}

// SetBF16DotProducts chooses how bf16 weights are multiplied. Off (the default): activations
// stay f32 and the bf16 weights are widened to f32 in registers, so results equal an f32 GEMM on
// the widened weights. On: activations are rounded to bf16 (nearest even) once per call and
// multiplied with VDPBF16PS, about twice the FLOP rate, at bf16 precision of the activations
// (relative error up to 2⁻⁹ per activation). It reports whether the dot-product path is now in
// use: false when the CPU has no AVX512_BF16 or the build is purego. The environment variable
// KERNELS_BF16_DOT=1 turns it on at start-up. Safe for concurrent use; calls in flight keep the
// mode they started with.
func SetBF16DotProducts(on bool) bool {
	bf16Dot.Store(on)
	return on && dotAvailable()
}

// Implementation names the GEMM implementation in use (for /v1/status and benchmarks):
// "avx512-bf16dot", "avx512", "avx2" or "generic".
func Implementation() string {
	switch isa := activeISA(); {
	case isa >= isaAVX512BF16 && bf16Dot.Load():
		return "avx512-bf16dot"
	case isa >= isaAVX512:
		return "avx512"
	case isa == isaAVX2:
		return "avx2"
	}
	return "generic"
}

// isaLevel orders the instruction sets the kernels can use, least capable first.
type isaLevel int

const (
	isaGeneric isaLevel = iota
	isaAVX2
	isaAVX512
	isaAVX512BF16
)

func (l isaLevel) String() string {
	return [...]string{"generic", "avx2", "avx512", "avx512bf16"}[l]
}

// dotAvailable reports whether the VDPBF16PS path can run.
func dotAvailable() bool { return activeISA() >= isaAVX512BF16 }
