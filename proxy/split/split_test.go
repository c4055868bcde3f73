package split_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy/split"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
	"github.com/relevance-scoring/relevance/proxy/split/fixed"
)

var coeffs = costmodel.Coeffs{A: 2e-5, B: 2e-9, C: 1e-3}

// heavyTailed draws item lengths from a Pareto-like mix: most items short, a few very long.
func heavyTailed(r *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		l := 60 / math.Pow(1-r.Float64(), 1/1.3) // Pareto, α = 1.3, min 60 tokens
		out[i] = int(math.Min(l, 4000))
	}
	return out
}

func checkCover(t *testing.T, name string, n, maxItems int, bs []split.Batch) {
	t.Helper()
	seen := make([]int, n)
	for bi, b := range bs {
		if len(b.Items) == 0 {
			t.Fatalf("%s: batch %d is empty", name, bi)
		}
		if maxItems > 0 && len(b.Items) > maxItems {
			t.Fatalf("%s: batch %d has %d items > max %d", name, bi, len(b.Items), maxItems)
		}
		for j, i := range b.Items {
			if i < 0 || i >= n {
				t.Fatalf("%s: batch %d holds index %d out of [0,%d)", name, bi, i, n)
			}
			if j > 0 && b.Items[j-1] >= i {
				t.Fatalf("%s: batch %d items not ascending: %v", name, bi, b.Items)
			}
			seen[i]++
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("%s: item %d lands in %d batches, want exactly 1", name, i, c)
		}
	}
}

func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	splitters := map[string]split.Splitter{fixed.Type: fixed.New(), cost.Type: cost.New()}
	for trial := range 150 {
		n := 1 + r.IntN(1200)
		nodes := make([]split.Node, 1+r.IntN(20))
		for j := range nodes {
			nodes[j] = split.Node{Backlog: r.Float64() * 0.2 * float64(r.IntN(2)), Scale: 0.5 + r.Float64()}
		}
		in := split.Input{
			PrefixTokens:       r.IntN(200),
			ItemTokens:         heavyTailed(r, n),
			Coeffs:             coeffs,
			Nodes:              nodes,
			MaxBatchItems:      r.IntN(64),
			TargetBatchSeconds: r.Float64() * 0.05,
		}
		for name, s := range splitters {
			bs := s.Split(in)
			checkCover(t, name, n, in.MaxBatchItems, bs)
			var sum float64
			for _, b := range bs {
				sum += b.Cost
			}
			want := float64(len(bs)) * split.BatchOverhead(coeffs, in.PrefixTokens)
			for _, l := range in.ItemTokens {
				want += split.ItemCost(coeffs, in.PrefixTokens, l)
			}
			if math.Abs(sum-want) > 1e-9*want {
				t.Fatalf("trial %d %s: batch costs sum to %v, want %v", trial, name, sum, want)
			}
		}
	}
}

func TestEmpty(t *testing.T) {
	for _, s := range []split.Splitter{fixed.New(), cost.New()} {
		if bs := s.Split(split.Input{Coeffs: coeffs}); len(bs) != 0 {
			t.Errorf("%T: %d batches for no items", s, len(bs))
		}
	}
}

func TestFixedChunks(t *testing.T) {
	bs := fixed.New().Split(split.Input{ItemTokens: make([]int, 7), MaxBatchItems: 3, Coeffs: coeffs})
	var got [][]int
	for _, b := range bs {
		got = append(got, b.Items)
	}
	if d := cmp.Diff([][]int{{0, 1, 2}, {3, 4, 5}, {6}}, got); d != "" {
		t.Errorf("chunks (-want +got):\n%s", d)
	}
}

func TestCostBalancesHeavyTail(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var fixedSum, costSum float64
	const trials = 50
	for range trials {
		in := split.Input{
			PrefixTokens:  40,
			ItemTokens:    heavyTailed(r, 500),
			Coeffs:        coeffs,
			Nodes:         make([]split.Node, 16),
			MaxBatchItems: 32,
		}
		fixedSum += split.Imbalance(fixed.New().Split(in))
		costSum += split.Imbalance(cost.New().Split(in))
	}
	fixedMean, costMean := fixedSum/trials, costSum/trials
	t.Logf("mean imbalance (max/mean): fixed %.3f, cost %.3f", fixedMean, costMean)
	if costMean > 1.1 || costMean >= fixedMean {
		t.Errorf("cost imbalance %.3f, want ≤ 1.1 and below fixed's %.3f", costMean, fixedMean)
	}
}

func TestCostBatchCount(t *testing.T) {
	items := make([]int, 200)
	for i := range items {
		items[i] = 300
	}
	tests := []struct {
		name   string
		nodes  []split.Node
		target float64
		max    int
		want   int
	}{
		{"one per idle node", make([]split.Node, 4), 0, 0, 4},
		{"target floor merges", make([]split.Node, 8), 1e9, 0, 1},
		{"item cap forces more", make([]split.Node, 2), 0, 10, 20},
		{"busy node skipped", []split.Node{{}, {}, {Backlog: 100}}, 0, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := cost.New().Split(split.Input{PrefixTokens: 40, ItemTokens: items, Coeffs: coeffs, Nodes: tt.nodes, TargetBatchSeconds: tt.target, MaxBatchItems: tt.max})
			if len(bs) != tt.want {
				t.Errorf("%d batches, want %d", len(bs), tt.want)
			}
		})
	}
}

func TestCostBacklogAware(t *testing.T) {
	items := make([]int, 100)
	for i := range items {
		items[i] = 200
	}
	in := split.Input{PrefixTokens: 40, ItemTokens: items, Coeffs: coeffs, Nodes: []split.Node{{Backlog: 0}, {Backlog: 0.2}}}
	var total float64
	for _, l := range items {
		total += split.ItemCost(coeffs, 40, l)
	}
	bs := cost.New().Split(in)
	if len(bs) != 2 {
		t.Fatalf("%d batches, want 2 (total %.3fs vs backlog 0.2s)", len(bs), total)
	}
	// Batches come in start order; the one planned behind the backlog must be the smaller.
	if !(bs[0].Start == 0 && bs[1].Start == 0.2 && bs[1].Cost < bs[0].Cost) {
		t.Errorf("batches %+v: want the later-starting one cheaper", []float64{bs[0].Start, bs[0].Cost, bs[1].Start, bs[1].Cost})
	}
	if imb := math.Abs(bs[0].Start + bs[0].Cost - bs[1].Start - bs[1].Cost); imb > 0.02 {
		t.Errorf("planned completions differ by %.3fs", imb)
	}
}

func TestImbalance(t *testing.T) {
	tests := []struct {
		name string
		bs   []split.Batch
		want float64
	}{
		{"none", nil, 1},
		{"equal", []split.Batch{{Cost: 1}, {Cost: 1}}, 1},
		{"double", []split.Batch{{Cost: 1}, {Cost: 3}}, 1.5},
		{"with start", []split.Batch{{Cost: 1, Start: 1}, {Cost: 2}}, 1},
	}
	for _, tt := range tests {
		if got := split.Imbalance(tt.bs); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func BenchmarkCostSplit1000(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	items := heavyTailed(r, 1000)
	for _, nodes := range []int{8, 64} {
		in := split.Input{PrefixTokens: 40, ItemTokens: items, Coeffs: coeffs, Nodes: make([]split.Node, nodes), MaxBatchItems: 64}
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cost.New().Split(in)
			}
		})
	}
}

// TestNonFiniteInputs: a node that reports a NaN or infinite backlog (a buggy or overflowing
// node) must not crash the splitter or lose items: every item still lands in exactly one batch.
func TestNonFiniteInputs(t *testing.T) {
	toks := heavyTailed(rand.New(rand.NewPCG(3, 4)), 200)
	for _, tc := range []struct {
		name  string
		nodes []split.Node
	}{
		{"all NaN", []split.Node{{Backlog: math.NaN()}, {Backlog: math.NaN()}}},
		{"all +Inf", []split.Node{{Backlog: math.Inf(1)}, {Backlog: math.Inf(1)}}},
		{"one NaN", []split.Node{{Backlog: math.NaN()}, {Backlog: 0.01}}},
		{"NaN scale", []split.Node{{Scale: math.NaN()}, {Scale: math.Inf(1)}}},
	} {
		for name, s := range map[string]split.Splitter{fixed.Type: fixed.New(), cost.Type: cost.New()} {
			in := split.Input{PrefixTokens: 80, ItemTokens: toks, Coeffs: coeffs, Nodes: tc.nodes, MaxBatchItems: 16, TargetBatchSeconds: 0.005}
			checkCover(t, tc.name+"/"+name, len(toks), 16, s.Split(in))
		}
	}
}

// profileSmall is the calibrated small-model profile (bench/results/profile-small.json): the
// per-batch overhead c dwarfs the work of a short item.
var profileSmall = costmodel.Coeffs{A: 6.68294096676272e-4, B: 3.793320296160167e-7, C: 0.13838811873546172}

// TestCostDoesNotOverSplit: short items under a dominant per-batch overhead. Cutting 16 items of
// ~16 tokens into one batch each would shorten this request's idle makespan by ~15 % but cost
// the cluster ~3.4× the work of 4 chunks of 4, so at load it saturates at a third of its
// capacity. The splitter must not buy a little latency with that much capacity, idle or busy.
func TestCostDoesNotOverSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name    string
		backlog float64
	}{{"idle", 0}, {"busy", 0.5}} {
		t.Run(tc.name, func(t *testing.T) {
			for trial := range 20 {
				items := make([]int, 8+r.IntN(17))
				for i := range items {
					items[i] = int(math.Min(300, math.Max(6, 16*math.Exp(0.7*r.NormFloat64()))))
				}
				nodes := make([]split.Node, 16)
				for i := range nodes {
					nodes[i].Backlog = tc.backlog * r.Float64()
				}
				in := split.Input{PrefixTokens: 70, ItemTokens: items, Coeffs: profileSmall, Nodes: nodes, MaxBatchItems: 4}
				work := func(bs []split.Batch) float64 {
					var w float64
					for _, b := range bs {
						w += b.Cost
					}
					return w
				}
				got, base := cost.New().Split(in), fixed.New().Split(in)
				checkCover(t, "cost", len(items), 4, got)
				if len(got) > len(base) || work(got) > 1.01*work(base) {
					t.Fatalf("trial %d (%d items): cost split makes %d batches (%.3fs of work), fixed chunks %d (%.3fs)",
						trial, len(items), len(got), work(got), len(base), work(base))
				}
			}
		})
	}
}

// TestCostUrgentFinishesFirst: when the economical plan (few batches: each pays the prefix and
// overhead again) would finish too late, an urgent split cuts the request into more batches
// that finish sooner — the plan admission asks for before refusing a request.
func TestCostUrgentFinishesFirst(t *testing.T) {
	c := costmodel.Coeffs{A: 1e-3, C: 0.25}
	items := make([]int, 16)
	for i := range items {
		items[i] = 25 // 0.025 s each: 0.4 s of items against 0.3 s of overhead per batch
	}
	in := split.Input{PrefixTokens: 50, ItemTokens: items, Coeffs: c, Nodes: make([]split.Node, 4)}
	finish := func(bs []split.Batch) float64 {
		var f float64
		for _, b := range bs {
			f = math.Max(f, b.Start+b.Cost)
		}
		return f
	}
	eco := cost.New().Split(in)
	in.Urgent = true
	urgent := cost.New().Split(in)
	checkCover(t, "urgent", len(items), len(items), urgent)
	if len(urgent) <= len(eco) || finish(urgent) >= finish(eco) {
		t.Errorf("economical: %d batches finishing at %.3fs; urgent: %d at %.3fs; want more batches finishing sooner",
			len(eco), finish(eco), len(urgent), finish(urgent))
	}
}

// TestCostKeepsANodesBatchesEqual: when a node gets several batches of one request (2 nodes, at
// most 4 items a batch, 16 items: 2 batches each), they must share the node's work equally. The
// node runs them one after another, and a scorer node merges whatever is queued while a pass runs
// into its next pass, so a long first batch makes the second ride with more of other requests'
// work. Balancing each batch's own planned completion (its planned start + its cost) instead gave
// the two batches planned to start at once the 8 longest items (e.g. 144 against 91 ms) and cost
// cost+least_loaded ~4 points of goodput against fixed chunks at 90 % load
// (bench/results/README.md §11b).
func TestCostKeepsANodesBatchesEqual(t *testing.T) {
	// The 1-thread node of the fidelity run (bench/results/fidelity-2-xeon/profile.json): 8 ms a
	// batch, 0.375 ms a token, so the items, not the overhead, decide a batch's cost.
	profileXeon := costmodel.Coeffs{A: 3.753647984172786e-4, B: 1.8082551292182668e-7, C: 8.108253120868483e-3}
	r := rand.New(rand.NewPCG(9, 10))
	for trial := range 50 {
		items := make([]int, 16)
		for i := range items {
			// The compare workload's listings: ~16 tokens, log-normal σ 0.7.
			items[i] = int(math.Min(300, math.Max(6, 16*math.Exp(0.7*r.NormFloat64()))))
		}
		in := split.Input{PrefixTokens: 70, ItemTokens: items, Coeffs: profileXeon, Nodes: make([]split.Node, 2), MaxBatchItems: 4}
		bs := cost.New().Split(in)
		checkCover(t, "cost", len(items), 4, bs)
		if len(bs) != 4 {
			t.Fatalf("trial %d: %d batches, want 4", trial, len(bs))
		}
		// Batches come in planned-start order: the first two start at once (one per node), the
		// last two after them. The early pair must not carry the late pair's share.
		early, late := bs[0].Cost+bs[1].Cost, bs[2].Cost+bs[3].Cost
		if early > 1.25*late {
			t.Errorf("trial %d: the batches planned first cost %.1f ms, the ones after them %.1f ms (items %v)",
				trial, 1e3*early, 1e3*late, items)
		}
	}
}

// TestCostMakesFewerBatchesOnABusyCluster: a batch's overhead costs a busy cluster more than an
// idle one (it delays everything queued behind it), so the same request is cut into fewer
// batches when every node has a backlog than when every node is idle — with the same backlog on
// every node, its own makespan gains nothing from the backlog either way.
func TestCostMakesFewerBatchesOnABusyCluster(t *testing.T) {
	profile := costmodel.Coeffs{A: 6.35e-4, B: 4.3e-7, C: 0.0194} // the small model, one thread
	items := make([]int, 16)
	for i := range items {
		items[i] = 20 + i%7
	}
	split16 := func(backlog float64) int {
		nodes := make([]split.Node, 16)
		for i := range nodes {
			nodes[i] = split.Node{Backlog: backlog, Scale: 1}
		}
		bs := cost.New().Split(split.Input{PrefixTokens: 70, ItemTokens: items, Coeffs: profile, Nodes: nodes, MaxBatchItems: 32})
		checkCover(t, "busy", len(items), 32, bs)
		return len(bs)
	}
	idle, busy := split16(0), split16(0.3)
	if busy >= idle {
		t.Errorf("%d batches with 0.3 s of backlog on every node, %d on idle nodes: want fewer when busy", busy, idle)
	}
}

// TestHugeBatchCapMeansNoCap: a cap far above any request (max_batch_items has no upper bound in
// the configuration, and a node may report a large limit) is no cap at all. The batch count
// ceil(n/m) was computed as (n+m−1)/m, which overflows for m near MaxInt: the cost splitter
// indexed bins[-1] and the fixed one made a slice of negative capacity, a panic either way.
func TestHugeBatchCapMeansNoCap(t *testing.T) {
	toks := heavyTailed(rand.New(rand.NewPCG(5, 6)), 40)
	for _, m := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - 38} {
		for name, s := range map[string]split.Splitter{fixed.Type: fixed.New(), cost.Type: cost.New()} {
			in := split.Input{PrefixTokens: 80, ItemTokens: toks, Coeffs: coeffs, Nodes: []split.Node{{}, {}}, MaxBatchItems: m}
			var bs []split.Batch
			func() {
				defer func() {
					if e := recover(); e != nil {
						t.Fatalf("%s, cap %d: panic: %v", name, m, e)
					}
				}()
				bs = s.Split(in)
			}()
			checkCover(t, fmt.Sprintf("%s cap %d", name, m), len(toks), m, bs)
		}
	}
}
