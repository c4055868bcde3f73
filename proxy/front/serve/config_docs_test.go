package serve

import (
	"strings"
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

// TestParseRejectsAFractionForAnIntegerField: an integer field given a fractional value is
// refused naming the value written, not cut (0.9 became 0 and was then reported as "got 0").
func TestParseRejectsAFractionForAnIntegerField(t *testing.T) {
	cfg, err := Parse([]byte("proxy:\n  nodes: {static: [127.0.0.1:1]}\n  split: {max_batch_items: 32.9}\n"))
	if err == nil {
		t.Fatalf("Parse accepted max_batch_items: 32.9 as %d", cfg.Proxy.Split.MaxBatchItems)
	}
	if !strings.Contains(err.Error(), "max_batch_items") || !strings.Contains(err.Error(), "32.9") {
		t.Errorf("error does not name the key and the value: %v", err)
	}
}
