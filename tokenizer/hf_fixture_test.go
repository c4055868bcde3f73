package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// hfCase is one line of testdata/hf/qwen3.jsonl.gz (made by testdata/hf/gen.js with Hugging
// Face tokenizers 0.23.2): IDs is HF's encode(text, add_special_tokens=false), which Encode must
// give; Plain, present where the text holds added-token text, is HF's ids for the same
// tokenizer.json without added tokens, which EncodePlain must give (elsewhere it must give IDs).
type hfCase struct {
	Group string  `json:"g"`
	Text  string  `json:"t"`
	IDs   []int32 `json:"ids"`
	Plain []int32 `json:"p"`
	line  int
}

func loadHFFixture(tb testing.TB) []hfCase {
	tb.Helper()
	f, err := os.Open("testdata/hf/qwen3.jsonl.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	var header struct {
		Cases int `json:"cases"`
	}
	var cases []hfCase
	for n := 1; sc.Scan(); n++ {
		if n == 1 {
			if err := json.Unmarshal(sc.Bytes(), &header); err != nil {
				tb.Fatalf("header: %v", err)
			}
			continue
		}
		c := hfCase{line: n}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatalf("line %d: %v", n, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(cases) != header.Cases || len(cases) < 10000 {
		tb.Fatalf("read %d cases, header says %d (want ≥ 10,000)", len(cases), header.Cases)
	}
	return cases
}

// TestEncodeMatchesHFFixture checks Encode and EncodePlain against Hugging Face on every case of
// the fixture: all assigned code points in three contexts, mixed scripts, long runs, combining
// marks, contractions, added-token text, CR/LF, control characters and random strings. A
// mismatch is reported at its first differing id, with the text around it.
func TestEncodeMatchesHFFixture(t *testing.T) {
	tok := defaultTB(t)
	cases := loadHFFixture(t)
	const perGroup = 3
	failed := map[string]int{}
	for i, c := range cases {
		if raceEnabled && i%8 != 0 {
			continue // an eighth under the race detector (~10× slower); all in the plain and purego runs
		}
		for _, api := range []string{"Encode", "EncodePlain"} {
			want, got := c.IDs, tok.Encode(c.Text)
			if api == "EncodePlain" {
				if c.Plain != nil {
					want = c.Plain
				}
				got = tok.EncodePlain(c.Text)
			}
			if slices.Equal(want, got) {
				continue
			}
			key := c.Group + " " + api
			failed[key]++
			if failed[key] <= perGroup {
				t.Errorf("%s line %d (%s): %s", c.Group, c.line, api, describeMismatch(tok, c.Text, want, got))
			}
		}
	}
	if len(failed) > 0 {
		keys := make([]string, 0, len(failed))
		for k := range failed {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "\n  %-28s %d", k, failed[k])
		}
		t.Errorf("mismatching cases by group (of %d):%s", len(cases), b.String())
	}
}

// describeMismatch names the first differing id and shows the text there: the decoded ids
// before it, then what HF and Go continue with.
func describeMismatch(tok *Tokenizer, text string, want, got []int32) string {
	k := 0
	for k < len(want) && k < len(got) && want[k] == got[k] {
		k++
	}
	seg := func(ids []int32, i, j int) []int32 { return ids[max(0, min(i, len(ids))):min(j, len(ids))] }
	show := func(ids []int32) string { return fmt.Sprintf("%+q %v", tok.DecodeBytes(ids), ids) }
	var b strings.Builder
	fmt.Fprintf(&b, "%d ids from HF, %d from Go, first difference at id %d\n", len(want), len(got), k)
	fmt.Fprintf(&b, "\tbefore: %s\n", show(seg(want, k-4, k)))
	fmt.Fprintf(&b, "\tHF:     %s\n", show(seg(want, k, k+6)))
	fmt.Fprintf(&b, "\tGo:     %s", show(seg(got, k, k+6)))
	if len(text) <= 120 {
		fmt.Fprintf(&b, "\n\ttext:   %+q", text)
	}
	return b.String()
}

// TestUnicodeVersionsAsHF pins the two Unicode-version differences the fixture found, with ids
// from HF tokenizers 0.23.2: its pre-tokenizer regex has Unicode 16.0's \p{L} and \p{N} (Go's
// unicode package is 15.0), and its NFC has Unicode 9.0's tables (x/text's are 15.0).
func TestUnicodeVersionsAsHF(t *testing.T) {
	tok := defaultTB(t)
	for _, tc := range []struct {
		name, text string
		want       []int32
	}{
		// U+13F68 (Egyptian Hieroglyphs Extended-A, Lo in 16.0) is a letter: "'t" stays a contraction.
		{"letter new in 16.0", "\U00013f68't", []int32{124373, 121, 101, 944}},
		// U+10D44 GARAY DIGIT FOUR (Nd in 16.0) is a number.
		{"digit new in 16.0", "\U00010d44're", []int32{123934, 113, 226, 2299}},
		// U+0898 (Unicode 14.0, class 230) is a starter to HF: no reordering, no composition.
		{"mark new since 9.0", "a\u0898\u0323", []int32{64, 156, 95, 246, 136, 96}},
		// U+07FD (Unicode 11.0, class 220) blocks a + U+0301 in HF (x/text makes "\u00e1\u07fd").
		{"mark new since 9.0 blocks", "a\u07fd\u0301", []int32{64, 155, 121, 53839}},
		// U+11935 U+11930 -> U+11938 is a Unicode 13.0 composition: HF keeps the pair.
		{"composition new since 9.0", "\U00011935\U00011930", []int32{128240, 97, 113, 128240, 97, 108}},
		// U+11938 must not be decomposed either (the fix must not leave the pair).
		{"no decomposition in 9.0", "\U00011938\u0301", []int32{128240, 97, 116, 53839}},
	} {
		for _, api := range []string{"Encode", "EncodePlain"} {
			got := tok.Encode(tc.text)
			if api == "EncodePlain" {
				got = tok.EncodePlain(tc.text)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: %s(%+q) = %v, want %v (HF)", tc.name, api, tc.text, got, tc.want)
			}
		}
	}
}
