package model

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/relevance-scoring/relevance/scorer/model/qwen"
)

// forwardBounded runs qwen.Forward over groups in passes of about maxRows rows at most (0: one
// pass), so that the activation arena, which grows to a pass's rows and is kept, stays within
// what the node's memory limit allows for (max_batch_tokens of working rows). A single batch of
// long documents used to run as one pass of any size: 32 items at the 8,192-token prompt limit
// are 262k rows, ~15 GiB of arena for the 0.6B model.
//
// The first pass computes every prefix (and keeps its KV) with as many items, in order, as fit;
// later passes run the rest of the items against the kept KV.
// A score does not depend on which pass computed it nor on whether its prefix was computed or
// read (TestScoresArePathIndependent), so the bits are those of one pass. What the first pass
// did (prefixes reused, KV and template KV kept) is copied back to groups, as from one pass.
func forwardBounded(ctx context.Context, m *qwen.Model, groups []*qwen.Group, maxRows int, st *qwen.Stats) ([][][]float32, error) {
	rows, items := 0, 0
	for _, g := range groups {
		if g.Cached == nil {
			rows += len(g.Prefix)
		}
		for _, it := range g.Items {
			rows += len(it)
			if len(it) > 0 {
				items++
			}
		}
	}
	if maxRows <= 0 || rows <= maxRows || items <= 1 {
		return m.Forward(ctx, groups, st)
	}
	// The prompts' lengths are checked here, as one pass checks them (prefixes, then items)
	// before computing anything:
	// found in a later pass, a too-long item would waste the first, and its error would name
	// the group by its place in that pass.
	for g, gr := range groups {
		if len(gr.Prefix) > m.MaxPositions() {
			return nil, fmt.Errorf("group %d: a prefix of %d tokens exceeds the model's %d positions", g, len(gr.Prefix), m.MaxPositions())
		}
	}
	for g, gr := range groups {
		for i, it := range gr.Items {
			if n := len(gr.Prefix) + len(it); n > m.MaxPositions() {
				return nil, fmt.Errorf("group %d item %d: %d prompt tokens exceed the model's %d positions", g, i, n, m.MaxPositions())
			}
		}
	}
	pass := assignPasses(groups, maxRows)
	out := make([][][]float32, len(groups))
	for i, g := range groups {
		out[i] = make([][]float32, len(g.Items))
	}
	// kv is each group's prefix KV for the passes after the first.
	kv := make([]*qwen.PrefixKV, len(groups))
	for p := 0; ; p++ {
		var views []*qwen.Group
		var of []int // views[k] is a part of groups[of[k]]
		for i, g := range groups {
			v := &qwen.Group{Prefix: g.Prefix, Items: make([][]int32, len(g.Items))}
			n := 0
			for j, it := range g.Items {
				if len(it) > 0 && pass[i][j] == p {
					v.Items[j] = it
					n++
				}
			}
			if n == 0 && p > 0 {
				continue // (in the first pass a group with no item still computes its prefix, as in one pass)
			}
			if p == 0 {
				v.Cached, v.TemplateLen, v.Template, v.KeepTemplateKV = g.Cached, g.TemplateLen, g.Template, g.KeepTemplateKV
				v.KeepKV = g.Cached == nil && len(g.Prefix) > 0
			} else {
				v.Cached = kv[i]
			}
			views = append(views, v)
			of = append(of, i)
		}
		if p > 0 && len(views) == 0 {
			break
		}
		res, err := m.Forward(ctx, views, st)
		if err != nil {
			return nil, err
		}
		for k, v := range views {
			i := of[k]
			for j, l := range res[k] {
				if l != nil {
					out[i][j] = l
				}
			}
			if p == 0 {
				g := groups[i]
				g.Reused = v.Reused
				g.TemplateKV = v.TemplateKV
				if g.KeepKV {
					g.KV = v.KV
				}
			}
		}
		if p == 0 {
			// A group whose prefix repeated an earlier group's in the first pass shared that
			// group's KV and kept none of its own.
			byPrefix := map[string]*qwen.PrefixKV{}
			for k, v := range views {
				if h := firstNonNil(v.Cached, v.KV); h != nil {
					byPrefix[prefixKey(groups[of[k]].Prefix)] = h
				}
			}
			for i, g := range groups {
				if len(g.Prefix) > 0 {
					kv[i] = byPrefix[prefixKey(g.Prefix)]
				}
			}
		}
	}
	return out, nil
}

// assignPasses numbers the pass of every item (-1 for an empty one): the first pass computes
// every prefix (a group without items in it still computes its own, for the passes after), then
// the items go in order, a new pass whenever the next would take the current one past maxRows
// (a pass holds at least one item, however long).
func assignPasses(groups []*qwen.Group, maxRows int) [][]int {
	pass := make([][]int, len(groups))
	rows := 0
	for i, g := range groups {
		pass[i] = make([]int, len(g.Items))
		if g.Cached == nil {
			rows += len(g.Prefix)
		}
	}
	cur, inPass := 0, 0
	for i, g := range groups {
		for j, it := range g.Items {
			if len(it) == 0 {
				pass[i][j] = -1
				continue
			}
			if inPass > 0 && rows+len(it) > maxRows {
				cur, rows, inPass = cur+1, 0, 0
			}
			pass[i][j] = cur
			rows += len(it)
			inPass++
		}
	}
	return pass
}

func firstNonNil(a, b *qwen.PrefixKV) *qwen.PrefixKV {
	if a != nil {
		return a
	}
	return b
}

// prefixKey is a prefix's tokens as a map key.
func prefixKey(p []int32) string {
	if len(p) == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), 4*len(p)))
}
