package sglang_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
	"github.com/relevance-scoring/relevance/proxy/backend/sglang"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kit = conformance.Kit{
	Kind:             backend.KindSGLang,
	New:              func(s backend.Spec) (backend.Backend, error) { return sglang.New(s) },
	Templates:        []string{backend.TemplateServer, backend.TemplateProxy},
	SendsInstruction: true,
}

func TestConformance(t *testing.T) { conformance.Run(t, kit) }

// TestRequestFields pins what goes on the wire: our default instruction (SGLang's template
// defaults to another text), top_n = every document, no echo.
func TestRequestFields(t *testing.T) {
	for _, tc := range []struct {
		tmpl string
		want map[string]any
	}{
		{backend.TemplateServer, map[string]any{"instruct": prompt.DefaultInstruction, "top_n": float64(3), "return_documents": false}},
		{backend.TemplateProxy, map[string]any{"top_n": float64(3), "return_documents": false}},
	} {
		t.Run(tc.tmpl, func(t *testing.T) {
			f, b := conformance.Start(t, kit, fakerank.Options{}, func(s *backend.Spec) { s.Template = tc.tmpl })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := b.ScoreBatch(ctx, conformance.Request(3)); err != nil {
				t.Fatal(err)
			}
			got := f.Requests()[0]
			if got.Path != "/v1/rerank" {
				t.Errorf("path = %q, want /v1/rerank", got.Path)
			}
			delete(got.Body, "query")
			delete(got.Body, "documents")
			if diff := cmp.Diff(tc.want, got.Body); diff != "" {
				t.Errorf("request fields (-want +got):\n%s", diff)
			}
		})
	}
}
