package costmodel

import (
	"errors"
	"fmt"
	"math"
)

// Sample is one measured piece of work: its features and the seconds it took.
type Sample struct {
	Features Features
	Seconds  float64
}

// FitResult is a least-squares fit of the coefficients to samples.
type FitResult struct {
	Coeffs Coeffs
	// Sigma is the RMS of log(measured/predicted): the σ of a multiplicative log-normal noise.
	Sigma float64
	// R2 is the coefficient of determination on seconds.
	R2 float64
	// MaxRelErr is the largest |measured/predicted − 1|.
	MaxRelErr float64
}

// Fit fits non-negative coefficients minimising the relative squared error
// Σ ((predicted − measured)/measured)²: node timing noise is multiplicative, so a millisecond off
// a 10 ms batch must weigh like 100 ms off a second. The constraint is exact: with three
// coefficients every active set is solved and the best feasible one kept. It needs at least 4
// samples, each with a positive time, and a design that separates the terms it keeps (a term
// whose feature never varies apart from the others gets 0 or an arbitrary split).
func Fit(samples []Sample) (FitResult, error) { return fit(samples, -1) }

// FitWithB is Fit with B fixed at b (≥ 0) and A and C fitted to what is left of each sample's
// time. b comes from a measurement of its own (the engine's attention timed alone): in passes
// short enough for a start-up calibration the attended pairs are a tenth of the time or less,
// within the timing noise, and Fit's b came out 7× under the attention's measured cost, which
// priced a document at the prompt limit at less than half its time.
func FitWithB(samples []Sample, b float64) (FitResult, error) {
	if !(b >= 0) || math.IsInf(b, 0) {
		return FitResult{}, fmt.Errorf("fit: fixed b must be finite and ≥ 0, got %v", b)
	}
	return fit(samples, b)
}

// fit fits every coefficient, or A and C with B fixed at fixedB when fixedB ≥ 0.
func fit(samples []Sample, fixedB float64) (FitResult, error) {
	if len(samples) < 4 {
		return FitResult{}, fmt.Errorf("fit: need at least 4 samples, got %d", len(samples))
	}
	x := make([][3]float64, len(samples))
	y := make([]float64, len(samples))
	for i, s := range samples {
		f := s.Features
		x[i] = [3]float64{f.Tokens, f.Pairs, f.Batches}
		y[i] = s.Seconds
		if !(y[i] > 0) || math.IsInf(y[i], 0) {
			return FitResult{}, fmt.Errorf("fit: sample %d has time %v, want a finite value > 0", i, y[i])
		}
	}
	// The target: the whole time, or what is left of it after the fixed b's share.
	target := y
	if fixedB >= 0 {
		target = make([]float64, len(y))
		for i := range y {
			target[i] = y[i] - fixedB*x[i][1]
		}
	}
	best, bestErr := [3]float64{}, math.Inf(1)
	for mask := 1; mask < 8; mask++ {
		if fixedB >= 0 && mask&2 != 0 {
			continue // b is not fitted
		}
		var idx []int
		for j := range 3 {
			if mask&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		coef, ok := weightedLS(x, y, target, idx)
		if !ok {
			continue
		}
		feasible := true
		for _, c := range coef {
			if !(c >= 0) {
				feasible = false
			}
		}
		if !feasible {
			continue
		}
		var full [3]float64
		for k, j := range idx {
			full[j] = coef[k]
		}
		if fixedB >= 0 {
			full[1] = fixedB
		}
		if e := relSSE(x, y, full); e < bestErr {
			best, bestErr = full, e
		}
	}
	if math.IsInf(bestErr, 1) {
		return FitResult{}, errors.New("fit: no feasible solution (degenerate design)")
	}
	f := FitResult{Coeffs: Coeffs{A: best[0], B: best[1], C: best[2]}}
	var mean, ssTot, ssRes, logSq float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	for i := range y {
		p := dot(x[i], best)
		ssTot += (y[i] - mean) * (y[i] - mean)
		ssRes += (y[i] - p) * (y[i] - p)
		if p > 0 {
			l := math.Log(y[i] / p)
			logSq += l * l
			f.MaxRelErr = math.Max(f.MaxRelErr, math.Abs(y[i]/p-1))
		}
	}
	f.Sigma = math.Sqrt(logSq / float64(len(y)))
	if ssTot > 0 {
		f.R2 = 1 - ssRes/ssTot
	}
	return f, nil
}

func dot(a, b [3]float64) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }

func relSSE(x [][3]float64, y []float64, c [3]float64) float64 {
	e := 0.0
	for i := range y {
		r := (dot(x[i], c) - y[i]) / y[i]
		e += r * r
	}
	return e
}

// weightedLS solves min Σ ((x_i·c − t_i)/y_i)² over the columns idx by the normal equations,
// with columns scaled to unit norm first (tokens, pairs and batches differ by 10⁶). The target t
// is y, or y less a fixed term's share (FitWithB); the weights are the whole times either way.
func weightedLS(x [][3]float64, y, t []float64, idx []int) ([]float64, bool) {
	n := len(idx)
	scale := make([]float64, n)
	for k, j := range idx {
		s := 0.0
		for i := range y {
			v := x[i][j] / y[i]
			s += v * v
		}
		if s == 0 {
			return nil, false
		}
		scale[k] = math.Sqrt(s)
	}
	a := make([][]float64, n)
	b := make([]float64, n)
	for r := range n {
		a[r] = make([]float64, n)
		for i := range y {
			w := 1 / (y[i] * y[i])
			xr := x[i][idx[r]] / scale[r]
			b[r] += w * xr * t[i]
			for c := range n {
				a[r][c] += w * xr * x[i][idx[c]] / scale[c]
			}
		}
	}
	sol, ok := solve(a, b)
	if !ok {
		return nil, false
	}
	for k := range sol {
		sol[k] /= scale[k]
	}
	return sol, true
}

// solve is Gaussian elimination with partial pivoting; false when singular.
func solve(a [][]float64, b []float64) ([]float64, bool) {
	n := len(b)
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) < 1e-12 {
			return nil, false
		}
		a[col], a[p] = a[p], a[col]
		b[col], b[p] = b[p], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < n; c++ {
				a[r][c] -= f * a[col][c]
			}
			b[r] -= f * b[col]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for c := r + 1; c < n; c++ {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}
