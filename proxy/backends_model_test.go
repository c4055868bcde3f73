package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// nodesJSON is /v1/nodes as served.
func nodesJSON(t *testing.T, p *Proxy) string {
	t.Helper()
	b, err := json.Marshal(p.Nodes())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBackendNotServingItsModelIsKeptOut: a vLLM server that serves another model than the
// configured one answers its health endpoint, and every batch 404. It is kept out of traffic
// from the start, /v1/nodes says why (naming both models), no batch is sent to it; restarted
// with the configured model, it joins and scores. (It joined, healthy in /v1/nodes, and every
// request failed.)
func TestBackendNotServingItsModelIsKeptOut(t *testing.T) {
	f := startFake(t, backend.KindVLLM, fakerank.Options{Model: "org/other"})
	addr := f.Addr()
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindVLLM, Addr: addr, Model: "org/wanted"}}
	p, err := New(cfg, prometheus.NewRegistry(), nil) // not startProxy: the node must not get healthy
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitUntil(t, "the node's first health poll", func() bool { return p.Nodes()[0].Healthy || strings.Contains(nodesJSON(t, p), "not_ready") })
	if s := p.Nodes()[0]; s.Healthy || p.Ready() {
		t.Fatalf("node serving org/other joined the traffic though org/wanted is configured: %s", nodesJSON(t, p))
	}
	if js := nodesJSON(t, p); !strings.Contains(js, `"not_ready"`) || !strings.Contains(js, "org/wanted") || !strings.Contains(js, "org/other") {
		t.Errorf("/v1/nodes = %s, want a not_ready reason naming org/wanted and org/other", js)
	}
	if _, err := p.Score(context.Background(), makeRequest(4, 1)); status.Code(err) != codes.Unavailable {
		t.Errorf("Score with the only node kept out: %v, want UNAVAILABLE", err)
	}
	if n := f.Calls(); n != 0 {
		t.Errorf("%d rerank calls reached the server of another model, want none", n)
	}

	// Restarted on the configured model: seen down, then checked afresh as it comes back.
	f.SetHealthy(false)
	waitUntil(t, "the node seen down", func() bool { return !strings.Contains(nodesJSON(t, p), "not_ready") })
	f.Close()
	g, err := fakerank.Start(backend.KindVLLM, fakerank.Options{Model: "org/wanted", Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatalf("restarted with org/wanted, the node did not join: %v; /v1/nodes = %s", err, nodesJSON(t, p))
	}
	if _, err := p.Score(context.Background(), makeRequest(4, 2)); err != nil {
		t.Errorf("Score once it serves org/wanted: %v", err)
	}
}

// TestBackendWithoutModelListStillJoins: a server that cannot say what it serves (404 on
// vLLM's /v1/models, TEI's /info, Infinity's /models: a gateway that routes only the API) joins
// as before; the check keeps out only a server that lists other models.
func TestBackendWithoutModelListStillJoins(t *testing.T) {
	for _, kind := range []string{backend.KindVLLM, backend.KindTEI, backend.KindInfinity} {
		t.Run(kind, func(t *testing.T) {
			f := startFake(t, kind, fakerank.Options{Model: "org/wanted", NoModelList: true})
			cfg := testConfig(nil)
			cfg.Nodes.Backends = []backend.Spec{{Kind: kind, Addr: f.Addr(), Model: "org/wanted"}}
			p, _ := startProxy(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.WaitReady(ctx); err != nil {
				t.Fatalf("server without a model list did not join: %v; /v1/nodes = %s", err, nodesJSON(t, p))
			}
			if _, err := p.Score(context.Background(), makeRequest(4, 1)); err != nil {
				t.Errorf("Score: %v", err)
			}
		})
	}
}

// TestModelUnknownReplyTakesNodeOut: a server that cannot be checked at join (no model list)
// but answers a batch 404 "The model … does not exist." is taken out of traffic at once, with the
// reason in /v1/nodes, instead of counting the answer as a failure of the node (its breaker
// opening and half-opening on every open timeout, its errors growing); the batch is retried on
// the node that serves the model, and every request succeeds.
func TestModelUnknownReplyTakesNodeOut(t *testing.T) {
	bad := startFake(t, backend.KindVLLM, fakerank.Options{Model: "org/other", NoModelList: true})
	good := startFake(t, backend.KindVLLM, fakerank.Options{Model: "org/wanted"})
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{
		{Kind: backend.KindVLLM, Addr: bad.Addr(), Model: "org/wanted"},
		{Kind: backend.KindVLLM, Addr: good.Addr(), Model: "org/wanted"},
	}
	p, _ := startProxy(t, cfg)
	waitUntil(t, "both nodes healthy", func() bool { return p.Nodes()[0].Healthy && p.Nodes()[1].Healthy })
	for i := 0; bad.Calls() == 0; i++ {
		if i == 50 {
			t.Fatal("50 requests and none placed a batch on the node of another model")
		}
		if _, err := p.Score(context.Background(), makeRequest(16, uint64(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var s NodeStatus
	for _, n := range p.Nodes() {
		if strings.Contains(n.Addr, bad.Addr()) {
			s = n
		}
	}
	js, _ := json.Marshal(s)
	if s.Healthy || s.Errors != 0 || s.Breaker != "closed" || !strings.Contains(string(js), `"not_ready"`) || !strings.Contains(string(js), "does not exist") {
		t.Errorf("node answering that the model does not exist: %s; want it out of traffic (not healthy, not_ready saying why), its breaker closed and no errors counted", js)
	}
}
