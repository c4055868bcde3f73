package kernels

// linear is the body of Linear (ops.go): dst[m×N] = x[m×K]·Wᵀ on up to Threads() goroutines.
// It panics with a message naming the problem when the slices are too short for the shapes:
// the kernels are assembly and must never run past a slice.
func linear(dst, x []float32, m int, w *Weight) {
	if w == nil {
		panic("kernels: Linear: nil weight")
	}
	if err := checkGemm(dst, w.N, x, w.K, m, w, 0, w.N); err != nil {
		panic("kernels: Linear: " + err.Error())
	}
	if m == 0 || w.N == 0 {
		return
	}
	linearImpl(dst, x, m, w, Threads())
}
