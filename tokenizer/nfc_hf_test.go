package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// Expected ids below come from Hugging Face tokenizers 0.23.2 (npm "tokenizers", the Rust
// library's node binding) on /work/shared/assets/qwen-tokenizer/tokenizer.json,
// add_special_tokens=false.

func rep(ids []int32, n int) []int32 {
	var out []int32
	for range n {
		out = append(out, ids...)
	}
	return out
}

// TestNFCNoStreamSafeCGJForExpandingMarks: x/text's NFC inserts U+034F (stream-safe format) once
// a run passes 30 non-starters *after decomposition*: characters that decompose into several
// non-starters (U+0344 -> U+0308 U+0301) or that have class 0 but decompose into non-starters
// (U+0F73 -> U+0F71 U+0F72) make such runs from fewer raw marks. HF never adds the joiner.
func TestNFCNoStreamSafeCGJForExpandingMarks(t *testing.T) {
	tok := defaultTB(t)
	for _, tc := range []struct {
		text string
		want []int32
	}{
		// 16 × U+0344 = 32 non-starters after decomposition; 16 raw runes (< 24).
		{"a" + strings.Repeat("\u0344", 16), append(append([]int32{2305}, rep([]int32{53839, 136, 230}, 15)...), 53839)},
		// 16 × U+0F73 (CCC 0, decomposes to two non-starters): hasLongMarkRun sees no run at all.
		{"a" + strings.Repeat("\u0f73", 16), append(append([]int32{64}, rep([]int32{62416, 109}, 16)...), rep([]int32{62416, 110}, 16)...)},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%+q):\n got %d ids %v\nwant %d ids %v (HF)", tc.text, len(got), got, len(tc.want), tc.want)
		}
		if n := strings.Count(nfc(tc.text), "\u034f"); n != 0 {
			t.Errorf("nfc(%+q) holds %d U+034F; HF's NFC adds none", tc.text, n)
		}
	}
}

// TestInvalidByteKeptWhateverTheNFCPath: invalid UTF-8 is kept byte for byte whether or not the
// text has a long mark run elsewhere (which takes nfcUnbounded): the same byte tokenizes the same
// way, and DecodeBytes gives it back.
func TestInvalidByteKeptWhateverTheNFCPath(t *testing.T) {
	tok := defaultTB(t)
	short := "\xff a\u0301"
	long := "\xff a" + strings.Repeat("\u0301", 40)
	if got := tok.EncodePlain(short)[0]; got != tok.byteID[0xff] {
		t.Fatalf("short path: first id %d, want byte 0xff's %d", got, tok.byteID[0xff])
	}
	if got := tok.EncodePlain(long)[0]; got != tok.byteID[0xff] {
		t.Errorf("long-mark-run path: first id %d (%q), want byte 0xff's %d as on the ordinary path",
			got, tok.DecodeBytes([]int32{got}), tok.byteID[0xff])
	}
}
