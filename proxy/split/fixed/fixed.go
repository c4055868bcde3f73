// Package fixed is the baseline splitting strategy: chunks of MaxBatchItems items in input order,
// whatever they cost. Batch k holds items [k·M, (k+1)·M). Safe for concurrent use.
package fixed

import "github.com/relevance-scoring/relevance/proxy/split"

// Type is the strategy's name in configuration.
const Type = "fixed"

// DefaultBatchItems is the chunk size when Input.MaxBatchItems is not set.
const DefaultBatchItems = 32

// Splitter cuts fixed-size chunks.
type Splitter struct{}

var _ split.Splitter = (*Splitter)(nil)

// New returns the fixed splitter.
func New() *Splitter { return &Splitter{} }

// Split implements split.Splitter.
func (*Splitter) Split(in split.Input) []split.Batch {
	m := in.MaxBatchItems
	if m <= 0 {
		m = DefaultBatchItems
	}
	n := len(in.ItemTokens)
	over := split.BatchOverhead(in.Coeffs, in.PrefixTokens)
	var out []split.Batch
	if n > 0 {
		out = make([]split.Batch, 0, (n-1)/m+1) // ceil(n/m); n+m−1 overflows for a cap near MaxInt
	}
	for lo := 0; lo < n; lo += m {
		hi := min(lo+m, n)
		b := split.Batch{Items: make([]int, 0, hi-lo), Cost: over}
		for i := lo; i < hi; i++ {
			b.Items = append(b.Items, i)
			b.Cost += split.ItemCost(in.Coeffs, in.PrefixTokens, in.ItemTokens[i])
		}
		out = append(out, b)
	}
	return out
}
