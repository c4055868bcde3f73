package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenizeCmd(t *testing.T) {
	// A model folder with a small tokenizer of its own, so --tokenizer visibly changes the ids.
	modelDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(modelDir, "tokenizer.json"), tinyTokenizerJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	const in = "\"Hello world\"\n\"<|im_start|>user\"\n"
	tests := []struct {
		name    string
		args    []string
		in      string
		want    string
		wantErr string
	}{
		{name: "shipped tokenizer", in: in, want: "[9707,1879]\n[151644,872]\n"},
		{name: "no special", args: []string{"--no-special"}, in: in, want: "[9707,1879]\n[27,91,318,4906,91,29,872]\n"},
		{name: "model folder", args: []string{"--tokenizer", modelDir}, in: "\"ab<|x|>\"\n", want: "[256,1000]\n"},
		{name: "model folder no special", args: []string{"--tokenizer", modelDir, "--no-special"}, in: "\"ab<|x|>\"\n", want: "[256,60,124,120,124,62]\n"},
		{name: "missing tokenizer", args: []string{"--tokenizer", filepath.Join(modelDir, "nope.json")}, in: in, wantErr: "nope.json"},
		{name: "bad line", in: "\"a\"\n42\n", want: "[64]\n", wantErr: "line 2"},
		{name: "stray argument", args: []string{"file.txt"}, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := tokenizeCmd(tc.args, strings.NewReader(tc.in), &out)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// tinyTokenizerJSON is a byte-level BPE tokenizer.json with the 256 byte tokens written in
// GPT-2's byte map (id = byte value), one merge a+b -> 256 and one added token <|x|> = 1000.
func tinyTokenizerJSON(tb testing.TB) []byte {
	tb.Helper()
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		printable := (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
		r := rune(b)
		if !printable {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	vocab["ab"] = 256
	doc := map[string]any{
		"added_tokens": []map[string]any{{"id": 1000, "content": "<|x|>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "behavior": "Isolated", "invert": false, "pattern": map[string]any{
				"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{[]string{"a", "b"}}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
