package qwen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relevance-scoring/relevance/kernels"
)

// Group is one shared prefix and the item sequences that continue it.
type Group struct {
	// Prefix tokens, shared by every item; may be empty.
	Prefix []int32
	// Items are the token sequences that continue the prefix; an empty item is skipped (its
	// output stays nil).
	Items [][]int32
	// Cached, when set, is the prefix's KV from an earlier pass: the prefix is not recomputed.
	// Its Len must equal len(Prefix).
	Cached *PrefixKV
	// KeepKV asks Forward to return the prefix's KV in KV (when it was computed in this pass).
	KeepKV bool

	// TemplateLen is how many leading prefix tokens other prefixes share (the prompt's template
	// head and instruction: every query of an instruction starts with them). When 0 <
	// TemplateLen < len(Prefix) and the prefix is computed, it is computed in two parts: the
	// template (Template when given, else computed in the pass, once for all the pass's groups
	// with the same template tokens), then the rest, which attends the template as its own
	// start (kernels.PrefixAttention.Past). The prefix's KV, and so every score, has the same
	// bits as the whole prefix computed in one piece (TestTemplateSplitIsExact); the split only
	// lets the template's KV be kept and shared. Otherwise it is ignored.
	TemplateLen int
	// Template, when set, is the KV of Prefix[:TemplateLen] from an earlier pass (used when the
	// prefix is computed). Its Len must equal TemplateLen.
	Template *PrefixKV
	// KeepTemplateKV asks Forward to return the template's KV in TemplateKV when this pass
	// computed it.
	KeepTemplateKV bool

	// KV is the prefix's KV computed by this pass when KeepKV was set.
	KV *PrefixKV
	// TemplateKV is the template's KV computed by this pass when KeepTemplateKV was set.
	TemplateKV *PrefixKV
	// Reused is how many of the prefix's tokens this pass did not compute for this group: all
	// of them when Cached or when an earlier group of the pass has the same prefix, the
	// template's when it came from Template or an earlier group of the pass, else 0.
	Reused int
}

// PrefixKV is a prefix's keys (RoPE applied) and values for every layer: K[l] and V[l] are
// [Len][num_key_value_heads·head_dim]. Immutable once built; safe to share between passes.
type PrefixKV struct {
	Len  int
	K, V [][]float32
}

// Bytes is the memory the KV takes.
func (kv *PrefixKV) Bytes() int64 {
	var n int64
	for l := range kv.K {
		n += int64(len(kv.K[l])+len(kv.V[l])) * 4
	}
	return n
}

// Stats is what a Forward call measured.
type Stats struct {
	PrefixTokens, ItemTokens int
	// MoE kernel variants used, one count per MoE layer call, and the sum of their padding
	// ratios (divide by the count for the mean).
	MoEVariants   map[string]int
	MoEPaddingSum float64
	MoECalls      int
	// Time spent in attention (the kernel), MoE experts (grouped kernel, shared expert), the
	// router (logits, softmax, top-k, grouping), and everything in total.
	Attention, MoE, Router, Total time.Duration
}

// span is a group's place in the packed rows of one pass.
type span struct {
	itemRow   int // first row of the group's items
	seqStarts []int
	kv        *PrefixKV // cached prefix KV, or nil
	share     int       // index of an earlier group with the same prefix, or -1
	// Where a computed prefix's rows are: one segment for the whole prefix (whole), or the
	// template (a cached KV, tmplKV, or a segment of the pass, tmpl) and the segment extending
	// it (ext). -1 when unused.
	whole, tmpl, ext int
	tmplKV           *PrefixKV
	// joined holds, per layer, the prefix's K and V assembled from the template's and the
	// extension's rows (the items attend them in one piece); nil for a whole segment.
	joinedK, joinedV [][]float32
}

// segment is a run of prefix tokens computed in the pass: rows [row, row+len(tokens)) are
// positions [pos0, pos0+len(tokens)). An extension segment continues a template (pos0 > 0):
// a cached KV (pastKV) or a template segment of the pass (pastSeg ≥ 0), which its rows attend
// as their own start.
type segment struct {
	row, pos0 int
	tokens    []int32
	pastKV    *PrefixKV
	pastSeg   int
	past      string // names the template continued ("" for none): one attention call per name
}

// layoutPrefixes decides how each group's prefix is had: cached (Cached), shared with an
// earlier group of the pass (same tokens), computed whole, or computed as a template (cached,
// or a segment shared by the pass's groups with the same template tokens) and an extension.
// It returns the groups' spans and the prefix segments to compute, those without a past first,
// then the extensions grouped by the template they continue; rows are not assigned yet. It
// sets each group's Reused.
func (m *Model) layoutPrefixes(groups []*Group) ([]span, []segment, error) {
	kvd := m.Config.NumKeyValueHeads * m.Config.HeadDim
	spans := make([]span, len(groups))
	var segs, exts []segment
	extOf := map[int]int{} // group → its index in exts
	seen := map[string]int{}
	tmplSeg := map[string]int{}
	for g, gr := range groups {
		sp := &spans[g]
		sp.share, sp.whole, sp.tmpl, sp.ext = -1, -1, -1, -1
		gr.KV, gr.TemplateKV, gr.Reused = nil, nil, 0
		P := len(gr.Prefix)
		if gr.Cached != nil {
			if gr.Cached.Len != P || len(gr.Cached.K) != len(m.Layers) {
				return nil, nil, fmt.Errorf("group %d: cached prefix KV does not match its prefix (%d vs %d tokens)", g, gr.Cached.Len, P)
			}
			sp.kv, gr.Reused = gr.Cached, P
			continue
		}
		key := tokensKey(gr.Prefix)
		if j, ok := seen[key]; ok {
			sp.share, gr.Reused = j, P
			continue
		}
		seen[key] = g
		if P == 0 {
			continue
		}
		t := gr.TemplateLen
		if t <= 0 || t >= P {
			sp.whole = len(segs)
			segs = append(segs, segment{tokens: gr.Prefix, pastSeg: -1})
			continue
		}
		ext := segment{pos0: t, tokens: gr.Prefix[t:], pastSeg: -1}
		if gr.Template != nil {
			if gr.Template.Len != t || len(gr.Template.K) != len(m.Layers) {
				return nil, nil, fmt.Errorf("group %d: template KV does not match its template (%d vs %d tokens)", g, gr.Template.Len, t)
			}
			sp.tmplKV, ext.pastKV, gr.Reused = gr.Template, gr.Template, t
		} else {
			tk := tokensKey(gr.Prefix[:t])
			i, ok := tmplSeg[tk]
			if ok {
				gr.Reused = t
			} else {
				i = len(segs)
				tmplSeg[tk] = i
				segs = append(segs, segment{tokens: gr.Prefix[:t], pastSeg: -1})
			}
			sp.tmpl, ext.pastSeg = i, i
		}
		ext.past = ext.pastName()
		extOf[g] = len(exts)
		exts = append(exts, ext)
		// The joined prefix K and V, per layer: kept as the group's KV when asked, else one
		// scratch pair reused by every layer.
		sp.joinedK, sp.joinedV = make([][]float32, len(m.Layers)), make([][]float32, len(m.Layers))
		var scratchK, scratchV []float32
		for l := range m.Layers {
			if gr.KeepKV || l == 0 {
				scratchK, scratchV = make([]float32, P*kvd), make([]float32, P*kvd)
			}
			sp.joinedK[l], sp.joinedV[l] = scratchK, scratchV
		}
	}
	// Extensions after the segments without a past, grouped by template (stable: groups keep
	// their order within a template).
	order := make([]int, len(exts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return strings.Compare(exts[a].past, exts[b].past)
	})
	at := make([]int, len(exts)) // ext index → segment index
	for _, i := range order {
		at[i] = len(segs)
		segs = append(segs, exts[i])
	}
	for g, i := range extOf {
		spans[g].ext = at[i]
	}
	return spans, segs, nil
}

// pastName names the template an extension segment continues.
func (sg *segment) pastName() string {
	if sg.pastKV != nil {
		return fmt.Sprintf("kv%p", sg.pastKV)
	}
	return fmt.Sprintf("seg%08d", sg.pastSeg)
}

// Forward runs every group's prefix (unless cached) and items in one packed pass and returns,
// for each group and item, the head-row logits at the item's last position (nil for empty items).
// Identical prefixes within the call are computed once, and so are identical templates (see
// Group.TemplateLen). It checks ctx between layers.
//
// The activations live in an arena kept on the Model and reused by the next call (a pass of a few
// thousand rows needs tens of MB; allocating and zeroing them per call showed in profiles).
// Concurrent calls are therefore serialised; the node makes one at a time anyway.
func (m *Model) Forward(ctx context.Context, groups []*Group, st *Stats) ([][][]float32, error) {
	m.arenaMu.Lock()
	defer m.arenaMu.Unlock()
	start := time.Now()
	cfg := m.Config
	H := cfg.HiddenSize
	nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	if st.MoEVariants == nil {
		st.MoEVariants = map[string]int{}
	}

	// Every prefix within the positions, whether or not its group has items (one with none still
	// computes its prefix, and RoPE would read past its table).
	for g, gr := range groups {
		if len(gr.Prefix) > m.maxPos {
			return nil, fmt.Errorf("group %d: a prefix of %d tokens exceeds the model's %d positions", g, len(gr.Prefix), m.maxPos)
		}
	}
	// Lay out rows: every computed prefix first — whole prefixes and templates, then the
	// extensions of templates grouped by template — then every item, group by group.
	spans, segs, err := m.layoutPrefixes(groups)
	if err != nil {
		return nil, err
	}
	rows := 0
	for i := range segs {
		segs[i].row = rows
		rows += len(segs[i].tokens)
	}
	prefixRows := rows
	for g, gr := range groups {
		sp := &spans[g]
		sp.itemRow = rows
		sp.seqStarts = append(sp.seqStarts, 0)
		n := 0
		for i, it := range gr.Items {
			if len(gr.Prefix)+len(it) > m.maxPos {
				return nil, fmt.Errorf("group %d item %d: %d prompt tokens exceed the model's %d positions", g, i, len(gr.Prefix)+len(it), m.maxPos)
			}
			n += len(it)
			sp.seqStarts = append(sp.seqStarts, n)
		}
		rows += n
	}
	T := rows
	st.PrefixTokens += prefixRows
	st.ItemTokens += T - prefixRows
	if T == prefixRows { // no item tokens: nothing to score
		st.Total += time.Since(start)
		return make([][][]float32, len(groups)), nil
	}

	b := m.arena.reset(cfg, T)
	pos, x := b.pos, b.x
	for i := range segs {
		sg := &segs[i]
		for j, id := range sg.tokens {
			if err := m.checkID(id); err != nil {
				return nil, fmt.Errorf("prefix: %w", err)
			}
			pos[sg.row+j] = int32(sg.pos0 + j)
			m.embedRow(x[(sg.row+j)*H:], id)
		}
	}
	for g, gr := range groups {
		sp := &spans[g]
		r := sp.itemRow
		for _, it := range gr.Items {
			for j, id := range it {
				if err := m.checkID(id); err != nil {
					return nil, fmt.Errorf("group %d item: %w", g, err)
				}
				pos[r] = int32(len(gr.Prefix) + j)
				m.embedRow(x[r*H:], id)
				r++
			}
		}
		if gr.KeepKV && (sp.whole >= 0 || sp.ext >= 0) {
			gr.KV = &PrefixKV{Len: len(gr.Prefix), K: make([][]float32, len(m.Layers)), V: make([][]float32, len(m.Layers))}
		}
		if gr.KeepTemplateKV && sp.tmpl >= 0 {
			gr.TemplateKV = &PrefixKV{Len: gr.TemplateLen, K: make([][]float32, len(m.Layers)), V: make([][]float32, len(m.Layers))}
		}
	}

	// The rows whose final state the head reads: each non-empty item's last position.
	var last []int
	for g := range groups {
		sp := &spans[g]
		for i := range groups[g].Items {
			if sp.seqStarts[i+1] > sp.seqStarts[i] {
				last = append(last, sp.itemRow+sp.seqStarts[i+1]-1)
			}
		}
	}

	eps := float32(cfg.RMSNormEps)
	qd, kvd := nh*cfg.HeadDim, nkv*cfg.HeadDim
	for l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if m.BeforeLayer != nil {
			if err := m.BeforeLayer(l); err != nil {
				return nil, fmt.Errorf("layer %d: %w", l, err)
			}
		}
		layer := &m.Layers[l]
		final := l == len(m.Layers)-1

		// Attention block.
		parallelRows(T, func(r0, r1 int) {
			kernels.RMSNorm(b.xn[r0*H:r1*H], x[r0*H:r1*H], layer.InputNorm, r1-r0, eps)
		})
		kernels.Linear(b.q, b.xn, T, layer.Q)
		kernels.Linear(b.k, b.xn, T, layer.K)
		kernels.Linear(b.v, b.xn, T, layer.V)
		parallelRows(T, func(r0, r1 int) {
			n := r1 - r0
			q, k, v := b.q[r0*qd:r1*qd], b.k[r0*kvd:r1*kvd], b.v[r0*kvd:r1*kvd]
			addBias(q, layer.QBias, n)
			addBias(k, layer.KBias, n)
			addBias(v, layer.VBias, n)
			if layer.QNorm != nil {
				kernels.RMSNorm(q, q, layer.QNorm, n*nh, eps)
				kernels.RMSNorm(k, k, layer.KNorm, n*nkv, eps)
			}
			kernels.ApplyRoPE(q, pos[r0:r1], nh, m.rope)
			kernels.ApplyRoPE(k, pos[r0:r1], nkv, m.rope)
		})

		t0 := time.Now()
		// In the last layer the prefixes' outputs feed nothing (their K/V are already made).
		m.attention(b, groups, spans, segs, l, !final)
		st.Attention += time.Since(t0)

		if final {
			// Only the head's rows need the rest of the last layer: gather them.
			n := len(last)
			qd := nh * cfg.HeadDim
			ax, xs := grow(&b.lastAttn, n*qd), grow(&b.lastX, n*H)
			for j, r := range last {
				copy(ax[j*qd:(j+1)*qd], b.attn[r*qd:(r+1)*qd])
				copy(xs[j*H:(j+1)*H], x[r*H:(r+1)*H])
			}
			if err := m.block(b, layer, xs, ax, n, true, st); err != nil {
				return nil, fmt.Errorf("layer %d: %w", l, err)
			}
			x = xs
			break
		}
		if err := m.block(b, layer, x, b.attn, T, false, st); err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}

	out := make([][][]float32, len(groups))
	if m.Head != nil && len(last) > 0 {
		hx := x[:len(last)*H] // the gathered last rows
		kernels.RMSNorm(hx, hx, m.Norm, len(last), float32(cfg.RMSNormEps))
		nr := m.Head.N
		logits := make([]float32, len(last)*nr)
		kernels.Linear(logits, hx, len(last), m.Head)
		j := 0
		for g := range groups {
			sp := &spans[g]
			out[g] = make([][]float32, len(groups[g].Items))
			for i := range groups[g].Items {
				if sp.seqStarts[i+1] > sp.seqStarts[i] {
					out[g][i] = logits[j*nr : (j+1)*nr : (j+1)*nr]
					j++
				}
			}
		}
	}
	st.Total += time.Since(start)
	return out, nil
}

// block finishes a layer for rows rows of the residual stream x given their attention output
// attn: output projection and residual, then the feed-forward (dense MLP or MoE) and residual.
// head is set for the last layer, which runs only the head's rows.
func (m *Model) block(b *buffers, layer *Layer, x, attn []float32, rows int, head bool, st *Stats) error {
	H := m.Config.HiddenSize
	o, xn := b.o[:rows*H], b.xn[:rows*H]
	kernels.Linear(o, attn, rows, layer.O)
	eps := float32(m.Config.RMSNormEps)
	parallelRows(rows, func(r0, r1 int) {
		o, x := o[r0*H:r1*H], x[r0*H:r1*H]
		addBias(o, layer.OBias, r1-r0)
		addTo(x, o)
		kernels.RMSNorm(xn[r0*H:r1*H], x, layer.PostNorm, r1-r0, eps)
	})
	if layer.Sparse {
		if err := m.moe(b, layer, rows, head, st); err != nil {
			return err
		}
	} else {
		mlp(o, xn, rows, layer.Gate, layer.Up, layer.Down, b.g, b.u)
	}
	parallelRows(rows, func(r0, r1 int) { addTo(x[r0*H:r1*H], o[r0*H:r1*H]) })
	return nil
}

// attention runs the prefix segments (skipped when prefixOut is false): the whole prefixes and
// templates, each a causal sequence of its own, in one call; the extensions of each template in
// one call, attending the template as their start. Then every group's items against its prefix
// KV. It keeps prefix and template KV where asked.
func (m *Model) attention(b *buffers, groups []*Group, spans []span, segs []segment, l int, prefixOut bool) {
	cfg := m.Config
	hd, nh, nkv := cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	qd, kvd := nh*hd, nkv*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	// segKV is segment i's K and V rows in this layer.
	segKV := func(i int) ([]float32, []float32) {
		sg := &segs[i]
		r0, r1 := sg.row, sg.row+len(sg.tokens)
		return b.k[r0*kvd : r1*kvd], b.v[r0*kvd : r1*kvd]
	}
	if prefixOut {
		// The segments without a past come first (one call), then each template's extensions
		// (one call each: a run of segments with the same past).
		for i := 0; i < len(segs); {
			j := i + 1
			for j < len(segs) && segs[j].past == segs[i].past {
				j++
			}
			starts := []int{0}
			for _, sg := range segs[i:j] {
				starts = append(starts, starts[len(starts)-1]+len(sg.tokens))
			}
			r0, r1 := segs[i].row, segs[j-1].row+len(segs[j-1].tokens)
			a := &kernels.PrefixAttention{
				Heads: nh, KVHeads: nkv, HeadDim: hd, Scale: scale,
				Q: b.q[r0*qd : r1*qd], K: b.k[r0*kvd : r1*kvd], V: b.v[r0*kvd : r1*kvd],
				SeqStarts: starts,
			}
			if sg := &segs[i]; sg.pos0 > 0 {
				a.PastLen = sg.pos0
				if sg.pastKV != nil {
					a.PastK, a.PastV = sg.pastKV.K[l], sg.pastKV.V[l]
				} else {
					a.PastK, a.PastV = segKV(sg.pastSeg)
				}
			}
			kernels.Attention(b.attn[r0*qd:r1*qd], a)
			i = j
		}
	}
	for g, gr := range groups {
		sp := &spans[g]
		src := sp
		if sp.share >= 0 {
			src = &spans[sp.share]
		}
		var pk, pv []float32
		plen := len(gr.Prefix)
		switch {
		case src.kv != nil:
			pk, pv = src.kv.K[l], src.kv.V[l]
		case src.whole >= 0:
			pk, pv = segKV(src.whole)
		case src.ext >= 0 && src == sp:
			// The template's rows, then the extension's, in one piece (the group's own buffers;
			// a group sharing this prefix reads them after this one wrote them).
			t := gr.TemplateLen
			var tk, tv []float32
			if src.tmpl >= 0 {
				tk, tv = segKV(src.tmpl)
			} else {
				tk, tv = src.tmplKV.K[l], src.tmplKV.V[l]
			}
			ek, ev := segKV(src.ext)
			pk, pv = sp.joinedK[l][:plen*kvd], sp.joinedV[l][:plen*kvd]
			copy(pk, tk[:t*kvd])
			copy(pk[t*kvd:], ek)
			copy(pv, tv[:t*kvd])
			copy(pv[t*kvd:], ev)
		case src.ext >= 0:
			pk, pv = src.joinedK[l], src.joinedV[l]
		}
		if gr.KV != nil {
			if sp.ext >= 0 {
				gr.KV.K[l], gr.KV.V[l] = pk, pv // the joined buffers are this group's own
			} else {
				gr.KV.K[l] = append([]float32(nil), pk...)
				gr.KV.V[l] = append([]float32(nil), pv...)
			}
		}
		if gr.TemplateKV != nil {
			tk, tv := segKV(sp.tmpl)
			gr.TemplateKV.K[l] = append([]float32(nil), tk...)
			gr.TemplateKV.V[l] = append([]float32(nil), tv...)
		}
		n := sp.seqStarts[len(sp.seqStarts)-1]
		if n == 0 {
			continue
		}
		r0, r1 := sp.itemRow, sp.itemRow+n
		kernels.Attention(b.attn[r0*qd:r1*qd], &kernels.PrefixAttention{
			Heads: nh, KVHeads: nkv, HeadDim: hd, Scale: scale,
			PrefixK: pk, PrefixV: pv, PrefixLen: plen,
			Q: b.q[r0*qd : r1*qd], K: b.k[r0*kvd : r1*kvd], V: b.v[r0*kvd : r1*kvd],
			SeqStarts: sp.seqStarts,
		})
	}
}

// moe writes the sparse block's output for b.xn into b.o: route each token (softmax over all
// experts in f32, top-k, optional renormalisation), group the tokens of each expert, run the
// grouped expert kernel, and add the gated shared expert (Qwen2-MoE).
//
// The last layer (head set) runs only one row per item: a few rows per expert, which whole-tile
// variants would pad to 64 or 128 each (padding ratios of 20 and more on the small preset), so
// it always uses the exact-rows variant.
func (m *Model) moe(b *buffers, layer *Layer, T int, head bool, st *Stats) error {
	cfg := m.Config
	H, E, k := cfg.HiddenSize, cfg.NumExperts, cfg.NumExpertsPerTok
	xn, o := b.xn[:T*H], b.o[:T*H]
	t0 := time.Now()
	kernels.Linear(b.router, xn, T, layer.Router)
	r := &b.routing
	for e := range r.Tokens {
		r.Tokens[e] = r.Tokens[e][:0]
		r.Weights[e] = r.Weights[e][:0]
	}
	// Each token's top-k (rows in parallel), then the grouping by expert in token order.
	idx, w := b.topIdx[:T*k], b.topW[:T*k]
	parallelRows(T, func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			p := b.router[t*E : (t+1)*E]
			kernels.Softmax(p)
			tw := w[t*k : (t+1)*k]
			kernels.TopK(p, k, idx[t*k:(t+1)*k], tw)
			if cfg.NormTopKProb {
				var sum float32
				for _, v := range tw {
					sum += v
				}
				for j := range tw {
					tw[j] /= sum
				}
			}
		}
	})
	for t := 0; t < T; t++ {
		for j, e := range idx[t*k : (t+1)*k] {
			r.Tokens[e] = append(r.Tokens[e], int32(t))
			r.Weights[e] = append(r.Weights[e], w[t*k+j])
		}
	}
	t1 := time.Now()
	st.Router += t1.Sub(t0)

	clear(o)
	var ms kernels.MoEStats
	runner := m.MoE
	if head {
		runner = headMoE
	}
	if runner != nil {
		var err error
		if ms, err = runner.Run(o, xn, H, layer.Experts, r); err != nil {
			return fmt.Errorf("moe: %w", err)
		}
	} else {
		ms = kernels.MoE(o, xn, H, layer.Experts, r)
	}
	st.MoEVariants[ms.Variant]++
	st.MoEPaddingSum += ms.PaddingRatio
	st.MoECalls++
	if layer.Shared != nil {
		mlp(b.shared, xn, T, layer.Shared.Gate, layer.Shared.Up, layer.Shared.Down, b.sg, b.su)
		kernels.Linear(b.gate1, xn, T, layer.SharedGate)
		for t := 0; t < T; t++ {
			g := float32(1 / (1 + math.Exp(-float64(b.gate1[t]))))
			ot := o[t*H : (t+1)*H]
			for i, v := range b.shared[t*H : (t+1)*H] {
				ot[i] += g * v
			}
		}
	}
	st.MoE += time.Since(t1)
	return nil
}

// headMoE runs the last layer's experts (see Model.moe).
var headMoE = kernels.NewMoERunner(kernels.MoEPolicy{Kind: kernels.PolicyFixed, Variant: kernels.VariantExact})

// mlp writes down(silu(gate(x))·up(x)) for T rows into out, using g and u as scratch.
func mlp(out, x []float32, T int, gate, up, down *kernels.Weight, g, u []float32) {
	I := gate.N
	g, u = g[:T*I], u[:T*I]
	kernels.Linear(g, x, T, gate)
	kernels.Linear(u, x, T, up)
	parallelRows(T, func(r0, r1 int) { kernels.SiLUMul(g[r0*I:r1*I], g[r0*I:r1*I], u[r0*I:r1*I]) })
	kernels.Linear(out, g, T, down)
}

// parallelRowsMin is the fewest rows worth a goroutine of their own for the element-wise steps.
const parallelRowsMin = 64

// parallelRows runs f over [0, n) split into contiguous row ranges, one per kernel thread, and
// waits. The element-wise steps between the kernels (norms, RoPE, SiLU·mul, residual adds,
// routing) are a few percent of a pass and would otherwise keep one core idle.
func parallelRows(n int, f func(r0, r1 int)) {
	t := min(kernels.Threads(), n/parallelRowsMin)
	if t <= 1 {
		f(0, n)
		return
	}
	chunk := (n + t - 1) / t
	var wg sync.WaitGroup
	for r0 := chunk; r0 < n; r0 += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(r0, min(r0+chunk, n))
		}()
	}
	f(0, chunk)
	wg.Wait()
}

func addBias(x, bias []float32, rows int) {
	if bias == nil {
		return
	}
	d := len(bias)
	for r := 0; r < rows; r++ {
		row := x[r*d : (r+1)*d]
		for i, b := range bias {
			row[i] += b
		}
	}
}

func addTo(dst, src []float32) { kernels.AddTo(dst, src) }

func (m *Model) checkID(id int32) error {
	if id < 0 || int(id) >= m.Config.VocabSize {
		return fmt.Errorf("token id %d outside the vocabulary (%d)", id, m.Config.VocabSize)
	}
	return nil
}

func tokensKey(ids []int32) string {
	b := make([]byte, 4*len(ids))
	for i, v := range ids {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	return string(b)
}

// buffers are one pass's activations. The arena keeps them between passes: reset reslices
// them to T rows, growing (with headroom) only when a pass has more rows than any before.
type buffers struct {
	pos                  []int32
	x                    []float32 // residual stream
	xn, q, k, v, attn, o []float32
	g, u                 []float32 // dense MLP scratch
	router, gate1        []float32
	shared, sg, su       []float32
	lastAttn, lastX      []float32 // the last layer's gathered head rows
	routing              kernels.Routing
	topIdx               []int32
	topW                 []float32
}

// grow returns (*s)[:n], reallocating *s when its capacity is short. Contents are not kept.
func grow[E any](s *[]E, n int) []E {
	if cap(*s) < n {
		*s = make([]E, n, n+n/4)
	}
	*s = (*s)[:n]
	return *s
}

// reset sizes every buffer for T rows. Buffers are not cleared: each is fully written before it
// is read in a pass.
func (b *buffers) reset(cfg *Config, T int) *buffers {
	H, hd := cfg.HiddenSize, cfg.HeadDim
	qd, kvd := cfg.NumAttentionHeads*hd, cfg.NumKeyValueHeads*hd
	grow(&b.pos, T)
	grow(&b.x, T*H)
	grow(&b.xn, T*H)
	grow(&b.q, T*qd)
	grow(&b.k, T*kvd)
	grow(&b.v, T*kvd)
	grow(&b.attn, T*qd)
	grow(&b.o, T*H)
	dense := false
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		dense = dense || !cfg.IsSparse(i)
	}
	if dense {
		grow(&b.g, T*cfg.IntermediateSize)
		grow(&b.u, T*cfg.IntermediateSize)
	}
	if cfg.NumExperts > 0 {
		grow(&b.router, T*cfg.NumExperts)
		if len(b.routing.Tokens) != cfg.NumExperts {
			b.routing = kernels.Routing{Tokens: make([][]int32, cfg.NumExperts), Weights: make([][]float32, cfg.NumExperts)}
		}
		grow(&b.topIdx, T*cfg.NumExpertsPerTok)
		grow(&b.topW, T*cfg.NumExpertsPerTok)
	}
	if cfg.HasSharedExpert() {
		S := cfg.SharedExpertIntermediateSize
		grow(&b.shared, T*H)
		grow(&b.sg, T*S)
		grow(&b.su, T*S)
		grow(&b.gate1, T)
	}
	return b
}
