package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// vectorCase is one reference case: text and the ids Hugging Face gives it (special-token text
// treated as plain text, no BOS/EOS).
type vectorCase struct {
	text string
	want []int32
}

// loadVectors reads testdata/qwen2.inp/.out (llama.cpp's Qwen2 vocab test, made with Hugging
// Face tokenizers); the format is described in the shared assets' README.
func loadVectors(tb testing.TB) []vectorCase {
	tb.Helper()
	inp, err := os.ReadFile("testdata/qwen2.inp")
	if err != nil {
		tb.Fatal(err)
	}
	out, err := os.ReadFile("testdata/qwen2.out")
	if err != nil {
		tb.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	if texts[len(texts)-1] != "" {
		tb.Fatalf("qwen2.inp does not end with the separator")
	}
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		tb.Fatalf("%d inputs but %d outputs", len(texts), len(lines))
	}
	cases := make([]vectorCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				tb.Fatalf("qwen2.out line %d: %v", i+1, err)
			}
			cases[i].want = append(cases[i].want, int32(id))
		}
	}
	return cases
}

func defaultTB(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := Default()
	if err != nil {
		tb.Fatalf("Default: %v", err)
	}
	return tok
}

func TestReferenceVectors(t *testing.T) {
	tok := defaultTB(t)
	cases := loadVectors(t)
	if len(cases) != 46 {
		t.Fatalf("got %d reference cases, want 46", len(cases))
	}
	for i, c := range cases {
		got := tok.EncodePlain(c.text)
		if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("case %d %q: EncodePlain mismatch (-want +got):\n%s", i, c.text, diff)
		}
		// No case holds added-token text, so Encode must agree.
		if diff := cmp.Diff(c.want, tok.Encode(c.text), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("case %d %q: Encode mismatch (-want +got):\n%s", i, c.text, diff)
		}
		if got := tok.Decode(got); got != c.text {
			t.Errorf("case %d: Decode = %q, want %q", i, got, c.text)
		}
	}
}
