package costmodel

import (
	"math"
	"slices"
)

// Level shifts. Huber weights make the learner robust to an outlier — a GC pause, a noisy
// neighbour — but for the same reason blind to a node that has become 3× or 10× slower (a
// throttled device, a stolen core) or faster: every sample of the new level looks like an outlier
// and moves the estimate by a bounded amount, so the proxy kept pricing a slowed node at its old
// speed and routing to it. A level shift is told from outliers by persistence: shiftRun samples in
// a row off by more than shiftRatio in the same direction, from shiftRun distinct forward passes
// where the samples name theirs (ObservePass). Then every coefficient is scaled by their
// geometric-mean ratio (the node's speed changed, not the shape of its costs) and the learner's
// confidence is reset, so that it refines from the new level.
//
// The batches of one merged pass share its time (the node splits it among them), so one stall
// of the pass makes all of them equally slow: one piece of evidence, counted once in the run and
// learned from once. The run remembers every pass in it, not only the last, because a node's
// replies reach the learner in the order their calls take its lock, which may interleave two
// passes' batches. A sample that names no pass (0: an older node, another kind of server, a
// batch that ran alone) is a pass of its own.
const (
	shiftRatio = 1.5
	shiftRun   = 3
)

// shiftSample is one sample of a level-shift run: its ratio of measured to predicted time and the
// pass it ran in (0: its own).
type shiftSample struct {
	ratio float64
	pass  uint64
}

// levelShift records one sample (predicted and measured, relative to the basis) and reports true
// when the sample is consumed: it completes a shift, which rescales the estimate, or it repeats
// the evidence of a pass already in the run, which must not move the estimate again (learned
// from, the second and third batches of one 20× stalled pass took a fresh learner to 2.30× and
// 3.12× its speed, where the first alone takes it to 1.66×).
func (l *Learner) levelShift(pred, y float64) bool {
	if !(pred > 0) || !(y > 0) {
		return false
	}
	ratio := y / pred
	if ratio < shiftRatio && ratio > 1/shiftRatio {
		l.shift = l.shift[:0]
		return false
	}
	if len(l.shift) > 0 && (l.shift[0].ratio > 1) != (ratio > 1) {
		l.shift = l.shift[:0] // the other way: a new run starts here
	}
	if l.pass != 0 && slices.ContainsFunc(l.shift, func(s shiftSample) bool { return s.pass == l.pass }) {
		return true // another batch of a pass already counted: the same evidence
	}
	l.shift = append(l.shift, shiftSample{ratio, l.pass})
	if len(l.shift) < shiftRun {
		return false
	}
	logSum := 0.0
	for _, s := range l.shift {
		logSum += math.Log(s.ratio)
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
