package plan

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/route/prefixaffinity"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prior = costmodel.Coeffs{A: 1e-3, B: 1e-7, C: 0.01}

// startCluster starts n fake nodes and a cluster over them, ready.
func startCluster(t testing.TB, n int) *cluster.Cluster {
	t.Helper()
	return startClusterWith(t, n, cluster.Config{Prior: prior, Forgetting: 0.99,
		Breaker: cluster.BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}})
}

// startClusterWith is startCluster with cfg (its Static set to the fake nodes).
func startClusterWith(t testing.TB, n int, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	nodes, err := fakenode.StartCluster(n, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodes.Close)
	cfg.Static = nodes.Addrs()
	c := cluster.New(cfg, nil)
	t.Cleanup(func() { c.Close() })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, func() bool { return len(c.Eligible(nil)) == n }); err != nil {
		t.Fatal(err)
	}
	return c
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.005+1e-3*math.Abs(b) }

// TestPlaceChargesEachPickBeforeTheNext: a placement is visible to the next one at once, so
// least-loaded spreads equal batches over idle nodes and queues the third behind the first; each
// lease's Finish is the work ahead of it plus its own predicted cost on that node.
func TestPlaceChargesEachPickBeforeTheNext(t *testing.T) {
	c := startCluster(t, 2)
	p := NewPlacer(c, leastloaded.New(0, route.DefaultRand))
	f := costmodel.BatchFeatures(50, []int{100, 100, 100, 100}, false)
	want := prior.Seconds(f)
	var ls []*Lease
	for range 3 {
		l := p.Place(Work{Features: f}, nil)
		if l == nil {
			t.Fatal("no lease")
		}
		ls = append(ls, l)
	}
	if ls[0].Node == ls[1].Node {
		t.Errorf("two equal batches on idle nodes both went to %s", ls[0].Node.Addr())
	}
	for i, l := range ls {
		if !near(l.Predicted, want) || !near(l.Finish, l.Start+l.Predicted) {
			t.Errorf("lease %d: predicted %.4f (want %.4f), start %.4f, finish %.4f", i, l.Predicted, want, l.Start, l.Finish)
		}
	}
	if !near(ls[0].Start, 0) || !near(ls[1].Start, 0) || !near(ls[2].Start, want) {
		t.Errorf("starts %.4f %.4f %.4f, want 0, 0, %.4f (the third behind a charged node)", ls[0].Start, ls[1].Start, ls[2].Start, want)
	}
	for _, l := range ls {
		l.Release()
	}
	for _, n := range c.Snapshot() {
		if n.Inflight() != 0 {
			t.Errorf("node %s: in-flight %v after every lease was released, want 0", n.Addr(), n.Inflight())
		}
	}
}

// TestPlaceExcludesTriedNodes: a retry or hedge never lands on a node it already tried, and gets
// nothing when every node was tried.
func TestPlaceExcludesTriedNodes(t *testing.T) {
	c := startCluster(t, 2)
	p := NewPlacer(c, leastloaded.New(0, route.DefaultRand))
	f := costmodel.BatchFeatures(10, []int{10}, false)
	first := p.Place(Work{Features: f}, nil)
	second := p.Place(Work{Features: f}, []*cluster.Node{first.Node})
	if second == nil || second.Node == first.Node {
		t.Fatalf("placement excluding %s: %v", first.Node.Addr(), second)
	}
	if l := p.Place(Work{Features: f}, []*cluster.Node{first.Node, second.Node}); l != nil {
		t.Errorf("every node excluded: got a lease on %s", l.Node.Addr())
	}
	first.Release()
	second.Release()
}

func request(items int) *relevancev1.ScoreRequest {
	req := &relevancev1.ScoreRequest{Query: "usb-c charger"}
	for i := range items {
		req.Items = append(req.Items, &relevancev1.Item{Text: fmt.Sprintf("item %d: a 65 W GaN charger with %d ports", i, i%4+1)})
	}
	return req
}

// TestPlanPlacesEveryBatch: the plan covers every item once, every batch carries its lease, and
// the plan's projected finish is the latest lease's; the idle finish sums each node's own batches.
func TestPlanPlacesEveryBatch(t *testing.T) {
	c := startCluster(t, 2)
	counter, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	placer := NewPlacer(c, roundrobin.New(0))
	pl := NewPlanner(Config{MaxBatchItems: 4}, counter, cost.New(), c, placer).Plan(request(16), "r1", "")
	if pl == nil || len(pl.Batches) < 2 {
		t.Fatalf("plan: %+v", pl)
	}
	seen := map[int]bool{}
	var latest float64
	perNode := map[*cluster.Node]float64{}
	for bi, b := range pl.Batches {
		if b.Lease == nil {
			t.Fatalf("batch %d: no lease", bi)
		}
		if b.Req.GetRequestId() != "r1" || int(b.Req.GetBatchIndex()) != bi || len(b.Req.GetItems()) != len(b.Items) {
			t.Errorf("batch %d: request %+v", bi, b.Req)
		}
		for _, i := range b.Items {
			if seen[i] {
				t.Errorf("item %d in two batches", i)
			}
			seen[i] = true
		}
		latest = max(latest, b.Lease.Finish)
		perNode[b.Lease.Node] += b.Lease.Predicted
	}
	if len(seen) != 16 {
		t.Errorf("%d of 16 items planned", len(seen))
	}
	if pl.Finish() != latest {
		t.Errorf("Finish %v, want the latest lease's %v", pl.Finish(), latest)
	}
	var idle float64
	for _, s := range perNode {
		idle = max(idle, s)
	}
	if !near(pl.IdleFinish(), idle) {
		t.Errorf("IdleFinish %v, want %v", pl.IdleFinish(), idle)
	}
	pl.Release()
	for _, n := range c.Snapshot() {
		if n.Inflight() != 0 {
			t.Errorf("node %s: in-flight %v after Release, want 0", n.Addr(), n.Inflight())
		}
	}
}

// TestPlanWithoutNodes: no eligible node means no plan.
func TestPlanWithoutNodes(t *testing.T) {
	c := cluster.New(cluster.Config{Prior: prior, Forgetting: 0.99}, nil)
	defer c.Close()
	counter, _ := prompt.NewCounter(prompt.CountEstimate)
	if pl := NewPlanner(Config{}, counter, cost.New(), c, NewPlacer(c, roundrobin.New(0))).Plan(request(2), "r", ""); pl != nil {
		t.Errorf("plan without nodes: %+v", pl)
	}
}

// TestPlaceCreditsACachedPrefix: on a node believed to hold the batch's prefix the batch costs its
// items only, and prefix affinity sends it there while that node's queue costs less than the
// prefix it saves.
func TestPlaceCreditsACachedPrefix(t *testing.T) {
	c := startCluster(t, 2)
	p := NewPlacer(c, prefixaffinity.New(0, route.DefaultRand))
	key := PrefixKey("", "usb-c charger")
	w := Work{Features: costmodel.BatchFeatures(400, []int{20, 20}, false), PrefixKey: key, Prefix: costmodel.PrefixFeatures(400)}
	holder := c.Snapshot()[1]
	holder.Remember(key, true)
	full, items := prior.Seconds(w.Features), prior.Seconds(costmodel.BatchFeatures(400, []int{20, 20}, true))
	var ls []*Lease
	defer func() {
		for _, l := range ls {
			l.Release()
		}
	}()
	for k := 0; ; k++ {
		if k > 50 {
			t.Fatal("every batch went to the holder: affinity piled work on one node")
		}
		l := p.Place(w, nil)
		ls = append(ls, l)
		if l.Node != holder {
			// The holder's queue now costs more than the prefix it saves.
			if !near(l.Predicted, full) || holder.Load(time.Now())+items <= full-0.01 {
				t.Errorf("batch %d left the holder (load %.4f) at predicted %.4f; want it only once load + %.4f > %.4f", k, holder.Load(time.Now()), l.Predicted, items, full)
			}
			if k == 0 {
				t.Error("the first batch did not go to the idle holder")
			}
			break
		}
		if !near(l.Predicted, items) {
			t.Errorf("predicted %.4f on the holder, want the items' %.4f (not %.4f)", l.Predicted, items, full)
		}
		if l.Start+items > full+0.01 {
			t.Errorf("batch %d on the holder behind %.4f s: it would finish earlier elsewhere", k, l.Start)
		}
	}
}

// TestPlacePricesOnlyTheQueryOnANodeThatKeepsTemplates: a node that keeps the instruction's
// template pays for a new query's prefix only the tokens after the template (attending it), not
// the whole prefix; a node that holds the query's prefix pays nothing for it.
func TestPlacePricesOnlyTheQueryOnANodeThatKeepsTemplates(t *testing.T) {
	c := startCluster(t, 1)
	n := c.Snapshot()[0]
	b := &Batch{PrefixTokens: 70, TemplateTokens: 60, PrefixKey: PrefixKey("", "usb-c charger"), Features: costmodel.BatchFeatures(70, []int{20, 20}, false)}
	w := b.Work()
	items := costmodel.BatchFeatures(70, []int{20, 20}, true)
	if got := w.On(n); got != w.Features {
		t.Errorf("plain node: %+v, want the whole prefix computed %+v", got, w.Features)
	}
	n.Observe(&relevancev1.ScoreBatchResponse{
		Scores: []*relevancev1.ItemScore{{Index: 0, Tokens: 20}},
		Usage:  &relevancev1.Usage{PrefixTokens: 10},
		Stats:  &relevancev1.BatchStats{ComputeSeconds: 0.05, PrefixTokens: 70},
	}, time.Now())
	want := items.Add(costmodel.ItemFeatures(60, 10))
	if got := w.On(n); math.Abs(got.Tokens-want.Tokens) > 1e-9 || math.Abs(got.Pairs-want.Pairs) > 1e-9 || got.Batches != 1 {
		t.Errorf("node keeping templates: %+v, want the 10 query tokens after the 60 of the template %+v", got, want)
	}
	n.Remember(b.PrefixKey, true)
	if got := w.On(n); math.Abs(got.Tokens-items.Tokens) > 1e-9 || math.Abs(got.Pairs-items.Pairs) > 1e-9 {
		t.Errorf("node holding the prefix: %+v, want the items only %+v", got, items)
	}
}

// TestImbalanceIsPerNode: two batches queued one after the other on a node finish apart by
// construction; a plan whose nodes all finish together is balanced, one whose node finishes
// late is not.
func TestImbalanceIsPerNode(t *testing.T) {
	c := startCluster(t, 2)
	a, b := c.Snapshot()[0], c.Snapshot()[1]
	type nf struct {
		n *cluster.Node
		f float64
	}
	plan := func(finishes ...nf) *Plan {
		p := &Plan{}
		for _, x := range finishes {
			p.Batches = append(p.Batches, &Batch{Lease: &Lease{Node: x.n, Finish: x.f}})
		}
		return p
	}
	if got := plan(nf{a, 0.1}, nf{a, 0.2}, nf{b, 0.1}, nf{b, 0.2}).Imbalance(); math.Abs(got-1) > 1e-9 {
		t.Errorf("nodes finishing together at 0.2 s: imbalance %.3f, want 1", got)
	}
	if got := plan(nf{a, 0.1}, nf{a, 0.3}, nf{b, 0.1}).Imbalance(); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("nodes finishing at 0.3 and 0.1 s: imbalance %.3f, want 1.5", got)
	}
}

// TestLongItemsArePricedAsTheNodesCutThem: an item longer than the nodes' prompt limit leaves
// after the prefix is planned at what a node will compute of it (as is one over the request's
// max_tokens_per_item), the scorer's default limit until a node reports its own. Under
// TRUNCATION_NONE the node refuses such an item instead of computing it: one counted clearly past
// the limit is priced at nothing, one within the estimate's error of it at the limit.
func TestLongItemsArePricedAsTheNodesCutThem(t *testing.T) {
	c := startCluster(t, 1)
	counter, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	planner := NewPlanner(Config{MaxBatchItems: 4}, counter, cost.New(), c, NewPlacer(c, roundrobin.New(0)))
	long := &relevancev1.ScoreRequest{Query: "usb-c charger", Items: []*relevancev1.Item{
		{Text: strings.Repeat("charger cable port watt ", 1500)}, // ~6,000 tokens
		{Text: "a 65 W GaN charger"},
	}}
	plan := func(opts *relevancev1.ScoreOptions) *Plan {
		t.Helper()
		req := proto.Clone(long).(*relevancev1.ScoreRequest)
		req.Options = opts
		pl := planner.Plan(req, "r", "")
		if pl == nil {
			t.Fatal("no plan")
		}
		pl.Release()
		return pl
	}
	whole := plan(nil).ItemTokens[0]
	if whole < 4000 {
		t.Fatalf("the long item counted %d tokens; the test wants several thousand", whole)
	}
	c.Snapshot()[0].Observe(&relevancev1.ScoreBatchResponse{MaxPromptTokens: 1024}, time.Now())
	pl := plan(nil)
	if got, want := pl.ItemTokens[0], 1024-pl.PrefixTokens; got != want {
		t.Errorf("after the node reported a limit of 1024: item planned at %d tokens, want %d (the limit less the %d-token prefix)", got, want, pl.PrefixTokens)
	}
	if got, short := pl.ItemTokens[1], plan(&relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}).ItemTokens[1]; got != short {
		t.Errorf("a short item planned at %d tokens, %d before: the cap must not touch it", got, short)
	}
	if got := plan(&relevancev1.ScoreOptions{MaxTokensPerItem: 100}).ItemTokens[0]; got != 100+counter.Tail() {
		t.Errorf("max_tokens_per_item 100: item planned at %d tokens, want %d (the document's 100 and the template tail)", got, 100+counter.Tail())
	}
	if got := plan(&relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}).ItemTokens[0]; got != 1 {
		// Priced at the limit, it kept a CPU node's request at admission (429, "send a longer
		// deadline") where the node answers 422 naming the document at once.
		t.Errorf("TRUNCATION_NONE: an item of ~6× the limit planned at %d tokens, want 1 (the node refuses it uncomputed)", got)
	}
	// Near the limit the count is exact: an item just past it is refused, one just under it is
	// computed and priced at its length.
	none := &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}
	for _, tc := range []struct {
		name string
		reps int
		over bool
	}{{"just past the limit", 240, true}, {"just under it", 200, false}} {
		near := proto.Clone(long).(*relevancev1.ScoreRequest)
		near.Items[0].Text = strings.Repeat("charger cable port watt ", tc.reps)
		near.Options = none
		np := planner.Plan(near, "r", "")
		if np == nil {
			t.Fatal("no plan")
		}
		np.Release()
		c, exact := 1024-np.PrefixTokens, counter.ItemExact(near.Items[0].Text)
		if (exact > c) != tc.over {
			t.Fatalf("%s: the item counts %d tokens exactly against the limit's %d; the test wants it over: %v", tc.name, exact, c, tc.over)
		}
		want := 1 // refused uncomputed
		if !tc.over {
			want = exact // computed: priced at its exact count (the estimate is ~20 % over here)
		}
		if np.ItemTokens[0] != want {
			t.Errorf("%s (%d of %d tokens): planned at %d tokens, want %d", tc.name, exact, c, np.ItemTokens[0], want)
		}
	}
	// Before any reply, a scorer node is assumed at the scorer's default limit.
	huge := proto.Clone(long).(*relevancev1.ScoreRequest)
	huge.Items[0].Text = strings.Repeat(huge.Items[0].Text, 3) // ~18,000 tokens
	fresh := startCluster(t, 1)
	p := NewPlanner(Config{MaxBatchItems: 4}, counter, cost.New(), fresh, NewPlacer(fresh, roundrobin.New(0))).Plan(huge, "r", "")
	if p == nil {
		t.Fatal("no plan")
	}
	p.Release()
	if got, want := p.ItemTokens[0], prompt.DefaultMaxTokens-p.PrefixTokens; got != want {
		t.Errorf("no node has reported: item planned at %d tokens, want %d (the scorer's default limit less the prefix)", got, want)
	}
}

// TestCutKeepsEveryItemOnceInOrder: a batch refused whole for a node's item limit is cut into
// the fewest pieces the limit allows, of near-equal size (10 at 4: 3, 3, 4 rather than 4, 4, 2,
// whose longest piece would set the batch's finish), every item once and in order, each piece
// carrying its own items and priced at them.
func TestCutKeepsEveryItemOnceInOrder(t *testing.T) {
	toks := make([]int, 12)
	for i := range toks {
		toks[i] = 10 + i
	}
	items := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 11}
	req := &relevancev1.ScoreBatchRequest{RequestId: "r", BatchIndex: 3, Query: "q"}
	for _, i := range items {
		req.Items = append(req.Items, &relevancev1.Item{Id: fmt.Sprint(i)})
	}
	b := &Batch{Index: 3, Items: items, Req: req, PrefixTokens: 20}
	pieces := b.Cut(4, toks)
	var sizes, got []int
	for _, p := range pieces {
		sizes = append(sizes, len(p.Items))
		bt := []int{}
		for j, i := range p.Items {
			got = append(got, i)
			bt = append(bt, toks[i])
			if p.Req.GetItems()[j].GetId() != fmt.Sprint(i) {
				t.Errorf("piece's item %d is %q, want %d", j, p.Req.GetItems()[j].GetId(), i)
			}
		}
		if p.Index != 3 || p.Req.GetBatchIndex() != 3 || p.Req.GetRequestId() != "r" || p.Req.GetQuery() != "q" {
			t.Errorf("piece lost the batch's identity: index %d, request %+v", p.Index, p.Req)
		}
		if p.Features != costmodel.BatchFeatures(20, bt, false) {
			t.Errorf("piece priced at %+v, want its own items'", p.Features)
		}
	}
	if fmt.Sprint(sizes) != "[3 3 4]" || fmt.Sprint(got) != fmt.Sprint(items) {
		t.Errorf("cut at 4: sizes %v, items %v; want [3 3 4] and %v", sizes, got, items)
	}
	if len(req.Items) != 10 {
		t.Errorf("the batch's own request changed: %d items", len(req.Items))
	}
	if p := b.Cut(10, toks); len(p) != 1 || p[0] != b {
		t.Errorf("a batch within the limit is cut into %d pieces", len(p))
	}
}

// TestNoneItemAtTheLimitIsPricedAsComputed: under TRUNCATION_NONE, whether an item near the nodes'
// prompt limit is refused is decided on the whole prompt as a node counts it: the exact prefix,
// the exact document and the exact template tail. An item whose prompt is exactly the limit is
// computed by the node, so it is priced at its tokens; one token more and the node refuses it,
// priced at nothing. The decision compared the exact document against the cap left by the
// estimated prefix (~10 tokens over on a short query) plus the estimated tail, so an item
// within ~10 tokens under the limit was priced at 1 token although the node computes it in
// full: the most expensive item a request can hold, left out of admission's projection.
func TestNoneItemAtTheLimitIsPricedAsComputed(t *testing.T) {
	c := startCluster(t, 1)
	est, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := prompt.NewCounter(prompt.CountExact)
	if err != nil {
		t.Fatal(err)
	}
	planner := NewPlanner(Config{MaxBatchItems: 4}, est, cost.New(), c, NewPlacer(c, roundrobin.New(0)))
	const query = "usb-c charger"
	doc := strings.Repeat("charger cable port watt ", 230)
	item := exact.Item(doc)
	whole := exact.Prefix("", query) + item // the prompt's tokens as a node counts them
	none := &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}
	for _, tc := range []struct {
		name  string
		limit int
		want  int
	}{
		{"prompt exactly at the limit (computed)", whole, item},
		{"prompt one token over the limit (refused)", whole - 1, 1},
	} {
		c.Snapshot()[0].Observe(&relevancev1.ScoreBatchResponse{MaxPromptTokens: uint32(tc.limit)}, time.Now())
		pl := planner.Plan(&relevancev1.ScoreRequest{Query: query, Items: []*relevancev1.Item{{Text: doc}}, Options: none}, "r", "")
		if pl == nil {
			t.Fatal("no plan")
		}
		pl.Release()
		if got := pl.ItemTokens[0]; got != tc.want {
			t.Errorf("%s: node limit %d, prompt %d tokens (item %d): planned at %d tokens, want %d", tc.name, tc.limit, whole, item, got, tc.want)
		}
	}
}
