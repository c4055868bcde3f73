package costmodel

import "math"

// Level shifts. Huber weights make the learner robust to an outlier — a GC pause, a noisy
// neighbour — but for the same reason blind to a node that has become 3× or 10× slower (a
// throttled device, a stolen core) or faster: every sample of the new level looks like an outlier
// and moves the estimate by a bounded amount, so the proxy kept pricing a slowed node at its old
// speed and routing to it. A level shift is told from outliers by persistence: shiftRun samples in
// a row off by more than shiftRatio in the same direction. Then every coefficient is scaled by
// their geometric-mean ratio (the node's speed changed, not the shape of its costs) and the
// learner's confidence is reset, so that it refines from the new level.
const (
	shiftRatio = 1.5
	shiftRun   = 3
)

// levelShift records one sample (predicted and measured, relative to the basis) and, when it
// completes a shift, rescales the estimate and reports true (the sample is then consumed).
func (l *Learner) levelShift(pred, y float64) bool {
	if !(pred > 0) || !(y > 0) {
		return false
	}
	ratio := y / pred
	if ratio < shiftRatio && ratio > 1/shiftRatio {
		l.shift = l.shift[:0]
		return false
	}
	if len(l.shift) > 0 && (l.shift[0] > 1) != (ratio > 1) {
		l.shift = l.shift[:0] // the other way: a new run starts here
	}
	if l.pass != 0 && len(l.shift) > 0 && l.pass == l.shiftPass {
		return false // another batch of the pass already counted: the same evidence
	}
	l.shift = append(l.shift, ratio)
	l.shiftPass = l.pass
	if len(l.shift) < shiftRun {
		return false
	}
	logSum := 0.0
	for _, r := range l.shift {
		logSum += math.Log(r)
	}
	g := math.Exp(logSum / float64(len(l.shift)))
	for i := range l.m {
		// The basis moves, not the multipliers: a node seeded 10⁴× too cheap or too dear is
		// learned to its level, where multipliers clamped at [1e-3, 1e3] of the seed left it
		// priced at 10× or a tenth of its time for good. The prior's multipliers move with it:
		// forgetting now pulls toward the new level.
		l.scaleBasis(i, g)
		for j := range l.p[i] {
			l.p[i][j] = 0
		}
		l.p[i][i] = pInit
	}
	l.scale = 0.5
	l.shift = l.shift[:0]
	l.n++
	return true
}
