package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestNFCHasNoStreamSafeLimit: past 30 combining marks x/text's NFC inserts U+034F and orders
// marks only within chunks of 30; Hugging Face's normalizer (and Unicode's NFC proper) does
// neither. "a" + 31 × U+0301 is "á" + 30 × U+0301, 31 ids as Hugging Face's tokenizer gives
// (1953, then 53839 thirty times), not 33; interleaved marks are ordered across the whole run.
func TestNFCHasNoStreamSafeLimit(t *testing.T) {
	acute, dotBelow := "\u0301", "\u0323"
	if got, want := nfc("a"+strings.Repeat(acute, 31)), "á"+strings.Repeat(acute, 30); got != want {
		t.Errorf("a + 31 acutes: %+q, want %+q", got, want)
	}
	if got, want := nfc("x"+strings.Repeat(acute+dotBelow, 16)), "x"+strings.Repeat(dotBelow, 16)+strings.Repeat(acute, 16); got != want {
		t.Errorf("x + 16 × (acute, dot below): %+q, want %+q", got, want)
	}
	tok, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]int32{1953}, slices.Repeat([]int32{53839}, 30)...)
	if got := tok.EncodePlain("a" + strings.Repeat(acute, 31)); !slices.Equal(got, want) {
		t.Errorf("ids %v, want Hugging Face's %v", got, want)
	}
}

// TestNFCUnboundedIsNFC: where x/text's NFC has no limit to apply (runs of marks shorter than
// 30), the unbounded composition gives exactly its result, on random strings of base letters,
// precomposed letters, combining marks of several classes, Hangul jamo and syllables.
func TestNFCUnboundedIsNFC(t *testing.T) {
	pieces := []string{"a", "e", "o", "u", "x", "A", "á", "ǘ", "ệ", "\u0301", "\u0300", "\u0323", "\u0308", "\u0327",
		"\u031b", "\u0345", "\u05bc", "\u0b3e", "\u0b47", "\u1100", "\u1161", "\u11a8", "가", "각", "ｶ", "\u3099", "か", "Å", "\u212b", "ﬁ", " "}
	rng := rand.New(rand.NewPCG(15, 7))
	for range 5000 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		if got, want := nfcUnbounded(s), norm.NFC.String(s); got != want {
			t.Fatalf("%+q: %+q, x/text's NFC %+q", s, got, want)
		}
	}
}
