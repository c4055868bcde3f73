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
	// PastK and PastV are [PastLen][KVHeads·HeadDim] (RoPE applied to K): positions that every
	// sequence continues as its own first PastLen tokens, unlike the prefix, which is merged
	// apart. Row i of a sequence (position PastLen+i) attends the past and its sequence's first
	// i+1 tokens in one softmax, summed in position order, exactly as if the past's tokens were
	// rows of the sequence: its bits are those it would have with the whole sequence computed in
	// one call, wherever the past ends. The scorer extends a cached template's KV with a
	// query's tokens this way (issue 14). A call has a past or a prefix, not both.
	PastK, PastV []float32
	PastLen      int
}

// attnRowBlock is the number of query rows one attention work item handles: its score block
// (attnRowBlock × keys) stays in L2 for keys up to a few thousand.
const attnRowBlock = 64

// Attention writes the attention output [T][Heads·HeadDim] for a into out. It panics, naming
// the problem, when the shapes do not fit the slices.
//
// The prefix part is one matrix product per query head over the queries of all sequences at
// once (all T suffix rows × PrefixLen prefix keys, then × prefix values; with a large out, one
// per causal block instead, see fusedOutBytes), giving for each row its unnormalised output and
// softmax statistics (max m₁, sum l₁). Each sequence's own causal part
// gives (m₂, l₂, o₂) the same way, and the two are merged exactly:
//
//	m = max(m₁, m₂),  out = (e^{m₁-m}·o₁ + e^{m₂-m}·o₂) / (e^{m₁-m}·l₁ + e^{m₂-m}·l₂).
//
// A row's result depends on its query, the prefix and its own sequence only: the prefix part
// always runs over all PrefixLen keys in one product and is merged with the causal part the same
// way, whether the prefix KV was computed in this pass or cached, and the GEMM gives each row the
// same bits whatever block of rows it shares (see the package doc).
//
// Both parts run on the GEMM kernels (gemmRows) with the work spread over Threads() goroutines.
// The keys and values are packed straight into the GEMM's panel layout in buffers of a pooled
// per-call state, so a steady stream of calls allocates nothing on one thread (a few small
// objects per phase for the extra goroutines on two).
func Attention(out []float32, a *PrefixAttention) {
	if err := a.check(len(out)); err != nil {
		panic("kernels: Attention: " + err.Error())
	}
	nSeq := len(a.SeqStarts) - 1
	T := a.SeqStarts[nSeq]
	if T == 0 {
		return
	}
	st := attnStatePool.Get().(*attnState)
	defer func() {
		st.a, st.out = nil, nil // keep no reference to the caller's data in the pool
		attnStatePool.Put(st)
	}()
	st.setup(out, a)
	workers := st.workers

	// Phase 0: the keys and values as GEMM weights: per KV head, the prefix K [P×hd] and Vᵀ
	// [hd×P]; per (sequence, KV head), the sequence's K and Vᵀ.
	nPrep := nSeq * st.KVH
	if st.P > 0 {
		nPrep += st.KVH
	}
	runQueue(workers, nPrep, st.prepFn)
	// Phase 1: the prefix part over all queries, (head, row block) items. out receives the
	// unnormalised o₁; stats the (m₁, l₁) of each (row, head). With a large out, phase 2's items
	// do it themselves (fusedOutBytes).
	if st.P > 0 && !st.fused {
		runQueue(workers, st.H*st.blocks, st.prefixFn)
	}
	// Phase 2: each sequence's causal part, (sequence, head, row block) items, merged into out.
	runQueue(workers, len(st.items), st.seqFn)
}

// fusedOutBytes is the size of out above which each causal item computes its rows' prefix part
// itself, just before merging it, instead of phase 1 computing every row's first. Above it out
// does not stay in L2 between the phases: at 16 items of 200 tokens (6.6 MB of out) phase 1's o₁
// was written, evicted and read back from L3, and fusing cut the call's time by 10 %. Below it
// phase 1's blocks of 64 rows over all sequences are worth keeping: short items (16–19 tokens)
// would each leave a 1-row remainder tile in a product of their own.
var fusedOutBytes = 1 << 20 // a variable so that tests can run both paths on one shape

// attnItem is one causal work item: rows [r0, r0+attnRowBlock) of sequence s, query head h.
type attnItem struct{ s, h, r0 int32 }

// attnState is one Attention call's plan and buffers. It is pooled: its slices grow to the
// largest call seen and are reused, and its work functions are bound once at creation (a
// method value made per call would be a heap allocation).
type attnState struct {
	a                       *PrefixAttention
	out                     []float32
	H, KVH, hd, P, group    int
	past                    int // PastLen: keys every sequence's own part starts with
	qs, kvs, T, nSeq        int
	blocks, workers         int
	scale                   float32
	packed                  bool
	fused                   bool     // the prefix part runs inside the causal items (fusedOutBytes)
	weights                 []Weight // K of (s, g) at s·KVH+g, then Vᵀ of (s, g), then prefix K of g, prefix Vᵀ of g
	kvOff                   []int    // offset in kv of weight i's values
	kv                      []float32
	stats                   []float32
	items                   []attnItem
	work                    [][]float32 // per worker: scores and partial outputs
	prepFn, prefixFn, seqFn func(worker, i int)
}

var attnStatePool = sync.Pool{New: func() any {
	st := &attnState{}
	st.prepFn, st.prefixFn, st.seqFn = st.prep, st.prefixItem, st.seqItem
	return st
}}

// kvSizes is the number of values the GEMM weights K [n×hd] and Vᵀ [hd×n] take: the packed
// panels of the assembly kernels (whole panels of 32 output features), or row-major.
func kvSizes(n, hd int, packed bool) (int, int) {
	if packed {
		return numPanels(n) * panelWidth * hd, numPanels(hd) * panelWidth * n
	}
	return n * hd, n * hd
}

func (st *attnState) setup(out []float32, a *PrefixAttention) {
	st.a, st.out = a, out
	st.H, st.KVH, st.hd, st.P, st.past = a.Heads, a.KVHeads, a.HeadDim, a.PrefixLen, a.PastLen
	st.group = st.H / st.KVH
	st.qs, st.kvs = st.H*st.hd, st.KVH*st.hd
	st.nSeq = len(a.SeqStarts) - 1
	st.T = a.SeqStarts[st.nSeq]
	st.scale = a.Scale
	st.workers = max(threads, 1)
	st.packed = packWeights && activeISA() != isaGeneric
	st.blocks = (st.T + attnRowBlock - 1) / attnRowBlock
	st.fused = st.P > 0 && st.T*st.qs*4 > fusedOutBytes

	// Weight layout and the values' offsets.
	nW := 2*st.nSeq*st.KVH + 2*st.KVH
	if cap(st.weights) < nW {
		st.weights = make([]Weight, nW)
		st.kvOff = make([]int, nW+1)
	}
	st.weights, st.kvOff = st.weights[:nW], st.kvOff[:nW+1]
	// Offsets in index order (weight i's values are kv[kvOff[i]:kvOff[i+1]]).
	maxL := 0
	for s := range st.nSeq {
		maxL = max(maxL, a.SeqStarts[s+1]-a.SeqStarts[s])
	}
	off := 0
	for i := range nW {
		st.kvOff[i] = off
		n, isV := st.P, i >= 2*st.nSeq*st.KVH+st.KVH
		if i < 2*st.nSeq*st.KVH {
			s := (i / st.KVH) % st.nSeq
			n, isV = st.past+a.SeqStarts[s+1]-a.SeqStarts[s], i >= st.nSeq*st.KVH
		}
		ks, vs := kvSizes(n, st.hd, st.packed)
		if isV {
			ks = vs
		}
		off += ks
	}
	st.kvOff[nW] = off
	st.kv = growF32(st.kv, off)

	if st.P > 0 && !st.fused {
		st.stats = growF32(st.stats, 2*st.T*st.H)
	}
	st.items = st.items[:0]
	for s := range st.nSeq {
		L := a.SeqStarts[s+1] - a.SeqStarts[s]
		for h := range st.H {
			for r0 := 0; r0 < L; r0 += attnRowBlock {
				st.items = append(st.items, attnItem{int32(s), int32(h), int32(r0)})
			}
		}
	}
	// Per-worker scratch: a prefix item needs rows·P scores, a causal item rows·(past+L) scores
	// and rows·hd outputs.
	need := attnRowBlock * max(st.P, st.past+maxL+st.hd)
	for len(st.work) < st.workers {
		st.work = append(st.work, nil)
	}
	for w := range st.workers {
		st.work[w] = growF32(st.work[w], need)
	}
}

// Indices into weights (and kvOff) of the K and Vᵀ weights of sequence s or of the prefix.
func (st *attnState) seqKi(s, g int) int { return s*st.KVH + g }
func (st *attnState) seqVi(s, g int) int { return (st.nSeq+s)*st.KVH + g }
func (st *attnState) prefKi(g int) int   { return 2*st.nSeq*st.KVH + g }
func (st *attnState) prefVi(g int) int   { return 2*st.nSeq*st.KVH + st.KVH + g }

// prep builds work item i of phase 0: the K and Vᵀ weights of one (sequence, KV head), or of
// the prefix for one KV head.
func (st *attnState) prep(_, i int) {
	a := st.a
	if i < st.nSeq*st.KVH {
		s, g := i/st.KVH, i%st.KVH
		t0, t1 := a.SeqStarts[s], a.SeqStarts[s+1]
		st.kvWeights(st.seqKi(s, g), st.seqVi(s, g), kvRows{a.PastK, a.PastV, 0, st.past}, kvRows{a.K, a.V, t0, t1}, g*st.hd)
		return
	}
	g := i - st.nSeq*st.KVH
	st.kvWeights(st.prefKi(g), st.prefVi(g), kvRows{}, kvRows{a.PrefixK, a.PrefixV, 0, st.P}, g*st.hd)
}

// kvRows are rows [t0, t1) of a K and a V matrix (row stride KVHeads·HeadDim).
type kvRows struct {
	k, v   []float32
	t0, t1 int
}

// kvRow returns the K and V matrices holding key i of the concatenation of a and b, and the
// offset of its row in them.
func kvRow(a, b *kvRows, i, kvs int) ([]float32, []float32, int) {
	if n := a.t1 - a.t0; i < n {
		return a.k, a.v, (a.t0 + i) * kvs
	}
	return b.k, b.v, (b.t0 + i - (a.t1 - a.t0)) * kvs
}

// kvWeights fills the GEMM weights of one KV head over the keys of a followed by those of b
// (row stride kvs, head columns [off, off+hd)): K as [n×hd] (scores = q·Kᵀ) and V transposed
// as [hd×n] (output = p·V). With the assembly kernels their values are written directly in the
// packed panel layout (gemm_pack.go), the last panel's unused columns zeroed; otherwise
// row-major.
func (st *attnState) kvWeights(ki, vi int, a, b kvRows, off int) {
	hd, kvs := st.hd, st.kvs
	n := (a.t1 - a.t0) + (b.t1 - b.t0)
	kw, vw := &st.weights[ki], &st.weights[vi]
	kb, vb := st.kv[st.kvOff[ki]:st.kvOff[ki+1]], st.kv[st.kvOff[vi]:st.kvOff[vi+1]]
	*kw = Weight{N: n, K: hd, DType: F32}
	*vw = Weight{N: hd, K: n, DType: F32}
	if n == 0 {
		return
	}
	if !st.packed {
		for i := range n {
			k, v, r := kvRow(&a, &b, i, kvs)
			copy(kb[i*hd:(i+1)*hd], k[r+off:r+off+hd])
			for d, x := range v[r+off : r+off+hd] {
				vb[d*n+i] = x
			}
		}
		kw.f32, vw.f32 = kb, vb
		return
	}
	// K: p32[p·hd·32 + d·32 + c] = K[32p+c, d].
	for p := range numPanels(n) {
		panel := kb[p*panelWidth*hd : (p+1)*panelWidth*hd]
		cols := min(panelWidth, n-p*panelWidth)
		if cols < panelWidth {
			clear(panel)
		}
		for c := range cols {
			k, _, r := kvRow(&a, &b, p*panelWidth+c, kvs)
			row := k[r+off:]
			for d := range hd {
				panel[d*panelWidth+c] = row[d]
			}
		}
	}
	// Vᵀ: p32[p·n·32 + j·32 + c] = V[j, 32p+c]: 32 contiguous values of V's row per step.
	for p := range numPanels(hd) {
		panel := vb[p*panelWidth*n : (p+1)*panelWidth*n]
		cols := min(panelWidth, hd-p*panelWidth)
		for j := range n {
			dst := panel[j*panelWidth : (j+1)*panelWidth]
			_, v, r := kvRow(&a, &b, j, kvs)
			src := v[r+off+p*panelWidth:]
			copy(dst[:cols], src[:cols])
			clear(dst[cols:])
		}
	}
	kw.p32, vw.p32 = kb, vb
}

// prefixItem is work item i of phase 1: one query head over one block of rows against the
// prefix.
func (st *attnState) prefixItem(w, i int) {
	a, P, H, hd, qs := st.a, st.P, st.H, st.hd, st.qs
	h, b := i/st.blocks, i%st.blocks
	g := h / st.group
	r0, r1 := b*attnRowBlock, min((b+1)*attnRowBlock, st.T)
	m := r1 - r0
	S := st.work[w][:m*P]
	gemmRows(S, P, a.Q[r0*qs+h*hd:], qs, m, &st.weights[st.prefKi(g)], 0, P, 0, false)
	for r := range m {
		mx, l := softmaxStats(S[r*P:(r+1)*P], st.scale)
		st.stats[2*((r0+r)*H+h)] = mx
		st.stats[2*((r0+r)*H+h)+1] = l
	}
	gemmRows(st.out[r0*qs+h*hd:], qs, S, P, m, &st.weights[st.prefVi(g)], 0, hd, 0, false)
}

// seqItem is work item i of phase 2: one block of rows of one sequence and query head against
// the sequence's own keys (causal; the past's first), merged with the prefix part: phase 1's,
// already in out, or (fused) computed here first into out. Either way a row's prefix part is
// one product over all P keys, and the GEMM gives each row the same bits whatever rows share
// its block, so fusing changes no bit.
func (st *attnState) seqItem(w, i int) {
	a, P, H, hd, qs := st.a, st.P, st.H, st.hd, st.qs
	it := st.items[i]
	s, h := int(it.s), int(it.h)
	g := h / st.group
	t0 := a.SeqStarts[s]
	L := a.SeqStarts[s+1] - t0
	r0, r1 := int(it.r0), min(int(it.r0)+attnRowBlock, L)
	m := r1 - r0
	var m1, l1 [attnRowBlock]float32 // the rows' prefix statistics (fused)
	if st.fused {
		S1 := st.work[w][:m*P]
		gemmRows(S1, P, a.Q[(t0+r0)*qs+h*hd:], qs, m, &st.weights[st.prefKi(g)], 0, P, 0, false)
		for r := range m {
			m1[r], l1[r] = softmaxStats(S1[r*P:(r+1)*P], st.scale)
		}
		gemmRows(st.out[(t0+r0)*qs+h*hd:], qs, S1, P, m, &st.weights[st.prefVi(g)], 0, hd, 0, false)
	}
	// Keys of the sequence: the past's, then its own; row r's position among them is past+r.
	K := st.past + L
	S := st.work[w][:m*K]
	o2 := st.work[w][m*K : m*K+m*hd]
	// Scores of rows r0..r1 against keys 0..past+r1 (the causal triangle's block); the keys
	// past each row's own position are zeroed after the exponentials. The value product runs
	// over those past+r1 keys only (a view of the first keys of Vᵀ): the zeros past a row's
	// position add exact zeros to its sum, so the row's bits are those of a product over all
	// K keys, while the block skips the keys no row of it attends (a third of the value
	// product's work at 200-token items). The row's softmax and value sum run from key 0 in
	// one call each, so its bits do not depend on where the past ends or which block it is in.
	kb := st.past + r1
	gemmRows(S, K, a.Q[(t0+r0)*qs+h*hd:], qs, m, &st.weights[st.seqKi(s, g)], 0, kb, 0, false)
	var m2, l2 [attnRowBlock]float32
	for r := range m {
		row := S[r*K : r*K+kb]
		m2[r], l2[r] = softmaxStats(row[:st.past+r0+r+1], st.scale)
		clear(row[st.past+r0+r+1:])
	}
	vw := st.weights[st.seqVi(s, g)].firstK(kb)
	gemmRows(o2, hd, S, K, m, &vw, 0, hd, 0, false)
	for r := range m {
		t := t0 + r0 + r
		o := st.out[t*qs+h*hd : t*qs+(h+1)*hd]
		ov := o2[r*hd : (r+1)*hd]
		if P == 0 {
			scaleF32(o, ov, 1/l2[r])
			continue
		}
		if !st.fused {
			m1[r], l1[r] = st.stats[2*(t*H+h)], st.stats[2*(t*H+h)+1]
		}
		mm := max(m1[r], m2[r])
		a1 := float32(math.Exp(float64(m1[r] - mm)))
		a2 := float32(math.Exp(float64(m2[r] - mm)))
		inv := 1 / (a1*l1[r] + a2*l2[r])
		mixF32(o, ov, a1*inv, a2*inv)
	}
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

// check validates the shapes against the slices (outLen is len(out)).
func (a *PrefixAttention) check(outLen int) error {
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0:
		return fmt.Errorf("heads %d, KV heads %d, head dim %d: all must be > 0", a.Heads, a.KVHeads, a.HeadDim)
	case a.Heads%a.KVHeads != 0:
		return fmt.Errorf("heads %d not a multiple of KV heads %d", a.Heads, a.KVHeads)
	case a.PrefixLen < 0:
		return fmt.Errorf("prefix length %d < 0", a.PrefixLen)
	case a.PastLen < 0:
		return fmt.Errorf("past length %d < 0", a.PastLen)
	case a.PastLen > 0 && a.PrefixLen > 0:
		return fmt.Errorf("a past (%d positions) and a prefix (%d) in one call", a.PastLen, a.PrefixLen)
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
	case len(a.PastK) < a.PastLen*kvs || len(a.PastV) < a.PastLen*kvs:
		return fmt.Errorf("past K/V have %d/%d values, %d positions need %d", len(a.PastK), len(a.PastV), a.PastLen, a.PastLen*kvs)
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
