package plan

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
)

// BenchmarkPlanNoneLongItems plans a 16 MB request, 250 items of 64 KB (~14,000 tokens each),
// against nodes that report a prompt limit of 8192, with the proxy's default (estimate) counter.
// Under TRUNCATION_NONE every item is past the cap and its exact count decides that the node
// refuses it; cut (the default truncation) prices each at the cap with no exact count, the floor
// for the same request.
func BenchmarkPlanNoneLongItems(b *testing.B) {
	c := startCluster(b, 1)
	c.Snapshot()[0].Observe(&relevancev1.ScoreBatchResponse{MaxPromptTokens: 8192}, time.Now())
	counter, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		b.Fatal(err)
	}
	planner := NewPlanner(Config{MaxBatchItems: 16}, counter, cost.New(), c, NewPlacer(c, roundrobin.New(0)))
	words := strings.Fields("wireless noise cancelling over-ear headphones with 30 h battery, USB-C fast charging " +
		"(10 min = 5 h), multipoint Bluetooth 5.3; foldable design and hard case. Compatible: iOS/Android. " +
		"SKU WH1000XM5-B, 250 g, colour black. Ships in 2-3 days.")
	r := rand.New(rand.NewPCG(1, 2))
	req := &relevancev1.ScoreRequest{Query: "noise cancelling headphones"}
	for range 250 {
		var sb strings.Builder
		for sb.Len() < 64<<10 {
			sb.WriteString(words[r.IntN(len(words))])
			sb.WriteByte(' ')
		}
		req.Items = append(req.Items, &relevancev1.Item{Text: sb.String()[:64<<10]})
	}
	for _, tc := range []struct {
		name string
		opts *relevancev1.ScoreOptions
	}{
		{"none", &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}},
		{"cut", nil},
	} {
		req.Options = tc.opts
		b.Run(tc.name, func(b *testing.B) {
			if pl := planner.Plan(req, "r", ""); pl == nil || (tc.opts != nil) != (pl.ItemTokens[0] == 1) {
				b.Fatal("the items are not priced as refused under TRUNCATION_NONE only")
			} else {
				pl.Release()
			}
			for b.Loop() {
				pl := planner.Plan(req, "r", "")
				if pl == nil {
					b.Fatal("no plan")
				}
				pl.Release()
			}
		})
	}
}
