package reqid

import (
	"encoding/hex"
	"testing"
)

// TestNewIsFreshHex: ids are 32 hex digits and do not repeat.
func TestNewIsFreshHex(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := New()
		if _, err := hex.DecodeString(id); err != nil || len(id) != 32 || seen[id] {
			t.Fatalf("id %q: not 32 fresh hex digits", id)
		}
		seen[id] = true
	}
}
