package kernels

import "sync"

// attentionReference is the plain attention the fast path is tested against: per (sequence, head),
// explicit scores, a stable softmax, then the weighted sum of V.
func attentionReference(out []float32, a *PrefixAttention) {
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
				scores = attendHeadReference(out, a, j.s, j.h, scores)
			}
		}()
	}
	wg.Wait()
}

// attendHeadReference computes one (sequence, head) of attentionReference.
func attendHeadReference(out []float32, a *PrefixAttention, s, h int, scores []float32) []float32 {
	hd := a.HeadDim
	kvh := h / (a.Heads / a.KVHeads)
	qs, kvs := a.Heads*hd, a.KVHeads*hd
	t0, t1 := a.SeqStarts[s], a.SeqStarts[s+1]
	// The keys before the sequence's own: the prefix's or the past's (a call has one or the
	// other; for the plain softmax here they are the same thing).
	preK, preV, pre := a.PrefixK, a.PrefixV, a.PrefixLen
	if a.PastLen > 0 {
		preK, preV, pre = a.PastK, a.PastV, a.PastLen
	}
	for t := t0; t < t1; t++ {
		q := a.Q[t*qs+h*hd : t*qs+(h+1)*hd]
		n := pre + (t - t0) + 1
		if cap(scores) < n {
			scores = make([]float32, n)
		}
		sc := scores[:n]
		for p := 0; p < pre; p++ {
			sc[p] = dotF32(q, preK[p*kvs+kvh*hd:p*kvs+(kvh+1)*hd]) * a.Scale
		}
		for u := t0; u <= t; u++ {
			sc[pre+u-t0] = dotF32(q, a.K[u*kvs+kvh*hd:u*kvs+(kvh+1)*hd]) * a.Scale
		}
		softmaxGeneric(sc)
		o := out[t*qs+h*hd : t*qs+(h+1)*hd]
		clear(o)
		for p := 0; p < pre; p++ {
			axpy(o, sc[p], preV[p*kvs+kvh*hd:p*kvs+(kvh+1)*hd])
		}
		for u := t0; u <= t; u++ {
			axpy(o, sc[pre+u-t0], a.V[u*kvs+kvh*hd:u*kvs+(kvh+1)*hd])
		}
	}
	return scores
}
