package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// TestScorerNodeItemLimitIsLearned: our scorer node's limit on items per batch (its max_items)
// becomes the node's Limits, which the planner cuts batches to, from a reply (which reports it)
// or from a refusal of a batch over it. The refusal is the node's limit, as other kinds say it
// (FAILED_PRECONDITION naming the limit, with the limit for dispatch to cut to), not the
// INVALID_ARGUMENT the node answers, which the proxy passed on to its client as bad input.
func TestScorerNodeItemLimitIsLearned(t *testing.T) {
	fc, err := fakenode.StartCluster(1, fakenode.Options{MaxItems: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	for _, tc := range []struct {
		name  string
		items int
	}{{"from a reply", 2}, {"from a refusal", 6}} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{Static: fc.Addrs(), Prior: testPrior, Forgetting: 0.99,
				Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
			defer c.Close()
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			n := c.Snapshot()[0]
			if got := n.Limits().MaxItems; got != 0 {
				t.Fatalf("before any reply: max items %d, want 0 (unknown)", got)
			}
			req := &relevancev1.ScoreBatchRequest{Query: "q"}
			for range tc.items {
				req.Items = append(req.Items, &relevancev1.Item{Text: "doc"})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := n.ScoreBatch(ctx, req)
			switch {
			case tc.items <= 4 && err != nil:
				t.Fatal(err)
			case tc.items <= 4:
				n.Observe(resp, time.Now())
			case status.Code(err) != codes.FailedPrecondition || backend.ItemLimit(err) != 4 ||
				!strings.Contains(err.Error(), "6 items is over the node's limit of 4"):
				t.Fatalf("batch of 6 on a node of max_items 4: %v (limit %d); want FailedPrecondition naming the limit 4", err, backend.ItemLimit(err))
			}
			if got := n.Limits().MaxItems; got != 4 {
				t.Errorf("learned max items %d, want 4", got)
			}
			// An operator sees what batches to the node are cut to in /v1/nodes.
			if st := c.Status(); len(st) != 1 || st[0].MaxItems != 4 {
				t.Errorf("/v1/nodes: %+v, want max_items 4", st)
			}
		})
	}
}
