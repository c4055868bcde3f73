package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy"
)

// gatedCore is the real core with a gate in front of the core calls of one query, so that a
// test can change the cluster's model between the core calls of one HTTP request.
type gatedCore struct {
	testAdapter
	query    string
	gate     chan struct{} // the calls for query wait until it is closed
	answered chan struct{} // gets one value when a call for another query has answered
}

func (c gatedCore) Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if req.GetQuery() == c.query {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return c.testAdapter.Score(ctx, req)
	}
	resp, err := c.testAdapter.Score(ctx, req)
	select {
	case c.answered <- struct{}{}:
	default:
	}
	return resp, err
}

// TestVLLMScoreNeverMixesModels: vLLM's score API answers each distinct text_1 with a core call
// of its own. When the cluster's model changes (a rolling update) between those calls, the reply
// must not hold scores of both models: the later call is served by the model the earlier one
// was, or the request fails UNAVAILABLE (503, retryable) saying the model changed.
func TestVLLMScoreNeverMixesModels(t *testing.T) {
	nodes, err := fakenode.StartCluster(1, fakenode.Options{Fingerprint: "fp-old"})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	cfg := testRunConfig()
	cfg.Proxy.Nodes.Static = nodes.Addrs()
	cfg.Proxy.Cost.Prime = false
	gc := gatedCore{query: "second", gate: make(chan struct{}), answered: make(chan struct{}, 1)}
	addr, _, stop := runFronts(t, cfg, Options{
		NewCore: func(c proxy.Config, reg prometheus.Registerer, log *slog.Logger) (Core, error) {
			p, err := proxy.New(c, reg, log)
			gc.testAdapter = testAdapter{p}
			return gc, err
		},
		Registry: prometheus.NewRegistry(),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer stop()
	core := gc.testAdapter.Proxy
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := core.WaitReady(wctx); err != nil {
		t.Fatalf("nodes never became ready: %v", err)
	}
	// The proxy learns the old model, so that the first core call is pinned to it.
	if _, err := core.Score(context.Background(), &relevancev1.ScoreRequest{Query: "warm", Items: []*relevancev1.Item{{Text: "w"}}}); err != nil {
		t.Fatal(err)
	}

	texts1 := []string{"first", "first", "second", "second"}
	texts2 := []string{"apple pie", "banana bread", "cherry tart", "date loaf"}
	body, _ := json.Marshal(map[string]any{"text_1": texts1, "text_2": texts2})
	type reply struct {
		code int
		body []byte
		err  error
	}
	replied := make(chan reply, 1)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	go func() {
		resp, err := client.Post("http://"+addr+"/score", "application/json", strings.NewReader(string(body)))
		if err != nil {
			replied <- reply{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		replied <- reply{code: resp.StatusCode, body: b}
	}()
	select {
	case <-gc.answered: // the first text_1 is scored, by the old model
	case <-time.After(10 * time.Second):
		close(gc.gate)
		t.Fatal("the first core call never answered")
	}
	// The rolling update: the node now serves another model, and the proxy learns it (a request
	// pinned to the old model fails on the node's new fingerprint, which the proxy records).
	nodes[0].SetModel("fp-new", 0.5)
	if err := waitFor(func() bool {
		_, _ = core.Score(context.Background(), &relevancev1.ScoreRequest{Query: "teach", Items: []*relevancev1.Item{{Text: "t"}},
			Options: &relevancev1.ScoreOptions{NoCache: true}})
		return core.Nodes()[0].Fingerprint == "fp-new"
	}); err != nil {
		close(gc.gate)
		t.Fatal("the proxy never learned the node's new model")
	}
	close(gc.gate) // the second text_1's core call runs now
	r := <-replied
	if r.err != nil {
		t.Fatal(r.err)
	}
	switch r.code {
	case http.StatusOK:
		var got struct {
			Data []struct {
				Index int     `json:"index"`
				Score float64 `json:"score"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		models := map[int]string{} // by pair
		for _, d := range got.Data {
			m := "old"
			if math.Abs(d.Score-float64(fakenode.Score(texts1[d.Index], texts2[d.Index]))) > 1e-3 {
				m = "new"
			}
			models[d.Index] = m
		}
		for i := range texts1 {
			if models[i] != models[0] {
				t.Fatalf("one reply mixes models: pairs scored by %v (body %s)", models, r.body)
			}
		}
	case http.StatusServiceUnavailable:
		if !strings.Contains(string(r.body), "model changed") {
			t.Errorf("503 %s, want it to say the model changed during the request", r.body)
		}
	default:
		t.Errorf("status %d %s, want 200 from one model or 503", r.code, r.body)
	}
}
