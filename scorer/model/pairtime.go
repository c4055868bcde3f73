package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/relevance-scoring/relevance/kernels"
)

// Shape of PairSeconds's measurement: one item of pairItemTokens tokens after a prefix of
// pairPrefixTokens, the shape of a long document, where attention is a large share of a pass.
const (
	pairPrefixTokens = 64
	pairItemTokens   = 512
	// The fastest of five: on `make run` the two nodes time it while the other calibrates, and
	// the fastest of three still read 3.4e-7 on one node and 5.7e-7 on the other.
	pairRepeats = 5
)

// PairSeconds measures the cost model's b for this model on this machine: the seconds of
// attention one (query row, key) pair costs a whole pass, from the attention kernel timed alone
// on the model's heads (one layer's call, on a synthetic long item, the fastest of five after
// a warm-up; wall time on the kernels' threads, as passes are timed) times the layers. A
// start-up calibration can afford only short passes, where attention is a few per cent of the
// time and noise decides a fitted b (scorer/node's calibrate uses this instead; see
// costmodel.FitWithB). About 0.1 s on the small preset.
func (e *Engine) PairSeconds(ctx context.Context) (float64, error) {
	cfg := e.model.Config
	h, kvh, hd := cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim
	if h <= 0 || kvh <= 0 || hd <= 0 || cfg.NumHiddenLayers <= 0 {
		return 0, fmt.Errorf("pair seconds: model has %d heads, %d KV heads of %d, %d layers", h, kvh, hd, cfg.NumHiddenLayers)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	P, L := pairPrefixTokens, pairItemTokens
	a := &kernels.PrefixAttention{
		Heads: h, KVHeads: kvh, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd))),
		PrefixK: fill(P * kvh * hd), PrefixV: fill(P * kvh * hd), PrefixLen: P,
		Q: fill(L * h * hd), K: fill(L * kvh * hd), V: fill(L * kvh * hd),
		SeqStarts: []int{0, L},
	}
	out := make([]float32, L*h*hd)
	kernels.Attention(out, a) // warm-up: pooled buffers grown, pages touched
	best := time.Duration(math.MaxInt64)
	for range pairRepeats {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		start := time.Now()
		kernels.Attention(out, a)
		best = min(best, time.Since(start))
	}
	pairs := float64(L) * (float64(P) + float64(L)/2) // costmodel.ItemFeatures(P, L).Pairs
	return best.Seconds() / pairs * float64(cfg.NumHiddenLayers), nil
}
