package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable bytes map to themselves, the others (controls,
// space, 0x7f-0xa0, 0xad) to U+0100 onwards, so every byte has a visible character in the vocab.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
	}
	n := 0
	for b := range 256 {
		if printable(b) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// tokenBytes turns a vocab entry back into the bytes it stands for. As Hugging Face's ByteLevel
// decoder does, a token holding a character outside the byte map is taken as its own UTF-8.
func tokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// buildDecode builds the id -> bytes table on first use: it costs ~150k conversions that a
// process which only encodes (the proxy) should not pay at start-up.
func (t *Tokenizer) buildDecode() {
	t.decodeOff = make([]uint32, t.vocabSize+1)
	buf := make([]byte, 0, 1<<20)
	added := 0
	for id := range t.vocabSize {
		t.decodeOff[id] = uint32(len(buf))
		// Added tokens decode to their content (they are not byte-mapped); they win over a
		// vocab entry with the same id, as in Hugging Face's id_to_token.
		if added < len(t.added) && int(t.added[added].ID) == id {
			buf = append(buf, t.added[added].Content...)
			for added < len(t.added) && int(t.added[added].ID) == id {
				added++
			}
			continue
		}
		buf = tokenBytes(buf, t.vocab.token(int32(id)))
	}
	t.decodeOff[t.vocabSize] = uint32(len(buf))
	t.decodeBuf = buf
}

// DecodeBytes returns the bytes the ids stand for, without UTF-8 repair. Unknown ids are
// skipped (Hugging Face drops ids it cannot map).
func (t *Tokenizer) DecodeBytes(ids []int32) []byte {
	t.decodeOnce.Do(t.buildDecode)
	var out []byte
	for _, id := range ids {
		if id < 0 || int(id) >= t.vocabSize {
			continue
		}
		out = append(out, t.decodeBuf[t.decodeOff[id]:t.decodeOff[id+1]]...)
	}
	return out
}

// Decode returns the text the ids stand for. Invalid UTF-8 (a token sequence cut inside a
// character) becomes U+FFFD, one per maximal invalid subsequence, like Python's
// bytes.decode(errors="replace") and Rust's String::from_utf8_lossy, which Hugging Face uses.
func (t *Tokenizer) Decode(ids []int32) string {
	return lossyUTF8(t.DecodeBytes(ids))
}

// lossyUTF8 converts b to a valid UTF-8 string. Go's strings.ToValidUTF8 replaces a whole run
// of bad bytes with one U+FFFD; Unicode's "maximal subpart" practice (used by Python and Rust)
// replaces each maximal prefix of a well-formed sequence separately, which is what this does.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			sb.WriteByte(b[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n == 3 { // n == 3: a real U+FFFD in the input
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		i += maximalSubpart(b[i:])
		sb.WriteRune(utf8.RuneError)
	}
	return sb.String()
}

// maximalSubpart returns the length (≥ 1) of the longest prefix of b that starts a well-formed
// UTF-8 sequence but is not one (b does not start with a valid character).
func maximalSubpart(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xbf) // allowed range of the first continuation byte
	switch {
	case lead >= 0xc2 && lead <= 0xdf:
		need = 1
	case lead == 0xe0:
		need, lo = 2, 0xa0
	case lead == 0xed:
		need, hi = 2, 0x9f
	case lead >= 0xe1 && lead <= 0xef:
		need = 2
	case lead == 0xf0:
		need, lo = 3, 0x90
	case lead == 0xf4:
		need, hi = 3, 0x8f
	case lead >= 0xf1 && lead <= 0xf3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		c := b[n]
		if k == 0 && (c < lo || c > hi) || k > 0 && (c < 0x80 || c > 0xbf) {
			break
		}
		n++
	}
	return n
}
