//go:build !amd64 || purego

package kernels

// Without assembly the weights are not packed and every product runs the reference.
const packWeights = false

func gemmRowsImpl(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int, tileM int, _ *Weight) {
	gemmRowsGeneric(dst, ldDst, x, ldX, m, w, n0, n1)
}

func linearImpl(dst, x []float32, m int, w *Weight, t int) { linearGeneric(dst, x, m, w, t) }

// rowGranule: the reference computes exactly the rows asked for.
func rowGranule(*Weight, int) int { return 1 }

// passRows: the reference reads the weight once per row; no row blocking to match.
func passRows(*Weight) int { return 0 }

// peakRun has no FMA chains to run: the peak reads 0.
func peakRun(isaLevel, bool, int) (flopsPerIter float64) { return 0 }
