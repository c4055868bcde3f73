package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// TestServersBehindOneGatewayAreTwoNodes: two vLLM servers behind one gateway, told apart by
// their path prefix (backend.Spec.Addr: "a base URL with an optional path prefix"), are two
// nodes; keyed by host and port alone, the second silently replaced the first.
func TestServersBehindOneGatewayAreTwoNodes(t *testing.T) {
	c := New(Config{Backends: []backend.Spec{
		{Kind: backend.KindVLLM, Addr: "http://gw.example:8080/gpu-1"},
		{Kind: backend.KindVLLM, Addr: "http://gw.example:8080/gpu-2"},
	}, Prior: testPrior, Forgetting: 0.99, Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Snapshot()); n != 2 {
		t.Fatalf("%d nodes for 2 configured servers", n)
	}
}

// TestScorerBackendEntriesKeepTheirLimits: a scorer node given as a backends entry keeps the
// entry's max_items (the planner's batch cap) and timeout (each call's cap); they were dropped,
// the node built from its address alone.
func TestScorerBackendEntriesKeepTheirLimits(t *testing.T) {
	c := New(Config{Backends: []backend.Spec{{Kind: backend.KindScorer, Addr: "127.0.0.1:1", MaxItems: 3, Timeout: 2 * time.Second}},
		Prior: testPrior, Forgetting: 0.99, Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := c.Snapshot()[0]
	if n.Limits().MaxItems != 3 || n.callTimeout != 2*time.Second {
		t.Errorf("limits %+v, call timeout %v; want max_items 3 and 2s", n.Limits(), n.callTimeout)
	}
}

// TestBusyTEIStaysHealthy: TEI's /health goes down the same queue as the batches
// (backends/src/lib.rs, Backend::health), so while a batch runs the health answer waits for it.
// A 2 s batch (CPU, or a large reranker) does not make the proxy drop the node: its probe waits
// as long as a call may (backend.HealthWaiter), not one second.
func TestBusyTEIStaysHealthy(t *testing.T) {
	var backendMu sync.Mutex // TEI's single backend thread
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			backendMu.Lock()
			backendMu.Unlock()
			w.WriteHeader(200)
		case "/rerank":
			backendMu.Lock()
			time.Sleep(2000 * time.Millisecond)
			backendMu.Unlock()
			w.Write([]byte(`[{"index":0,"score":1.0}]`))
		}
	}))
	defer srv.Close()
	c := New(Config{Backends: []backend.Spec{{Kind: backend.KindTEI, Addr: srv.URL}}, Prior: testPrior, Forgetting: 0.99,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	n := c.Snapshot()[0]
	done := make(chan error, 1)
	go func() {
		_, err := n.ScoreBatch(context.Background(), &relevancev1.ScoreBatchRequest{Query: "q", Items: []*relevancev1.Item{{Text: "d"}}})
		done <- err
	}()
	lost := false
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if lost {
				t.Fatalf("TEI node marked unhealthy while it was busy with one 2 s batch (it answered the batch fine)")
			}
			return
		case <-time.After(10 * time.Millisecond):
			if !n.Healthy() {
				lost = true
			}
		}
	}
}

// TestNodeKeptOutForItsModelJoinsOnceServed: a vLLM server whose /v1/models lists another model
// than the configured one is kept out of traffic, with the reason in its status, though its
// health endpoint answers; the check is retried, and once the server serves the configured model
// (a restart the polls did not see) the node joins.
func TestNodeKeptOutForItsModelJoinsOnceServed(t *testing.T) {
	p, r := pollEvery, modelRecheck
	t.Cleanup(func() { pollEvery, modelRecheck = p, r }) // after the cluster's own cleanup, which stops its polls
	pollEvery, modelRecheck = 10*time.Millisecond, 50*time.Millisecond
	var served atomic.Value
	served.Store("org/other")
	var checks atomic.Int64
	c := startBackendCluster(t, backend.Spec{Kind: backend.KindVLLM, Model: "org/wanted"}, vllmListing(func() (int, string) {
		checks.Add(1)
		return http.StatusOK, served.Load().(string)
	}))
	// The model checked twice (at join, then again), or the node in traffic.
	for deadline := time.Now().Add(5 * time.Second); !c.Ready() && checks.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second model check within 5 s (%d checks)", checks.Load())
		}
	}
	st := c.Status()[0]
	if st.Healthy {
		t.Fatalf("node serving org/other joined though org/wanted is configured: %+v", st)
	}
	if !strings.Contains(st.NotReady, "org/wanted") || !strings.Contains(st.NotReady, "org/other") {
		t.Errorf("not_ready = %q, want the configured org/wanted and the served org/other named", st.NotReady)
	}
	served.Store("org/wanted")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("serving org/wanted, the node did not join: %v (%+v)", err, c.Status()[0])
	}
	if st := c.Status()[0]; st.NotReady != "" {
		t.Errorf("joined with not_ready = %q, want none", st.NotReady)
	}
}

// TestModelCheckThatDidNotAnswerIsAskedAgain: a model list that fails as the node joins (a 503
// while the server finishes starting) lets the node in, but is asked again until it answers;
// listing another model, the node is then taken out. Let in unchecked for good, a vLLM server of
// another model stayed in traffic, each of its batches failing.
func TestModelCheckThatDidNotAnswerIsAskedAgain(t *testing.T) {
	p, r := pollEvery, modelRecheck
	t.Cleanup(func() { pollEvery, modelRecheck = p, r }) // after the cluster's own cleanup, which stops its polls
	pollEvery, modelRecheck = 10*time.Millisecond, 50*time.Millisecond
	var checks atomic.Int64
	c := startBackendCluster(t, backend.Spec{Kind: backend.KindVLLM, Model: "org/wanted"}, vllmListing(func() (int, string) {
		if checks.Add(1) == 1 {
			return http.StatusServiceUnavailable, ""
		}
		return http.StatusOK, "org/other"
	}))
	waitKeptOut(t, c)
	if st := c.Status()[0]; st.Healthy {
		t.Errorf("kept out for its model but healthy: %+v", st)
	}
}

// TestTEIServingAnotherModelIDJoins: TEI takes no model name and scores with its one model, so
// a configured name other than its model_id (a friendly name for a server started from a local
// path) labels replies and is warned of; the node is not kept out.
func TestTEIServingAnotherModelIDJoins(t *testing.T) {
	p := pollEvery
	t.Cleanup(func() { pollEvery = p })
	pollEvery = 10 * time.Millisecond
	c := startBackendCluster(t, backend.Spec{Kind: backend.KindTEI, Model: "reranker"}, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(200)
		case "/info":
			fmt.Fprint(w, `{"model_id":"/data/qwen3-reranker"}`)
		default:
			http.NotFound(w, r)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("TEI labelled by a friendly name did not join: %v (%+v)", err, c.Status()[0])
	}
	if st := c.Status()[0]; st.NotReady != "" {
		t.Errorf("not_ready = %q, want none", st.NotReady)
	}
}

// startBackendCluster starts a server answering with h and a started cluster of one node of
// spec's kind on it (spec.Addr set here), both closed when the test ends.
func startBackendCluster(t *testing.T, spec backend.Spec, h http.HandlerFunc) *Cluster {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	spec.Addr = srv.URL
	c := New(Config{Backends: []backend.Spec{spec}, Prior: testPrior, Forgetting: 0.99,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	t.Cleanup(func() { c.Close() })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// vllmListing answers as a vLLM server: /health 200, and /v1/models listing the model list()
// names, or list()'s status when it is not 200.
func vllmListing(list func() (status int, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			status, id := list()
			if status != http.StatusOK {
				w.WriteHeader(status)
				return
			}
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, id)
		default:
			http.NotFound(w, r)
		}
	}
}

// waitKeptOut waits, 5 s at most, until c's one node says why it is kept out of traffic.
func waitKeptOut(t *testing.T, c *Cluster) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); c.Status()[0].NotReady == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the node is still in traffic 5 s on: %+v", c.Status()[0])
		}
	}
}
