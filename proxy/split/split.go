// Package split is the contract between the proxy and its splitting strategies: given the token
// counts of one request's items and a view of the nodes that can serve it, a Splitter returns the
// batches to send. Each strategy lives in its own sub-package (fixed, cost) with a Type constant;
// the proxy holds the one registration list.
//
// Everything here is plain data or pure functions, safe for concurrent use. A Splitter must be
// safe for concurrent use too (the proxy calls Split from many requests at once).
package split

import (
	"math"

	"github.com/relevance-scoring/relevance/costmodel"
)

// Node is the splitter's view of one node that may receive a batch.
type Node struct {
	// Backlog is the node's outstanding work in seconds (in flight from this proxy plus what the
	// node last reported from elsewhere, drained since).
	Backlog float64
	// Scale is the node's time for one reference-second of work (1: as fast as Input.Coeffs
	// predicts, 2: twice as slow). Zero means 1.
	Scale float64
}

// Input is one request to split.
type Input struct {
	// PrefixTokens is the shared prefix (template, instruction, query): paid once per batch.
	PrefixTokens int
	// ItemTokens holds each item's own tokens, in input order.
	ItemTokens []int
	// Coeffs is the reference cost model (e.g. the mean of the nodes' learned coefficients).
	Coeffs costmodel.Coeffs
	// Nodes are the nodes that can take batches now (at least one).
	Nodes []Node
	// MaxBatchItems caps the items of one batch (≤ 0: no cap).
	MaxBatchItems int
	// TargetBatchSeconds is the smallest batch cost worth a batch of its own: a request is not
	// cut into batches cheaper than this (≤ 0: no floor), because each batch pays the prefix and
	// the per-batch overhead again.
	TargetBatchSeconds float64
	// Urgent asks for the plan that finishes this request first, whatever its batches' overhead
	// costs the cluster: a request whose economical plan would miss its deadline (admission asks
	// for it before refusing the request). Strategies that do not trade latency for overhead
	// ignore it.
	Urgent bool
}

// Batch is one planned batch.
type Batch struct {
	// Items are indices into Input.ItemTokens, ascending.
	Items []int
	// Cost is the batch's predicted seconds under Input.Coeffs: items, prefix once and the
	// per-batch overhead.
	Cost float64
	// Start is when the plan expects the batch to start on its node (the backlog it was planned
	// against, in seconds from now); batches are returned in ascending Start, so dispatching them
	// in order to the least-loaded node reproduces the plan.
	Start float64
}

// Splitter turns one request's items into batches.
type Splitter interface {
	// Split returns batches covering every item exactly once. It never returns an empty batch and
	// returns no batch only when there are no items.
	Split(in Input) []Batch
}

// ItemCost is the predicted seconds of one item of l tokens after the prefix.
func ItemCost(c costmodel.Coeffs, prefix, l int) float64 {
	return c.Seconds(costmodel.ItemFeatures(prefix, l))
}

// BatchOverhead is what every batch pays besides its items: the prefix once and the fixed cost.
func BatchOverhead(c costmodel.Coeffs, prefix int) float64 {
	return c.Seconds(costmodel.PrefixFeatures(prefix)) + c.C
}

// Imbalance is max/mean of the batches' projected completion (Start + Cost): 1 is perfect. It
// is 1 for fewer than two batches and for batches that all cost nothing.
func Imbalance(bs []Batch) float64 {
	ends := make([]float64, len(bs))
	for i, b := range bs {
		ends[i] = b.Start + b.Cost
	}
	return MaxOverMean(ends)
}

// MaxOverMean is the imbalance of completion times: max/mean, 1 for fewer than two and for all
// zero.
func MaxOverMean(ts []float64) float64 {
	if len(ts) < 2 {
		return 1
	}
	var sum, maxv float64
	for _, t := range ts {
		sum += t
		maxv = math.Max(maxv, t)
	}
	if sum <= 0 {
		return 1
	}
	return maxv / (sum / float64(len(ts)))
}
