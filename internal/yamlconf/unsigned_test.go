package yamlconf

import "testing"

// TestNegativeWholeFloatIntoUnsignedIsRefused: "-1.0" is a whole float, but yaml.v3 converts it
// into an unsigned field with uint64(-1.0): MaxUint64 on amd64, silently.
func TestNegativeWholeFloatIntoUnsignedIsRefused(t *testing.T) {
	var c struct {
		Seed uint64 `yaml:"seed"`
	}
	if err := Decode([]byte("seed: -1.0\n"), &c); err == nil {
		t.Errorf("seed: -1.0 accepted as %d", c.Seed)
	}
}
