package tokenizer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeJSONLines(t *testing.T) {
	tok := defaultTB(t)
	tests := []struct {
		name    string
		in      string
		plain   bool
		want    string
		wantErr string
	}{
		{name: "two lines", in: "\"Hello world\"\n\" Hello\"\n", want: "[9707,1879]\n[21927]\n"},
		{name: "no final newline", in: `"Hello world"`, want: "[9707,1879]\n"},
		{name: "crlf", in: "\"Hello world\"\r\n", want: "[9707,1879]\n"},
		{name: "empty string", in: "\"\"\n", want: "[]\n"},
		{name: "empty input", in: "", want: ""},
		{name: "escapes", in: `"\u6211\u60f3\n"` + "\n", want: "[104100,198]\n"},
		{name: "special", in: "\"<|im_start|>user\"\n", want: "[151644,872]\n"},
		{name: "special plain", in: "\"<|im_start|>user\"\n", plain: true, want: "[27,91,318,4906,91,29,872]\n"},
		{name: "bad json names line", in: "\"ok\"\n{\"text\": 1}\n", want: "[562]\n", wantErr: "line 2: want a JSON string"},
		{name: "null is not a string", in: "null\n", wantErr: "line 1: want a JSON string"},
		{name: "blank line", in: "\"a\"\n\n\"b\"\n", want: "[64]\n", wantErr: "line 2"},
		{name: "unterminated string", in: "\"abc\n", wantErr: "line 1: want a JSON string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := EncodeJSONLines(tok, strings.NewReader(tc.in), &out, tc.plain)
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

// TestEncodeJSONLinesVectors runs the reference vectors through the line protocol.
func TestEncodeJSONLinesVectors(t *testing.T) {
	tok := defaultTB(t)
	var in, want strings.Builder
	for _, c := range loadVectors(t) {
		b, _ := jsonString(c.text)
		in.Write(b)
		in.WriteByte('\n')
		want.WriteByte('[')
		for i, id := range c.want {
			if i > 0 {
				want.WriteByte(',')
			}
			want.WriteString(itoa(id))
		}
		want.WriteString("]\n")
	}
	var out bytes.Buffer
	if err := EncodeJSONLines(tok, strings.NewReader(in.String()), &out, true); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.String(), out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func jsonString(s string) ([]byte, error) { return json.Marshal(s) }

func itoa(id int32) string { return strconv.Itoa(int(id)) }
