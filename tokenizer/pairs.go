package tokenizer

import "math/bits"

// pairTable maps an adjacent token pair (left id, right id) to its merge rank and the id of the
// merged token. It is an open-addressing hash table with linear probing: the BPE inner loop does
// one lookup per candidate pair, and this is several times faster than a Go map for uint64 keys.
// Read-only after build, so safe for concurrent readers.
type pairTable struct {
	slots []pairSlot
	shift uint8 // 64 - log2(len(slots))
	n     int
}

// emptyKey cannot be a real key: ids are < 2^31, so the high bit of each half is never set.
const emptyKey = ^uint64(0)

// pairSlot keeps key and value side by side: a lookup touches one cache line, not two.
type pairSlot struct {
	key uint64 // pairKey(a, b); emptyKey marks a free slot
	val uint64 // rank<<32 | merged id
}

// noRank is the rank of a pair that has no merge.
const noRank = ^uint32(0)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newPairTable(capacity int) pairTable {
	// Load factor up to 2/3 (Qwen: 151k merges in 2^18 slots, 4 MB): a smaller table stays
	// in cache better, and linear probing is still short at that load.
	size := 16
	for size*2 < capacity*3 {
		size <<= 1
	}
	t := pairTable{
		slots: make([]pairSlot, size),
		shift: uint8(64 - bits.TrailingZeros(uint(size))),
	}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	return t
}

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put inserts or overwrites a pair. A later duplicate merge overwrites an earlier one, as in
// Hugging Face's BPE builder (it collects the merges into a hash map in file order).
func (t *pairTable) put(a, b int32, rank uint32, merged int32) {
	if 4*(t.n+1) > 3*len(t.slots) { // keep the load factor under 3/4
		t.grow()
	}
	k := pairKey(a, b)
	mask := uint64(len(t.slots) - 1)
	v := uint64(rank)<<32 | uint64(uint32(merged))
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case emptyKey:
			t.slots[i] = pairSlot{key: k, val: v}
			t.n++
			return
		case k:
			t.slots[i].val = v
			return
		}
	}
}

// grow doubles the table; the size hint given to newPairTable is only an estimate.
func (t *pairTable) grow() {
	old := t.slots
	*t = newPairTable(max(8, len(old)))
	for _, s := range old {
		if s.key != emptyKey {
			t.put(int32(s.key>>32), int32(uint32(s.key)), uint32(s.val>>32), int32(uint32(s.val)))
		}
	}
}

// get returns the rank and merged id of (a, b), or noRank.
func (t *pairTable) get(a, b int32) (rank uint32, merged int32) {
	if len(t.slots) == 0 {
		return noRank, -1
	}
	k := pairKey(a, b)
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch s := &t.slots[i]; s.key {
		case k:
			return uint32(s.val >> 32), int32(uint32(s.val))
		case emptyKey:
			return noRank, -1
		}
	}
}
