package infinity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/infinity"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kit = conformance.Kit{
	Kind:          backend.KindInfinity,
	New:           func(s backend.Spec) (backend.Backend, error) { return infinity.New(s) },
	Templates:     []string{backend.TemplateProxy, backend.TemplateServer},
	Limits:        backend.Limits{MaxItems: 2048},
	ModelAdvisory: true,
}

func TestConformance(t *testing.T) { conformance.Run(t, kit) }

// TestModelCheckKeepsOutOnlyAServerListingOtherModels: see conformance.ModelCheck.
func TestModelCheckKeepsOutOnlyAServerListingOtherModels(t *testing.T) {
	conformance.ModelCheck(t, kit)
}

// TestRequestFields pins what goes on the wire: raw logits, no echo, top_n = every document.
func TestRequestFields(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.ScoreBatch(ctx, conformance.Request(3)); err != nil {
		t.Fatal(err)
	}
	got := f.Requests()[0]
	if got.Path != "/rerank" {
		t.Errorf("path = %q, want /rerank", got.Path)
	}
	delete(got.Body, "query")
	delete(got.Body, "documents")
	want := map[string]any{"return_documents": false, "raw_scores": true, "top_n": float64(3)}
	if diff := cmp.Diff(want, got.Body); diff != "" {
		t.Errorf("request fields (-want +got):\n%s", diff)
	}
}

// TestLoadGaugeOfNamedModel reads the stats of the configured model only.
func TestLoadGaugeOfNamedModel(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{Model: "a"}, func(s *backend.Spec) { s.Model = "b" })
	f.SetLoad(2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if w, r, ok := b.(backend.Loader).LoadGauge(ctx); ok {
		t.Errorf("LoadGauge() = %v, %v, true for a model the server does not list", w, r)
	}
}

// TestWrongModelIsNotServed: a server of several models answers a model it does not serve with
// 400 "Invalid model: …" — not the caller's bad input (INVALID_ARGUMENT, never retried) but a
// misconfigured node: Unimplemented, matching backend.ErrModelNotServed.
func TestWrongModelIsNotServed(t *testing.T) {
	_, b := conformance.Start(t, kit, fakerank.Options{Model: "served"}, func(s *backend.Spec) { s.Model = "other" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.ScoreBatch(ctx, conformance.Request(1))
	if status.Code(err) != codes.Unimplemented || !errors.Is(err, backend.ErrModelNotServed) {
		t.Fatalf("error = %v, want Unimplemented matching backend.ErrModelNotServed", err)
	}
}
