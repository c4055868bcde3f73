package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Version names the ids this code gives a tokenizer.json: it changes when the same text and the
// same tokenizer.json give other ids (2026-11-28: NFC without the stream-safe limit). Model
// fingerprints hash it, as they hash the tokenizer.json, so that the proxy's score cache does not
// serve scores of one tokenization for another.
const Version = "2026-11-28"

// markRunLimit is the longest run of combining marks (non-starters) left to x/text's NFC. Past 30
// in its decomposed form, x/text applies Unicode's Stream-Safe Text Format (UAX #15): it inserts
// U+034F COMBINING GRAPHEME JOINER and orders the marks only within each chunk of 30. Hugging
// Face's normalizer does neither, so "a" + 31 × U+0301 gave 33 ids instead of its 31. Runs of
// more raw marks than this (with room for a few more from decompositions) take nfcUnbounded.
const markRunLimit = 24

// nfc is the NFC form of s as Hugging Face's normalizer gives it: x/text's, except for text with a
// long run of combining marks.
func nfc(s string) string {
	if !hasLongMarkRun(s) {
		return norm.NFC.String(s)
	}
	return nfcUnbounded(s)
}

// hasLongMarkRun reports whether s has more than markRunLimit consecutive runes of non-zero
// canonical combining class.
func hasLongMarkRun(s string) bool {
	run := 0
	for i := 0; i < len(s); {
		p := norm.NFD.PropertiesString(s[i:])
		if p.CCC() != 0 {
			if run++; run > markRunLimit {
				return true
			}
		} else {
			run = 0
		}
		i += max(p.Size(), 1)
	}
	return false
}

// nfcUnbounded is Unicode's NFC without the stream-safe limit: full canonical decomposition, the
// canonical ordering of every run of non-starters (a stable sort by combining class), then
// canonical composition, each character composed with the last starter unless a character
// between them blocks it (class 0, or a class at least its own). A pair's primary composite is
// what x/text's NFC makes of the two alone (a two-character string is far inside its limit).
func nfcUnbounded(s string) string {
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
