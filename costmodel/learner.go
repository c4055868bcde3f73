package costmodel

import (
	"math"
)

// Learner estimates one node's cost coefficients online from the (features, compute seconds) of
// each batch it answers.
//
// Method: recursive least squares with exponential forgetting and Huber weights, on multipliers
// of the prior. The model is y = Σ_k m_k·basis_k·x_k with basis = the prior, so the unknowns m
// start at 1 and share one scale (the raw features span 1 to 1e8). A prior coefficient of 0 (a
// non-negative fit may return one) gets a basis of a tenth of the prior's reference batch time
// spread over that feature, and its multiplier starts at 0: the estimate starts at the prior and
// the coefficient can still be learned if the node shows it. Each sample is divided by its prior prediction, making
// residuals relative: node timing noise is multiplicative, and a 2 ms jitter on a 1 ms batch must
// not weigh like one on a 1 s batch. A sample whose relative residual r exceeds k·s (k = 1.345,
// s a running mean of |r|) gets weight k·s/|r| (Huber), so a GC pause or a noisy neighbour moves
// the estimate by a bounded amount. Forgetting λ (default 0.99: ~100 batches) tracks drift, and
// leaks back toward the prior (stabilised forgetting), so that directions the data never excites
// stay at the prior while the features stop varying, instead of P winding up. Multipliers are kept at or above 1e-3 (0 for a zero prior) so
// predictions stay positive, and at most 1e3; a level shift moves the basis instead (shift.go).
//
// Not safe for concurrent use: the owner guards it (the proxy per node, the scorer node for itself).
type Learner struct {
	basis  [3]float64 // scale of each coefficient: the prior's, or a stand-in for a zero prior
	origin [3]float64 // the basis it started from: scaleBasis keeps basis within 1e±9 of it
	lo     [3]float64 // lower clamp of each multiplier
	lambda float64
	m      [3]float64
	m0     [3]float64 // the prior's multipliers
	p      [3][3]float64
	scale  float64 // running mean of |relative residual|
	n      int
	// shift detects a change of level (shift.go): the last few samples' ratios of measured to
	// predicted time, while they all point the same way, with their passes.
	shift []shiftSample
	// pass is the pass of the sample being observed (ObservePass; 0: its own).
	pass uint64
}

const (
	huberK = 1.345
	pInit  = 100.0 // prior variance of each multiplier: weak, so small features are still learned
)

// NewLearner starts a learner at prior with forgetting factor lambda in (0, 1].
func NewLearner(prior Coeffs, lambda float64) *Learner {
	l := &Learner{lambda: lambda, scale: 0.5}
	ref := prior.Seconds(RefFeatures)
	if !(ref > 0) {
		ref = 1 // all zero (Config.Validate rejects it): learn from scratch
	}
	refX := [3]float64{RefFeatures.Tokens, RefFeatures.Pairs, RefFeatures.Batches}
	for i, c := range [3]float64{prior.A, prior.B, prior.C} {
		l.basis[i], l.m[i], l.lo[i] = c, 1, 1e-3
		if !(c > 0) {
			l.basis[i], l.m[i], l.lo[i] = 0.1*ref/refX[i], 0, 0
		}
		l.p[i][i] = pInit
	}
	l.origin = l.basis
	l.m0 = l.m
	return l
}

// Coeffs is the current estimate.
func (l *Learner) Coeffs() Coeffs {
	return Coeffs{A: l.basis[0] * l.m[0], B: l.basis[1] * l.m[1], C: l.basis[2] * l.m[2]}
}

// ObservePass is Observe for a batch that ran in forward pass pass (0: a pass of its own): the
// batches of one pass count as one piece of evidence of a level shift, and an outlier pass is
// learned from once (shift.go). A node splits a merged pass's time among its batches, so one
// stalled pass of three gave three slow replies in a row — a "shift" that made the node 20×
// dearer.
func (l *Learner) ObservePass(f Features, y float64, pass uint64) {
	l.pass = pass
	l.Observe(f, y)
	l.pass = 0
}

// Observe learns from one batch that took y seconds of compute.
func (l *Learner) Observe(f Features, y float64) {
	x := [3]float64{l.basis[0] * f.Tokens, l.basis[1] * f.Pairs, l.basis[2] * f.Batches}
	y0 := x[0] + x[1] + x[2]
	if !(y0 > 0) || !(y >= 0) || math.IsInf(y, 0) {
		return
	}
	for i := range x {
		x[i] /= y0
	}
	y /= y0
	if math.IsInf(y, 0) { // an absurd time (1e308 s) over a small prediction: no information
		return
	}
	pred := l.m[0]*x[0] + l.m[1]*x[1] + l.m[2]*x[2]
	if l.levelShift(pred, y) {
		return
	}
	r := y - pred
	w := 1.0
	if a := math.Abs(r); a > huberK*l.scale {
		w = huberK * l.scale / a
	}
	l.scale = 0.9*l.scale + 0.1*math.Min(math.Abs(r), 10*l.scale)
	l.scale = math.Max(l.scale, 0.02) // never down-weight residuals under ~3%

	saved := *l // an update that is not finite is undone (NaN would stay forever)
	defer func() {
		for i := range 3 {
			if c := l.basis[i] * l.m[i]; math.IsNaN(c) || math.IsInf(c, 0) || math.IsNaN(l.p[i][i]) {
				shift := l.shift
				*l = saved
				l.shift = shift
				return
			}
		}
	}()
	// Huber RLS: the residual is clipped (ψ(r) = w·r), so one sample moves the prediction of its
	// own shape by at most k·s whatever P is.
	r *= w
	var px [3]float64
	for i := range 3 {
		for j := range 3 {
			px[i] += l.p[i][j] * x[j]
		}
	}
	den := l.lambda
	for i := range 3 {
		den += x[i] * px[i]
	}
	for i := range 3 {
		l.m[i] += px[i] / den * r
	}
	for i := range 3 {
		for j := range 3 {
			l.p[i][j] = (l.p[i][j] - px[i]*px[j]/den) / l.lambda
		}
	}
	// Stabilised forgetting: information (1−λ)·1e-6 toward the prior is added every sample, so
	// directions the data does not excite (one batch shape, reply after reply) stay at the prior
	// instead of P winding up and noise random-walking them (a per-coordinate cap on P, not
	// aligned with its eigenvectors, let them drift: A to its clamp, C ×16). A larger amount
	// biases what the data does determine.
	l.regularise()
	l.bound()
	l.n++
}

// maxMultiplier is how far a multiplier may grow from its basis.
const maxMultiplier = 1e3

// bound keeps each multiplier within [its lower clamp, maxMultiplier]: predictions stay positive
// and noise in a direction the data barely excites (the quadratic term, on short prompts) cannot
// run away. A change of the node's level moves the basis instead (levelShift, scaleBasis).
func (l *Learner) bound() {
	for i := range 3 {
		l.m[i] = math.Min(math.Max(l.lo[i], l.m[i]), maxMultiplier)
	}
}

// scaleBasis multiplies coefficient i's basis by g, held within 1e±9 of where it started (the
// multipliers, the prior's among them, are relative to it and stay): the node's level changed.
func (l *Learner) scaleBasis(i int, g float64) {
	b := l.basis[i] * g
	if o := l.origin[i]; o > 0 {
		b = math.Min(math.Max(b, 1e-9*o), 1e9*o)
	}
	if b > 0 && !math.IsInf(b, 0) {
		l.basis[i] = b
	}
}

// regularise adds information eps·I centred on the prior multipliers: P ← (P⁻¹ + eps·I)⁻¹,
// m ← P·(P⁻¹·m + eps·m0). Closed-form 3×3 inverses: it runs on every reply, under the node's lock.
func (l *Learner) regularise() {
	eps := (1 - l.lambda) * 1e-6
	if eps <= 0 {
		return
	}
	inv, ok := inverse3(l.p)
	if !ok {
		return
	}
	var a [3][3]float64
	var b [3]float64
	for r := range 3 {
		for c := range 3 {
			a[r][c] = (inv[r][c] + inv[c][r]) / 2
			b[r] += a[r][c] * l.m[c]
		}
		a[r][r] += eps
		b[r] += eps * l.m0[r]
	}
	p, ok := inverse3(a)
	if !ok {
		return
	}
	for r := range 3 {
		l.m[r] = p[r][0]*b[0] + p[r][1]*b[1] + p[r][2]*b[2]
		for c := range 3 {
			l.p[r][c] = (p[r][c] + p[c][r]) / 2
		}
	}
}

// inverse3 is a's inverse by its adjugate, or false when a is singular (or not finite).
func inverse3(a [3][3]float64) (inv [3][3]float64, ok bool) {
	c00 := a[1][1]*a[2][2] - a[1][2]*a[2][1]
	c01 := a[1][2]*a[2][0] - a[1][0]*a[2][2]
	c02 := a[1][0]*a[2][1] - a[1][1]*a[2][0]
	det := a[0][0]*c00 + a[0][1]*c01 + a[0][2]*c02
	if det == 0 || math.IsNaN(det) || math.IsInf(det, 0) {
		return inv, false
	}
	d := 1 / det
	inv[0][0], inv[1][0], inv[2][0] = c00*d, c01*d, c02*d
	inv[0][1] = (a[0][2]*a[2][1] - a[0][1]*a[2][2]) * d
	inv[1][1] = (a[0][0]*a[2][2] - a[0][2]*a[2][0]) * d
	inv[2][1] = (a[0][1]*a[2][0] - a[0][0]*a[2][1]) * d
	inv[0][2] = (a[0][1]*a[1][2] - a[0][2]*a[1][1]) * d
	inv[1][2] = (a[0][2]*a[1][0] - a[0][0]*a[1][2]) * d
	inv[2][2] = (a[0][0]*a[1][1] - a[0][1]*a[1][0]) * d
	return inv, true
}

// Samples is how many batches the learner has observed.
func (l *Learner) Samples() int { return l.n }

// RefFeatures is the reference batch used to express a node's speed as one number: a 64-token
// prefix and 16 items of 256 tokens.
var RefFeatures = BatchFeatures(64, []int{256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256}, false)
