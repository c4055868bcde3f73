package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Version names the ids this code gives a tokenizer.json: it changes when the same text and the
// same tokenizer.json give other ids (2026-11-28: NFC without the stream-safe limit; 2026-11-28.2: also where the marks come from
// decompositions). Model
// fingerprints hash it, as they hash the tokenizer.json, so that the proxy's score cache does not
// serve scores of one tokenization for another.
const Version = "2026-11-28.2"

// nfc is the NFC form of s as Hugging Face's normalizer gives it: x/text's, except where x/text
// applied Unicode's Stream-Safe Text Format (UAX #15). Past 30 non-starters in a run's decomposed
// form it inserts U+034F COMBINING GRAPHEME JOINER and orders the marks only within each chunk of
// 30; Hugging Face's normalizer does neither ("a" + 31 × U+0301: 33 ids instead of its 31). The
// insertion is detected in the result rather than predicted from the input: a count of raw marks
// misses characters that decompose into several (U+0344) or that are starters decomposing into
// marks (U+0F73).
func nfc(s string) string {
	out := norm.NFC.String(s)
	if strings.Contains(out, cgj) && strings.Count(out, cgj) != strings.Count(s, cgj) {
		return nfcUnbounded(s)
	}
	return out
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
		rs = append(rs, []rune(norm.NFD.String(string(r)))...)
	}
	ccc := func(r rune) uint8 { return norm.NFD.PropertiesString(string(r)).CCC() }
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
			if !blocked {
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
