package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/scorer/model"
)

func TestScoreCommand(t *testing.T) {
	dir := t.TempDir()
	if err := runGenModel([]string{"--arch", "qwen3_moe", "--preset", "tiny", "--seed", "3", "--out", dir}); err != nil {
		t.Fatal(err)
	}
	docs := filepath.Join(dir, "docs.jsonl")
	lines := []string{`"A moka pot is cheap."`, `{"text": "The weather is nice.", "id": 7}`, `""`, `"北京"`}
	os.WriteFile(docs, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	var out bytes.Buffer
	if err := scoreMain(context.Background(), []string{"--model", dir, "--query", "cheap espresso", "--documents", docs}, nil, &out); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
		Logit float64 `json:"logit"`
	}
	var rows []row
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	for dec.More() {
		var r row
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != len(lines) {
		t.Fatalf("%d output lines for %d documents", len(rows), len(lines))
	}
	// The offline engine path gives the same scores.
	e, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, r := range rows {
		if r.Index != i || !(r.Score > 0 && r.Score < 1) {
			t.Errorf("row %d: %+v", i, r)
		}
		if d := r.Score - model.Sigmoid(r.Logit); d > 1e-6 || d < -1e-6 {
			t.Errorf("row %d: score %v is not sigmoid(logit %v)", i, r.Score, r.Logit)
		}
	}

	// Errors name the bad line or flag.
	os.WriteFile(docs, []byte("\"ok\"\n{\"title\": \"x\"}\n"), 0o644)
	err = scoreMain(context.Background(), []string{"--model", dir, "--query", "q", "--documents", docs}, nil, &out)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: err = %v", err)
	}
	err = scoreMain(context.Background(), []string{"--model", dir, "--documents", docs}, nil, &out)
	if err == nil || !strings.Contains(err.Error(), "--query") {
		t.Errorf("no query: err = %v", err)
	}
	// Stdin and truncation.
	out.Reset()
	in := strings.NewReader(`"` + strings.Repeat("long document ", 200) + `"` + "\n")
	if err := scoreMain(context.Background(), []string{"--model", dir, "--query", "q", "--documents", "-", "--max-tokens", "100"}, in, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Errorf("stdin output: %q", out.String())
	}
	var cut struct {
		Truncated int `json:"truncated_tokens"`
	}
	if err := json.Unmarshal(out.Bytes(), &cut); err != nil || cut.Truncated <= 0 {
		t.Errorf("a document cut to --max-tokens 100: %q (%v); want truncated_tokens > 0", out.String(), err)
	}
}

func TestReadDocuments(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		err      string
	}{
		{"mixed", "\"a\"\n{\"text\":\"b\"}\n\"\"\n", []string{"a", "b", ""}, ""},
		{"no final newline", "\"a\"", []string{"a"}, ""},
		{"crlf", "\"a\"\r\n\"b\"\r\n", []string{"a", "b"}, ""},
		{"blank", "\"a\"\n\n\"b\"\n", nil, "line 2: empty line"},
		{"number", "\"a\"\n3\n", nil, "line 2"},
		{"bad json", "\"a\n", nil, "line 1"},
		{"no text", "{\"t\":1}\n", nil, "line 1: object has no \"text\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readDocuments(strings.NewReader(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
