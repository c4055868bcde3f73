package tei_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
	"github.com/relevance-scoring/relevance/proxy/backend/tei"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kit = conformance.Kit{
	Kind:          backend.KindTEI,
	New:           func(s backend.Spec) (backend.Backend, error) { return tei.New(s) },
	Templates:     []string{backend.TemplateProxy, backend.TemplateServer},
	Limits:        backend.Limits{MaxItems: 32},
	ModelAdvisory: true,
}

func TestConformance(t *testing.T) { conformance.Run(t, kit) }

// TestModelCheckKeepsOutOnlyAServerListingOtherModels: see conformance.ModelCheck.
func TestModelCheckKeepsOutOnlyAServerListingOtherModels(t *testing.T) {
	conformance.ModelCheck(t, kit)
}

// TestRequestFields pins what goes on the wire: texts, not documents; raw logits; no echo; no
// server-side truncation.
func TestRequestFields(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.ScoreBatch(ctx, conformance.Request(2)); err != nil {
		t.Fatal(err)
	}
	got := f.Requests()[0]
	if got.Path != "/rerank" {
		t.Errorf("path = %q, want /rerank", got.Path)
	}
	delete(got.Body, "query")
	delete(got.Body, "texts")
	want := map[string]any{"truncate": false, "raw_scores": true, "return_text": false}
	if diff := cmp.Diff(want, got.Body); diff != "" {
		t.Errorf("request fields (-want +got):\n%s", diff)
	}
}
