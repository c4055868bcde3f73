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
// the estimate by a bounded amount. Forgetting λ (default 0.99: ~100 batches) tracks drift; P is
// capped so that it does not blow up while the features stop varying. Directions the data never
// excites stay at the prior. Multipliers are clamped to [1e-3, 1e3] (to [0, 1e3] for a zero
// prior) so predictions stay positive.
//
// Not safe for concurrent use: the owner guards it (the proxy per node, the scorer node for itself).
type Learner struct {
	basis  [3]float64 // scale of each coefficient: the prior's, or a stand-in for a zero prior
	lo     [3]float64 // lower clamp of each multiplier
	lambda float64
	m      [3]float64
	p      [3][3]float64
	scale  float64 // running mean of |relative residual|
	n      int
	// shift detects a change of level (shift.go): the last few samples' ratios of measured to
	// predicted time, while they all point the same way.
	shift []float64
}

const (
	huberK   = 1.345
	pInit    = 100.0 // prior variance of each multiplier: weak, so small features are still learned
	pMaxDiag = 1e4
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
	return l
}

// Coeffs is the current estimate.
func (l *Learner) Coeffs() Coeffs {
	return Coeffs{A: l.basis[0] * l.m[0], B: l.basis[1] * l.m[1], C: l.basis[2] * l.m[2]}
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

	// Weighted RLS: K = P·x / (λ/w + xᵀ·P·x); m += K·r; P = (P − K·xᵀ·P) / λ.
	var px [3]float64
	for i := range 3 {
		for j := range 3 {
			px[i] += l.p[i][j] * x[j]
		}
	}
	den := l.lambda / w
	for i := range 3 {
		den += x[i] * px[i]
	}
	var k [3]float64
	for i := range 3 {
		k[i] = px[i] / den
		l.m[i] = math.Min(1e3, math.Max(l.lo[i], l.m[i]+k[i]*r))
	}
	for i := range 3 {
		for j := range 3 {
			l.p[i][j] = (l.p[i][j] - k[i]*px[j]) / l.lambda
		}
	}
	for i := range 3 {
		if l.p[i][i] > pMaxDiag {
			s := pMaxDiag / l.p[i][i]
			for j := range 3 {
				l.p[i][j] *= math.Sqrt(s)
				l.p[j][i] *= math.Sqrt(s)
			}
		}
	}
	l.n++
}

// Samples is how many batches the learner has observed.
func (l *Learner) Samples() int { return l.n }

// RefFeatures is the reference batch used to express a node's speed as one number: a 64-token
// prefix and 16 items of 256 tokens.
var RefFeatures = BatchFeatures(64, []int{256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256}, false)
