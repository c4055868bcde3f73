package plan

import (
	"math"
	"sync"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TokenScale learns how the planner's token counts compare with the nodes' own: the ratio of
// the tokens nodes report for answered batches to what the planner counted for them, for the
// items and the shared prefix apart. The cheap "estimate" counter (no BPE) is a few per cent off
// on a given traffic, always the same way (on the compare workload against emulated nodes, 5 %
// high). Uncorrected, every projection is off by that much: admission's quantile margin absorbs
// it, but a node's load mixes the proxy's charges with the backlog the node reports in its own
// tokens, and the projection-error metrics read as noise what is bias. Under the "exact"
// counter the ratios stay at 1.
//
// The ratios are decaying sums (about the last tokenScaleWindow batches count), clamped to
// [0.5, 2], and 1 until tokenScaleMin tokens were compared. Safe for concurrent use.
type TokenScale struct {
	mu                   sync.Mutex
	itemNode, itemCount  float64
	prefNode, prefCount  float64
	itemRatio, prefRatio float64 // read under mu; 0 until learned
}

const (
	tokenScaleWindow = 200
	tokenScaleMin    = 2000
)

// Ratios are the item and prefix scales applied to counts (1: not learned yet).
func (t *TokenScale) Ratios() (item, prefix float64) {
	if t == nil {
		return 1, 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	item, prefix = 1, 1
	if t.itemRatio > 0 {
		item = t.itemRatio
	}
	if t.prefRatio > 0 {
		prefix = t.prefRatio
	}
	return item, prefix
}

// observe compares one answered batch's counts (the planner's, before scaling) with the node's.
func (t *TokenScale) observe(countedItems, nodeItems, countedPrefix, nodePrefix int) {
	if t == nil || countedItems <= 0 || nodeItems <= 0 {
		return
	}
	const keep = 1 - 1.0/tokenScaleWindow
	t.mu.Lock()
	defer t.mu.Unlock()
	t.itemNode = keep*t.itemNode + float64(nodeItems)
	t.itemCount = keep*t.itemCount + float64(countedItems)
	if t.itemCount >= tokenScaleMin || t.itemRatio > 0 {
		t.itemRatio = min(2, max(0.5, t.itemNode/t.itemCount))
	}
	if countedPrefix > 0 && nodePrefix > 0 {
		t.prefNode = keep*t.prefNode + float64(nodePrefix)
		t.prefCount = keep*t.prefCount + float64(countedPrefix)
		if t.prefCount >= tokenScaleMin || t.prefRatio > 0 {
			t.prefRatio = min(2, max(0.5, t.prefNode/t.prefCount))
		}
	}
}

// scaled is n counted tokens as the nodes would count them: at least 1 for a non-empty count.
func scaled(n int, ratio float64) int {
	if n <= 0 || ratio == 1 {
		return n
	}
	return max(1, int(math.Round(float64(n)*ratio)))
}

// LearnTokens compares the node's token counts in resp, a reply to b, with what the planner
// counted for b. A batch with a truncated or refused item is left out: the node's count is then
// not the text's.
func (b *Batch) LearnTokens(resp *relevancev1.ScoreBatchResponse) {
	if b.tokens == nil || resp.GetUsage().GetTokensTruncated() > 0 || len(resp.GetScores()) != len(b.countedItems) {
		return
	}
	node, counted := 0, 0
	for j, s := range resp.GetScores() {
		if s.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_OK {
			return
		}
		node += int(s.GetTokens())
		counted += b.countedItems[j]
	}
	b.tokens.observe(counted, node, b.countedPrefix, int(resp.GetStats().GetPrefixTokens()))
}
