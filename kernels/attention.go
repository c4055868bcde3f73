package kernels

import "sync"

// PrefixAttention describes causal self-attention for a group of sequences that all continue one
// shared prefix. Every suffix token attends to all PrefixLen prefix positions and, causally, to the
// tokens of its own sequence up to itself; never to another sequence. Grouped-query attention:
// query head h reads KV head h / (Heads/KVHeads).
type PrefixAttention struct {
	Heads, KVHeads, HeadDim int
	// Scale multiplies q·k (usually 1/sqrt(HeadDim)).
	Scale float32
	// PrefixK and PrefixV are [PrefixLen][KVHeads·HeadDim], RoPE already applied to K.
	PrefixK, PrefixV []float32
	PrefixLen        int
	// Q is [T][Heads·HeadDim]; K and V are [T][KVHeads·HeadDim]: the suffix tokens of all sequences,
	// packed one sequence after another.
	Q, K, V []float32
	// SeqStarts has one entry per sequence plus a final T: sequence s is rows
	// [SeqStarts[s], SeqStarts[s+1]) of Q, K and V.
	SeqStarts []int
}

// Attention writes the attention output [T][Heads·HeadDim] for a into out.
func Attention(out []float32, a *PrefixAttention) {
	nSeq := len(a.SeqStarts) - 1
	type job struct{ s, h int }
	jobs := make(chan job, nSeq*a.Heads)
	for s := 0; s < nSeq; s++ {
		for h := 0; h < a.Heads; h++ {
			jobs <- job{s, h}
		}
	}
	close(jobs)
	var wg sync.WaitGroup
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scores []float32
			for j := range jobs {
				scores = attendHead(out, a, j.s, j.h, scores)
			}
		}()
	}
	wg.Wait()
}

// attendHead is the reference: explicit scores, a stable softmax, then the weighted sum of V.
func attendHead(out []float32, a *PrefixAttention, s, h int, scores []float32) []float32 {
	hd := a.HeadDim
	kvh := h / (a.Heads / a.KVHeads)
	qs, kvs := a.Heads*hd, a.KVHeads*hd
	t0, t1 := a.SeqStarts[s], a.SeqStarts[s+1]
	for t := t0; t < t1; t++ {
		q := a.Q[t*qs+h*hd : t*qs+(h+1)*hd]
		n := a.PrefixLen + (t - t0) + 1
		if cap(scores) < n {
			scores = make([]float32, n)
		}
		sc := scores[:n]
		for p := 0; p < a.PrefixLen; p++ {
			sc[p] = dotF32(q, a.PrefixK[p*kvs+kvh*hd:p*kvs+(kvh+1)*hd]) * a.Scale
		}
		for u := t0; u <= t; u++ {
			sc[a.PrefixLen+u-t0] = dotF32(q, a.K[u*kvs+kvh*hd:u*kvs+(kvh+1)*hd]) * a.Scale
		}
		Softmax(sc)
		o := out[t*qs+h*hd : t*qs+(h+1)*hd]
		clear(o)
		for p := 0; p < a.PrefixLen; p++ {
			axpy(o, sc[p], a.PrefixV[p*kvs+kvh*hd:p*kvs+(kvh+1)*hd])
		}
		for u := t0; u <= t; u++ {
			axpy(o, sc[a.PrefixLen+u-t0], a.V[u*kvs+kvh*hd:u*kvs+(kvh+1)*hd])
		}
	}
	return scores
}

func axpy(dst []float32, a float32, x []float32) {
	for i, v := range x {
		dst[i] += a * v
	}
}
