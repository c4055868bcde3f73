package proxy

import (
	"context"
	"testing"

	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
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
