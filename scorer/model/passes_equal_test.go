package model

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
)

// rawTokens is n token ids from base on, within the tiny models' vocabulary.
func rawTokens(n, base int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(1 + (base+i)%300)
	}
	return t
}

// boundedCase is a call whose groups stress forwardBounded: duplicate prefixes split differently,
// groups with nothing to score, items longer than a pass, an empty prefix.
type boundedCase struct {
	name  string
	build func(t *testing.T, e *Engine) []*scorer.Group
}

func tokenizeFor(t *testing.T, e *Engine, instr, q string, docs []string, opt scorer.TokenizeOptions) *scorer.Group {
	g, err := e.Tokenize(instr, q, docs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func boundedCases() []boundedCase {
	long := syntheticTexts(1, 90, 110, 6)[0]
	return []boundedCase{
		{"dup prefix diff template", func(t *testing.T, e *Engine) []*scorer.Group {
			a := tokenizeFor(t, e, "", "cheap espresso", testDocs[:5], scorer.TokenizeOptions{})
			b := tokenizeFor(t, e, "", "cheap espresso", testDocs[5:], scorer.TokenizeOptions{})
			b.TemplateLen = 0
			c := tokenizeFor(t, e, "", "other query here", testDocs[2:7], scorer.TokenizeOptions{})
			return []*scorer.Group{b, a, c}
		}},
		{"all toolong group", func(t *testing.T, e *Engine) []*scorer.Group {
			a := tokenizeFor(t, e, "", "cheap espresso", testDocs[:5], scorer.TokenizeOptions{})
			b := tokenizeFor(t, e, "", "another one", testDocs[:3], scorer.TokenizeOptions{})
			b.TooLong = []bool{true, true, true}
			c := tokenizeFor(t, e, "", "another two", []string{"", ""}, scorer.TokenizeOptions{})
			c.Items = [][]int32{nil, {}}
			return []*scorer.Group{b, a, c}
		}},
		{"one long item", func(t *testing.T, e *Engine) []*scorer.Group {
			a := tokenizeFor(t, e, "", "cheap espresso", []string{long, "x", long, "y"}, scorer.TokenizeOptions{})
			return []*scorer.Group{a}
		}},
		{"empty prefix", func(t *testing.T, e *Engine) []*scorer.Group {
			a := tokenizeFor(t, e, "", "cheap espresso", testDocs, scorer.TokenizeOptions{})
			a.Items = append([][]int32(nil), a.Items...)
			for i := range a.Items {
				a.Items[i] = append(append([]int32(nil), a.Prefix...), a.Items[i]...)
			}
			a.Prefix = nil
			a.TemplateLen = 0
			b := tokenizeFor(t, e, "", "cheap espresso", testDocs[:3], scorer.TokenizeOptions{})
			return []*scorer.Group{a, b}
		}},
		{"same prefix three groups", func(t *testing.T, e *Engine) []*scorer.Group {
			a := tokenizeFor(t, e, "", "cheap espresso", testDocs[:4], scorer.TokenizeOptions{})
			b := tokenizeFor(t, e, "", "cheap espresso", testDocs[4:], scorer.TokenizeOptions{})
			c := tokenizeFor(t, e, "", "cheap espresso", testDocs[1:3], scorer.TokenizeOptions{})
			return []*scorer.Group{a, b, c}
		}},
	}
}

// TestBoundedPassesEqualOnePass: a call run in passes of at most 1 or 40 rows gives what one
// pass gives, bit for bit — logits, prefix reuse, stats, and what the prefix cache holds — over
// two rounds (the second reads what the first published), with and without a cache, dense and
// MoE.
func TestBoundedPassesEqualOnePass(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2_moe"} {
		dir := generated(t, GenSpec{Arch: arch, Preset: "tiny", Seed: 1})
		for _, cache := range []int64{0, 64 << 20} {
			for _, c := range boundedCases() {
				for _, bound := range []int{1, 40} {
					ref := load(t, dir, Options{PrefixCacheBytes: cache})
					bnd := load(t, dir, Options{PrefixCacheBytes: cache, MaxPassTokens: bound})
					name := fmt.Sprintf("%s/cache=%d/%s/bound=%d", arch, cache, c.name, bound)
					for round := 0; round < 2; round++ {
						gr := c.build(t, ref)
						gb := c.build(t, bnd)
						sr, err := ref.Forward(context.Background(), gr)
						if err != nil {
							t.Fatalf("%s ref: %v", name, err)
						}
						sb, err := bnd.Forward(context.Background(), gb)
						if err != nil {
							t.Fatalf("%s bounded: %v", name, err)
						}
						for i := range gr {
							for j := range gr[i].Logits {
								if math.Float32bits(gr[i].Logits[j]) != math.Float32bits(gb[i].Logits[j]) {
									t.Errorf("%s r%d: group %d item %d: %v vs %v", name, round, i, j, gr[i].Logits[j], gb[i].Logits[j])
								}
							}
							if gr[i].PrefixReused != gb[i].PrefixReused || gr[i].PrefixCached != gb[i].PrefixCached {
								t.Errorf("%s r%d: group %d reused %d/%v vs %d/%v", name, round, i, gr[i].PrefixReused, gr[i].PrefixCached, gb[i].PrefixReused, gb[i].PrefixCached)
							}
						}
						if sr.PrefixTokens != sb.PrefixTokens || sr.PrefixReused != sb.PrefixReused || sr.ItemTokens != sb.ItemTokens || sr.Features != sb.Features {
							t.Errorf("%s r%d: stats %+v vs %+v", name, round, sr, sb)
						}
						if cache > 0 {
							cr, _ := ref.PrefixCacheStats()
							cb, _ := bnd.PrefixCacheStats()
							if cr != cb {
								t.Errorf("%s r%d: cache %+v vs %+v", name, round, cr, cb)
							}
						}
					}
				}
			}
		}
	}
}

// TestPrefixOverThePositionsIsAnErrorWithoutItems: a group with no items whose prefix is longer
// than the model's positions is an error naming it, not a panic in RoPE (which, on a helper
// goroutine, ended the process).
func TestPrefixOverThePositionsIsAnErrorWithoutItems(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1})
	e := load(t, dir, Options{MaxTokens: 64})
	gs := []*scorer.Group{
		{Prefix: rawTokens(80, 0)},
		{Prefix: rawTokens(5, 3), Items: [][]int32{rawTokens(4, 9)}},
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	if _, err := e.Forward(context.Background(), gs); err == nil || !strings.Contains(err.Error(), "group 0: a prefix of 80 tokens") {
		t.Errorf("err %v, want one naming group 0's prefix", err)
	}
}

// TestBoundedPassesNameATooLongItemAsOnePassDoes: a prompt over the positions is refused before
// any pass runs, naming its group and item as one pass does (found in a later pass, it wasted the
// first and was named by its place in that pass).
func TestBoundedPassesNameATooLongItemAsOnePassDoes(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1})
	e := load(t, dir, Options{MaxTokens: 64, MaxPassTokens: 20})
	gs := []*scorer.Group{
		{Prefix: rawTokens(5, 0), Items: [][]int32{rawTokens(10, 1)}},
		{Prefix: rawTokens(5, 3), Items: [][]int32{rawTokens(10, 9), rawTokens(70, 2)}},
	}
	_, err := e.Forward(context.Background(), gs)
	e2 := load(t, dir, Options{MaxTokens: 64})
	_, err2 := e2.Forward(context.Background(), gs)
	if err == nil || err2 == nil || err.Error() != err2.Error() || !strings.Contains(err.Error(), "group 1 item 1") {
		t.Errorf("error differs: %v vs %v", err, err2)
	}
}
