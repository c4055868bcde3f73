package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Word pools for product-like text. Small on purpose: realism comes from the structure
// (title, attributes, description) and the length distribution, which is what drives cost.
var (
	brands     = []string{"Acme", "Nordlys", "Kestrel", "Orbita", "Tamarind", "Vantage", "Lumio", "Brightwell", "Halden", "Sora", "Quill", "Maple & Co", "Zephyr", "Ironbark", "Pelican"}
	adjectives = []string{"wireless", "waterproof", "lightweight", "ergonomic", "stainless", "organic", "portable", "compact", "premium", "foldable", "noise-cancelling", "rechargeable", "vintage", "heavy-duty", "breathable", "adjustable", "ultra-thin", "smart", "insulated", "non-stick"}
	nouns      = []string{"earbuds", "running shoes", "backpack", "coffee grinder", "desk lamp", "yoga mat", "water bottle", "office chair", "phone case", "blender", "rain jacket", "mechanical keyboard", "air fryer", "tent", "smartwatch", "frying pan", "monitor stand", "headphones", "sleeping bag", "electric toothbrush", "dress shirt", "baby stroller", "bike helmet", "router", "vacuum cleaner"}
	colors     = []string{"black", "white", "navy", "forest green", "red", "graphite", "sand", "rose gold", "silver", "sky blue"}
	materials  = []string{"cotton", "polyester", "aluminium", "stainless steel", "bamboo", "ABS plastic", "leather", "merino wool", "silicone", "glass"}
	sizes      = []string{"S", "M", "L", "XL", "42", "10 inch", "1.5 L", "500 ml", "15.6\"", "king"}
	descWords  = strings.Fields(`designed for everyday use with a durable build and a clean minimal look the
		product keeps you comfortable all day and fits easily in a bag or drawer its battery lasts up to
		thirty hours on a single charge and recharges quickly over usb-c the surface resists scratches
		stains and water so it is easy to clean with a damp cloth customers say it is reliable quiet and
		good value for money it comes with a two year warranty free returns within thirty days and a
		quick start guide compatible with most phones laptops and accessories perfect as a gift for
		travel the office the gym or the kitchen made from recycled materials where possible and packed
		in plastic-free packaging the adjustable strap and soft padding reduce pressure on the shoulders
		while the reinforced seams add strength for outdoor adventures`)
	queryWords = []string{"best", "cheap", "for men", "for women", "kids", "2024", "under 50", "gift", "with case", "large", "small", "sale", "bluetooth", "waterproof", "running", "office", "camping", "travel", "ergonomic", "quiet"}
	zhTitles   = []string{"无线蓝牙耳机", "防水运动手表", "不锈钢保温杯", "人体工学办公椅", "便携式咖啡机", "超轻跑步鞋", "降噪头戴式耳机", "智能扫地机器人", "纯棉短袖T恤", "户外双人帐篷"}
	zhDesc     = []string{"采用优质材料制作，经久耐用。", "续航时间长达三十小时，支持快充。", "轻巧便携，适合旅行和日常使用。", "简约设计，多种颜色可选。", "七天无理由退换，全国包邮。", "符合人体工学，久坐不累。", "防水防尘，适合户外运动。", "赠送收纳袋和说明书。", "好评如潮，性价比高。", "支持蓝牙5.3，连接稳定。"}
)

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// genQuery makes a short search query of about n words.
func genQuery(r *rand.Rand, n int) string {
	parts := []string{pick(r, adjectives), pick(r, nouns)}
	if n <= 1 {
		return pick(r, nouns)
	}
	for len(parts) < n {
		switch r.IntN(3) {
		case 0:
			parts = append(parts, pick(r, queryWords))
		case 1:
			parts = append([]string{pick(r, brands)}, parts...)
		default:
			parts = append(parts, pick(r, colors))
		}
	}
	return strings.Join(parts, " ")
}

// genItem makes an English product listing of about target tokens: a title, attributes and a
// description padded to length.
func genItem(r *rand.Rand, target int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s %s, %s", pick(r, brands), pick(r, adjectives), pick(r, adjectives), pick(r, nouns), pick(r, colors))
	if target > 30 {
		fmt.Fprintf(&b, "\nColor: %s; Material: %s; Size: %s; Weight: %d g; Rating: %.1f/5 (%d reviews); Price: $%d.%02d\n",
			pick(r, colors), pick(r, materials), pick(r, sizes), 50+r.IntN(3000), 3+2*r.Float64(), r.IntN(20000), 5+r.IntN(400), r.IntN(100))
	}
	// Pad with description words until the estimate reaches the target.
	tok := EstimateTokens(b.String())
	start := r.IntN(len(descWords))
	for i := 0; tok < target; i++ {
		w := descWords[(start+i)%len(descWords)]
		b.WriteByte(' ')
		b.WriteString(w)
		tok += estimateWord(w)
		if i%17 == 16 {
			b.WriteByte('.')
			tok++
		}
	}
	return b.String()
}

// genChineseItem makes a Chinese listing of about target tokens.
func genChineseItem(r *rand.Rand, target int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s 【%s】\n", pick(r, brands), pick(r, zhTitles), pick(r, zhTitles))
	for EstimateTokens(b.String()) < target {
		b.WriteString(pick(r, zhDesc))
	}
	return b.String()
}

// EstimateTokens approximates the number of Qwen BPE tokens of s: about 1.3 tokens per English
// word (with punctuation and digits counting extra) and about 0.7 tokens per CJK character. It
// is for shaping workloads, not for billing.
func EstimateTokens(s string) int {
	n := 0
	inWord := false
	wordLen := 0
	flush := func() {
		if inWord {
			n += estimateWordLen(wordLen)
		}
		inWord, wordLen = false, 0
	}
	cjk := 0
	for _, c := range s {
		switch {
		case c >= 0x2E80 && utf8.RuneLen(c) >= 3 && !unicode.IsPunct(c):
			flush()
			cjk++
		case unicode.IsLetter(c):
			inWord = true
			wordLen++
		case unicode.IsDigit(c):
			flush()
			n++ // Qwen splits digits one by one
		case unicode.IsSpace(c):
			flush()
		default:
			flush()
			n++
		}
	}
	flush()
	return n + (cjk*7+9)/10
}

func estimateWord(w string) int {
	return EstimateTokens(w)
}

// estimateWordLen: common short words are one token, long words split into ~4-letter pieces.
func estimateWordLen(l int) int {
	if l <= 8 {
		return 1
	}
	return (l + 4) / 5
}

// Item returns one product listing of about tokens tokens (Chinese when zh), drawn from r.
func Item(r *rand.Rand, tokens int, zh bool) string {
	if zh {
		return genChineseItem(r, tokens)
	}
	return genItem(r, tokens)
}

// Query returns a search query of about words words, drawn from r.
func Query(r *rand.Rand, words int) string { return genQuery(r, words) }
