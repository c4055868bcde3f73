package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Qwen pre-tokenizer splits text with the regex
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (Hugging Face runs it with Oniguruma: leftmost-first alternation with backtracking). Every
// character is a letter, a number, white space or something else, and each class starts some
// alternative, so the matches tile the text with no gaps; nextPiece returns the end of the match
// that starts at a given offset, trying the alternatives in the regex's order.

// Character classes. \s is Unicode White_Space (what Oniguruma's \s means for UTF-8), which is
// exactly Go's unicode.IsSpace; \p{L} and \p{N} are the general categories L and N, of Unicode
// 16.0 as HF has them (Go's tables are 15.0: unicode16.go adds the difference).
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch r := rune(c); {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case unicode.IsSpace(r):
			t[c] = clsSpace
		}
	}
	return t
}()

func runeClass(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	case r >= 0x1c89 && unicode.Is(unicode16Letter, r):
		return clsLetter
	case r >= 0x10d40 && unicode.Is(unicode16Number, r):
		return clsNumber
	}
	return clsOther
}

// at decodes the character at s[i]. A byte that is not valid UTF-8 is returned as RuneError of
// width 1 and classed as "other": Hugging Face never sees such input (Rust and Python strings are
// valid UTF-8), and keeping the raw byte lets byte-level BPE carry it through losslessly.
func at(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt is runeClass of the character at s[i]; an invalid byte is clsOther.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return clsOther, 1
	}
	return runeClass(r), w
}

// nextPiece returns the end of the pre-token that starts at s[i] (i < len(s)).
func nextPiece(s string, i int) int {
	r, w := at(s, i)
	cls := runeClass(r)
	if r == utf8.RuneError && w == 1 {
		cls = clsOther
	}

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return scanClass(s, i+w, clsLetter)
	}
	if cls != clsNumber && r != '\r' && r != '\n' && i+w < len(s) {
		if c2, w2 := classAt(s, i+w); c2 == clsLetter {
			return scanClass(s, i+w+w2, clsLetter)
		}
	}

	// \p{N}
	if cls == clsNumber {
		return i + w
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if cls == clsOther {
		return scanNewlines(s, scanClass(s, i+w, clsOther))
	}
	if r == ' ' && i+1 < len(s) {
		if c2, w2 := classAt(s, i+1); c2 == clsOther {
			return scanNewlines(s, scanClass(s, i+1+w2, clsOther))
		}
	}

	// White space from here on. Find the maximal run and the end of its last line break.
	j, lastLastChar, afterNL := i, i, -1
	for j < len(s) {
		c, cw := at(s, j)
		if !isSpaceRune(c, cw) {
			break
		}
		if c == '\r' || c == '\n' {
			afterNL = j + cw
		}
		lastLastChar = j
		j += cw
	}
	switch {
	case afterNL >= 0: // \s*[\r\n]+ : \s* backs off to the last line break
		return afterNL
	case j == len(s): // \s+(?!\S) at the end of the text
		return j
	case lastLastChar > i: // \s+(?!\S) backtracks one character, leaving it to the next word
		return lastLastChar
	default: // \s+ : a single space before a non-space
		return j
	}
}

func isSpaceRune(r rune, w int) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r] == clsSpace
	}
	return w > 1 && unicode.IsSpace(r)
}

// scanClass returns the end of the run of characters of class cls starting at s[i].
func scanClass(s string, i int, cls uint8) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c != cls {
			break
		}
		i += w
	}
	return i
}

func scanNewlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// contraction matches s|t|re|ve|m|ll|d case-insensitively at s[i:] and returns its length.
// Under Unicode case folding 's' also matches U+017F LATIN SMALL LETTER LONG S; no other
// character folds to one of these letters.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	lower := func(c byte) byte { return c | 0x20 }
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		if s[i] >= 'A' && s[i] <= 'z' {
			return 1
		}
	case 'r', 'v':
		if s[i] >= 'A' && s[i] <= 'z' && i+1 < len(s) && lower(s[i+1]) == 'e' && s[i+1] >= 'A' {
			return 2
		}
	case 'l':
		if s[i] >= 'A' && s[i] <= 'z' && i+1 < len(s) && lower(s[i+1]) == 'l' && s[i+1] >= 'A' {
			return 2
		}
	}
	if len(s)-i >= 2 && s[i] == 0xc5 && s[i+1] == 0xbf { // U+017F ſ
		return 2
	}
	return 0
}

// nextPieceGPT2 is nextPiece for GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (contractions are case-sensitive here, numbers run together, and line breaks are ordinary
// white space).
func nextPieceGPT2(s string, i int) int {
	r, _ := at(s, i)
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	cls, _ := classAt(s, i)
	start := i
	if r == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 != clsSpace {
			start, cls = i+1, c2
		}
	}
	if cls != clsSpace {
		return scanClass(s, start, cls)
	}
	j, lastChar := i, i
	for j < len(s) {
		c, cw := at(s, j)
		if !isSpaceRune(c, cw) {
			break
		}
		lastChar = j
		j += cw
	}
	switch {
	case j == len(s): // \s+(?!\S) at the end
		return j
	case lastChar > i: // \s+(?!\S) backtracks one character
		return lastChar
	default: // \s+
		return j
	}
}
