package httpapi

import (
	"strings"
	"testing"
)

// TestHasKeyReadsOnlyTopLevelMemberNames: the dialect of a body is told by its top-level keys,
// not by the same word in a document, a nested object or a value.
func TestHasKeyReadsOnlyTopLevelMemberNames(t *testing.T) {
	tests := []struct {
		body string
		want bool
	}{
		{`{"query":"q","texts":["a"]}`, true},
		{`{"query":"q", "texts" : ["a"]}`, true},
		{`{"query":"q","documents":["the \"texts\" key","b"]}`, false},
		{`{"query":"texts","documents":["texts"]}`, false},
		{`{"query":"q","meta":{"texts":1},"documents":[]}`, false},
		{`{"query":"q","documents":[{"texts":["x"]}]}`, false},
		{`[{"texts":1},{"texts":2}]`, false},
		{`{"query":"q","\u0074exts":["texts"]}`, true},
		{`{"a":"\\","texts":[]}`, true},
		{`{"a":"\\\"texts\":","b":1}`, false},
		{`{}`, false},
		{`{"texts"`, true}, // malformed: the decoder that runs next says so
		{``, false},
	}
	for _, tt := range tests {
		if got := hasKey([]byte(tt.body), "texts"); got != tt.want {
			t.Errorf("hasKey(%s, texts) = %v, want %v", tt.body, got, tt.want)
		}
	}
}

// BenchmarkIsTEI: telling a TEI body from a Jina one, on a 2 MiB body of 1,000 texts.
func BenchmarkIsTEI(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"query":"q","texts":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"` + strings.Repeat("word ", 400) + `"`)
	}
	sb.WriteString(`],"raw_scores":false}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !isTEI(body) {
			b.Fatal("not TEI")
		}
	}
}
