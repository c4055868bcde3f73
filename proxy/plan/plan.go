// Package plan is the first stage of a request: it turns a validated request into batches, each
// already placed on a node with its projected finish time. Admission reads those finish times and
// dispatch sends each batch to the node it was placed on; retries and hedges are placed by the
// same function. So a change to how load is measured (cluster.Node.Load) or how a node is picked
// (the route strategy) reaches splitting, admission, retries and hedging together.
//
// Formulas. With P the shared prefix's tokens (template, instruction, query; prompt.Counter) and
// L_i item i's own tokens, the reference cost of item i is a·L_i + b·L_i·(P + L_i/2) and every
// batch adds a·P + b·P²/2 + c (package costmodel; a, b, c the mean of the candidate nodes'
// learned coefficients). The split strategy (package split) cuts the items into batches against
// each candidate's backlog and relative speed. Then, in the split's order (earliest planned start
// first), Placer.Place puts each batch on a node:
//
//	node   = the route strategy's pick among eligible nodes (healthy, breaker not open, not ejected)
//	cost   = node's learned cost of the batch, less its prefix (a·P + b·P²/2) on a node believed
//	         to hold the prefix in its cache
//	start  = node.Load(now)                       seconds of work ahead of the batch
//	finish = start + cost
//
// and charges the batch to the node at once, so the next batch's pick, and every concurrent
// request, sees it. A Plan's Finish is the largest batch finish: when the request is projected to
// be answered, in seconds from planning.
//
// A Placer and a Planner are safe for concurrent use. A Plan belongs to one request.
package plan

import (
	"hash/fnv"
	"slices"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/split"
)

// Lease is a batch's claim on a node: a breaker permit (Done reports the outcome; nil when the
// fallback bypasses the breaker) and the batch's predicted cost, charged to the node's load when
// placed and released when the call returns (Settle) or is abandoned (Release).
type Lease struct {
	Node *cluster.Node
	// Done reports the call's outcome to the node's breaker (cluster.ErrExcluded: neither success
	// nor failure); nil for a fallback lease that bypassed the breaker.
	Done func(error)
	// Coeffs is the node's cost model at placement.
	Coeffs costmodel.Coeffs
	// Predicted is the batch's compute seconds on this node.
	Predicted float64
	// Start is the node's load when the batch was placed: seconds of work ahead of it.
	Start float64
	// Finish is Start + Predicted: when the batch should be answered, in seconds from placement.
	Finish float64
	// Features is the work priced on this node (without a prefix it holds).
	Features costmodel.Features
	// Alone is set when no other batch of this proxy's was in flight on the node at placement: a
	// latency that can be learned from for a node that reports no compute time.
	Alone bool
	// Samples is how many replies the node's cost model had learned from at placement: how far
	// the projection could be trusted.
	Samples int64
	// charged is its charge to the node's load (Release gives it back).
	charged cluster.Charge
}

// Release gives back a lease whose call will not be made: its charge, its call count and its
// breaker permit (uncounted).
func (l *Lease) Release() {
	l.Node.Uncharge(l.charged)
	if l.Done != nil {
		l.Done(cluster.ErrExcluded)
	}
	l.Node.CallEnded()
}

// Placer is the one placement function: where a batch goes and when it is projected to finish.
type Placer struct {
	cluster *cluster.Cluster
	picker  route.Picker
}

// NewPlacer places batches on c's nodes with picker.
func NewPlacer(c *cluster.Cluster, picker route.Picker) *Placer {
	return &Placer{cluster: c, picker: picker}
}

// Work is what a placement prices: the batch's features (its prefix computed) and its prefix's
// key and features, which a node that holds the prefix in its cache does not pay, and of which a
// node that keeps the instruction's template pays only the rest.
type Work struct {
	Features costmodel.Features
	// PrefixKey identifies the shared prefix (instruction and query); 0: none.
	PrefixKey uint64
	Prefix    costmodel.Features
	// Rest is the prefix's work on a node that keeps the template (cluster.Node.KeepsTemplates):
	// the tokens after it, attending it. Equal to Prefix when the prefix has no template part.
	Rest costmodel.Features
	// Fingerprint pins the work to nodes of one model: a node known to answer with another
	// fingerprint is not a candidate. "": any node.
	Fingerprint string
}

// On is the work's features on node n: without the prefix where n holds it, with only the
// prefix's rest where n keeps templates.
func (w Work) On(n *cluster.Node) costmodel.Features {
	switch {
	case n.Holds(w.PrefixKey):
		return w.Features.Sub(w.Prefix)
	case n.KeepsTemplates():
		return w.Features.Sub(w.Prefix).Add(w.Rest)
	}
	return w.Features
}

// candList adapts nodes to route.Candidates and route.Costed; loads are read at pick time.
type candList struct {
	nodes []*cluster.Node
	now   time.Time
	work  Work
}

func (c candList) Len() int               { return len(c.nodes) }
func (c candList) Load(i int) float64     { return c.nodes[i].Load(c.now) }
func (c candList) Cost(i int) float64     { return c.nodes[i].Coeffs().Seconds(c.work.On(c.nodes[i])) }
func (c candList) BaseCost(i int) float64 { return c.nodes[i].Coeffs().Seconds(c.work.Features) }

// Place picks a node for work w among the eligible nodes not in exclude, takes a breaker permit
// and charges the batch to the node. When every breaker refuses it falls back to the node that
// failed longest ago (breakers never remove every node). It returns nil when no node can take the
// batch.
func (p *Placer) Place(w Work, exclude []*cluster.Node) *Lease {
	exclude = p.otherModels(w.Fingerprint, exclude)
	cands := p.cluster.Eligible(exclude)
	refused := exclude
	for len(cands) > 0 {
		i := p.picker.Pick(candList{cands, time.Now(), w})
		n := cands[i]
		done, err := n.Breaker().Allow()
		if err == nil {
			return lease(n, done, w)
		}
		// Open, or half-open with its probes taken: try the others.
		cands = slices.Delete(cands, i, i+1)
		refused = append(slices.Clip(refused), n)
		if len(cands) == 0 {
			// Eligible offers nodes on probation, then stalled ones, only when no other node is
			// a candidate: with every candidate refusing, those are next. (Fallback gives
			// nothing while such a node's breaker is closed, so the batch failed UNAVAILABLE.)
			cands = p.cluster.Eligible(refused)
		}
	}
	if fb := p.cluster.Fallback(exclude); len(fb) > 0 {
		return lease(fb[0], nil, w)
	}
	return nil
}

// PlaceOn leases work w on node n itself, whatever the route strategy would pick (a probe of a
// node on probation): n's breaker permit and a charge to n's load. It returns nil when n's
// breaker refuses.
func (p *Placer) PlaceOn(w Work, n *cluster.Node) *Lease {
	done, err := n.Breaker().Allow()
	if err != nil {
		return nil
	}
	return lease(n, done, w)
}

// otherModels adds to exclude the nodes known to serve another model than fp.
func (p *Placer) otherModels(fp string, exclude []*cluster.Node) []*cluster.Node {
	if fp == "" {
		return exclude
	}
	for _, n := range p.cluster.Snapshot() {
		if f := n.Fingerprint(); f != "" && f != fp && !slices.Contains(exclude, n) {
			exclude = append(slices.Clip(exclude), n)
		}
	}
	return exclude
}

func lease(n *cluster.Node, done func(error), w Work) *Lease {
	c := n.Coeffs()
	now := time.Now()
	f := w.On(n)
	l := &Lease{Node: n, Done: done, Coeffs: c, Predicted: c.Seconds(f), Features: f, Samples: n.Samples()}
	l.charged = n.Charge(now, l.Predicted) // the start and the charge in one step (Node.Charge)
	l.Start = l.charged.Start()
	l.Finish = l.Start + l.Predicted
	l.Alone = n.CallStarted()
	return l
}

// Batch is one planned batch.
type Batch struct {
	// Index is the batch's position in the plan.
	Index int
	// Items are indices into the request's items, ascending.
	Items []int
	// Req is the ScoreBatch request to send.
	Req *relevancev1.ScoreBatchRequest
	// PrefixTokens is the shared prefix's token count; PrefixKey identifies it (instruction and
	// query) for the nodes' prefix caches. TemplateTokens are its leading tokens every query of
	// the instruction shares (prompt.Counter.Template).
	PrefixTokens   int
	PrefixKey      uint64
	TemplateTokens int
	// Fingerprint is the model the request is pinned to ("": any).
	Fingerprint string
	// Features is the batch's work as the proxy sees it (prefix not cached).
	Features costmodel.Features
	// Lease is the node the batch was placed on; nil when no node could take it.
	Lease *Lease

	// tokens learns from the batch's reply how the planner's counts compare with the node's;
	// countedItems and countedPrefix are the planner's counts before its scaling (nil / 0: none).
	tokens        *TokenScale
	countedItems  []int
	countedPrefix int
}

// Work is the batch as a placement prices it.
func (b *Batch) Work() Work {
	w := Work{Features: b.Features, PrefixKey: b.PrefixKey, Prefix: costmodel.PrefixFeatures(b.PrefixTokens), Fingerprint: b.Fingerprint}
	w.Rest = w.Prefix
	if t := b.TemplateTokens; t > 0 && t < b.PrefixTokens {
		w.Rest = costmodel.ItemFeatures(t, b.PrefixTokens-t)
	}
	return w
}

// Head is b cut to its first k items (b itself when it holds no more): a copy of the batch for
// a node that takes at most k documents per request, as a probe of a node on probation, which
// was no planning candidate, so the plan's batches were not cut to its limit. itemTokens are the
// plan's per-item counts (Plan.ItemTokens), which price the head. The head learns no token
// counts (its reply answers part of the batch the counts were taken for).
func (b *Batch) Head(k int, itemTokens []int) *Batch {
	if k <= 0 || k >= len(b.Items) {
		return b
	}
	return b.slice(0, k, itemTokens)
}

// Cut is b cut into the fewest pieces of at most k items, of near-equal size, in item order (b
// alone when it holds no more): what is sent instead of a batch that a node refused whole for
// its own limit of k items per request (backend.ItemLimit), which the planning did not know.
// itemTokens price the pieces, as Head's; like a head, a piece learns no token counts.
func (b *Batch) Cut(k int, itemTokens []int) []*Batch {
	n := len(b.Items)
	if k <= 0 || k >= n {
		return []*Batch{b}
	}
	m := (n-1)/k + 1 // ceil(n/k): each piece of n/m rounded is at most k
	out := make([]*Batch, m)
	for p := range m {
		out[p] = b.slice(p*n/m, (p+1)*n/m, itemTokens)
	}
	return out
}

// slice is a copy of b holding its items from through to-1.
func (b *Batch) slice(from, to int, itemTokens []int) *Batch {
	req := &relevancev1.ScoreBatchRequest{}
	dst := req.ProtoReflect()
	b.Req.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v) // shallow: the items are shared, never written
		return true
	})
	req.Items = b.Req.GetItems()[from:to:to]
	toks := make([]int, to-from)
	for j, i := range b.Items[from:to] {
		toks[j] = itemTokens[i]
	}
	return &Batch{Index: b.Index, Items: b.Items[from:to:to], Req: req, PrefixTokens: b.PrefixTokens, PrefixKey: b.PrefixKey,
		TemplateTokens: b.TemplateTokens, Fingerprint: b.Fingerprint, Features: costmodel.BatchFeatures(b.PrefixTokens, toks, false)}
}

// PrefixKey identifies the shared prefix of (instruction, query) — what a node's prefix cache is
// keyed by, up to the tokenizer — as a 64-bit FNV-1a hash of the prompt body up to the document.
// Never 0.
func PrefixKey(instruction, query string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(prompt.BodyPrefix(instruction, query)))
	return max(h.Sum64(), 1)
}

// Plan is one request's batches, placed.
type Plan struct {
	// PrefixTokens is the shared prefix's token count; ItemTokens each item's.
	PrefixTokens int
	ItemTokens   []int
	// Batches in dispatch order.
	Batches []*Batch
	// Candidates is how many nodes could take batches at planning time; MinSamples the fewest
	// replies any of them had learned its cost model from (how far its projections can be trusted).
	Candidates int
	MinSamples int64
	// Backlogs are the candidates' loads at planning time, in seconds; nil when all were idle
	// (see Backlogged).
	Backlogs []float64
	// Duration is how long planning took.
	Duration time.Duration
}

// Backlogged reports whether some candidate had work ahead at planning time, so that the split
// and placement were shaped by it (fewer batches, or none on a busy node) and may not be what idle
// nodes would get.
func (p *Plan) Backlogged() bool { return len(p.Backlogs) > 0 }

// Finish is when the request is projected to be answered: the latest batch finish, in seconds
// from planning (0 without batches).
func (p *Plan) Finish() float64 {
	var f float64
	for _, b := range p.Batches {
		if b.Lease != nil {
			f = max(f, b.Lease.Finish)
		}
	}
	return f
}

// IdleFinish is when the request would be answered if its nodes had no other work: per node, the
// sum of its batches' predicted seconds; the largest of those.
func (p *Plan) IdleFinish() float64 {
	per := map[*cluster.Node]float64{}
	var f float64
	for _, b := range p.Batches {
		if b.Lease != nil {
			per[b.Lease.Node] += b.Lease.Predicted
			f = max(f, per[b.Lease.Node])
		}
	}
	return f
}

// Imbalance is max/mean over the plan's nodes of when each is projected to finish its last batch
// of the request: 1 is perfect (and for < 2 nodes). Per node, not per batch: a node runs its
// batches one after another, so two batches queued on one node finish apart by construction,
// and counting them apart would call a plan whose nodes all finish together imbalanced.
func (p *Plan) Imbalance() float64 {
	last := map[*cluster.Node]float64{}
	var order []*cluster.Node
	for _, b := range p.Batches {
		if b.Lease == nil {
			continue
		}
		n := b.Lease.Node
		if _, ok := last[n]; !ok {
			order = append(order, n)
		}
		last[n] = max(last[n], b.Lease.Finish)
	}
	ends := make([]float64, len(order))
	for i, n := range order {
		ends[i] = last[n]
	}
	return split.MaxOverMean(ends)
}

// Release gives back every lease of the plan (a rejected request).
func (p *Plan) Release() {
	for _, b := range p.Batches {
		if b.Lease != nil {
			b.Lease.Release()
			b.Lease = nil
		}
	}
}

// maxItems is the batch cap: the configured one and every candidate's own per-request limit
// (a TEI server takes 32 documents by default), so that no batch is refused as too large.
func maxItems(cfg int, cands []*cluster.Node) int {
	for _, n := range cands {
		if m := n.Limits().MaxItems; m > 0 && (cfg <= 0 || m < cfg) {
			cfg = m
		}
	}
	return cfg
}

// Config is what planning needs of the proxy's configuration.
type Config struct {
	// MaxBatchItems caps the items of one batch (≤ 0: no cap).
	MaxBatchItems int
	// TargetBatchSeconds is the smallest batch cost worth a batch of its own (≤ 0: no floor).
	TargetBatchSeconds float64
	// LearnTokens scales the counter's token counts by what the nodes' replies report
	// (TokenScale).
	LearnTokens bool
}

// Planner plans requests.
type Planner struct {
	cfg      Config
	counter  *prompt.Counter
	tokens   *TokenScale // nil: counts are used as they are
	splitter split.Splitter
	placer   *Placer
	cluster  *cluster.Cluster
}

// NewPlanner builds a planner: tokens counted by counter, items split by splitter, batches placed
// by placer on c's nodes.
func NewPlanner(cfg Config, counter *prompt.Counter, splitter split.Splitter, c *cluster.Cluster, placer *Placer) *Planner {
	pl := &Planner{cfg: cfg, counter: counter, splitter: splitter, placer: placer, cluster: c}
	if cfg.LearnTokens {
		pl.tokens = &TokenScale{}
	}
	return pl
}

// TokenRatios are the scales applied to the counter's item and prefix counts (1, 1 when
// Config.LearnTokens is off or nothing was learned yet).
func (pl *Planner) TokenRatios() (item, prefix float64) { return pl.tokens.Ratios() }

// Plan counts req's tokens, splits its items and places every batch on nodes of the model
// fingerprint ("": any). It returns nil when no node can take work. reqID is stamped on every
// batch request.
func (pl *Planner) Plan(req *relevancev1.ScoreRequest, reqID, fingerprint string) *Plan {
	return pl.plan(req, reqID, fingerprint, false)
}

// Urgent plans req for the earliest finish, whatever its batches' overhead costs the cluster
// (split.Input.Urgent): what admission asks for before refusing a request whose economical plan
// would miss its deadline.
func (pl *Planner) Urgent(req *relevancev1.ScoreRequest, reqID, fingerprint string) *Plan {
	return pl.plan(req, reqID, fingerprint, true)
}

func (pl *Planner) plan(req *relevancev1.ScoreRequest, reqID, fingerprint string, urgent bool) *Plan {
	start := time.Now()
	// Counts as the nodes would make them: the counter's, scaled by what the replies taught.
	itemRatio, prefRatio := pl.tokens.Ratios()
	counted := pl.counter.Prefix(req.GetInstruction(), req.GetQuery())
	prefix := scaled(counted, prefRatio)
	tmpl := min(scaled(pl.counter.Template(req.GetInstruction()), prefRatio), prefix)
	raw := make([]int, len(req.GetItems()))
	toks := make([]int, len(req.GetItems()))
	for i, it := range req.GetItems() {
		raw[i] = pl.counter.Item(it.GetText())
		toks[i] = scaled(raw[i], itemRatio)
	}
	others := pl.placer.otherModels(fingerprint, nil)
	cands := pl.cluster.Eligible(others)
	if len(cands) == 0 {
		cands = pl.cluster.Fallback(others)
	}
	if len(cands) == 0 {
		return nil
	}
	if c := itemCap(req.GetOptions(), prefix, pl.counter.Tail(), cands); c > 0 {
		none := req.GetOptions().GetTruncation() == relevancev1.Truncation_TRUNCATION_NONE
		exactCap := 0 // c from the exact prefix and tail, counted for the first item near c
		for i := range toks {
			// Under TRUNCATION_NONE an item over the cap is refused (TOO_LONG) by the node having
			// only been tokenized. Priced at the cap, a document past the limit made admission
			// refuse the whole request as too slow ("send a longer deadline") on a CPU node,
			// where a longer deadline then got the 422 naming the document; priced at nothing it
			// reaches the node and that 422 at once. Whether it is over is counted exactly for an
			// item the estimate puts near or past the cap (an estimate a few per cent off either
			// way would price a fitting item at nothing, or a refused one at the cap).
			if none && 10*toks[i] > 9*c {
				// Against the cap the exact prefix and tail leave, as the node decides: the
				// estimated prefix is some 10 tokens over on a short query, which put an item
				// whose prompt fits within those tokens of the limit past the cap, priced at
				// nothing while the node computes it whole.
				if exactCap == 0 {
					exactCap = itemCap(req.GetOptions(), pl.counter.PrefixExact(req.GetInstruction(), req.GetQuery()), pl.counter.TailExact(), cands)
				}
				// Counted only as far as the cap (ItemExactUpTo): an item of 64 KB against an 8K
				// cap is known to be over once 8K of its pre-tokens are found, where counting it
				// whole made planning a request of 250 such items take 384 ms against 121 ms
				// without TRUNCATION_NONE (twice when admission replans). An exact counter's own
				// count is already the exact one.
				n := raw[i]
				if !pl.counter.Exact() {
					n = pl.counter.ItemExactUpTo(req.GetItems()[i].GetText(), exactCap)
				}
				toks[i] = n
				if n > exactCap {
					toks[i] = 1
				}
				continue
			}
			toks[i] = min(toks[i], c)
		}
	}
	now := time.Now()
	ref := cluster.MeanCoeffs(cands)
	in := split.Input{
		PrefixTokens:       prefix,
		ItemTokens:         toks,
		Coeffs:             ref,
		Nodes:              make([]split.Node, len(cands)),
		MaxBatchItems:      maxItems(pl.cfg.MaxBatchItems, cands),
		TargetBatchSeconds: pl.cfg.TargetBatchSeconds,
		Urgent:             urgent,
	}
	key := PrefixKey(req.GetInstruction(), req.GetQuery())
	out := &Plan{PrefixTokens: prefix, ItemTokens: toks, Candidates: len(cands), MinSamples: cands[0].Samples()}
	for i, n := range cands {
		in.Nodes[i] = split.Node{Backlog: n.Load(now), Scale: n.Scale(ref)}
		out.MinSamples = min(out.MinSamples, n.Samples())
	}
	if slices.ContainsFunc(in.Nodes, func(nd split.Node) bool { return nd.Backlog > 0 }) {
		out.Backlogs = make([]float64, len(cands))
		for i, nd := range in.Nodes {
			out.Backlogs[i] = nd.Backlog
		}
	}
	batches := pl.splitter.Split(in)
	out.Batches = make([]*Batch, len(batches))
	for bi, b := range batches {
		br := &relevancev1.ScoreBatchRequest{
			RequestId:            reqID,
			BatchIndex:           uint32(bi),
			Query:                req.GetQuery(),
			Instruction:          req.GetInstruction(),
			Items:                make([]*relevancev1.Item, len(b.Items)),
			Options:              req.GetOptions(),
			EstimatedCostSeconds: b.Cost,
		}
		bt := make([]int, len(b.Items))
		ct := make([]int, len(b.Items))
		for j, i := range b.Items {
			br.Items[j] = req.GetItems()[i]
			bt[j], ct[j] = toks[i], raw[i]
		}
		out.Batches[bi] = &Batch{Index: bi, Items: b.Items, Req: br, PrefixTokens: prefix, PrefixKey: key, TemplateTokens: tmpl, Fingerprint: fingerprint, Features: costmodel.BatchFeatures(prefix, bt, false),
			tokens: pl.tokens, countedItems: ct, countedPrefix: counted}
	}
	// Place in the split's order (earliest planned start first), each placement charged before
	// the next, so that the route strategy's picks follow the split's plan.
	for _, b := range out.Batches {
		b.Lease = pl.placer.Place(b.Work(), nil)
	}
	out.Duration = time.Since(start)
	return out
}

// itemCap is the most tokens of one item the nodes will compute after a prefix of prefix tokens
// (0: no bound known): a longer document is cut at its end to fit the nodes' prompt limit
// (Node.MaxPromptTokens, the smallest among the candidates that know one) and the request's
// max_tokens_per_item, so its cost is that of the cut item. Under TRUNCATION_NONE such an item is
// refused rather than computed: plan prices one counted clearly past the cap at nothing, one near
// it at the cap, so that the request reaches the node that refuses it (422, naming the item)
// rather than admission (a misleading 429). Without
// the cap a document of a few times the limit was priced at its whole length, quadratically, and
// admission refused as too slow a request the nodes would have answered in time.
func itemCap(opts *relevancev1.ScoreOptions, prefix, tail int, cands []*cluster.Node) int {
	c := 0
	for _, n := range cands {
		if m := n.MaxPromptTokens(); m > 0 && (c == 0 || m-prefix < c) {
			c = max(1, m-prefix)
		}
	}
	if d := int(opts.GetMaxTokensPerItem()); d > 0 && (c == 0 || d+tail < c) {
		c = d + tail
	}
	return c
}
