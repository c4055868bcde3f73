package proxy

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/proxy/scorecache"
)

// TestScoreCacheServesRepeatsWithoutNodes: a repeated (query, item) under the same model is
// answered from the cache, marked in usage; new items in the same request still go to the nodes;
// no_cache bypasses it; scores and ranking are what the nodes gave.
func TestScoreCacheServesRepeatsWithoutNodes(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Fingerprint: "model-a"})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	calls := func() int64 { return nodes[0].Items() + nodes[1].Items() }
	first := score(t, p, makeRequest(10, 1)) // learns the fingerprint
	req := makeRequest(10, 1)
	before := calls()
	again := score(t, p, req)
	if got := calls() - before; got != 0 {
		t.Errorf("a repeated request sent %d items to the nodes, want 0", got)
	}
	if u := again.GetUsage().GetCachedItems(); u != 10 {
		t.Errorf("cached_items = %d, want 10", u)
	}
	for i := range first.GetScores() {
		if first.GetScores()[i].GetScore() != again.GetScores()[i].GetScore() || again.GetScores()[i].GetId() != req.GetItems()[i].GetId() {
			t.Fatalf("item %d: cached %+v, fresh %+v", i, again.GetScores()[i], first.GetScores()[i])
		}
	}
	if len(again.GetRanking()) != 10 || again.GetRanking()[0] != first.GetRanking()[0] {
		t.Errorf("ranking from the cache %v, fresh %v", again.GetRanking(), first.GetRanking())
	}
	// Half new items: only those are scored by nodes.
	mixed := makeRequest(10, 1)
	extra := makeRequest(5, 77)
	mixed.Items = append(mixed.Items[:5], extra.Items...)
	before = calls()
	resp := score(t, p, mixed)
	if got := calls() - before; got != 5 {
		t.Errorf("5 new items of 10: %d scored by nodes", got)
	}
	if resp.GetUsage().GetCachedItems() != 5 || len(resp.GetScores()) != 10 {
		t.Errorf("usage %+v, %d scores", resp.GetUsage(), len(resp.GetScores()))
	}
	for i, s := range resp.GetScores() {
		if int(s.GetIndex()) != i || s.GetId() != mixed.GetItems()[i].GetId() {
			t.Errorf("scores[%d] = %+v: index/id out of order", i, s)
		}
	}
	// Bypass.
	bypass := makeRequest(10, 1)
	bypass.Options = &relevancev1.ScoreOptions{NoCache: true}
	before = calls()
	if r := score(t, p, bypass); r.GetUsage().GetCachedItems() != 0 || calls()-before != 10 {
		t.Errorf("no_cache: cached_items %d, %d items to nodes; want 0 and 10", r.GetUsage().GetCachedItems(), calls()-before)
	}
}

// TestCachedItemsCountTheirPromptTokens: usage.prompt_tokens is every prompt token the request
// stands for, so a request answered wholly or partly from the cache reports what the same request
// scored by the nodes reports (cached_items says how many nodes did not compute).
func TestCachedItemsCountTheirPromptTokens(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Fingerprint: "model-a"})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	fresh := func(r *relevancev1.ScoreRequest) uint64 {
		r.Options = &relevancev1.ScoreOptions{NoCache: true}
		return score(t, p, r).GetUsage().GetPromptTokens()
	}
	first := score(t, p, makeRequest(10, 1)).GetUsage().GetPromptTokens()
	if first == 0 {
		t.Fatal("the nodes reported no prompt tokens")
	}
	if got := score(t, p, makeRequest(10, 1)).GetUsage(); got.GetCachedItems() != 10 || got.GetPromptTokens() != first {
		t.Errorf("all cached: usage %+v, want 10 cached items and %d prompt tokens", got, first)
	}
	mixed := func() *relevancev1.ScoreRequest {
		r := makeRequest(10, 1)
		r.Items = append(r.Items[:5], makeRequest(5, 77).Items...)
		return r
	}
	got := score(t, p, mixed()).GetUsage()
	if want := fresh(mixed()); got.GetCachedItems() != 5 || got.GetPromptTokens() != want {
		t.Errorf("half cached: usage %+v, want 5 cached items and %d prompt tokens (the nodes' count)", got, want)
	}
}

// TestModelSwapUnderTraffic: nodes swap model one after the other (a rolling update) while
// requests flow. No reply ever mixes scores of the two models, and once the cluster serves the
// new model no score of the old one is served, from a node or from the cache.
func TestModelSwapUnderTraffic(t *testing.T) {
	nodes := startNodes(t, 3, fakenode.Options{Fingerprint: "model-a", Coeffs: fastCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.MaxBatchItems = 3 // several batches per request, on several nodes
	p, _ := startProxy(t, cfg)
	const shift = 0.5 // model b scores every item 0.5 higher than model a
	base := func(req *relevancev1.ScoreRequest, i int) float32 {
		return fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText())
	}
	// which says which model scored the reply: every item's score is a's or every one is b's.
	which := func(req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) string {
		model := ""
		for i, s := range resp.GetScores() {
			m := "a"
			if d := float64(s.GetScore() - base(req, i)); math.Abs(d) > 1e-3 {
				m = "b"
			}
			if model != "" && m != model {
				t.Errorf("reply mixes models: item %d from %s, earlier items from %s", i, m, model)
				return "mixed"
			}
			model = m
		}
		return model
	}
	for i := range 5 { // warm the cache with model a
		which(makeRequest(9, uint64(i)), score(t, p, makeRequest(9, uint64(i))))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				req := makeRequest(9, uint64(k%5+10*w))
				resp, err := p.Score(context.Background(), req)
				if err != nil {
					continue // UNAVAILABLE while the model changed under the request: allowed, never mixed
				}
				which(req, resp)
			}
		})
	}
	for _, n := range nodes {
		time.Sleep(20 * time.Millisecond)
		n.SetModel("model-b", shift)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	// Every node serves b now: once the proxy has seen it, nothing of a is served.
	scoreAny := func(req *relevancev1.ScoreRequest) *relevancev1.ScoreResponse {
		t.Helper()
		resp, err := p.Score(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The proxy learns each node's model from its replies, and pins a request to the model most
	// nodes were last seen with: a request pinned to a while the nodes it reached already serve b
	// fails (UNAVAILABLE, never mixed) and teaches the proxy. Under CPU contention the traffic
	// above may have reached only some nodes before the swap ended, so that can take a request
	// or two.
	waitUntil(t, "a request answered after the swap", func() bool {
		req := makeRequest(9, 100)
		resp, err := p.Score(context.Background(), req)
		if err != nil {
			return false
		}
		if m := which(req, resp); m != "b" {
			t.Errorf("the first request answered after the swap was served by model %s", m)
		}
		return true
	})
	for i := range 5 {
		req := makeRequest(9, uint64(i))
		if m := which(req, scoreAny(req)); m != "b" {
			t.Errorf("request %d after the swap served model %s (stale cache or node)", i, m)
		}
	}
}

// TestScoresWithoutTheModelsIdentityAreNotCached: in a mixed cluster a server of another kind
// (vLLM, TEI, …) answers without a model fingerprint. Its scores may go into a reply, but they
// are not cached under the served model's identity: a repeat of the request is answered from
// the cache only with the items the fingerprinted nodes scored, and the rest are scored again.
func TestScoresWithoutTheModelsIdentityAreNotCached(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Fingerprint: "model-a", Coeffs: fastCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.MaxBatchItems = 2
	p, _ := startProxy(t, cfg)
	score(t, p, makeRequest(8, 1)) // both nodes answer: the cluster serves model-a
	for _, n := range p.cluster.Snapshot() {
		if n.Fingerprint() != "model-a" {
			t.Fatalf("node %s fingerprint %q, want model-a", n.Addr(), n.Fingerprint())
		}
	}
	nodes[1].SetModel("", 0.5) // another server: no fingerprint, scores 0.5 higher
	req := makeRequest(8, 2)
	first, err := p.Score(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	unidentified := 0
	for i, s := range first.GetScores() {
		if math.Abs(float64(s.GetScore()-fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText()))) > 1e-3 {
			unidentified++
		}
	}
	if unidentified == 0 || unidentified == 8 {
		t.Fatalf("%d of 8 items scored by the node without a fingerprint, want some but not all", unidentified)
	}
	nodes[1].SetModel("model-a", 0) // the same node now serves model-a: what it scores again is exact
	again := score(t, p, makeRequest(8, 2))
	if got, want := again.GetUsage().GetCachedItems(), uint64(8-unidentified); got != want {
		t.Errorf("repeat: %d items from the cache, want the %d that model-a's node scored", got, want)
	}
	for i, s := range again.GetScores() {
		if want := fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText()); math.Abs(float64(s.GetScore()-want)) > 1e-3 {
			t.Errorf("repeat, item %d: score %v, want model-a's %v (a score without its identity was cached under it)", i, s.GetScore(), want)
		}
	}
}

// TestRestartedNodeDoesNotKeepItsOldIdentity: a node goes away and comes back healthy serving
// another model (a restart on new weights). Until it answers, the proxy does not know its model;
// it must not keep answering from the cache under the identity the node had before the restart.
func TestRestartedNodeDoesNotKeepItsOldIdentity(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{Fingerprint: "model-a"})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	req := makeRequest(6, 1)
	score(t, p, req) // learns model-a, fills the cache
	healthy := func(want bool) func() bool {
		return func() bool { return p.Nodes()[0].Healthy == want }
	}
	nodes[0].SetServing(false) // restart: down ...
	waitUntil(t, "node seen down", healthy(false))
	nodes[0].SetModel("model-b", 0.5) // ... on new weights ...
	nodes[0].SetServing(true)         // ... and back
	waitUntil(t, "node seen up", healthy(true))
	checkNoStaleScores(t, p, req)
}

// checkNoStaleScores scores req again and fails the test for every score that is model-a's
// (the fake node's unshifted score), after the node came back on model-b.
func checkNoStaleScores(t *testing.T, p *Proxy, req *relevancev1.ScoreRequest) {
	t.Helper()
	resp, err := p.Score(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stale := 0
	for i, s := range resp.GetScores() {
		if math.Abs(float64(s.GetScore()-fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText()))) < 1e-3 {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("after the node came back on model-b, %d of %d scores are model-a's (cached_items %d, cluster fingerprint %q)",
			stale, len(req.GetItems()), resp.GetUsage().GetCachedItems(), p.cluster.Fingerprint())
	}
}

// TestSplicedReplyCountsCachedTruncation: usage.tokens_truncated is "document tokens cut by
// truncation" — a property of the request's documents, like prompt_tokens (which splice already
// counts for cached items). A repeat answered partly from the cache must report what the same
// request scored by the nodes reported.
func TestSplicedReplyCountsCachedTruncation(t *testing.T) {
	req := &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Id: "a", Text: "long"}, {Id: "b", Text: "short"}}}
	look := cacheLookup{
		hit:    []bool{true, false},
		cached: []scorecache.Entry{{Score: 0.5, Status: relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED, Tokens: 10, TruncatedTokens: 7, PrefixTokens: 20}, {}},
		misses: 1, missed: []int{1},
	}
	fresh := &relevancev1.ScoreResponse{
		Scores: []*relevancev1.ItemScore{{Index: 0, Score: 0.4, Status: relevancev1.ItemStatus_ITEM_STATUS_OK, Tokens: 5}},
		Usage:  &relevancev1.Usage{PromptTokens: 25, ItemTokens: 5},
	}
	out := look.splice(req, fresh)
	if got := out.GetUsage().GetTokensTruncated(); got != 7 {
		t.Errorf("tokens_truncated = %d with a cached item cut by 7 tokens; the nodes would have reported 7", got)
	}
}

// TestDrainedNodeDoesNotKeepItsOldIdentity: a node shutting down for a model update drains — its
// health goes NOT_SERVING at once, and the batches it was running still answer, with the old
// model's fingerprint — then comes back on new weights. The replies that arrive after the proxy
// saw the health go must not leave the node known as the old model when it comes back: the
// proxy would answer repeated requests from the cache under the old identity.
func TestDrainedNodeDoesNotKeepItsOldIdentity(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{Fingerprint: "model-a"})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	req := makeRequest(6, 1)
	score(t, p, req) // learns model-a, fills the cache
	healthy := func(want bool) func() bool {
		return func() bool { return p.Nodes()[0].Healthy == want }
	}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	nodes[0].SetLatency(func(fakenode.Batch) time.Duration {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return 0
	})
	done := make(chan error, 1)
	go func() {
		_, err := p.Score(context.Background(), makeRequest(4, 2)) // in flight across the drain
		done <- err
	}()
	<-started
	nodes[0].SetServing(false) // drain: health goes first ...
	waitUntil(t, "node seen down", healthy(false))
	close(release) // ... the running batch answers, as model-a
	if err := <-done; err != nil {
		t.Fatalf("the batch running across the drain: %v", err)
	}
	nodes[0].SetLatency(nil)
	nodes[0].SetModel("model-b", 0.5) // back on new weights
	nodes[0].SetServing(true)
	waitUntil(t, "node seen up", healthy(true))
	if fp := p.cluster.Fingerprint(); fp == "model-a" {
		t.Errorf("after the node came back on model-b the cluster still serves model-a from the cache (fingerprint %q)", fp)
	}
	checkNoStaleScores(t, p, req)
}

// TestCachedReplyNamesTheModelOfItsScores: during a rolling update that also renames the model,
// a reply answered wholly from the cache names the model whose scores the cache holds (the one
// the nodes of the cluster's fingerprint report), not whichever name any node reports sorts
// first.
func TestCachedReplyNamesTheModelOfItsScores(t *testing.T) {
	nodes := startNodes(t, 3, fakenode.Options{Fingerprint: "fp-old", Coeffs: fastCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.MaxBatchItems = 2 // several batches per request, on several nodes
	p, _ := startProxy(t, cfg)
	seed := uint64(0)
	fresh := func() (*relevancev1.ScoreRequest, *relevancev1.ScoreResponse, error) {
		seed++
		req := makeRequest(6, seed)
		resp, err := p.Score(context.Background(), req)
		return req, resp, err
	}
	// Every node has answered as the old model, "fakenode" (which sorts before "z-new").
	waitUntil(t, "every node seen serving fakenode", func() bool {
		fresh()
		for _, n := range p.Nodes() {
			if n.Model != "fakenode" {
				return false
			}
		}
		return true
	})
	// Two of three nodes are updated; the third still serves the old model, healthy.
	nodes[0].SetNamedModel("z-new", "fp-new", 0.5)
	nodes[1].SetNamedModel("z-new", "fp-new", 0.5)
	var req *relevancev1.ScoreRequest
	waitUntil(t, "a request served by the new model", func() bool {
		r, resp, err := fresh()
		if err != nil || resp.GetModel() != "z-new" {
			return false // pinned to the old model while the proxy learns the new one
		}
		req = r
		return true
	})
	if fp := p.cluster.Fingerprint(); fp != "fp-new" {
		t.Fatalf("cluster fingerprint %q, want fp-new", fp)
	}
	again, err := p.Score(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.GetUsage().GetCachedItems() != uint64(len(req.GetItems())) {
		t.Fatalf("repeat: %d of %d items from the cache, want all", again.GetUsage().GetCachedItems(), len(req.GetItems()))
	}
	if m := again.GetModel(); m != "z-new" {
		t.Errorf("a reply of fp-new's cached scores names model %q, want z-new (the nodes report %q)", m, p.cluster.Models())
	}
}

// TestScoreCacheHitsCountAnsweredItems: relevance_proxy_score_cache_hits_total counts items
// answered from the cache, so the cached items of a request that then fails add nothing; those
// of a reply add one each.
func TestScoreCacheHitsCountAnsweredItems(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Fingerprint: "model-a", Coeffs: fastCost})
	p, reg := startProxy(t, testConfig(nodes.Addrs()))
	const hits = "relevance_proxy_score_cache_hits_total"
	req := makeRequest(6, 1)
	score(t, p, req) // fills the cache
	for _, n := range nodes {
		n.SetFailing(true, codes.Unavailable)
	}
	half := makeRequest(6, 1)
	half.Items = append(half.Items, makeRequest(6, 2).Items...)
	if _, err := p.Score(context.Background(), half); err == nil {
		t.Fatal("half cached, with every node failing: answered, want an error")
	}
	if got := counterValue(t, reg, hits); got != 0 {
		t.Errorf("after a failed request of 6 cached items: %s = %v, want 0 (none was answered)", hits, got)
	}
	if got := score(t, p, makeRequest(6, 1)).GetUsage().GetCachedItems(); got != 6 {
		t.Fatalf("repeat: %d items from the cache, want 6", got)
	}
	if got := counterValue(t, reg, hits); got != 6 {
		t.Errorf("after a reply of 6 cached items: %s = %v, want 6", hits, got)
	}
}
