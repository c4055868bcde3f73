package proxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestScorerNodeBelowBatchCapIsCutToItsLimit: scorer nodes whose max_items (4) is below the
// proxy's split.max_batch_items (16) refused every batch of more than 4 items INVALID_ARGUMENT
// ("too many items"), which the proxy neither retried nor recognised: the client got a 400
// blaming its own input for a mismatch between the proxy's and the nodes' configurations. The
// proxy learns the limit from the refusal, cuts the refused batch to it within the deadline,
// and plans later requests at the limit from the start.
func TestScorerNodeBelowBatchCapIsCutToItsLimit(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost, MaxItems: 4})
	cfg := limitConfig(nodes.Addrs())
	p, _ := startProxy(t, cfg)

	req := makeRequest(20, 1)
	resp, err := p.Score(context.Background(), req)
	if err != nil {
		t.Fatalf("20 items on nodes of max_items 4: %v (code %s)", err, status.Code(err))
	}
	checkScores(t, req, resp)
	calls, batches := nodeCalls(nodes)
	if calls == batches {
		t.Fatalf("no batch was refused (%d calls, all run): the nodes' limit was not met", calls)
	}

	// Learned: the next request goes out in batches the nodes take, none refused.
	score(t, p, makeRequest(20, 2))
	calls2, batches2 := nodeCalls(nodes)
	if c, b := calls2-calls, batches2-batches; c != b || b < 5 {
		t.Errorf("second request: %d calls reached the nodes, %d batches ran; want every call run, in batches of at most 4 (5 or more)", c, b)
	}
}

// TestScorerNodeItemLimitLearnedAtJoin: with priming on (cost.prime), the tiny batch each node
// gets when it becomes healthy brings back its item limit with its cost model, so that not even
// the first request sends a node a batch it refuses.
func TestScorerNodeItemLimitLearnedAtJoin(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost, MaxItems: 4})
	cfg := limitConfig(nodes.Addrs())
	cfg.Cost.Prime = true
	p, _ := startProxy(t, cfg)
	waitUntil(t, "every node's item limit learned", func() bool {
		for _, n := range p.cluster.Snapshot() {
			if n.Limits().MaxItems != 4 {
				return false
			}
		}
		return true
	})
	calls, batches := nodeCalls(nodes)
	score(t, p, makeRequest(20, 1))
	calls2, batches2 := nodeCalls(nodes)
	if c, b := calls2-calls, batches2-batches; c != b || b < 5 {
		t.Errorf("first request: %d calls reached the nodes, %d batches ran; want every call run, in batches of at most 4 (5 or more)", c, b)
	}
}

// limitConfig is testConfig with batches of up to 16 items, and no second copies of a batch
// (hedges, rescues, slow marks), so that every call the nodes get is one that the plan or a cut
// sent, and a call that reaches a node and runs no batch is one it refused.
func limitConfig(addrs []string) Config {
	cfg := testConfig(addrs)
	cfg.Split.MaxBatchItems = 16
	cfg.Hedge.Enabled = false
	cfg.Retry.RescueFactor = 0
	cfg.Outlier.Disabled = true
	return cfg
}

// nodeCalls is the nodes' ScoreBatch calls received and batches run, summed.
func nodeCalls(c fakenode.Cluster) (calls, batches int64) {
	for _, n := range c {
		calls += n.Calls()
		batches += n.Batches()
	}
	return calls, batches
}

// TestCutBatchKeepsItsScoredPiecesWhenPartial: a batch cut to its node's item limit (8 items on
// a node of max_items 4) whose one piece fails for good (the node fails every call holding one of
// its items) failed whole, so that with partial results allowed the items the other piece had
// scored came back FAILED too. They keep their scores; only the failed piece's items are FAILED,
// with its error as merge words a failed batch's, and they are not cached (the next request, the
// fault gone, has them scored). Without partial results, the request still fails.
func TestCutBatchKeepsItsScoredPiecesWhenPartial(t *testing.T) {
	const poison = "the item the node fails"
	request := func(query string, partial bool) *relevancev1.ScoreRequest {
		req := &relevancev1.ScoreRequest{Query: query, Options: &relevancev1.ScoreOptions{AllowPartial: partial}}
		for i := range 8 {
			text := fmt.Sprintf("item %d: a document of a few words", i)
			if i == 5 {
				text = fmt.Sprintf("item %d: %s", i, poison)
			}
			req.Items = append(req.Items, &relevancev1.Item{Id: fmt.Sprintf("id%d", i), Text: text})
		}
		return req
	}
	// One node, so that the plan sends the 8 items as one batch, which the node refuses (and the
	// proxy learns its limit from: each case starts a proxy of its own).
	start := func(t *testing.T) (*Proxy, fakenode.Cluster) {
		nodes := startNodes(t, 1, fakenode.Options{Coeffs: fastCost, MaxItems: 4, Fingerprint: "fp1"}) // cached under fp1
		nodes[0].FailItems(func(text string) bool { return strings.Contains(text, poison) }, codes.Unavailable)
		cfg := limitConfig(nodes.Addrs())
		cfg.Split.MaxBatchItems = 8
		p, _ := startProxy(t, cfg)
		return p, nodes
	}

	t.Run("fail-fast", func(t *testing.T) {
		p, nodes := start(t)
		if _, err := p.Score(context.Background(), request("fail fast", false)); status.Code(err) != codes.Unavailable {
			t.Fatalf("a piece failed: err %v, want Unavailable", err)
		}
		if calls, batches := nodeCalls(nodes); calls != 3 || batches != 1 {
			t.Fatalf("%d calls, %d batches run; want 3 and 1 (the batch refused, its two pieces sent, one failed)", calls, batches)
		}
	})

	t.Run("partial", func(t *testing.T) {
		p, nodes := start(t)
		req := request("partial", true)
		resp, err := p.Score(context.Background(), req)
		if err != nil {
			t.Fatalf("one piece failed: %v", err)
		}
		if calls, batches := nodeCalls(nodes); calls != 3 || batches != 1 {
			t.Fatalf("%d calls, %d batches run; want 3 and 1 (the batch refused, its two pieces sent, one failed)", calls, batches)
		}
		checkScores(t, req, resp)
		var failed []int
		for i, s := range resp.GetScores() {
			switch s.GetStatus() {
			case relevancev1.ItemStatus_ITEM_STATUS_FAILED:
				failed = append(failed, i)
				if !strings.HasPrefix(s.GetError(), "rpc error: code = Unavailable desc = batch failed: node ") || !strings.Contains(s.GetError(), "injected failure") {
					t.Errorf("scores[%d] FAILED with %q, want the piece's error as merge words a failed batch's", i, s.GetError())
				}
			case relevancev1.ItemStatus_ITEM_STATUS_OK:
			default:
				t.Errorf("scores[%d] status %s", i, s.GetStatus())
			}
		}
		if len(failed) != 4 || !slices.Contains(failed, 5) {
			t.Fatalf("FAILED items %v, want the 4 of the piece holding item 5; the other piece's items scored", failed)
		}
		if len(resp.GetRanking()) != 4 {
			t.Errorf("ranking %v, want the 4 scored items", resp.GetRanking())
		}

		// The scored items were cached, the failed ones not: with the fault gone, the same request
		// has the 4 scored from the cache and the other 4 scored now.
		nodes[0].FailItems(nil, codes.OK)
		again := score(t, p, request("partial", true))
		if got := again.GetUsage().GetCachedItems(); got != 4 {
			t.Errorf("second request: %d items from the cache, want the 4 scored", got)
		}
		for i, s := range again.GetScores() {
			if s.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_OK {
				t.Errorf("second request: scores[%d] status %s", i, s.GetStatus())
			}
		}
	})
}
