package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

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
