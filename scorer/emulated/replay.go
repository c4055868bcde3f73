package emulated

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/relevance-scoring/relevance/costmodel"
)

// Emulation modes (Engine.Emulation, and the Kernels field of Info, which /v1/status shows).
const (
	// ModeSamples replays the measured shapes of a samples profile (costmodel.Profile.Measured).
	ModeSamples = "samples"
	// ModeFormula sleeps for the profile's fitted formula times log-normal noise.
	ModeFormula = "formula"
)

// replayK is how many nearest measured shapes a pass's time is interpolated from.
const replayK = 4

// shape is what the replay matches a pass on.
type shape struct {
	prefix   float64 // prefix tokens (computed or reused), mean over the pass's groups
	meanItem float64 // mean item tokens
	items    float64 // item count
	groups   float64 // groups merged into the pass
	cached   float64 // share of the groups whose prefix was reused (0 … 1)
	features costmodel.Features
}

// vec is a shape's point in the normalised log-feature space.
func (s shape) vec(r *replayer) [5]float64 {
	v := [5]float64{math.Log1p(s.prefix), math.Log1p(s.meanItem), math.Log(max(1, s.items)), s.cached, math.Log(max(1, s.groups))}
	for i := range v {
		v[i] = (v[i] - r.mean[i]) / r.scale[i]
	}
	return v
}

type replayShape struct {
	v       [5]float64
	predict float64   // the formula's seconds for the measured shape
	logMean float64   // mean of log(seconds) over repetitions
	resid   []float64 // log(seconds) − logMean, one per repetition
}

// replayer draws pass times from a profile's measured shapes.
//
// A pass is matched on (log prefix tokens, log mean item tokens, log item count, prefix cached,
// log groups), each log feature centred and divided by its standard deviation over the measured
// shapes (a constant feature weighs nothing; cached is a 0/1 feature, so a cached pass prefers
// cached measurements when there are any). Its centre time is the weighted geometric mean over
// the K nearest shapes i of exp(logMean_i)·formula(pass)/formula(shape_i), weights 1/d_i²: the
// neighbours' measured times, each carried to the pass's shape by the ratio of the formula's
// predictions, so shapes between samples scale smoothly and the measured curvature (what the
// formula gets wrong) is kept near the samples. A pass at distance 0 from a measured shape uses
// that shape alone. The spread is a residual log(seconds/mean) of one repetition of one
// neighbour, drawn with probability ∝ its weight: the measured distribution, not a parametric
// noise. A shape equal to a measured one thus replays exactly its repetitions' times. (A shape
// measured only once borrows the pooled spread: see newReplayer.)
type replayer struct {
	coeffs costmodel.Coeffs
	shapes []replayShape
	mean   [5]float64
	scale  [5]float64
}

func newReplayer(p *costmodel.Profile) *replayer {
	r := &replayer{coeffs: p.Coeffs}
	raw := make([]shape, len(p.Measured))
	for i, m := range p.Measured {
		raw[i] = shape{prefix: float64(m.PrefixTokens), meanItem: m.MeanItemTokens(), items: float64(len(m.ItemTokens)),
			groups: float64(m.NumGroups())}
		if m.PrefixCached {
			raw[i].cached = 1
		}
	}
	// Centre and scale the log features (cached stays 0/1).
	for i := range r.scale {
		r.scale[i] = 1
	}
	ident := replayer{scale: r.scale}
	pts := make([][5]float64, len(raw))
	for i, s := range raw {
		pts[i] = s.vec(&ident)
	}
	for d := range 5 {
		if d == 3 {
			continue
		}
		var sum, sq float64
		for _, v := range pts {
			sum += v[d]
		}
		mu := sum / float64(len(pts))
		for _, v := range pts {
			sq += (v[d] - mu) * (v[d] - mu)
		}
		sd := math.Sqrt(sq / float64(len(pts)))
		r.mean[d] = mu
		if sd > 1e-9 {
			r.scale[d] = sd
		} else {
			r.scale[d] = math.Inf(1) // constant over the samples: carries no distance
		}
	}
	var pooled, fitResid []float64 // within-shape residuals of repeated shapes; log(measured/formula)
	for i, m := range p.Measured {
		var lm float64
		for _, s := range m.Seconds {
			lm += math.Log(s)
		}
		lm /= float64(len(m.Seconds))
		rs := replayShape{v: raw[i].vec(r), predict: r.coeffs.Seconds(m.Features()), logMean: lm}
		for _, s := range m.Seconds {
			if len(m.Seconds) > 1 {
				rs.resid = append(rs.resid, math.Log(s)-lm)
			}
			if rs.predict > 0 {
				fitResid = append(fitResid, math.Log(s/rs.predict))
			}
		}
		pooled = append(pooled, rs.resid...)
		r.shapes = append(r.shapes, rs)
	}
	// A shape measured once has no spread of its own: it borrows the pooled residuals of the
	// repeated shapes, or, when no shape was repeated, the residuals of every measurement
	// around the formula (centred): an upper bound on the noise, since it holds the formula's
	// misfit too.
	if len(pooled) == 0 && len(fitResid) > 0 {
		var mu float64
		for _, x := range fitResid {
			mu += x
		}
		mu /= float64(len(fitResid))
		for _, x := range fitResid {
			pooled = append(pooled, x-mu)
		}
	}
	if len(pooled) == 0 {
		pooled = []float64{0}
	}
	for i := range r.shapes {
		if len(r.shapes[i].resid) == 0 {
			r.shapes[i].resid = pooled
		}
	}
	return r
}

type neighbour struct {
	i int
	d float64
	w float64
}

// seconds draws one pass's time from rng (the engine's seeded source).
func (r *replayer) seconds(s shape, rng *rand.Rand) float64 {
	v := s.vec(r)
	nb := make([]neighbour, len(r.shapes))
	for i, m := range r.shapes {
		var d2 float64
		for k := range v {
			x := v[k] - m.v[k]
			if !math.IsNaN(x) { // ±Inf/±Inf on a constant feature: no distance
				d2 += x * x
			}
		}
		nb[i] = neighbour{i: i, d: math.Sqrt(d2)}
	}
	sort.SliceStable(nb, func(a, b int) bool { return nb[a].d < nb[b].d })
	if nb[0].d < 1e-9 {
		// Exact shape: that shape (and any duplicate of it) alone.
		k := 1
		for k < len(nb) && nb[k].d < 1e-9 {
			k++
		}
		nb = nb[:k]
		for i := range nb {
			nb[i].w = 1
		}
	} else {
		nb = nb[:min(replayK, len(nb))]
		for i := range nb {
			nb[i].w = 1 / (nb[i].d * nb[i].d)
		}
	}
	want := r.coeffs.Seconds(s.features)
	var sw, sl float64
	for _, n := range nb {
		m := r.shapes[n.i]
		l := m.logMean
		if want > 0 && m.predict > 0 {
			l += math.Log(want / m.predict)
		}
		sw += n.w
		sl += n.w * l
	}
	centre := sl / sw
	// The spread: one repetition of one neighbour, by weight.
	u := rng.Float64() * sw
	pick := nb[len(nb)-1].i
	for _, n := range nb {
		if u < n.w {
			pick = n.i
			break
		}
		u -= n.w
	}
	res := r.shapes[pick].resid
	return math.Exp(centre + res[rng.IntN(len(res))])
}
