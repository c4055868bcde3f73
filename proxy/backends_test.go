package proxy

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

func startFake(t *testing.T, kind string, opts fakerank.Options) *fakerank.Server {
	t.Helper()
	s, err := fakerank.Start(kind, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestMixedClusterOfNodeKinds: our scorer, a vLLM and a TEI server behind one proxy. Every item
// is scored, in item order, by one of them; no batch to TEI exceeds its 32-document limit (the
// planner reads each node's limits), so none is refused.
func TestMixedClusterOfNodeKinds(t *testing.T) {
	ours := startNodes(t, 1, fakenode.Options{})
	vllm := startFake(t, backend.KindVLLM, fakerank.Options{})
	tei := startFake(t, backend.KindTEI, fakerank.Options{})
	cfg := testConfig(ours.Addrs())
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindVLLM, Addr: vllm.Addr()}, {Kind: backend.KindTEI, Addr: tei.Addr()}}
	cfg.Split.MaxBatchItems = 64
	p, _ := startProxy(t, cfg)
	if n := len(p.Nodes()); n != 3 {
		t.Fatalf("%d nodes, want 3", n)
	}
	for r := range 6 {
		req := makeRequest(100, uint64(r))
		resp, err := p.Score(context.Background(), req)
		if err != nil {
			t.Fatalf("request %d: %v", r, err)
		}
		for i, s := range resp.GetScores() {
			text := req.GetItems()[i].GetText()
			ourScore, theirs := float64(fakenode.Score(req.GetQuery(), text)), fakerank.Score(req.GetQuery(), text)
			if got := float64(s.GetScore()); int(s.GetIndex()) != i || (math.Abs(got-ourScore) > 1e-6 && math.Abs(got-theirs) > 1e-4) {
				t.Fatalf("request %d item %d: %+v, want index %d and score %v (ours) or %v (theirs)", r, i, s, i, ourScore, theirs)
			}
		}
	}
	for _, rq := range tei.Requests() {
		if len(rq.Documents) > 32 {
			t.Errorf("TEI got %d documents in one request, over its limit of 32", len(rq.Documents))
		}
	}
	if vllm.Calls() == 0 || tei.Calls() == 0 {
		t.Errorf("calls: vLLM %d, TEI %d; want both used", vllm.Calls(), tei.Calls())
	}
	for _, s := range p.Nodes() {
		if s.Kind == backend.KindVLLM && s.Samples == 0 {
			t.Errorf("vLLM node learned nothing from its latencies: %+v", s)
		}
	}
}

// TestWrongShapeReplyNamesNodeAndField: a server answering in the wrong shape fails its batch
// with an error naming the node and the field, the breaker counts it, and the batch is retried on
// a healthy node.
func TestWrongShapeReplyNamesNodeAndField(t *testing.T) {
	bad := startFake(t, backend.KindVLLM, fakerank.Options{})
	bad.SetShape(fakerank.ShapeDuplicateIndex)
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindVLLM, Addr: bad.Addr()}}
	cfg.Retry.Disabled = true
	p, _ := startProxy(t, cfg)
	_, err := p.Score(context.Background(), makeRequest(4, 1))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "vllm@"+bad.Addr()) || !strings.Contains(err.Error(), "index") {
		t.Fatalf("wrong-shape reply: %v, want UNAVAILABLE naming vllm@%s and the index field", err, bad.Addr())
	}
	if s := p.Nodes()[0]; s.Errors != 1 {
		t.Errorf("breaker/node errors %d, want the wrong shape counted once", s.Errors)
	}

	good := startFake(t, backend.KindVLLM, fakerank.Options{})
	cfg.Retry.Disabled = false
	cfg.Nodes.Backends = append(cfg.Nodes.Backends, backend.Spec{Kind: backend.KindVLLM, Addr: good.Addr()})
	p2, _ := startProxy(t, cfg)
	for i := range 10 {
		if _, err := p2.Score(context.Background(), makeRequest(4, uint64(i))); err != nil {
			t.Fatalf("request %d with a healthy second node: %v", i, err)
		}
	}
}

// TestBackendHealthFollowsItsEndpoint: a server whose health endpoint fails leaves the traffic
// and comes back when it answers again.
func TestBackendHealthFollowsItsEndpoint(t *testing.T) {
	s := startFake(t, backend.KindTEI, fakerank.Options{})
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindTEI, Addr: s.Addr()}}
	p, _ := startProxy(t, cfg)
	s.SetHealthy(false)
	waitUntil(t, "node unhealthy", func() bool { return !p.Ready() })
	if _, err := p.Score(context.Background(), makeRequest(2, 1)); status.Code(err) != codes.Unavailable {
		t.Errorf("no healthy node: %v, want UNAVAILABLE", err)
	}
	s.SetHealthy(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Score(context.Background(), makeRequest(2, 2)); err != nil {
		t.Errorf("back: %v", err)
	}
}
