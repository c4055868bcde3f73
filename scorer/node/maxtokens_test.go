package node

import (
	"strings"
	"testing"
)

// TestMaxTokensBelowThePromptTemplateIsRefused: a max_tokens below what the prompt template alone
// takes (~75 tokens) would make every batch fail while the node reports ready, each call an
// INVALID_ARGUMENT the proxy hands its callers as their own 422: the configuration is refused,
// naming the key.
func TestMaxTokensBelowThePromptTemplateIsRefused(t *testing.T) {
	for _, tc := range []struct {
		maxTokens int
		ok        bool
	}{{0, true}, {5, false}, {64, false}, {MinMaxTokens - 1, false}, {MinMaxTokens, true}, {8192, true}} {
		c := Default()
		c.Model = "/m"
		c.MaxTokens = tc.maxTokens
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "max_tokens") {
			t.Errorf("max_tokens %d: %v (want accepted %v)", tc.maxTokens, err, tc.ok)
		}
	}
}

// TestValidateReportsEveryBadField: an operator fixes a file in one pass, not one error a run.
func TestValidateReportsEveryBadField(t *testing.T) {
	c := Default()
	c.Model = "/m"
	c.MaxItems, c.Threads = 0, -1
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "max_items") || !strings.Contains(err.Error(), "threads") {
		t.Errorf("Validate = %v, want both max_items and threads named", err)
	}
}
