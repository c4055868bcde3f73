// Package cost is the cost-balanced splitting strategy.
//
// Item i of L_i tokens after a prefix of P tokens costs c_i = a·L_i + b·L_i·(P + L_i/2); every
// batch also pays o = a·P + b·P²/2 + c (the prefix once and the fixed overhead). With W = Σ c_i,
// k batches of cost W/k + o are placed greedily on the nodes (each to the node that would finish
// it first, counting its backlog and relative speed), the work is then spread over them so that
// all finish together (a node behind a backlog gets less), and k is the one with the least
// projected completion T(k) plus k·o·(1 + B̄/S) / capacity — the share of the cluster (Σ 1/scale
// nodes) that the batches' overheads take from later requests, dearer the busier the cluster (B̄
// the mean node backlog, S = o + W/kmin a batch's time; see Split) (with Input.Urgent, T(k)
// alone: the plan that finishes this request first); fewer batches on near-ties — within
//
//	ceil(n / MaxBatchItems) ≤ k ≤ min(n, 2·nodes, W / (TargetBatchSeconds − o)).
//
// The items are then partitioned longest-processing-time first over the nodes: in decreasing
// cost, each item goes to the node whose planned finish (backlog + its batches' overheads and
// items so far, times its scale) is earliest, into that node's least-loaded batch, skipping full
// batches. LPT is within 4/3 of the optimal makespan and, with hundreds of items much smaller
// than a batch, near-equal in practice. A node's batches are planned to run one after another,
// the lightest first, and come out in order of planned start.
//
// Safe for concurrent use: Split keeps no state.
package cost

import (
	"cmp"
	"math"
	"slices"

	"github.com/relevance-scoring/relevance/proxy/split"
)

// Type is the strategy's name in configuration.
const Type = "cost"

// Splitter balances estimated cost.
type Splitter struct{}

var _ split.Splitter = (*Splitter)(nil)

// New returns the cost splitter.
func New() *Splitter { return &Splitter{} }

type bin struct {
	node        int // the node the bin is planned on (index into the nodes planned against)
	scale, load float64
	items       []int
}

// Split implements split.Splitter.
func (*Splitter) Split(in split.Input) []split.Batch {
	n := len(in.ItemTokens)
	if n == 0 {
		return nil
	}
	costs := make([]float64, n)
	var total float64
	for i, l := range in.ItemTokens {
		costs[i] = split.ItemCost(in.Coeffs, in.PrefixTokens, l)
		total += costs[i]
	}
	over := split.BatchOverhead(in.Coeffs, in.PrefixTokens)
	nodes := in.Nodes
	if len(nodes) == 0 {
		nodes = []split.Node{{}}
	}
	m := in.MaxBatchItems
	if m <= 0 {
		m = n
	}
	kmin := (n-1)/m + 1 // ceil(n/m) without n+m−1, which overflows for a cap near MaxInt
	kmax := min(n, 2*len(nodes))
	if t := in.TargetBatchSeconds; t > 0 && !math.IsInf(total, 0) {
		if t > over {
			kmax = min(kmax, int(total/(t-over)))
		} else {
			kmax = min(kmax, n)
		}
	}
	kmax = max(kmax, kmin, 1)

	// Each batch's overhead o is work the cluster does for this request and for nobody else:
	// spread over the cluster it delays every later request by o / capacity (capacity in
	// reference nodes: Σ 1/scale). Minimising this request's makespan alone buys a few percent
	// of its latency with k·o of everyone's capacity — with a per-batch overhead that dominates
	// the item work (c = 138 ms against ~11 ms per short item on the calibrated small model) it
	// cut 16 items into 16 batches: 3.4× the work of 4 chunks of 4 for a 15 % shorter idle
	// makespan, so the cluster saturated at a third of its capacity. So k minimises the makespan
	// plus the capacity the batches' overhead takes from the cluster.
	var capacity, backlog float64
	for _, nd := range nodes {
		capacity += 1 / scaleOf(nd)
		backlog += backlogOf(nd)
	}
	// The overhead's price grows with the load: a second of work added to a busy cluster delays
	// every batch queued behind it until the queue next drains, about 1/(1−ρ) times what it
	// delays an idle one. With the mean backlog B̄ standing for the queueing wait and a batch of
	// this request at kmin for the service time S, 1/(1−ρ) = 1 + W/S ≈ 1 + B̄/S (M/M/1). At
	// 90 % load on 16 nodes, pricing overhead at the idle rate cut requests into 5.3 batches
	// against fixed chunks' 3.4 and cost 12 % more node time (results §9b).
	congestion := 1.0
	if s := over + total/float64(kmin); s > 0 && !math.IsInf(total, 0) {
		congestion += backlog / float64(len(nodes)) / s
	}
	bestJ := math.Inf(1)
	var bestBins []bin
	for k := kmin; k <= kmax; k = nextK(k, kmax) {
		planned, t := place(nodes, k, total/float64(k)+over, total, over)
		j := t + float64(k)*over*congestion/capacity
		if in.Urgent {
			j = t // this request's makespan alone: it would miss its deadline otherwise
		}
		// A new k must win by more than noise to pay o again. The first k is always kept, so a
		// plan exists even when t is not a number (a node that reported a NaN backlog).
		if bestBins == nil || j < bestJ*0.99 {
			bestJ, bestBins = j, planned
		}
	}

	bins := bestBins
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(costs[y], costs[x]) }) // costliest first
	// LPT over nodes, then the least-loaded open bin of the chosen node. A node runs its batches
	// one after another, so what is balanced is each node's finish, and a node's bins are kept
	// equal. Balancing each bin's own planned completion instead (a planned start of
	// B + r·(T − B)/m, plus its cost) front-loaded the plan: of a node's two bins, the one
	// planned to start at once took about three quarters of the node's share, although the other
	// could only start when it ended. The node's finish is the same either way, but a scorer node
	// merges the batches queued while a pass runs into its next pass, so the longer the first
	// batch, the more of other requests' work rides with the rest of this request
	// (bench/results/README.md §11b: at most 4 items a batch on 2 nodes, the first two
	// batches carried 62 % of a request's work against 53 % for fixed chunks, and cost+least_loaded
	// had ~4 points less goodput than fixed+least_loaded at 90 % load).
	nodeEnd := backlogs(nodes)
	for _, b := range bins {
		nodeEnd[b.node] += b.scale * over
	}
	for _, i := range order {
		best := -1
		var bestEnd float64
		for b := range bins {
			if len(bins[b].items) >= m {
				continue
			}
			j := bins[b].node
			end := nodeEnd[j] + bins[b].scale*costs[i]
			if best < 0 || end < bestEnd || (end == bestEnd && bins[b].node == bins[best].node && bins[b].load < bins[best].load) {
				best, bestEnd = b, end
			}
		}
		bins[best].items = append(bins[best].items, i)
		bins[best].load += costs[i]
		nodeEnd[bins[best].node] += bins[best].scale * costs[i]
	}
	// Each node runs its batches in turn, the lightest first: the batches queued behind a running
	// pass merge into the next one, so the shorter the first, the less of other requests' work
	// rides with the rest of this request. A batch's start is its node's backlog plus the
	// batches before it there.
	slices.SortStableFunc(bins, func(x, y bin) int {
		return cmp.Or(cmp.Compare(x.node, y.node), cmp.Compare(x.load, y.load))
	})
	next := backlogs(nodes)
	out := make([]split.Batch, 0, len(bins))
	for _, b := range bins {
		if len(b.items) == 0 {
			continue
		}
		slices.Sort(b.items)
		out = append(out, split.Batch{Items: b.items, Cost: over + b.load, Start: next[b.node]})
		next[b.node] += b.scale * (over + b.load)
	}
	slices.SortStableFunc(out, func(x, y split.Batch) int { return cmp.Compare(x.Start, y.Start) })
	return out
}

// place decides how many of k batches each node gets (one at a time, each to the node that
// would finish an equal share c first) and then the makespan T if the work W were spread
// continuously over those batches: node j with m_j batches and backlog B_j takes
// max(0, (T − B_j)/s_j − m_j·o) of work, and T solves Σ_j of that = W.
func place(nodes []split.Node, k int, c, w, o float64) ([]bin, float64) {
	free := backlogs(nodes)
	count := make([]int, len(nodes))
	for range k {
		best := 0
		var bestEnd float64
		for j, nd := range nodes {
			end := free[j] + scaleOf(nd)*c
			if j == 0 || end < bestEnd {
				best, bestEnd = j, end
			}
		}
		free[best] = bestEnd
		count[best]++
	}
	spread := func(t float64) float64 {
		var sum float64
		for j, nd := range nodes {
			if count[j] > 0 {
				sum += math.Max(0, (t-backlogOf(nd))/scaleOf(nd)-float64(count[j])*o)
			}
		}
		return sum
	}
	lo, hi := 0.0, 0.0
	for j := range nodes {
		if count[j] > 0 {
			hi = math.Max(hi, free[j])
		}
	}
	for range 60 {
		mid := (lo + hi) / 2
		if spread(mid) < w {
			lo = mid
		} else {
			hi = mid
		}
	}
	bins := make([]bin, 0, k)
	for j, nd := range nodes {
		for range count[j] {
			bins = append(bins, bin{node: j, scale: scaleOf(nd)})
		}
	}
	return bins, hi
}

// nextK steps through the batch counts worth evaluating: every one up to 16, then about 10%
// apart (the makespan is flat there and each evaluation costs O(k·nodes)), always ending on kmax.
func nextK(k, kmax int) int {
	if k < 16 || k == kmax {
		return k + 1
	}
	return min(kmax, max(k+1, k*11/10))
}

// maxSeconds bounds a backlog or scale that a node reported as infinite: far beyond any deadline,
// but finite, so that the arithmetic of place still orders nodes instead of producing NaN.
const maxSeconds = 1e9

func scaleOf(n split.Node) float64 {
	if n.Scale > 0 {
		return math.Min(n.Scale, maxSeconds)
	}
	return 1 // zero, negative or NaN
}

// backlogs is every node's backlogOf, by index.
func backlogs(nodes []split.Node) []float64 {
	out := make([]float64, len(nodes))
	for j, nd := range nodes {
		out[j] = backlogOf(nd)
	}
	return out
}

// backlogOf is the node's backlog made safe to compute with: NaN or negative is 0, +Inf is
// maxSeconds (node loads come from node replies and must not be trusted to be finite).
func backlogOf(n split.Node) float64 {
	if !(n.Backlog > 0) {
		return 0
	}
	return math.Min(n.Backlog, maxSeconds)
}
