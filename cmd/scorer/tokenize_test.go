package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/relevance-scoring/relevance/tokenizer"
)

func TestTokenizeCmd(t *testing.T) {
	data, err := tokenizer.DefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
	modelDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(modelDir, "tokenizer.json"), data, 0o644); err != nil {
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
		{name: "model folder", args: []string{"--tokenizer", modelDir}, in: in, want: "[9707,1879]\n[151644,872]\n"},
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
