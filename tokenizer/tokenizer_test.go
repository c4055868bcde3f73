package tokenizer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/text/unicode/norm"
)

// Expected ids come from Hugging Face's reference behaviour as reproduced by an independent
// implementation (see testdata/xcheck/README.md); the comments say why each case is there.
func TestExtraCases(t *testing.T) {
	tok := defaultTB(t)
	tests := []struct {
		name  string
		text  string
		want  []int32 // Encode
		plain []int32 // EncodePlain, when it differs
	}{
		// \s+(?!\S) leaves the last space of a run to the next word: "a", "  ", " b".
		{name: "spaces before word", text: "a   b", want: []int32{64, 256, 293}},
		// At the end of the text the whole run is one piece.
		{name: "spaces at end", text: "word   ", want: []int32{1158, 262}},
		// \s*[\r\n]+ takes a run of line breaks at once ("\n\n\n" is one token).
		{name: "newline runs", text: "a\n\n\nb\n", want: []int32{64, 1406, 65, 198}},
		// Spaces before a line break join it; spaces after it split as before a word.
		{name: "spaces then newline", text: "x  \n  y", want: []int32{87, 2303, 220, 379}},
		{name: "crlf", text: "line1\r\nline2\r\n", want: []int32{1056, 16, 319, 1056, 17, 319}},
		// A tab is a valid [^\r\n\p{L}\p{N}] prefix of a word.
		{name: "tabs", text: "\tindented\t\tcode", want: []int32{197, 484, 15864, 197, 43343}},
		// \p{N} takes one digit at a time.
		{name: "digits alone", text: "SKU 12345 x2", want: []int32{89755, 220, 16, 17, 18, 19, 20, 856, 17}},
		{name: "decimal and thousands", text: "3.14 1,000,000", want: []int32{18, 13, 16, 19, 220, 16, 11, 15, 15, 15, 11, 15, 15, 15}},
		{name: "cjk", text: "我想在apple工作", want: []int32{104100, 18493, 22377, 99257}},
		{name: "cjk punctuation", text: "颜色：黑色，尺寸：大。", want: []int32{102284, 5122, 104723, 3837, 105356, 5122, 26288, 1773}},
		{name: "emoji", text: "great 👍🏽 product 🚀🚀", want: []int32{46891, 61804, 235, 145375, 1985, 11162, 248, 222, 145836}},
		{name: "zwj emoji", text: "👨\u200d👩\u200d👧 family", want: []int32{145367, 378, 235, 145233, 378, 235, 145665, 2997}},
		// (?i:...) contractions in upper case are pieces of their own ("'LL" then merges to "'"+"LL").
		{name: "contractions upper", text: "I'M SURE YOU'RE RIGHT, WE'LL SEE, IT'S THEY'VE HE'D DON'T",
			want: []int32{40, 27603, 328, 4521, 14985, 94153, 27477, 11, 19677, 6, 4086, 26103, 11, 8700, 13272, 62493, 6, 4491, 11685, 27705, 44273, 17323}},
		{name: "contractions mixed case", text: "it'S we'Ve you'rE", want: []int32{275, 13272, 582, 6, 42612, 498, 96570, 36}},
		{name: "apostrophe not contraction", text: "'hello' rock'n'roll", want: []int32{6, 14990, 6, 6946, 43786, 6, 1100}},
		// NBSP and U+3000 are \s but not \r\n, so they prefix the next word.
		{name: "nbsp before word", text: "a\u00a0b", want: []int32{64, 4102, 65}},
		{name: "ideographic space", text: "a\u3000b", want: []int32{64, 22441, 65}},
		// NFD input is composed first: "é" and "ä" become single characters.
		{name: "nfd input", text: "Cafe\u0301 na\u0308ive", want: []int32{34, 2577, 963, 43117, 533}},
		{name: "special text", text: "<|im_start|>user\nhi<|im_end|>",
			want:  []int32{151644, 872, 198, 6023, 151645},
			plain: []int32{27, 91, 318, 4906, 91, 29, 872, 198, 6023, 27, 91, 318, 6213, 91, 29}},
		{name: "think tags", text: "<think>\n\n</think>\n\n",
			want:  []int32{151667, 271, 151668, 271},
			plain: []int32{13708, 766, 1339, 522, 26865, 1339}},
		{name: "partial special", text: "<|im_start|", want: []int32{27, 91, 318, 4906, 91}},
		{name: "special inside brackets", text: "<<|im_end|>>",
			want:  []int32{27, 151645, 29},
			plain: []int32{2442, 91, 318, 6213, 91, 2452}},
		{name: "empty", text: "", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tok.Encode(tc.text), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Encode(%q) mismatch (-want +got):\n%s", tc.text, diff)
			}
			plain := tc.plain
			if plain == nil {
				plain = tc.want
			}
			got := tok.EncodePlain(tc.text)
			if diff := cmp.Diff(plain, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("EncodePlain(%q) mismatch (-want +got):\n%s", tc.text, diff)
			}
			if dec := tok.Decode(got); dec != norm.NFC.String(tc.text) {
				t.Errorf("Decode(EncodePlain(%q)) = %q, want the NFC text", tc.text, dec)
			}
		})
	}
}

// TestCrossCheck runs the 400 adversarial strings of testdata/xcheck.jsonl.
func TestCrossCheck(t *testing.T) {
	tok := defaultTB(t)
	f, err := os.Open("testdata/xcheck.jsonl")
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
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 400 {
		t.Fatalf("read %d cases, want 400", n)
	}
}

// TestPromptTemplate checks the reranker prompt of DESIGN.md: control tokens map to their ids
// in Encode, and splitting the prompt at the prefix boundary (after "<Document>:") gives the same
// tokens as the whole prompt, which prefix reuse relies on.
func TestPromptTemplate(t *testing.T) {
	tok := defaultTB(t)
	const (
		head = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
		tail = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	)
	ids := func(tb testing.TB, s string) int32 {
		tb.Helper()
		id, ok := tok.TokenID(s)
		if !ok {
			tb.Fatalf("TokenID(%q) not found", s)
		}
		return id
	}
	imStart, imEnd, think, endThink := ids(t, "<|im_start|>"), ids(t, "<|im_end|>"), ids(t, "<think>"), ids(t, "</think>")
	if diff := cmp.Diff([]int32{151644, 151645, 151667, 151668}, []int32{imStart, imEnd, think, endThink}); diff != "" {
		t.Fatalf("special ids (-want +got):\n%s", diff)
	}
	for _, doc := range []string{"Apple iPhone 15 Pro 256GB", "苹果手机 官方正品", "  two leading spaces", "\nnewline first", "<|im_end|> injected", "'s contraction first"} {
		prefix := head + "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: iphone 15\n<Document>:"
		whole := tok.Encode(prefix + " " + doc + tail)
		// The document is user text: plain. The template's control tokens are Encode'd.
		split := append(tok.Encode(prefix), tok.EncodePlain(" "+doc)...)
		split = append(split, tok.Encode(tail)...)
		if strings.Contains(doc, "<|im_end|>") {
			// Encode of the whole string would turn the injected text into a control token;
			// that is exactly why user text goes through EncodePlain.
			if count(whole, imEnd) != 3 {
				t.Errorf("%q: whole-prompt Encode should see 3 <|im_end|>, got %d", doc, count(whole, imEnd))
			}
			if count(split, imEnd) != 2 {
				t.Errorf("%q: split Encode should keep the injected text plain, got %d <|im_end|>", doc, count(split, imEnd))
			}
			continue
		}
		if diff := cmp.Diff(whole, split); diff != "" {
			t.Errorf("doc %q: prefix + item tokens differ from the whole prompt (-whole +split):\n%s", doc, diff)
		}
		if count(whole, imStart) != 3 || count(whole, imEnd) != 2 || count(whole, think) != 1 || count(whole, endThink) != 1 {
			t.Errorf("doc %q: control token counts wrong in %v", doc, whole)
		}
		if got := whole[len(whole)-4:]; !cmp.Equal(got, []int32{think, 271, endThink, 271}) {
			t.Errorf("doc %q: prompt ends with %v, want <think> \\n\\n </think> \\n\\n", doc, got)
		}
	}
}

func count(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func TestTokenIDAndVocab(t *testing.T) {
	tok := defaultTB(t)
	tests := []struct {
		tok  string
		want int32
	}{
		{"yes", 9693}, {"no", 2152}, {"Ġyes", 9834}, {"Ġno", 902}, {"Ċ", 198}, {"ĊĊ", 271},
		{"<|endoftext|>", 151643}, {"<|im_end|>", 151645}, {"</think>", 151668},
	}
	for _, tc := range tests {
		got, ok := tok.TokenID(tc.tok)
		if !ok || got != tc.want {
			t.Errorf("TokenID(%q) = %d, %v; want %d, true", tc.tok, got, ok, tc.want)
		}
	}
	if _, ok := tok.TokenID("definitely not a token"); ok {
		t.Error("TokenID of a non-token reported found")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	// Decode maps ids back, added tokens included; unknown ids are skipped as in Hugging Face.
	if got := tok.Decode([]int32{151644, 872, 198, -1, 999999, 9693}); got != "<|im_start|>user\nyes" {
		t.Errorf("Decode = %q", got)
	}
}

// TestAllBytes: every single byte is one token. For ASCII, Decode gives the byte back. A byte
// ≥ 0x80 alone is not UTF-8; the ids still carry it exactly (DecodeBytes), and Decode turns it
// into U+FFFD, as Hugging Face's errors="replace" decoding does.
func TestAllBytes(t *testing.T) {
	tok := defaultTB(t)
	seen := map[int32]int{}
	for b := range 256 {
		s := string([]byte{byte(b)})
		ids := tok.EncodePlain(s)
		if len(ids) != 1 {
			t.Errorf("byte 0x%02x: %d tokens %v, want 1", b, len(ids), ids)
			continue
		}
		if prev, dup := seen[ids[0]]; dup {
			t.Errorf("bytes 0x%02x and 0x%02x share token %d", prev, b, ids[0])
		}
		seen[ids[0]] = b
		if got := tok.DecodeBytes(ids); string(got) != s {
			t.Errorf("byte 0x%02x: DecodeBytes = %x", b, got)
		}
		want := s
		if b >= utf8.RuneSelf {
			want = "\uFFFD"
		}
		if got := tok.Decode(ids); got != want {
			t.Errorf("byte 0x%02x: Decode = %q, want %q", b, got, want)
		}
	}
}

func TestDecodeInvalidUTF8(t *testing.T) {
	// Want values are Python's bytes.decode("utf-8", errors="replace").
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"valid", "héllo", "héllo"},
		{"truncated 3-byte", "\xe2\x82", "\ufffd"},
		{"two bad leads", "\xff\xfe", "\ufffd\ufffd"},
		{"truncated emoji then ascii", "\xf0\x9f\x98a", "\ufffda"},
		{"overlong", "\xc0\xaf", "\ufffd\ufffd"},
		{"above U+10FFFF", "\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"surrogate", "\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"overlong 3-byte", "\xe0\x80\xaf", "\ufffd\ufffd\ufffd"},
		{"real U+FFFD kept", "a\ufffdb", "a\ufffdb"},
	}
	tok := defaultTB(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := lossyUTF8([]byte(tc.in)); got != tc.want {
				t.Errorf("lossyUTF8(%q) = %q, want %q", tc.in, got, tc.want)
			}
			// Invalid input bytes pass through Encode unchanged at the byte level.
			ids := tok.Encode(tc.in)
			if got := tok.DecodeBytes(ids); string(got) != tc.in {
				t.Errorf("DecodeBytes(Encode(%q)) = %q", tc.in, got)
			}
			if got := tok.Decode(ids); got != tc.want {
				t.Errorf("Decode(Encode(%q)) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzEncode(f *testing.F) {
	for _, c := range loadVectors(f) {
		f.Add(c.text)
	}
	f.Add("<|im_start|>user\n<think>\n\n</think>")
	f.Add("e\u0301\xff\xfe'S  \u3000\r\n")
	tok := defaultTB(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		plain := tok.EncodePlain(s)
		_ = EstimateTokens(s)
		if !utf8.ValidString(s) {
			// Bytes still round-trip when nothing was normalized.
			if norm.NFC.String(s) == s && string(tok.DecodeBytes(plain)) != s {
				t.Fatalf("DecodeBytes(EncodePlain(%q)) = %q", s, tok.DecodeBytes(plain))
			}
			return
		}
		if got, want := tok.Decode(plain), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(EncodePlain(%q)) = %q, want NFC %q", s, got, want)
		}
		if !strings.Contains(s, "<") && !cmp.Equal(ids, plain, cmpopts.EquateEmpty()) {
			t.Fatalf("Encode and EncodePlain differ on %q without added-token text", s)
		}
	})
}

// TestLongRepeated: 1 MB of one character is a single pre-token for letters; merging it must
// not be quadratic. A quadratic merge would take minutes here; the heap merge takes well under
// a second, so a generous bound catches the regression without being a timing assertion.
func TestLongRepeated(t *testing.T) {
	tok := defaultTB(t)
	for _, unit := range []string{"a", "哈", " ", "!", "1", "\n", "ab"} {
		size := 1 << 20 // 1 MB of one character; 256 KB for the other shapes keeps the run short
		if unit != "a" {
			size = 256 << 10
		}
		if raceEnabled {
			size /= 8
		}
		s := strings.Repeat(unit, size/len(unit))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		done := make(chan []int32, 1)
		go func() { done <- tok.EncodePlain(s) }()
		select {
		case ids := <-done:
			if got := tok.DecodeBytes(ids); string(got) != s {
				t.Errorf("%q×%d: does not round-trip", unit, len(s)/len(unit))
			}
		case <-ctx.Done():
			t.Fatalf("%q×%d: EncodePlain did not finish in 60 s (quadratic merge?)", unit, len(s)/len(unit))
		}
		cancel()
	}
}

// TestHeapMatchesSmall: the two merge implementations agree on words both can handle.
func TestHeapMatchesSmall(t *testing.T) {
	tok := defaultTB(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		text := productText(uint64(i), 1+r.IntN(smallWord))
		word := text
		if len(word) > smallWord {
			word = word[:smallWord]
		}
		if len(word) < 2 {
			continue
		}
		small := tok.bpeSmall(nil, word)
		heap := tok.bpeHeap(nil, word)
		if diff := cmp.Diff(small, heap); diff != "" {
			t.Fatalf("word %q: bpeSmall vs bpeHeap (-small +heap):\n%s", word, diff)
		}
	}
}

// TestConcurrent: one tokenizer shared by goroutines gives every one the same answers (run
// with -race: the word cache is the only shared mutable state).
func TestConcurrent(t *testing.T) {
	tok := defaultTB(t)
	texts := make([]string, 64)
	want := make([][]int32, len(texts))
	for i := range texts {
		texts[i] = productText(uint64(100+i), 300)
		want[i] = tok.Encode(texts[i])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 200 {
				i := (g*31 + k) % len(texts)
				if got := tok.Encode(texts[i]); !cmp.Equal(got, want[i]) {
					select {
					case errs <- fmt.Sprintf("goroutine %d text %d: got %v", g, i, got):
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestLoadFile(t *testing.T) {
	// A small tokenizer.json keeps this fast; TestShippedFile and Default cover the real one.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyJSON(t, tinyMerges, false, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, "tokenizer.json")} {
		tok, err := LoadFile(path)
		if err != nil {
			t.Fatalf("LoadFile(%s): %v", path, err)
		}
		low, _ := tok.TokenID("low")
		if got := tok.Encode("low<|x|>"); !cmp.Equal(got, []int32{low, 1000}) {
			t.Errorf("LoadFile(%s): Encode = %v", path, got)
		}
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), t.TempDir()} {
		if _, err := LoadFile(bad); err == nil {
			t.Errorf("LoadFile(%s): no error", bad)
		}
	}
}

// TestShippedFile: the embedded tokenizer decompresses to the official Qwen3 file.
func TestShippedFile(t *testing.T) {
	data, err := DefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
	const want = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
	if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != want || len(data) != 11422654 {
		t.Errorf("DefaultJSON: %d bytes, sha256 %s; want 11422654 bytes, %s", len(data), got, want)
	}
}

// TestCountPlainUpToStopsPastTheLimit: CountPlainUpTo encodes a long text only until its count
// passes the limit (what makes deciding that a 64 KB document is over an 8K cap cheap), so the
// count it returns is the limit plus at most the last pre-token's ids, not the text's own; a text
// within the limit is counted whole.
func TestCountPlainUpToStopsPastTheLimit(t *testing.T) {
	tok, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat(" charger cable port watt", 20000) // one token per word: 80,000
	if got := tok.CountPlainUpTo(long, 8192); got != 8193 {
		t.Errorf("CountPlainUpTo(80,000-token text, 8192) = %d, want 8193 (stopped at the first piece past the limit)", got)
	}
	short := long[:24*100]
	if got, want := tok.CountPlainUpTo(short, 8192), len(tok.EncodePlain(short)); got != want {
		t.Errorf("CountPlainUpTo(text within the limit) = %d, want its whole count %d", got, want)
	}
	if got := tok.CountPlainUpTo("", 0); got != 0 {
		t.Errorf("CountPlainUpTo(\"\", 0) = %d, want 0", got)
	}
}
