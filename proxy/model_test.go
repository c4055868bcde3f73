package proxy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestModelNames: a request naming a model the proxy does not serve is NOT_FOUND with the served
// names (vLLM's answer); the served name and its aliases pass; replies carry the served name,
// never the caller's alias.
func TestModelNames(t *testing.T) {
	nodes := startNodes(t, 1, fakenode.Options{})
	t.Run("configured name", func(t *testing.T) {
		cfg := testConfig(nodes.Addrs())
		cfg.Model = ModelConfig{Name: "qwen3-reranker-0.6b", Aliases: []string{"rerank"}}
		p, _ := startProxy(t, cfg)
		for _, name := range []string{"", "qwen3-reranker-0.6b", "rerank"} {
			req := makeRequest(3, 1)
			req.Model = name
			resp, err := p.Score(context.Background(), req)
			if err != nil {
				t.Fatalf("model %q: %v", name, err)
			}
			if resp.GetModel() != "qwen3-reranker-0.6b" {
				t.Errorf("model %q: reply names %q, want the served name", name, resp.GetModel())
			}
		}
		req := makeRequest(3, 1)
		req.Model = "gpt-4o"
		_, err := p.Score(context.Background(), req)
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "The model `gpt-4o` does not exist. Served: qwen3-reranker-0.6b, rerank") {
			t.Errorf("unknown model: %v, want NOT_FOUND naming the served models", err)
		}
		if got := p.ServedModels(); !slices.Equal(got, []string{"qwen3-reranker-0.6b", "rerank"}) {
			t.Errorf("ServedModels %q, want the configured name and its alias", got)
		}
	})
	t.Run("names the nodes report", func(t *testing.T) {
		p, _ := startProxy(t, testConfig(nodes.Addrs()))
		req := makeRequest(3, 2)
		req.Model = "anything" // nothing to check against before a node has answered
		if resp, err := p.Score(context.Background(), req); err != nil || resp.GetModel() != "fakenode" {
			t.Fatalf("first request: %v, %v; want it served by fakenode", resp.GetModel(), err)
		}
		req.Model = "fakenode"
		if _, err := p.Score(context.Background(), req); err != nil {
			t.Errorf("the nodes' model: %v", err)
		}
		req.Model = "anything"
		if _, err := p.Score(context.Background(), req); status.Code(err) != codes.NotFound {
			t.Errorf("another model once the nodes answered: %v, want NOT_FOUND", err)
		}
		if got := p.ServedModels(); !slices.Equal(got, []string{"fakenode", "rerank"}) {
			t.Errorf("ServedModels %q, want the name the nodes reported and the default alias", got)
		}
	})
}
