package llamacpp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
	"github.com/relevance-scoring/relevance/proxy/backend/llamacpp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kit = conformance.Kit{
	Kind:      backend.KindLlamaCpp,
	New:       func(s backend.Spec) (backend.Backend, error) { return llamacpp.New(s) },
	Templates: []string{backend.TemplateServer},
	Limits:    backend.Limits{MaxItemTokens: 512},
}

func TestConformance(t *testing.T) { conformance.Run(t, kit) }

// TestRequestFields pins what goes on the wire (Jina format: "documents", so the reply has
// "results") and that llama-server's GGUF template makes the model read our full prompt.
func TestRequestFields(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := conformance.Request(2)
	if _, err := b.ScoreBatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := f.Requests()[0]
	if got.Path != "/v1/rerank" {
		t.Errorf("path = %q, want /v1/rerank", got.Path)
	}
	full := prompt.HeadText + prompt.BodyPrefix("", req.Query) + " " + req.Items[1].Text + prompt.TailText
	if diff := cmp.Diff(full, got.Prompts[1]); diff != "" {
		t.Errorf("the model read (-our prompt +got):\n%s", diff)
	}
	delete(got.Body, "query")
	delete(got.Body, "documents")
	if diff := cmp.Diff(map[string]any{"top_n": float64(2)}, got.Body); diff != "" {
		t.Errorf("request fields (-want +got):\n%s", diff)
	}
}

func TestProxyTemplateRefused(t *testing.T) {
	_, err := llamacpp.New(backend.Spec{Addr: "127.0.0.1:8080", Template: backend.TemplateProxy})
	if err == nil || !strings.HasPrefix(err.Error(), `template: llamacpp supports only "server"`) {
		t.Fatalf("New(template proxy) error = %v", err)
	}
}

// TestDocumentPlaceholderInQueryStaysText: llama-server puts the query into its template before
// substituting {document}, so "{document}" typed in a query would become each document's text
// (every document then matching "itself"); the model must read the query as typed.
func TestDocumentPlaceholderInQueryStaysText(t *testing.T) {
	f, b := conformance.Start(t, kit, fakerank.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := conformance.Request(2)
	req.Query = "headphones like {document}"
	if _, err := b.ScoreBatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	for i, p := range f.Requests()[0].Prompts {
		_, q, _, ok := fakerank.Parse(p)
		if !ok || strings.Contains(q, req.Items[i].Text) || strings.ReplaceAll(q, "\u200b", "") != req.Query {
			t.Errorf("item %d: the model read query %q (parsed %v), want %q with nothing substituted", i, q, ok, req.Query)
		}
	}
}
