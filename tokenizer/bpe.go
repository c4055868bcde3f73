package tokenizer

// BPE on one pre-token. The word starts as one token per byte; the adjacent pair with the lowest
// merge rank is merged, leftmost first among equal ranks, until no pair has a merge. That is the
// order Hugging Face's Word::merge_all uses (a heap of (rank, position)).
//
// Short words (almost all of them) use a flat array and a linear scan for the minimum: with a
// handful of symbols it beats any heap. Longer words use a heap over a linked list so the work is
// O(n log n), not quadratic, in the word's length.

// smallWord is the longest word merged with the flat-array method.
const smallWord = 48

// appendBPE appends the ids of word (raw bytes) to dst.
func (t *Tokenizer) appendBPE(dst []int32, word string) []int32 {
	if len(word) == 1 {
		return append(dst, t.byteID[word[0]])
	}
	if t.ignoreMerges {
		if id, ok := t.vocab.get(byteLevelString(word)); ok {
			return append(dst, id)
		}
	}
	if len(word) <= smallWord {
		return t.bpeSmall(dst, word)
	}
	return t.bpeHeap(dst, word)
}

func (t *Tokenizer) bpeSmall(dst []int32, word string) []int32 {
	var (
		symBuf  [smallWord]int32
		rankBuf [smallWord]uint32
		idBuf   [smallWord]int32
	)
	n := len(word)
	syms := symBuf[:n]
	for i := range n {
		syms[i] = t.byteID[word[i]]
	}
	// ranks[i], merged[i] describe the pair (syms[i], syms[i+1]).
	ranks, merged := rankBuf[:n-1], idBuf[:n-1]
	for i := range n - 1 {
		v := t.bytePairs[uint16(word[i])<<8|uint16(word[i+1])]
		ranks[i], merged[i] = uint32(v>>32), int32(uint32(v))
	}
	for len(syms) > 1 {
		best, bestRank := -1, noRank
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = merged[best]
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		copy(merged[best:], merged[best+1:])
		merged = merged[:len(merged)-1]
		if best > 0 {
			ranks[best-1], merged[best-1] = t.merges.get(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], merged[best] = t.merges.get(syms[best], syms[best+1])
		}
	}
	return append(dst, syms...)
}

// heapSym is one symbol of a long word in a doubly linked list over byte positions.
type heapSym struct {
	id         int32
	prev, next int32 // -1 at the ends
	alive      bool
}

type mergeCand struct {
	rank   uint32
	pos    int32 // position of the left symbol
	merged int32
}

// candHeap is a binary min-heap of merge candidates ordered by (rank, pos). Typed rather than
// container/heap, which would box every candidate in an interface (one allocation per push).
type candHeap []mergeCand

func (c mergeCand) less(d mergeCand) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

func (h *candHeap) push(c mergeCand) {
	*h = append(*h, c)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *candHeap) pop() mergeCand {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	*h = a
	h.down(0)
	return top
}

func (h candHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (t *Tokenizer) bpeHeap(dst []int32, word string) []int32 {
	n := len(word)
	syms := make([]heapSym, n)
	for i := range n {
		syms[i] = heapSym{id: t.byteID[word[i]], prev: int32(i - 1), next: int32(i + 1), alive: true}
	}
	syms[n-1].next = -1
	h := make(candHeap, 0, n)
	for i := range n - 1 {
		v := t.bytePairs[uint16(word[i])<<8|uint16(word[i+1])]
		if r, m := uint32(v>>32), int32(uint32(v)); r != noRank {
			h = append(h, mergeCand{rank: r, pos: int32(i), merged: m})
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	for len(h) > 0 {
		c := h.pop()
		left := &syms[c.pos]
		if !left.alive || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		// A stale candidate: one of the two symbols has grown since it was queued. Equal merged
		// ids imply the same pair, since symbols only grow to the right.
		if r, m := t.merges.get(left.id, right.id); r != c.rank || m != c.merged {
			continue
		}
		left.id = c.merged
		right.alive = false
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = c.pos
		}
		if left.prev >= 0 {
			if r, m := t.merges.get(syms[left.prev].id, left.id); r != noRank {
				h.push(mergeCand{rank: r, pos: left.prev, merged: m})
			}
		}
		if left.next >= 0 {
			if r, m := t.merges.get(left.id, syms[left.next].id); r != noRank {
				h.push(mergeCand{rank: r, pos: c.pos, merged: m})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// byteLevelString maps raw bytes to the byte-level characters the vocab is written in.
func byteLevelString(word string) string {
	buf := make([]rune, 0, len(word))
	for i := 0; i < len(word); i++ {
		buf = append(buf, byteToRune[word[i]])
	}
	return string(buf)
}
