package proxy

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/proxy/modelpin"
)

// shifted says whether resp scores req by a model that shifts fakenode.Score (SetModel's shift).
func shifted(req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) bool {
	for i, s := range resp.GetScores() {
		if math.Abs(float64(s.GetScore()-fakenode.Score(req.GetQuery(), req.GetItems()[i].GetText()))) > 1e-3 {
			return true
		}
	}
	return false
}

// TestCallsUnderOnePinAreServedByOneModel: the core calls of one client request share a pin
// (modelpin). Once the cluster's model moves on (a rolling update), a later call is still served
// by the model the first one was, while a node serves it; when none does, it fails UNAVAILABLE
// saying the model changed, never served by the other model.
func TestCallsUnderOnePinAreServedByOneModel(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Fingerprint: "fp-old", Coeffs: fastCost})
	cfg := testConfig(nodes.Addrs())
	cfg.Split.MaxBatchItems = 2 // a request's batches reach both nodes
	p, _ := startProxy(t, cfg)
	teach := func(fp string) { // the proxy learns the nodes' new model from refused replies
		t.Helper()
		waitUntil(t, "the proxy sees the new model", func() bool {
			req := makeRequest(4, 999)
			req.Options = &relevancev1.ScoreOptions{NoCache: true}
			_, _ = p.Score(context.Background(), req)
			return p.cluster.Fingerprint() == fp
		})
	}
	score(t, p, makeRequest(4, 1)) // the cluster serves fp-old
	pin := new(modelpin.Pin)
	ctx := modelpin.NewContext(context.Background(), pin)
	if _, err := p.Score(ctx, makeRequest(4, 2)); err != nil {
		t.Fatal(err)
	}
	if got := pin.Hold(""); got != "fp-old" {
		t.Fatalf("after the first call the pin holds %q, want fp-old", got)
	}
	// Half the cluster updated: the cluster's model is fp-new (it wins the tie), one node
	// still serves fp-old.
	nodes[0].SetModel("fp-new", 0.5)
	teach("fp-new")
	req := makeRequest(4, 3)
	resp, err := p.Score(ctx, req)
	if err != nil {
		t.Fatalf("a pinned call while a node still serves its model: %v", err)
	}
	if shifted(req, resp) {
		t.Error("a call pinned to fp-old was served by fp-new")
	}
	// Without the pin a request is the new model's.
	if resp, err := p.Score(context.Background(), makeRequest(4, 4)); err != nil || !shifted(makeRequest(4, 4), resp) {
		t.Errorf("an unpinned call after the update: %v, want it served by fp-new", err)
	}
	// The whole cluster updated: nothing serves the pinned model. The last node restarts on it
	// (the proxy forgets its model when its health goes, and learns it again when it answers).
	healthy := func(want bool) func() bool {
		return func() bool {
			for _, n := range p.Nodes() {
				if n.Addr == nodes[1].Addr() {
					return n.Healthy == want
				}
			}
			return false
		}
	}
	nodes[1].SetServing(false)
	waitUntil(t, "node seen down", healthy(false))
	nodes[1].SetModel("fp-new", 0.5)
	nodes[1].SetServing(true)
	waitUntil(t, "node seen up", healthy(true))
	_, err = p.Score(ctx, makeRequest(4, 5))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "model changed") {
		t.Errorf("a call pinned to a model no node serves: %v, want UNAVAILABLE saying the model changed", err)
	}
}

// TestCallPlannedBeforeTheModelWasKnownKeepsToThePin: a call planned while no node's model was
// known yet (cluster fingerprint "") is served by whatever model answers; if another call of the
// same request pinned another model meanwhile, it fails UNAVAILABLE rather than mix.
func TestCallPlannedBeforeTheModelWasKnownKeepsToThePin(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	nodes := startNodes(t, 1, fakenode.Options{Fingerprint: "fp-old", Latency: func(b fakenode.Batch) time.Duration {
		if b.Query != "query 1" {
			return 0 // the node's own start-up work
		}
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return 0
	}})
	p, _ := startProxy(t, testConfig(nodes.Addrs()))
	if fp := p.cluster.Fingerprint(); fp != "" {
		t.Fatalf("cluster fingerprint %q before any reply, want unknown", fp)
	}
	pin := new(modelpin.Pin)
	done := make(chan error, 1)
	go func() {
		_, err := p.Score(modelpin.NewContext(context.Background(), pin), makeRequest(4, 1))
		done <- err
	}()
	<-started
	pin.Hold("fp-other") // another call of the request, served by another model, pinned it
	close(release)
	if err := <-done; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "model changed") {
		t.Errorf("a call served by fp-old under a pin to fp-other: %v, want UNAVAILABLE saying the model changed", err)
	}
}
