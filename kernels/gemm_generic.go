package kernels

import "sync"

// gemmRowsGeneric is the pure-Go reference of gemmRows: one weight row at a time (widened to
// f32 for bf16, which is exact), a plain f32 dot product per output. It ignores tiling.
func gemmRowsGeneric(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int) {
	k := w.K
	row := make([]float32, k)
	for j := n0; j < n1; j++ {
		w.Row(row, j)
		for i := 0; i < m; i++ {
			xi := x[i*ldX : i*ldX+k]
			var s float32
			for kk, v := range row {
				s += xi[kk] * v
			}
			dst[i*ldDst+j] = s
		}
	}
}

// linearGeneric splits the output columns across t goroutines, each running the reference.
func linearGeneric(dst, x []float32, m int, w *Weight, t int) {
	n := w.N
	t = min(t, n)
	if t <= 1 {
		gemmRowsGeneric(dst, n, x, w.K, m, w, 0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + t - 1) / t
	for c0 := 0; c0 < n; c0 += chunk {
		c1 := min(c0+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			gemmRowsGeneric(dst, n, x, w.K, m, w, c0, c1)
		}()
	}
	wg.Wait()
}
