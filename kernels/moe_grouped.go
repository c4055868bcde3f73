package kernels

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// exactChunkRows is the most rows one exact-variant work item computes: a multiple of every
// plausible micro-tile height (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), large enough that the
// expert's weights are streamed once per ~200 rows, small enough that a skewed expert is spread
// over both cores.
const exactChunkRows = 192

// exactItemRows is the exact variant's work-item height for experts whose gate weight is gate:
// exactChunkRows, or less where the GEMM reads the weight once per fewer rows (AMX with
// f32-accurate three-term activations: 64 rows at hidden 2048). A taller item would pass over
// the weights several times anyway and only push its 4·rows·width-byte outputs out of L2:
// on 16×576 balanced qwen3-30b-a3b (two runs, interleaved), 64-row items took 4.4–4.7 s of CPU
// against 5.0–5.1 s for 192-row ones. It is a multiple of 16, AMX's row granule.
func exactItemRows(gate *Weight) int {
	p := passRows(gate)
	if p <= 0 || p >= exactChunkRows {
		return exactChunkRows
	}
	return max(32, p/16*16)
}

// MoERunner runs the grouped expert GEMM under one policy. It keeps the auto policy's cost tables
// (one per layer shape) and reusable scratch buffers, so a model should hold one runner for its
// life. Safe for concurrent use: concurrent Runs take separate scratch.
type MoERunner struct {
	policy MoEPolicy

	mu      sync.Mutex
	costs   map[moeShape]*MoECostTable
	scratch []*moeScratch // free list; buffers are kept across calls, never shrunk
}

// moeShape keys a cost table.
type moeShape struct {
	hidden, inter int
	dtype         DType
}

// NewMoERunner returns a runner with policy p and no cost tables yet.
func NewMoERunner(p MoEPolicy) *MoERunner {
	return &MoERunner{policy: p, costs: map[moeShape]*MoECostTable{}}
}

// Policy returns the runner's policy.
func (r *MoERunner) Policy() MoEPolicy { return r.policy }

// SetCostTable installs a cost table for layers of the given shape (tests, or a table measured
// elsewhere), replacing any measured one.
func (r *MoERunner) SetCostTable(hidden, inter int, dt DType, c MoECostTable) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.costs[moeShape{hidden, inter, dt}] = &c
}

// CostTable returns the cost table for a layer shape, if one was measured or set.
func (r *MoERunner) CostTable(hidden, inter int, dt DType) (MoECostTable, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.costs[moeShape{hidden, inter, dt}]
	if !ok {
		return MoECostTable{}, false
	}
	return *c, true
}

// Calibrate measures (or returns the already measured) cost table for the layer of experts, in
// about budget of wall time (a single measurement may overrun it with a slow GEMM). It runs on
// the calling goroutine with the experts' real weights, cycling through them so the weight
// traffic resembles a real pass. Call it at start-up for every distinct MoE layer shape.
func (r *MoERunner) Calibrate(experts []Expert, budget time.Duration) (MoECostTable, error) {
	sh, err := expertShape(experts, -1)
	if err != nil {
		return MoECostTable{}, fmt.Errorf("calibrate moe: %w", err)
	}
	r.mu.Lock()
	c, ok := r.costs[sh]
	r.mu.Unlock()
	if ok {
		return *c, nil
	}
	m := measureMoECosts(experts, sh, budget)
	r.mu.Lock()
	r.costs[sh] = &m
	r.mu.Unlock()
	return m, nil
}

// MoEShape is what a kept cost table is measured for: a layer's hidden size, expert width and
// weight type (the table's own key in a runner), and its number of experts, which bounds how
// many threads the measurement ran on.
type MoEShape struct {
	Hidden, Inter int
	DType         DType
	Experts       int
}

// MoECostTableStore keeps measured cost tables beyond the process (a scorer node's calibration
// cache), so that a restart on the same machine need not measure them again. Load returns a table
// kept for shape on this machine and build; Save keeps one just measured. Implementations must be
// safe for concurrent use.
type MoECostTableStore interface {
	Load(shape MoEShape) (MoECostTable, bool)
	Save(shape MoEShape, c MoECostTable)
}

// CalibrateKept is Calibrate with a store: a valid table kept there for the layer's shape is
// installed instead of measured (kept reports it), and a table measured now is saved there. A nil
// store is Calibrate.
func (r *MoERunner) CalibrateKept(experts []Expert, budget time.Duration, store MoECostTableStore) (c MoECostTable, kept bool, err error) {
	if store == nil {
		c, err = r.Calibrate(experts, budget)
		return c, false, err
	}
	sh, err := expertShape(experts, -1)
	if err != nil {
		return MoECostTable{}, false, fmt.Errorf("calibrate moe: %w", err)
	}
	shape := MoEShape{Hidden: sh.hidden, Inter: sh.inter, DType: sh.dtype, Experts: len(experts)}
	if c, ok := store.Load(shape); ok && c.Validate() == nil {
		r.SetCostTable(sh.hidden, sh.inter, sh.dtype, c)
		return c, true, nil
	}
	if c, err = r.Calibrate(experts, budget); err != nil {
		return c, false, err
	}
	store.Save(shape, c)
	return c, false, nil
}

// Choose returns the variant the policy picks for experts with the given routed row counts.
// Under PolicyAuto without a cost table for the shape it measures one first (see Calibrate).
func (r *MoERunner) Choose(experts []Expert, counts []int) (MoEVariant, error) {
	switch r.policy.Kind {
	case PolicyFixed:
		if r.policy.Variant >= numMoEVariants {
			return 0, fmt.Errorf("fixed policy with unknown variant %d", r.policy.Variant)
		}
		return r.policy.Variant, nil
	case PolicyAuto:
		c, err := r.Calibrate(experts, defaultCalibrationBudget)
		if err != nil {
			return 0, err
		}
		return c.Cheapest(counts), nil
	}
	return chooseThreshold(counts), nil
}

// defaultCalibrationBudget is the lazy calibration time of PolicyAuto.
const defaultCalibrationBudget = time.Second

// Run adds the weighted expert outputs for the routed tokens of x ([nTok×hidden]) to out, as MoE
// documents, with the variant the runner's policy chooses.
func (r *MoERunner) Run(out, x []float32, hidden int, experts []Expert, rt *Routing) (MoEStats, error) {
	sc := r.getScratch()
	defer r.putScratch(sc)
	counts, rows, err := validateMoE(sc, out, x, hidden, experts, rt)
	if err != nil {
		return MoEStats{}, err
	}
	st := MoEStats{Variant: "none", PaddingRatio: 1, Policy: r.policy.String()}
	if rows == 0 {
		return st, nil
	}
	v, err := r.Choose(experts, counts)
	if err != nil {
		return MoEStats{}, err
	}
	return runVariant(sc, st, v, counts, rows, out, x, hidden, experts, rt), nil
}

// RunVariant is Run with the variant given instead of chosen by the policy (benchmarks compare
// every variant on one routing through one runner's scratch).
func (r *MoERunner) RunVariant(v MoEVariant, out, x []float32, hidden int, experts []Expert, rt *Routing) (MoEStats, error) {
	if v >= numMoEVariants {
		return MoEStats{}, fmt.Errorf("unknown variant %d", v)
	}
	sc := r.getScratch()
	defer r.putScratch(sc)
	counts, rows, err := validateMoE(sc, out, x, hidden, experts, rt)
	if err != nil {
		return MoEStats{}, err
	}
	st := MoEStats{Variant: "none", PaddingRatio: 1, Policy: MoEPolicy{Kind: PolicyFixed, Variant: v}.String()}
	if rows == 0 {
		return st, nil
	}
	return runVariant(sc, st, v, counts, rows, out, x, hidden, experts, rt), nil
}

func runVariant(sc *moeScratch, st MoEStats, v MoEVariant, counts []int, rows int, out, x []float32, hidden int, experts []Expert, rt *Routing) MoEStats {
	runGrouped(sc, out, x, hidden, experts, rt, counts, v)
	st.Variant, st.BlockM, st.Rows = v.String(), v.BlockM(), rows
	if b := v.BlockM(); b > 0 {
		st.PaddingRatio = PaddingRatio(counts, b)
	}
	return st
}

// ReleaseScratch drops the buffers kept from earlier calls (they grow to the largest call seen,
// e.g. after an unusually big batch); calls in flight keep theirs until they return.
func (r *MoERunner) ReleaseScratch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scratch = nil
}

func (r *MoERunner) getScratch() *moeScratch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.scratch); n > 0 {
		sc := r.scratch[n-1]
		r.scratch = r.scratch[:n-1]
		return sc
	}
	return newMoEScratch()
}

func (r *MoERunner) putScratch(sc *moeScratch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scratch = append(r.scratch, sc)
}

// validateMoE checks the routing against x and the experts and returns the rows per expert (in
// sc's buffer).
func validateMoE(sc *moeScratch, out, x []float32, hidden int, experts []Expert, rt *Routing) ([]int, int, error) {
	if hidden <= 0 {
		return nil, 0, fmt.Errorf("hidden must be > 0, got %d", hidden)
	}
	if len(x)%hidden != 0 {
		return nil, 0, fmt.Errorf("len(x) %d is not a multiple of hidden %d", len(x), hidden)
	}
	if len(out) != len(x) {
		return nil, 0, fmt.Errorf("len(out) %d != len(x) %d", len(out), len(x))
	}
	if rt == nil {
		return nil, 0, errors.New("nil routing")
	}
	if len(rt.Tokens) != len(experts) || len(rt.Weights) != len(experts) {
		return nil, 0, fmt.Errorf("routing has %d token lists and %d weight lists for %d experts",
			len(rt.Tokens), len(rt.Weights), len(experts))
	}
	nTok := len(x) / hidden
	if cap(sc.counts) < len(experts) {
		sc.counts = make([]int, len(experts))
	}
	counts := sc.counts[:len(experts)]
	rows := 0
	for e, toks := range rt.Tokens {
		if len(rt.Weights[e]) != len(toks) {
			return nil, 0, fmt.Errorf("expert %d: %d tokens but %d weights", e, len(toks), len(rt.Weights[e]))
		}
		for _, t := range toks {
			if t < 0 || int(t) >= nTok {
				return nil, 0, fmt.Errorf("expert %d: token %d out of range [0, %d)", e, t, nTok)
			}
		}
		counts[e] = len(toks)
		rows += len(toks)
	}
	if rows > 0 {
		sh, err := expertShape(experts, hidden)
		if err != nil {
			return nil, 0, err
		}
		for e := range experts {
			if counts[e] == 0 {
				continue
			}
			if err := checkExpert(&experts[e], sh); err != nil {
				return nil, 0, fmt.Errorf("expert %d: %w", e, err)
			}
		}
	}
	return counts, rows, nil
}

// expertShape reads the layer shape from the first expert with weights; hidden < 0 takes it
// from the weights.
func expertShape(experts []Expert, hidden int) (moeShape, error) {
	for e := range experts {
		ex := &experts[e]
		if ex.Gate == nil {
			continue
		}
		if hidden < 0 {
			hidden = ex.Gate.K
		}
		sh := moeShape{hidden: hidden, inter: ex.Gate.N, dtype: ex.Gate.DType}
		if err := checkExpert(ex, sh); err != nil {
			return moeShape{}, fmt.Errorf("expert %d: %w", e, err)
		}
		return sh, nil
	}
	return moeShape{}, errors.New("no expert has weights")
}

func checkExpert(ex *Expert, sh moeShape) error {
	if ex.Gate == nil || ex.Up == nil || ex.Down == nil {
		return errors.New("missing gate, up or down weight")
	}
	if ex.Gate.K != sh.hidden || ex.Up.K != sh.hidden || ex.Down.N != sh.hidden {
		return fmt.Errorf("weights [%d×%d], [%d×%d], [%d×%d] do not match hidden %d",
			ex.Gate.N, ex.Gate.K, ex.Up.N, ex.Up.K, ex.Down.N, ex.Down.K, sh.hidden)
	}
	if ex.Gate.N != sh.inter || ex.Up.N != sh.inter || ex.Down.K != sh.inter {
		return fmt.Errorf("expert width %d/%d/%d differs from the layer's %d", ex.Gate.N, ex.Up.N, ex.Down.K, sh.inter)
	}
	return nil
}

// moeItem is one unit of the shared work queue: rows [r0, r1) of expert e's segment (real rows;
// block variants compute the tile they start whole) and output columns [n0, n1).
type moeItem struct {
	e      int32
	r0, r1 int32
	n0, n1 int32
}

// moeScratch holds one call's buffers; they grow to the largest call seen and are reused. It
// also carries the call's operands for the work functions of its phases, which are bound once
// at creation (a closure or method value made per call would be a heap allocation).
type moeScratch struct {
	counts                              []int
	call                                moeCall
	packFn, gateUpFn, downFn, combineFn func(worker, i int)

	x        []float32   // packed expert inputs, later the down outputs [rows×H]
	g        []float32   // activations silu(gate)·up [rows×I]
	u        [][]float32 // per worker: the up projection of the item being computed [tile×I]
	segStart []int       // first packed row of each expert's segment
	items    []moeItem
	order    []int32 // experts in the order their items run
	tokOff   []int32 // CSR over tokens: packed rows and weights of token t are [tokOff[t], tokOff[t+1])
	tokPos   []int32
	tokW     []float32
	tokFill  []int32
}

// moeCall is one runGrouped call's operands.
type moeCall struct {
	out, x        []float32
	hidden, inter int
	experts       []Expert
	rt            *Routing
	counts        []int
	blockM        int
	nTok          int
}

func newMoEScratch() *moeScratch {
	sc := &moeScratch{}
	sc.packFn, sc.gateUpFn, sc.downFn, sc.combineFn = sc.pack, sc.gateUp, sc.down, sc.combine
	return sc
}

// moeTokChunk is the tokens one combine work item adds up.
const moeTokChunk = 32

// pack gathers expert e's rows and zeroes its padding rows (they are computed by the block
// variants; zeros keep them finite and the result independent of earlier calls).
func (sc *moeScratch) pack(_, e int) {
	c := &sc.call
	seg, hidden := sc.segStart, c.hidden
	xs := sc.x[seg[e]*hidden : seg[e+1]*hidden]
	for j, t := range c.rt.Tokens[e] {
		copy(xs[j*hidden:(j+1)*hidden], c.x[int(t)*hidden:(int(t)+1)*hidden])
	}
	clear(xs[c.counts[e]*hidden:])
}

// gateUp runs gate/up work item i.
func (sc *moeScratch) gateUp(w, i int) {
	c := &sc.call
	it := sc.items[i]
	row := sc.segStart[it.e] + int(it.r0)
	gateUpItem(&c.experts[it.e], sc.g[row*c.inter:], sc.x[row*c.hidden:], sc.u[w], c.hidden, c.inter,
		int(it.r1-it.r0), int(it.n0), int(it.n1), c.blockM, sc.nextExpert(i).Gate)
}

// nextExpert is the expert of the queue's item after i (this worker's next or the other's: a
// prefetch hint either way), or an expert with no weights after the last item.
func (sc *moeScratch) nextExpert(i int) *Expert {
	if i+1 < len(sc.items) {
		return &sc.call.experts[sc.items[i+1].e]
	}
	return &noExpert
}

// noExpert has no weights: the hint after the last item (nextExpert), without an allocation.
var noExpert Expert

// down runs down work item i, into the packed input buffer (its contents are no longer needed).
func (sc *moeScratch) down(_, i int) {
	c := &sc.call
	it := sc.items[i]
	row := sc.segStart[it.e] + int(it.r0)
	downItem(&c.experts[it.e], sc.x[row*c.hidden:], sc.g[row*c.inter:], c.hidden, c.inter,
		int(it.r1-it.r0), int(it.n0), int(it.n1), c.blockM, sc.nextExpert(i).Down)
}

// combine adds up the weighted expert outputs of one chunk of tokens.
func (sc *moeScratch) combine(_, ch int) {
	c := &sc.call
	hidden := c.hidden
	for t := ch * moeTokChunk; t < min((ch+1)*moeTokChunk, c.nTok); t++ {
		o := c.out[t*hidden : (t+1)*hidden]
		for p := sc.tokOff[t]; p < sc.tokOff[t+1]; p++ {
			r := int(sc.tokPos[p])
			axpy(o, sc.tokW[p], sc.x[r*hidden:(r+1)*hidden])
		}
	}
}

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

func growI32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b[:n]
}

// runGrouped is the grouped expert GEMM: pack, gate/up with SiLU·mul over all (expert, tile,
// column block) items, down over all items, then the weighted combine per token. Each phase is
// a shared work queue drained by Threads() goroutines.
func runGrouped(sc *moeScratch, out, x []float32, hidden int, experts []Expert, rt *Routing, counts []int, v MoEVariant) {
	nE := len(experts)
	blockM := v.BlockM()
	align := max(blockM, 1)
	gate := experts[firstActive(counts)].Gate
	inter := gate.N

	// Layout: segment e starts at segStart[e] and holds roundUp(n_e, align) rows.
	if cap(sc.segStart) < nE+1 {
		sc.segStart = make([]int, nE+1)
	}
	seg := sc.segStart[:nE+1]
	total := 0
	for e, n := range counts {
		seg[e] = total
		total += roundUp(n, align)
	}
	seg[nE] = total
	sc.x = growF32(sc.x, total*hidden)
	sc.g = growF32(sc.g, total*inter)
	itemRows := exactItemRows(gate)
	tile := max(blockM, itemRows)
	workers := max(threads, 1)
	if len(sc.u) < workers {
		sc.u = append(sc.u, make([][]float32, workers-len(sc.u))...)
	}
	for w := range workers {
		sc.u[w] = growF32(sc.u[w], tile*inter)
	}

	nTok := len(x) / hidden
	sc.call = moeCall{out: out, x: x, hidden: hidden, inter: inter, experts: experts, rt: rt,
		counts: counts, blockM: blockM, nTok: nTok}
	defer func() { sc.call = moeCall{} }() // keep no reference to the caller's data

	runQueue(workers, nE, sc.packFn)

	step := itemRows
	if blockM > 0 {
		step = blockM
	}

	// Gate and up, fused per item: both projections of the same rows and columns, then
	// SiLU·mul while they are in cache.
	sc.items, sc.order = planItems(sc.items[:0], sc.order, counts, step, blockM, inter, workers)
	runQueue(workers, len(sc.items), sc.gateUpFn)

	// Down, into the packed input buffer.
	sc.items, sc.order = planItems(sc.items[:0], sc.order, counts, step, blockM, hidden, workers)
	runQueue(workers, len(sc.items), sc.downFn)

	// Combine: per token, its experts' rows in expert order, so the sum is deterministic and
	// adds up in the order the reference does.
	sc.tokOff = growI32(sc.tokOff, nTok+1)
	sc.tokFill = growI32(sc.tokFill, nTok)
	clear(sc.tokOff)
	rows := 0
	for e := range nE {
		for _, t := range rt.Tokens[e] {
			sc.tokOff[t+1]++
		}
		rows += counts[e]
	}
	for t := range nTok {
		sc.tokOff[t+1] += sc.tokOff[t]
	}
	copy(sc.tokFill, sc.tokOff[:nTok])
	sc.tokPos = growI32(sc.tokPos, rows)
	if cap(sc.tokW) < rows {
		sc.tokW = make([]float32, rows)
	}
	sc.tokW = sc.tokW[:rows]
	for e := range nE {
		for j, t := range rt.Tokens[e] {
			p := sc.tokFill[t]
			sc.tokFill[t]++
			sc.tokPos[p] = int32(seg[e] + j)
			sc.tokW[p] = rt.Weights[e][j]
		}
	}
	runQueue(workers, (nTok+moeTokChunk-1)/moeTokChunk, sc.combineFn)
}

// firstActive is the first expert with routed rows (runGrouped is called with at least one).
func firstActive(counts []int) int {
	for e, n := range counts {
		if n > 0 {
			return e
		}
	}
	return 0
}

// planItems appends the work items of one projection: each expert's rows cut in steps of step,
// and the n output columns cut in blocks when there are too few row items to keep every worker
// busy to the end (a single hot expert must not run on one core). blockM > 0: the items compute
// whole blockM-row tiles whatever their real rows.
func planItems(items []moeItem, order []int32, counts []int, step, blockM, n, workers int) ([]moeItem, []int32) {
	rowItems := 0
	for _, c := range counts {
		rowItems += (c + step - 1) / step
	}
	if rowItems == 0 {
		return items, order
	}
	// Aim for at least 8 items per worker; column blocks are multiples of 64 columns.
	split := 1
	if want := 8 * workers; rowItems < want {
		split = min((want+rowItems-1)/rowItems, max(n/64, 1))
	}
	colStep := roundUp((n+split-1)/split, 64)
	// Experts with the most rows computed first, each expert's items together: the queue then
	// ends on small items, so the workers finish nearly together, and an expert's items run
	// back to back (on both workers at once) while its weights are in cache — a chunk or tile
	// left for later would fetch them again. Stable, so equal experts keep their order.
	order = order[:0]
	for e, c := range counts {
		if c > 0 {
			order = append(order, int32(e))
		}
	}
	computed := func(e int32) int {
		if blockM > 0 {
			return roundUp(counts[e], blockM)
		}
		return counts[e]
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(computed(b), computed(a)) })
	for _, e := range order {
		c := counts[e]
		for r0 := 0; r0 < c; r0 += step {
			r1 := min(r0+step, c)
			for n0 := 0; n0 < n; n0 += colStep {
				items = append(items, moeItem{e: e, r0: int32(r0), r1: int32(r1), n0: int32(n0), n1: int32(min(n0+colStep, n))})
			}
		}
	}
	return items, order
}

// runQueue runs f(worker, i) for i in [0, n) on min(workers, n) goroutines (the caller's among
// them) that take items from a shared counter, so unequal items balance out.
func runQueue(workers, n int, f func(worker, i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	drain := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			f(w, i)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); drain(w) }()
	}
	drain(0)
	wg.Wait()
}

// gateUpItem computes one gate/up work item on the calling goroutine: rows [0, m) of the packed
// input xs and columns [n0, n1) of both projections, then gs = silu(gate)·up over them. A block
// variant (blockM > 0) computes the whole tile, padding rows included; u is scratch of at least
// max(blockM, m)·inter values.
func gateUpItem(ex *Expert, gs, xs, u []float32, hidden, inter, m, n0, n1, blockM int, then *Weight) {
	pad := blockM > 0
	gemmRowsThen(gs, inter, xs, hidden, m, ex.Gate, n0, n1, blockM, pad, ex.Up)
	gemmRowsThen(u, inter, xs, hidden, m, ex.Up, n0, n1, blockM, pad, then)
	if pad {
		m = roundUp(m, blockM)
	}
	for r := range m {
		g := gs[r*inter+n0 : r*inter+n1]
		SiLUMul(g, g, u[r*inter+n0:r*inter+n1])
	}
}

// downItem computes one down work item: ys[r, n0:n1] = gs[r]·Downᵀ for rows [0, m) (the whole
// tile for a block variant).
func downItem(ex *Expert, ys, gs []float32, hidden, inter, m, n0, n1, blockM int, then *Weight) {
	gemmRowsThen(ys, hidden, gs, inter, m, ex.Down, n0, n1, blockM, blockM > 0, then)
}
