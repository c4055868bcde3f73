package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Version names the ids this code gives a tokenizer.json: it changes when the same text and the
// same tokenizer.json give other ids (2026-11-28: NFC without the stream-safe limit; 2026-11-28.2: also where the marks come from
// decompositions; 2026-11-28.3: NFC with Unicode 9.0's combining classes and compositions, \p{L} and
// \p{N} with Unicode 16.0's). Model
// fingerprints hash it, as they hash the tokenizer.json, so that the proxy's score cache does not
// serve scores of one tokenization for another.
const Version = "2026-11-28.3"

// nfc is the NFC form of s as Hugging Face's normalizer gives it: x/text's, except where x/text
// applied Unicode's Stream-Safe Text Format (UAX #15). Past 30 non-starters in a run's decomposed
// form it inserts U+034F COMBINING GRAPHEME JOINER and orders the marks only within each chunk of
// 30; Hugging Face's normalizer does neither ("a" + 31 × U+0301: 33 ids instead of its 31). The
// insertion is detected in the result rather than predicted from the input: a count of raw marks
// misses characters that decompose into several (U+0344) or that are starters decomposing into
// marks (U+0F73).
//
// Hugging Face's NFC is also older than x/text's: tokenizers 0.23.2 normalizes with
// unicode-normalization-alignments 0.1.12, whose tables are Unicode 9.0. The marks that Unicode
// 10.0-15.0 added with a nonzero combining class are starters there (they block composition and
// are not reordered: "a\u0898\u0323" stays as it is instead of becoming "\u1ea1\u0898"), and the one
// canonical composition added since, U+11935 U+11930 -> U+11938 (Unicode 13.0), does not happen
// (nor does U+11938 decompose). Text holding any of these takes nfcUnbounded, which applies both.
func nfc(s string) string {
	if hasSinceUnicode9(s) {
		return nfcUnbounded(s)
	}
	out := norm.NFC.String(s)
	if strings.Contains(out, cgj) && strings.Count(out, cgj) != strings.Count(s, cgj) {
		return nfcUnbounded(s)
	}
	return out
}

// hasSinceUnicode9 reports whether s holds a mark of marksSinceUnicode9 or U+11930, the second
// character of the one composition Unicode 9.0 lacks.
func hasSinceUnicode9(s string) bool {
	for _, r := range s {
		if r >= 0x7fd && (r == 0x11930 || unicode.Is(marksSinceUnicode9, r)) {
			return true
		}
	}
	return false
}

// marksSinceUnicode9: the characters with a nonzero canonical combining class in x/text's Unicode
// 15.0 tables that Hugging Face's NFC treats as class 0 (Unicode 10.0-15.0 additions), found by
// testing each of x/text's 922 non-starters against HF tokenizers 0.23.2.
var marksSinceUnicode9 = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x07fd, Hi: 0x07fd, Stride: 1},
		{Lo: 0x0898, Hi: 0x089f, Stride: 1},
		{Lo: 0x08ca, Hi: 0x08d3, Stride: 1},
		{Lo: 0x09fe, Hi: 0x09fe, Stride: 1},
		{Lo: 0x0c3c, Hi: 0x0c3c, Stride: 1},
		{Lo: 0x0d3b, Hi: 0x0d3c, Stride: 1},
		{Lo: 0x0eba, Hi: 0x0eba, Stride: 1},
		{Lo: 0x1715, Hi: 0x1715, Stride: 1},
		{Lo: 0x1abf, Hi: 0x1ace, Stride: 1},
		{Lo: 0x1df6, Hi: 0x1dfa, Stride: 1},
		{Lo: 0xa82c, Hi: 0xa82c, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x10d24, Hi: 0x10d27, Stride: 1},
		{Lo: 0x10eab, Hi: 0x10eac, Stride: 1},
		{Lo: 0x10efd, Hi: 0x10eff, Stride: 1},
		{Lo: 0x10f46, Hi: 0x10f50, Stride: 1},
		{Lo: 0x10f82, Hi: 0x10f85, Stride: 1},
		{Lo: 0x11070, Hi: 0x11070, Stride: 1},
		{Lo: 0x1133b, Hi: 0x1133b, Stride: 1},
		{Lo: 0x1145e, Hi: 0x1145e, Stride: 1},
		{Lo: 0x11839, Hi: 0x1183a, Stride: 1},
		{Lo: 0x1193d, Hi: 0x1193e, Stride: 1},
		{Lo: 0x11943, Hi: 0x11943, Stride: 1},
		{Lo: 0x119e0, Hi: 0x119e0, Stride: 1},
		{Lo: 0x11a34, Hi: 0x11a34, Stride: 1},
		{Lo: 0x11a47, Hi: 0x11a47, Stride: 1},
		{Lo: 0x11a99, Hi: 0x11a99, Stride: 1},
		{Lo: 0x11d42, Hi: 0x11d42, Stride: 1},
		{Lo: 0x11d44, Hi: 0x11d45, Stride: 1},
		{Lo: 0x11d97, Hi: 0x11d97, Stride: 1},
		{Lo: 0x11f41, Hi: 0x11f42, Stride: 1},
		{Lo: 0x16ff0, Hi: 0x16ff1, Stride: 1},
		{Lo: 0x1e08f, Hi: 0x1e08f, Stride: 1},
		{Lo: 0x1e130, Hi: 0x1e136, Stride: 1},
		{Lo: 0x1e2ae, Hi: 0x1e2ae, Stride: 1},
		{Lo: 0x1e2ec, Hi: 0x1e2ef, Stride: 1},
		{Lo: 0x1e4ec, Hi: 0x1e4ef, Stride: 1},
	},
}

// cgj is U+034F COMBINING GRAPHEME JOINER, what the stream-safe format inserts.
const cgj = "\u034f"

// nfcUnbounded is Unicode's NFC without the stream-safe limit: full canonical decomposition, the
// canonical ordering of every run of non-starters (a stable sort by combining class), then
// canonical composition, each character composed with the last starter unless a character
// between them blocks it (class 0, or a class at least its own). A pair's primary composite is
// what x/text's NFC makes of the two alone (a two-character string is far inside its limit).
//
// Bytes that are not UTF-8 are kept as they are (as x/text's NFC and the rest of the tokenizer
// keep them, byte-level): each valid stretch between them is normalised on its own.
func nfcUnbounded(s string) string {
	if utf8.ValidString(s) {
		return nfcUnboundedValid(s)
	}
	var b strings.Builder
	for s != "" {
		i := 0
		for i < len(s) {
			r, w := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && w == 1 {
				break
			}
			i += w
		}
		b.WriteString(nfcUnboundedValid(s[:i]))
		if i < len(s) {
			b.WriteByte(s[i])
			i++
		}
		s = s[i:]
	}
	return b.String()
}

// nfcUnboundedValid is nfcUnbounded of valid UTF-8.
func nfcUnboundedValid(s string) string {
	var rs []rune
	for _, r := range s {
		if r == 0x11938 { // no decomposition in Unicode 9.0
			rs = append(rs, r)
			continue
		}
		rs = append(rs, []rune(norm.NFD.String(string(r)))...)
	}
	ccc := func(r rune) uint8 {
		if r >= 0x7fd && unicode.Is(marksSinceUnicode9, r) {
			return 0
		}
		return norm.NFD.PropertiesString(string(r)).CCC()
	}
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	out := make([]rune, 0, len(rs))
	starter := -1 // index in out of the last starter
	for _, r := range rs {
		c := ccc(r)
		if starter >= 0 {
			// Blocked when a character after the starter has class 0 or a class ≥ c.
			last := out[len(out)-1]
			blocked := len(out)-1 > starter && (ccc(last) == 0 || ccc(last) >= c)
			if !blocked && !(out[starter] == 0x11935 && r == 0x11930) { // U+11938 is Unicode 13.0
				if comp := []rune(norm.NFC.String(string(out[starter]) + string(r))); len(comp) == 1 {
					out[starter] = comp[0]
					continue
				}
			}
		}
		if c == 0 {
			starter = len(out)
		}
		out = append(out, r)
	}
	var b strings.Builder
	b.Grow(len(out) * utf8.UTFMax)
	for _, r := range out {
		b.WriteRune(r)
	}
	return b.String()
}
