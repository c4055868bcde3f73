package tokenizer

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
)

// vocabTable maps token text (as written in tokenizer.json, in byte-level characters) to ids and
// back. All texts live in one arena string and the hash table holds only integers, so loading
// 151k entries makes a handful of allocations instead of one string and one map slot each: load
// time is paid at every process start. Read-only after build, so safe for concurrent readers.
type vocabTable struct {
	arena string
	start []uint32 // entry -> offset of its text in arena; start[len] = len(arena)
	ids   []int32  // entry -> id
	byID  []int32  // id -> entry, -1 where the id is unused
	slots []uint64 // hash>>32<<32 | entry+1; 0 marks a free slot
	shift uint8
	seed  maphash.Seed
}

// vocabBuilder collects entries in file order before the table is built.
type vocabBuilder struct {
	arena []byte
	start []uint32
	ids   []int32
	maxID int32
}

func (b *vocabBuilder) add(text []byte, id int32) error {
	if len(text) == 0 {
		return errors.New("empty token text")
	}
	b.start = append(b.start, uint32(len(b.arena)))
	b.arena = append(b.arena, text...)
	b.ids = append(b.ids, id)
	b.maxID = max(b.maxID, id)
	return nil
}

func (b *vocabBuilder) build() (*vocabTable, error) {
	n := len(b.ids)
	size := 16
	for size*2 < 3*n { // load factor up to 2/3, as in pairTable
		size <<= 1
	}
	v := &vocabTable{
		arena: string(b.arena),
		start: append(b.start, uint32(len(b.arena))),
		ids:   b.ids,
		byID:  make([]int32, b.maxID+1),
		slots: make([]uint64, size),
		shift: uint8(64 - bits.TrailingZeros(uint(size))),
		seed:  maphash.MakeSeed(),
	}
	for i := range v.byID {
		v.byID[i] = -1
	}
	mask := uint64(size - 1)
	for e := range n {
		text := v.text(int32(e))
		h := maphash.String(v.seed, text)
		for i := v.slot(h); ; i = (i + 1) & mask {
			s := v.slots[i]
			if s == 0 {
				v.slots[i] = h>>32<<32 | uint64(e+1)
				break
			}
			if s>>32 == h>>32 && v.text(int32(s&0xffffffff)-1) == text {
				return nil, fmt.Errorf("%q listed twice (ids %d and %d)", text, v.ids[s&0xffffffff-1], v.ids[e])
			}
		}
		id := v.ids[e]
		if prev := v.byID[id]; prev >= 0 {
			return nil, fmt.Errorf("id %d used by both %q and %q", id, v.text(prev), text)
		}
		v.byID[id] = int32(e)
	}
	return v, nil
}

func (v *vocabTable) text(e int32) string { return v.arena[v.start[e]:v.start[e+1]] }

func (v *vocabTable) slot(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> v.shift }

// get returns the id of token text s.
func (v *vocabTable) get(s string) (int32, bool) {
	h := maphash.String(v.seed, s)
	mask := uint64(len(v.slots) - 1)
	for i := v.slot(h); ; i = (i + 1) & mask {
		x := v.slots[i]
		if x == 0 {
			return -1, false
		}
		if x>>32 == h>>32 {
			if e := int32(x&0xffffffff) - 1; v.text(e) == s {
				return v.ids[e], true
			}
		}
	}
}

// getBytes is get for a byte slice; the conversion does not allocate.
func (v *vocabTable) getBytes(b []byte) (int32, bool) {
	h := maphash.Bytes(v.seed, b)
	mask := uint64(len(v.slots) - 1)
	for i := v.slot(h); ; i = (i + 1) & mask {
		x := v.slots[i]
		if x == 0 {
			return -1, false
		}
		if x>>32 == h>>32 {
			if e := int32(x&0xffffffff) - 1; v.text(e) == string(b) {
				return v.ids[e], true
			}
		}
	}
}

// token returns the text of id, or "" when the vocab has no such id.
func (v *vocabTable) token(id int32) string {
	if id < 0 || int(id) >= len(v.byID) || v.byID[id] < 0 {
		return ""
	}
	return v.text(v.byID[id])
}

// size is the highest id + 1.
func (v *vocabTable) size() int { return len(v.byID) }
