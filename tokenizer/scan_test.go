package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func pieces(split func(string, int) int, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := split(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// TestSplitPieces pins the pre-tokenizers' pieces, alternative by alternative of each regex.
func TestSplitPieces(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		qwen, gpt2 []string
	}{
		{name: "space joins the word", text: "Hello world", qwen: []string{"Hello", " world"}, gpt2: []string{"Hello", " world"}},
		{name: "space run leaves one space", text: "a   b", qwen: []string{"a", "  ", " b"}, gpt2: []string{"a", "  ", " b"}},
		{name: "trailing spaces", text: "a  ", qwen: []string{"a", "  "}, gpt2: []string{"a", "  "}},
		{name: "single space before digit", text: "x 12", qwen: []string{"x", " ", "1", "2"}, gpt2: []string{"x", " 12"}},
		{name: "line breaks", text: "a \n\n b", qwen: []string{"a", " \n\n", " b"}, gpt2: []string{"a", " \n\n", " b"}},
		{name: "spaces after line break", text: "\n   x", qwen: []string{"\n", "  ", " x"}, gpt2: []string{"\n  ", " x"}},
		{name: "punctuation takes line breaks", text: "!!\n\nx", qwen: []string{"!!\n\n", "x"}, gpt2: []string{"!!", "\n", "\n", "x"}},
		{name: "punctuation prefixes a word", text: ".cpp", qwen: []string{".cpp"}, gpt2: []string{".", "cpp"}},
		{name: "tab prefixes a word", text: "\tif", qwen: []string{"\tif"}, gpt2: []string{"\t", "if"}},
		{name: "contractions", text: "we'll it's", qwen: []string{"we", "'ll", " it", "'s"}, gpt2: []string{"we", "'ll", " it", "'s"}},
		{name: "upper-case contraction", text: "IT'S", qwen: []string{"IT", "'S"}, gpt2: []string{"IT", "'", "S"}},
		{name: "long s folds to s", text: "x'ſ", qwen: []string{"x", "'ſ"}, gpt2: []string{"x", "'", "ſ"}},
		{name: "apostrophe word", text: "'all", qwen: []string{"'all"}, gpt2: []string{"'", "all"}},
		{name: "nbsp is white space", text: "a\u00a0\u00a0b", qwen: []string{"a", "\u00a0", "\u00a0b"}, gpt2: []string{"a", "\u00a0", "\u00a0", "b"}},
		{name: "NEL is white space", text: "a\u0085b", qwen: []string{"a", "\u0085b"}, gpt2: []string{"a", "\u0085", "b"}},
		{name: "BOM is not white space", text: "\ufeff'x", qwen: []string{"\ufeff'", "x"}, gpt2: []string{"\ufeff'", "x"}},
		{name: "cjk run", text: "我想在apple工作", qwen: []string{"我想在apple工作"}, gpt2: []string{"我想在apple工作"}},
		{name: "invalid byte is other", text: "a\xffb", qwen: []string{"a", "\xffb"}, gpt2: []string{"a", "\xff", "b"}},
		{name: "crlf after spaces", text: "x  \r\n", qwen: []string{"x", "  \r\n"}, gpt2: []string{"x", "  \r\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.qwen, pieces(nextPiece, tc.text)); diff != "" {
				t.Errorf("qwen pieces of %q (-want +got):\n%s", tc.text, diff)
			}
			if diff := cmp.Diff(tc.gpt2, pieces(nextPieceGPT2, tc.text)); diff != "" {
				t.Errorf("gpt2 pieces of %q (-want +got):\n%s", tc.text, diff)
			}
		})
	}
}

// TestGPT2PreTokenizer loads the Qwen vocabulary with GPT-2's ByteLevel(use_regex=true)
// pre-tokenizer and checks testdata/xcheck_gpt2.jsonl, made with the same independent
// implementation as xcheck.jsonl (strings holding U+0085 or U+FEFF left out: that
// implementation's built-in GPT-2 regex uses JavaScript's \s, which differs from Oniguruma's
// there).
func TestGPT2PreTokenizer(t *testing.T) {
	data, err := DefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(data, []byte(`"pre_tokenizer": {`))
	end := bytes.Index(data, []byte(`"post_processor":`))
	if start < 0 || end < start {
		t.Fatal("cannot find the pre_tokenizer section")
	}
	gpt2 := append(append(append([]byte{}, data[:start]...),
		`"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},`+"\n  "...),
		data[end:]...)
	tok, err := Load(gpt2)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/xcheck_gpt2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var c struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
		if diff := cmp.Diff(c.IDs, tok.Encode(c.Text), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("line %d: Encode(%q) mismatch (-want +got):\n%s", n, c.Text, diff)
		}
	}
	if n != 200 {
		t.Fatalf("read %d cases, want 200", n)
	}
}

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
