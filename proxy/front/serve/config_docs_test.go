package serve

import (
	"testing"
)

// TestParseRejectsASecondDocument: a second YAML document (after ---) is decoded by nobody: its
// keys, even unknown or invalid ones, must not be dropped silently.
func TestParseRejectsASecondDocument(t *testing.T) {
	_, err := Parse([]byte("proxy:\n  nodes: {static: [127.0.0.1:1]}\n---\nproxy:\n  slo: -1s\n  bogus: 1\n"))
	if err == nil {
		t.Fatal("Parse accepted a config whose second document (slo: -1s, bogus: 1) was ignored")
	}
}
