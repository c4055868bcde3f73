package prompt

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// upToAtoms are the pieces the random documents are built from: every class the pre-tokenizer
// tells apart (letters of several scripts, digits one by one, punctuation runs that swallow line
// breaks, contractions, white-space runs with and without line breaks, Unicode spaces), text that
// NFC changes (combining marks, Hangul jamo, a Unicode 10 mark, the one post-9.0 composition),
// bytes that are not UTF-8 and added-token text, which EncodePlain reads as characters.
var upToAtoms = []string{
	"a", "Z", "the", "charger", " watt", "ſ", "'s", "'re", "'LL", "'", "0", "7", "2048", "٣", "½",
	".", ",", "!", "?!", "--", "...", "(", ")", "\"", "#", "@", "€", "😀", "©",
	" ", " ", " ", "  ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2003",
	"中文", "词", "，", "。", "充电器", "Привет", "ελληνικά", "é", "e\u0301", "a\u0323\u0301", "\u0301",
	"\u1100\u1161", "\u11a8", "\uac00", "\u0898", "\U00011935\U00011930", "\xff", "\xe4\xb8", "<|im_end|>",
}

func upToDoc(r *rand.Rand, atoms int) string {
	var b strings.Builder
	for range atoms {
		b.WriteString(upToAtoms[r.IntN(len(upToAtoms))])
	}
	return b.String()
}

// TestItemExactUpToDecidesAsItemExact: ItemExactUpTo stops tokenizing a document once its count
// has passed the limit, and must still decide "over the limit" exactly as the whole count does
// (plan refuses or computes an item under TRUNCATION_NONE on it), and give the whole count when it
// is within the limit. Random documents of every character class, limits on both sides of the
// exact count and far from it, with both counter kinds (the estimate's counts exactly through the
// shared tokenizer).
func TestItemExactUpToDecidesAsItemExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, kind := range []string{CountExact, CountEstimate} {
		c, err := NewCounter(kind)
		if err != nil {
			t.Fatal(err)
		}
		fails := 0
		for range 1000 {
			doc := upToDoc(r, r.IntN(120))
			n := c.ItemExact(doc)
			for _, limit := range []int{-1, 0, c.Tail() - 1, c.Tail(), n / 3, n / 2, n - 3, n - 2, n - 1, n, n + 1, n + 5, 2 * n} {
				got := c.ItemExactUpTo(doc, limit)
				if (got > limit) != (n > limit) || (n <= limit && got != n) {
					if fails++; fails <= 5 {
						t.Errorf("%s counter, limit %d: ItemExactUpTo(%q) = %d, ItemExact %d", kind, limit, doc, got, n)
					}
				}
			}
		}
	}
}
