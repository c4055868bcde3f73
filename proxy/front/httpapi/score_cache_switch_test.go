package httpapi

import "testing"

// TestScoreCacheTrueCarriedOverIsNotRefused: "cache": true asks for what /v1/score does anyway;
// only false (a bypass that would be silently ignored) needs refusing.
func TestScoreCacheTrueCarriedOverIsNotRefused(t *testing.T) {
	if _, err := decodeScore([]byte(`{"query":"q","items":[{"text":"a"}],"cache":true}`), 0); err != nil {
		t.Errorf("cache: true refused: %v", err)
	}
}
