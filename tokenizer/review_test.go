package tokenizer

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// TestSplitUnicodeClasses pins the Qwen pre-tokenizer on the edges of \s, \p{N} and \p{M} as
// Oniguruma reads them: \s is Unicode White_Space (U+0085, U+00A0, U+1680, U+2000–U+200A,
// U+2028/9, U+202F, U+205F, U+3000, but not U+200B or U+FEFF); \p{N} includes letter numbers
// (Ⅻ) and other numbers (½ ² ①), one per piece; combining marks are neither L nor N. Each case
// is built so that the other reading of the class gives different pieces.
func TestSplitUnicodeClasses(t *testing.T) {
	type tc struct {
		name string
		text string
		want []string
	}
	var tests []tc
	// A run of two white-space characters before a letter: \s+(?!\S) leaves the second to the word.
	for _, r := range []rune{0x85, 0xa0, 0x1680, 0x2000, 0x2005, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000} {
		sp := string(r)
		tests = append(tests, tc{fmt.Sprintf("U+%04X is white space", r), "a" + sp + sp + "b", []string{"a", sp, sp + "b"}})
	}
	// The same run of a non-space format character is punctuation-like: one piece.
	for _, r := range []rune{0x200b, 0xfeff, 0x180e} {
		c := string(r)
		tests = append(tests, tc{fmt.Sprintf("U+%04X is not white space", r), "a" + c + c + "b", []string{"a", c + c, "b"}})
	}
	tests = append(tests,
		tc{"letter and other numbers one per piece", "Ⅻ½²①", []string{"Ⅻ", "½", "²", "①"}},
		tc{"letter number ends a word", "abⅫ", []string{"ab", "Ⅻ"}},
		tc{"space before a number stands alone", "x ½", []string{"x", " ", "½"}},
		tc{"space before a symbol joins it", "x ©", []string{"x", " ©"}},
		tc{"combining mark is not a letter", "x\u0301y", []string{"x", "\u0301y"}},
		tc{"combining marks after a digit", "1\u0301\u0301", []string{"1", "\u0301\u0301"}},
		tc{"space joins combining marks", " \u0301\u0302", []string{" \u0301\u0302"}},
		tc{"devanagari virama splits the word", "क्ष", []string{"क", "्ष"}},
		tc{"nbsp run before a number", "\u00a0\u00a0½", []string{"\u00a0", "\u00a0", "½"}},
		tc{"line separator is not a line break", "a\u2028\nb", []string{"a", "\u2028\n", "b"}},
		tc{"NEL does not end punctuation", "!\u0085x", []string{"!", "\u0085x"}},
		tc{"ideographic space before CJK", "好\u3000\u3000的", []string{"好", "\u3000", "\u3000的"}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, pieces(nextPiece, tt.text)); diff != "" {
				t.Errorf("pieces of %q (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

// TestDecodeAcrossTokens: a character whose bytes are spread over several tokens decodes whole
// when the ids are decoded together; decoding a prefix of them yields U+FFFD, not garbage.
func TestDecodeAcrossTokens(t *testing.T) {
	tok := defaultTB(t)
	split := 0
	for _, s := range []string{"𝔘", "🦜", "𓀀", "ꙮ", "﷽", "a𝔘b🦜c"} {
		ids := tok.EncodePlain(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(EncodePlain(%q)) = %q", s, got)
		}
		var parts []byte
		for k := range ids {
			parts = append(parts, tok.DecodeBytes(ids[k:k+1])...)
		}
		if string(parts) != s {
			t.Errorf("token bytes of %q concatenate to %q", s, parts)
		}
		for k := 1; k < len(ids); k++ {
			head := tok.Decode(ids[:k])
			if !utf8.ValidString(head) {
				t.Errorf("Decode of %d/%d ids of %q is not valid UTF-8: %q", k, len(ids), s, head)
			}
			if !utf8.Valid(tok.DecodeBytes(ids[:k])) {
				split++
				if !strings.HasSuffix(head, "\uFFFD") {
					t.Errorf("Decode of %d/%d ids of %q = %q, want a trailing U+FFFD", k, len(ids), s, head)
				}
			}
		}
	}
	if split == 0 {
		t.Fatal("no test string split a character across tokens; pick rarer characters")
	}
}

// TestWordCacheBounded: many distinct words never grow the cache past its bound, and a word
// evicted by a shard reset still encodes the same.
func TestWordCacheBounded(t *testing.T) {
	tok := defaultTB(t)
	if tok.cache == nil {
		t.Skip("no word cache")
	}
	want := tok.EncodePlain(" zqxwvutsrp")
	for i := range 3 * cacheShards * shardCap {
		tok.EncodePlain(fmt.Sprintf(" w%dq", i))
	}
	n := 0
	for i := range tok.cache.shards {
		sh := &tok.cache.shards[i]
		sh.mu.RLock()
		if len(sh.m) > shardCap {
			t.Errorf("shard %d holds %d words, cap %d", i, len(sh.m), shardCap)
		}
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	if n > cacheShards*shardCap {
		t.Errorf("cache holds %d words, bound %d", n, cacheShards*shardCap)
	}
	if got := tok.EncodePlain(" zqxwvutsrp"); !cmp.Equal(got, want) {
		t.Errorf("re-encode after churn = %v, want %v", got, want)
	}
}
