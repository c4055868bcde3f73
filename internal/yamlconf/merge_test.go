package yamlconf

import "testing"

// TestWholeNumberWrittenAsFloatIsAccepted: a whole number written as a float (1e9 bytes, 32.0)
// is no fraction: yaml.v3 decodes it exactly.
func TestWholeNumberWrittenAsFloatIsAccepted(t *testing.T) {
	var c struct {
		Budget int64 `yaml:"budget_bytes"`
		Items  int   `yaml:"max_batch_items"`
	}
	if err := Decode([]byte("budget_bytes: 1e9\nmax_batch_items: 32.0\n"), &c); err != nil {
		t.Fatalf("whole numbers refused: %v", err)
	}
	if c.Budget != 1e9 || c.Items != 32 {
		t.Errorf("got %d, %d", c.Budget, c.Items)
	}
}

// TestFractionThroughMergeKeyIsRefused: a merge key (<<: *base) carries a fraction in from an
// anchor or a list of them: still refused.
func TestFractionThroughMergeKeyIsRefused(t *testing.T) {
	type inner struct {
		Items int `yaml:"max_batch_items"`
	}
	var c struct {
		Base inner `yaml:"base"`
		Over inner `yaml:"over"`
	}
	for _, body := range []string{
		"base: &b\n  max_batch_items: 32\nover:\n  <<: {max_batch_items: 32.9}\n",
		"base: &b\n  max_batch_items: 32.9\nover:\n  <<: *b\n",
		"base: &b\n  max_batch_items: 32.9\nover:\n  <<: [*b]\n",
	} {
		if err := Decode([]byte(body), &c); err == nil {
			t.Errorf("fraction via merge key accepted: %q → %+v", body, c)
		}
	}
}
