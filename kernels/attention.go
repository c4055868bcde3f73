package kernels

import (
	"fmt"
	"math"
	"sync"
)

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

// attnRowBlock is the number of query rows one attention work item handles: its score block
// (attnRowBlock × keys) stays in L2 for keys up to a few thousand.
const attnRowBlock = 64

// Attention writes the attention output [T][Heads·HeadDim] for a into out. It panics, naming
// the problem, when the shapes do not fit the slices.
//
// The prefix part is one matrix product per query head over the queries of all sequences at
// once (all T suffix rows × PrefixLen prefix keys, then × prefix values), giving for each row its
// unnormalised output and softmax statistics (max m₁, sum l₁). Each sequence's own causal part
// gives (m₂, l₂, o₂) the same way, and the two are merged exactly:
//
//	m = max(m₁, m₂),  out = (e^{m₁-m}·o₁ + e^{m₂-m}·o₂) / (e^{m₁-m}·l₁ + e^{m₂-m}·l₂).
//
// Both parts run on the GEMM kernels (gemmRows) with the work spread over Threads() goroutines.
func Attention(out []float32, a *PrefixAttention) {
	if err := a.check(len(out)); err != nil {
		panic("kernels: Attention: " + err.Error())
	}
	nSeq := len(a.SeqStarts) - 1
	T := a.SeqStarts[nSeq]
	if T == 0 {
		return
	}
	H, KVH, hd, P := a.Heads, a.KVHeads, a.HeadDim, a.PrefixLen
	group := H / KVH
	qs, kvs := H*hd, KVH*hd
	workers := max(threads, 1)
	// The GEMM computes q·k unscaled; a positive scale is folded into the exponentials, anything
	// else is applied to the scores first (see scaleRow).
	scale := a.Scale

	// Phase 0: the keys and values as GEMM weights: per KV head, the prefix K [P×hd] and Vᵀ
	// [hd×P]; per (sequence, KV head), the sequence's K and Vᵀ.
	// The row-major copies come from one pooled arena (the weights are dropped on return):
	// sequence s, KV head g at 2·hd·(T·g + KVH·t0), the prefix's after all of them.
	arena := getAttnScratch(2 * hd * KVH * (T + P))
	defer putAttnScratch(arena)
	prefK := make([]*Weight, KVH)
	prefV := make([]*Weight, KVH)
	seqK := make([]*Weight, nSeq*KVH)
	seqV := make([]*Weight, nSeq*KVH)
	nPrep := nSeq * KVH
	if P > 0 {
		nPrep += KVH
	}
	runQueue(workers, nPrep, func(_, i int) {
		if i < nSeq*KVH {
			s, g := i/KVH, i%KVH
			t0, t1 := a.SeqStarts[s], a.SeqStarts[s+1]
			if t1 > t0 {
				buf := arena.s[2*hd*(T*g+t0) : 2*hd*(T*g+t1)]
				seqK[i], seqV[i] = kvWeights(buf, a.K, a.V, t0, t1, kvs, g*hd, hd)
			}
			return
		}
		g := i - nSeq*KVH
		base := 2 * hd * KVH * T
		buf := arena.s[base+2*hd*P*g : base+2*hd*P*(g+1)]
		prefK[g], prefV[g] = kvWeights(buf, a.PrefixK, a.PrefixV, 0, P, kvs, g*hd, hd)
	})

	// Phase 1: the prefix part over all queries, (head, row block) items. out receives the
	// unnormalised o₁; stats the (m₁, l₁) of each (row, head).
	var stats []float32
	if P > 0 {
		stats = make([]float32, 2*T*H)
		blocks := (T + attnRowBlock - 1) / attnRowBlock
		runQueue(workers, H*blocks, func(_, i int) {
			h, b := i/blocks, i%blocks
			g := h / group
			r0, r1 := b*attnRowBlock, min((b+1)*attnRowBlock, T)
			m := r1 - r0
			sc := getAttnScratch(m * P)
			defer putAttnScratch(sc)
			S := sc.s[:m*P]
			gemmRows(S, P, a.Q[r0*qs+h*hd:], qs, m, prefK[g], 0, P, 0, false)
			for r := range m {
				mx, l := softmaxStats(S[r*P:(r+1)*P], scale)
				stats[2*((r0+r)*H+h)] = mx
				stats[2*((r0+r)*H+h)+1] = l
			}
			gemmRows(out[r0*qs+h*hd:], qs, S, P, m, prefV[g], 0, hd, 0, false)
		})
	}

	// Phase 2: each sequence's causal part, (sequence, head, row block) items, merged into out.
	type item struct{ s, h, r0 int }
	var items []item
	for s := range nSeq {
		L := a.SeqStarts[s+1] - a.SeqStarts[s]
		for h := range H {
			for r0 := 0; r0 < L; r0 += attnRowBlock {
				items = append(items, item{s, h, r0})
			}
		}
	}
	runQueue(workers, len(items), func(_, i int) {
		it := items[i]
		g := it.h / group
		t0 := a.SeqStarts[it.s]
		L := a.SeqStarts[it.s+1] - t0
		r0, r1 := it.r0, min(it.r0+attnRowBlock, L)
		m := r1 - r0
		sc := getAttnScratch(m*L + m*hd)
		defer putAttnScratch(sc)
		S := sc.s[:m*L]
		o2 := sc.s[m*L : m*L+m*hd]
		// Scores of rows r0..r1 against keys 0..r1 (the causal triangle's block); the keys past
		// each row's own position are zeroed after the exponentials, the rest of the row too,
		// because the value product runs over all L keys.
		gemmRows(S, L, a.Q[(t0+r0)*qs+it.h*hd:], qs, m, seqK[it.s*KVH+g], 0, r1, 0, false)
		var m2, l2 [attnRowBlock]float32
		for r := range m {
			row := S[r*L : (r+1)*L]
			m2[r], l2[r] = softmaxStats(row[:r0+r+1], scale)
			clear(row[r0+r+1:])
		}
		gemmRows(o2, hd, S, L, m, seqV[it.s*KVH+g], 0, hd, 0, false)
		for r := range m {
			t := t0 + r0 + r
			o := out[t*qs+it.h*hd : t*qs+(it.h+1)*hd]
			ov := o2[r*hd : (r+1)*hd]
			if P == 0 {
				inv := 1 / l2[r]
				for d := range o {
					o[d] = ov[d] * inv
				}
				continue
			}
			m1, l1 := stats[2*(t*H+it.h)], stats[2*(t*H+it.h)+1]
			mm := max(m1, m2[r])
			a1 := float32(math.Exp(float64(m1 - mm)))
			a2 := float32(math.Exp(float64(m2[r] - mm)))
			inv := 1 / (a1*l1 + a2*l2[r])
			a1, a2 = a1*inv, a2*inv
			for d := range o {
				o[d] = a1*o[d] + a2*ov[d]
			}
		}
	})
}

// softmaxStats replaces the raw scores q·k of one row by exp(scale·s - m) and returns m (the
// row's maximum scaled score) and the sum of the exponentials.
func softmaxStats(row []float32, scale float32) (m, l float32) {
	if !(scale > 0) {
		// max(scale·s) is not scale·max(s) for a negative scale: scale the row first.
		for i := range row {
			row[i] *= scale
		}
		scale = 1
	}
	m = maxF32(row) * scale
	return m, expScaleSum(row, scale, m)
}

// kvWeights builds the GEMM weights of one KV head over rows [t0, t1) of k and v (row stride
// kvs, head columns [off, off+hd)): K as [n×hd] (scores = q·Kᵀ) and V transposed as [hd×n]
// (output = p·V). Their row-major copies are written to buf (2·n·hd values).
func kvWeights(buf, k, v []float32, t0, t1, kvs, off, hd int) (*Weight, *Weight) {
	n := t1 - t0
	kc := buf[:n*hd]
	vt := buf[n*hd : 2*n*hd]
	for i := range n {
		copy(kc[i*hd:(i+1)*hd], k[(t0+i)*kvs+off:(t0+i)*kvs+off+hd])
		vr := v[(t0+i)*kvs+off : (t0+i)*kvs+off+hd]
		for d, x := range vr {
			vt[d*n+i] = x
		}
	}
	return NewWeightF32(kc, n, hd), NewWeightF32(vt, hd, n)
}

type attnScratch struct{ s []float32 }

var attnPool = sync.Pool{New: func() any { return &attnScratch{} }}

func getAttnScratch(n int) *attnScratch {
	sc := attnPool.Get().(*attnScratch)
	sc.s = growF32(sc.s, n)
	return sc
}

func putAttnScratch(sc *attnScratch) { attnPool.Put(sc) }

// check validates the shapes against the slices (outLen is len(out)).
func (a *PrefixAttention) check(outLen int) error {
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0:
		return fmt.Errorf("heads %d, KV heads %d, head dim %d: all must be > 0", a.Heads, a.KVHeads, a.HeadDim)
	case a.Heads%a.KVHeads != 0:
		return fmt.Errorf("heads %d not a multiple of KV heads %d", a.Heads, a.KVHeads)
	case a.PrefixLen < 0:
		return fmt.Errorf("prefix length %d < 0", a.PrefixLen)
	case len(a.SeqStarts) == 0 || a.SeqStarts[0] != 0:
		return fmt.Errorf("SeqStarts must start at 0, got %v", a.SeqStarts)
	}
	for s := 1; s < len(a.SeqStarts); s++ {
		if a.SeqStarts[s] < a.SeqStarts[s-1] {
			return fmt.Errorf("SeqStarts not ascending at %d: %v", s, a.SeqStarts)
		}
	}
	T := a.SeqStarts[len(a.SeqStarts)-1]
	qs, kvs := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	switch {
	case len(a.Q) < T*qs:
		return fmt.Errorf("q has %d values, %d tokens need %d", len(a.Q), T, T*qs)
	case len(a.K) < T*kvs || len(a.V) < T*kvs:
		return fmt.Errorf("k/v have %d/%d values, %d tokens need %d", len(a.K), len(a.V), T, T*kvs)
	case len(a.PrefixK) < a.PrefixLen*kvs || len(a.PrefixV) < a.PrefixLen*kvs:
		return fmt.Errorf("prefix K/V have %d/%d values, %d positions need %d", len(a.PrefixK), len(a.PrefixV), a.PrefixLen, a.PrefixLen*kvs)
	case outLen < T*qs:
		return fmt.Errorf("out has %d values, %d tokens need %d", outLen, T, T*qs)
	}
	return nil
}

func axpy(dst []float32, a float32, x []float32) {
	for i, v := range x {
		dst[i] += a * v
	}
}
