package vllm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
	"github.com/relevance-scoring/relevance/proxy/backend/vllm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kit = conformance.Kit{
	Kind:      backend.KindVLLM,
	New:       func(s backend.Spec) (backend.Backend, error) { return vllm.New(s) },
	Templates: []string{backend.TemplateProxy, backend.TemplateServer},
}

func TestConformance(t *testing.T) { conformance.Run(t, kit) }

// TestModelCheckKeepsOutOnlyAServerListingOtherModels: see conformance.ModelCheck.
func TestModelCheckKeepsOutOnlyAServerListingOtherModels(t *testing.T) {
	conformance.ModelCheck(t, kit)
}

// TestRequestFields pins what goes on the wire: top_n = every document, the model when
// configured, nothing that older servers would misread.
func TestRequestFields(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{Model: "Qwen/Qwen3-Reranker-0.6B"}, func(s *backend.Spec) { s.Model = "Qwen/Qwen3-Reranker-0.6B" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := b.ScoreBatch(ctx, conformance.Request(3))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetModel() != "Qwen/Qwen3-Reranker-0.6B" || resp.GetUsage().GetPromptTokens() == 0 {
		t.Errorf("model %q usage %v, want the server's model name and token count", resp.GetModel(), resp.GetUsage())
	}
	got := f.Requests()[0]
	if got.Path != "/rerank" {
		t.Errorf("path = %q, want /rerank", got.Path)
	}
	delete(got.Body, "query")
	delete(got.Body, "documents")
	want := map[string]any{"model": "Qwen/Qwen3-Reranker-0.6B", "top_n": float64(3)}
	if diff := cmp.Diff(want, got.Body); diff != "" {
		t.Errorf("request fields (-want +got):\n%s", diff)
	}
}

// TestWrongModelIsUnimplementedAndNotServed: vLLM's 404 "The model `other` does not exist." is
// Unimplemented, as any 404, and says that the server does not serve the configured model
// (backend.ErrModelNotServed), so that the proxy takes the node out instead of counting failures.
func TestWrongModelIsUnimplementedAndNotServed(t *testing.T) {
	_, b := conformance.Start(t, kit, fakerank.Options{Model: "served"}, func(s *backend.Spec) { s.Model = "other" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.ScoreBatch(ctx, conformance.Request(1))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("error = %v, want Unimplemented (HTTP 404: no such model)", err)
	}
	if !errors.Is(err, backend.ErrModelNotServed) || !strings.Contains(status.Convert(err).Message(), "does not exist") {
		t.Errorf("error = %v, want it to match backend.ErrModelNotServed and keep the server's message", err)
	}
}
