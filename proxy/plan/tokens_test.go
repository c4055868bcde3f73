package plan

import (
	"math"
	"testing"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
)

// reply is a node's answer to b counting every item at itemScale × the planner's count and the
// prefix at prefixScale × it.
func reply(b *Batch, itemScale, prefixScale float64) *relevancev1.ScoreBatchResponse {
	r := &relevancev1.ScoreBatchResponse{Usage: &relevancev1.Usage{},
		Stats: &relevancev1.BatchStats{PrefixTokens: uint32(math.Round(float64(b.countedPrefix) * prefixScale))}}
	for j, n := range b.countedItems {
		r.Scores = append(r.Scores, &relevancev1.ItemScore{Index: uint32(j), Status: relevancev1.ItemStatus_ITEM_STATUS_OK,
			Tokens: uint32(math.Round(float64(n) * itemScale))})
	}
	return r
}

// TestPlannerCountsTokensAsTheNodesDo: a counter that counts the traffic's items 25 % high and its
// prefix 10 % low is corrected from the replies, so that plans are priced in the nodes' tokens;
// before enough tokens were compared, and with learning off, counts are the counter's.
func TestPlannerCountsTokensAsTheNodesDo(t *testing.T) {
	c := startCluster(t, 2)
	counter, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	learning := NewPlanner(Config{MaxBatchItems: 4, LearnTokens: true}, counter, cost.New(), c, NewPlacer(c, roundrobin.New(0)))
	fixed := NewPlanner(Config{MaxBatchItems: 4}, counter, cost.New(), c, NewPlacer(c, roundrobin.New(0)))
	base := fixed.Plan(request(16), "r0", "")
	base.Release()

	first := learning.Plan(request(16), "r1", "")
	first.Release()
	if first.PrefixTokens != base.PrefixTokens || first.ItemTokens[3] != base.ItemTokens[3] {
		t.Fatalf("before any reply: prefix %d, item %d; want the counter's %d, %d", first.PrefixTokens, first.ItemTokens[3], base.PrefixTokens, base.ItemTokens[3])
	}
	for i := 0; ; i++ {
		if it, pr := learning.TokenRatios(); it != 1 && pr != 1 {
			break
		}
		if i == 1000 {
			t.Fatal("nothing learned from 1000 replies")
		}
		pl := learning.Plan(request(16), "r", "")
		for _, b := range pl.Batches {
			b.LearnTokens(reply(b, 0.8, 1.1))
		}
		pl.Release()
	}
	item, prefix := learning.TokenRatios()
	if math.Abs(item-0.8) > 0.02 || math.Abs(prefix-1.1) > 0.02 { // each count rounded
		t.Fatalf("ratios item %.3f prefix %.3f, want 0.8 and 1.1", item, prefix)
	}
	pl := learning.Plan(request(16), "r2", "")
	pl.Release()
	if want := int(math.Round(float64(base.PrefixTokens) * prefix)); pl.PrefixTokens != want {
		t.Errorf("prefix %d tokens, want %d (the counter's %d scaled)", pl.PrefixTokens, want, base.PrefixTokens)
	}
	for i, n := range pl.ItemTokens {
		if want := int(math.Round(float64(base.ItemTokens[i]) * item)); n != want {
			t.Errorf("item %d: %d tokens, want %d (the counter's %d scaled)", i, n, want, base.ItemTokens[i])
		}
	}
	if it, pr := fixed.TokenRatios(); it != 1 || pr != 1 {
		t.Errorf("learning off: ratios %v, %v", it, pr)
	}
}

// TestTruncatedRepliesTeachNoTokenCounts: a node's count of a truncated or refused item is not
// the text's, so such a batch is left out; the ratios stay clamped to [0.5, 2].
func TestTruncatedRepliesTeachNoTokenCounts(t *testing.T) {
	b := &Batch{tokens: &TokenScale{}, countedItems: []int{600, 600, 600, 600}, countedPrefix: 60}
	for range 20 {
		r := reply(b, 0.5, 1)
		r.Usage.TokensTruncated = 100
		b.LearnTokens(r)
		r = reply(b, 0.5, 1)
		r.Scores[1].Status = relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG
		b.LearnTokens(r)
	}
	if it, _ := b.tokens.Ratios(); it != 1 {
		t.Fatalf("learned item ratio %v from truncated and refused items", it)
	}
	for range 50 {
		b.LearnTokens(reply(b, 3, 0.2))
	}
	if it, pr := b.tokens.Ratios(); it != 2 || pr != 0.5 {
		t.Errorf("ratios %v, %v; want clamped to 2 and 0.5", it, pr)
	}
}
