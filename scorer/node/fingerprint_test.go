package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/emulated"
)

// TestReplyCarriesFingerprint: every ScoreBatch reply and /v1/status carry the engine's
// fingerprint, which the proxy pins requests and keys its score cache by.
func TestReplyCarriesFingerprint(t *testing.T) {
	newEngine := func(a float64) scorer.Engine {
		e, err := emulated.New(emulated.Options{
			Profile: &costmodel.Profile{Coeffs: costmodel.Coeffs{A: a, C: 1e-4}},
			Sleep:   func(ctx context.Context, d time.Duration) error { return ctx.Err() },
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	eng := newEngine(1e-6)
	want := eng.Info().Fingerprint
	if len(want) != 32 {
		t.Fatalf("emulated fingerprint %q: want 32 hex digits", want)
	}
	if other := newEngine(2e-6).Info().Fingerprint; other == want {
		t.Errorf("another cost profile has the same fingerprint %s", want)
	}
	if again := newEngine(1e-6).Info().Fingerprint; again != want {
		t.Errorf("the same profile: fingerprint %s, then %s", want, again)
	}
	cfg := testConfig()
	cfg.Engine, cfg.CostProfile = EngineEmulated, "profile.json"
	h := start(t, cfg, loadEngine(eng), true)
	for i := 0; i < 2; i++ {
		resp, err := h.client.ScoreBatch(ctxT(t), batch("q", "a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.ModelFingerprint != want {
			t.Errorf("reply %d: model_fingerprint %q, want %q", i, resp.ModelFingerprint, want)
		}
	}
	_, body := get(t, h, "/v1/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if st.ModelFingerprint != want {
		t.Errorf("status model_fingerprint %q, want %q", st.ModelFingerprint, want)
	}
}
