package model

import (
	"testing"

	"github.com/relevance-scoring/relevance/scorer/model/qwen"
)

// TestPassesStayWithinTheirRows: assignPasses puts every non-empty item in exactly one pass, in
// order, the first pass beside the prefixes it computes, and no pass over the bound unless one
// item alone is (a pass holds at least one item); empty items get none.
func TestPassesStayWithinTheirRows(t *testing.T) {
	toks := func(n int) []int32 { return make([]int32, n) }
	groups := []*qwen.Group{
		{Prefix: toks(20), Items: [][]int32{toks(10), nil, toks(30), toks(15), toks(5)}},
		{Prefix: toks(20), Cached: &qwen.PrefixKV{Len: 20}, Items: [][]int32{toks(25), toks(25)}},
		{Prefix: toks(8), Items: [][]int32{nil, toks(120), toks(4)}}, // one item longer than a pass
		{Prefix: toks(8), Items: [][]int32{nil}},
	}
	const maxRows = 60
	pass := assignPasses(groups, maxRows)
	rows := map[int]int{0: 20 + 8 + 8} // the first pass computes the uncached prefixes
	last := 0
	for i, g := range groups {
		for j, it := range g.Items {
			p := pass[i][j]
			if len(it) == 0 {
				if p != -1 {
					t.Errorf("group %d item %d is empty but in pass %d", i, j, p)
				}
				continue
			}
			if p < last || p > last+1 {
				t.Errorf("group %d item %d in pass %d after an item in pass %d: not in order", i, j, p, last)
			}
			last = p
			rows[p] += len(it)
		}
	}
	for p, r := range rows {
		if r > maxRows && r != 120 {
			t.Errorf("pass %d holds %d rows, over %d", p, r, maxRows)
		}
	}
	if len(rows) < 3 {
		t.Errorf("%d passes for %d rows, want at least 3", len(rows), 20+8+8+10+30+15+5+50+124)
	}
}
