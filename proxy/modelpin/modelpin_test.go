package modelpin

import (
	"context"
	"testing"
)

// TestFirstFingerprintHolds: the first non-empty fingerprint pins; later ones get it back; a
// context without a pin gives a nil Pin, which pins nothing.
func TestFirstFingerprintHolds(t *testing.T) {
	p := new(Pin)
	if got := p.Hold(""); got != "" {
		t.Errorf("empty pin, Hold(\"\") = %q, want \"\"", got)
	}
	if got := p.Hold("a"); got != "a" {
		t.Errorf("Hold(a) = %q, want a", got)
	}
	if got := p.Hold("b"); got != "a" {
		t.Errorf("pinned to a, Hold(b) = %q, want a", got)
	}
	if FromContext(NewContext(context.Background(), p)) != p {
		t.Error("the context does not carry its pin")
	}
	var none *Pin = FromContext(context.Background())
	if got := none.Hold("b"); none != nil || got != "b" {
		t.Errorf("no pin: %v, Hold(b) = %q, want nil and b", none, got)
	}
}
