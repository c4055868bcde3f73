package kernels

// gemmRows is the tile-level entry point of the dense GEMM, shared by Linear and the grouped
// expert GEMM. It computes, on the calling goroutine only,
//
//	dst[i*ldDst + j] = Σ_k x[i*ldX + k] · W[j, k]   for i in [0, m), j in [n0, n1)
//
// tileM is the height of the row tile the caller wants the kernel to compute in: rows are
// processed in tiles of tileM, and when padRows is true the last tile is computed whole (rows
// m..ceil(m/tileM)·tileM-1 of x and dst must then exist; they are computed, as a GPU kernel
// computes padding rows). tileM 0 lets the implementation pick. The generic version ignores tiling.
func gemmRows(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int, tileM int, padRows bool) {
	k := w.K
	if padRows && tileM > 0 {
		m = (m + tileM - 1) / tileM * tileM
	}
	row := make([]float32, k)
	for j := n0; j < n1; j++ {
		w.Row(row, j)
		for i := 0; i < m; i++ {
			dst[i*ldDst+j] = dotF32(x[i*ldX:i*ldX+k], row)
		}
	}
}
