package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy"
)

// TestEndToEndWithRealCore runs the fronts over the real proxy core and three fake scorer nodes:
// the Cohere client's request and Ranker.Score must come back with the nodes' scores, ranked.
func TestEndToEndWithRealCore(t *testing.T) {
	nodes, err := fakenode.StartCluster(3, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	cfg := testRunConfig()
	cfg.Proxy.Nodes.Static = nodes.Addrs()
	cfg.Proxy.Split.MaxBatchItems = 4                      // several batches over several nodes
	cfg.Proxy.Model.Aliases = []string{"rerank-v3.5", "m"} // what the Cohere clients below send
	reg := prometheus.NewRegistry()
	var core *proxy.Proxy
	httpAddr, grpcAddr, stop := runFronts(t, cfg, Options{
		NewCore: func(c proxy.Config, reg prometheus.Registerer, log *slog.Logger) (Core, error) {
			p, err := proxy.New(c, reg, log)
			core = p
			return testAdapter{p}, err
		},
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	defer stop()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := core.WaitReady(wctx); err != nil {
		t.Fatalf("nodes never became ready: %v", err)
	}

	query := "What is the capital of the United States?"
	docs := []string{"Carson City is the capital city of Nevada.", "Washington, D.C. is the capital of the United States.",
		"Paris is the capital of France.", "Capital punishment in the United States.", "The capital of Peru is Lima.",
		"Ottawa is the capital of Canada.", "Canberra is the capital of Australia.", "Tokyo is the capital of Japan.",
		"Madrid is the capital of Spain.", "Rome is the capital of Italy."}
	body, _ := json.Marshal(map[string]any{"model": "rerank-v3.5", "query": query, "documents": docs, "top_n": 3, "max_tokens_per_doc": 512})
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "http://"+httpAddr+"/v2/rerank", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer co-test-key")
	req.Header.Set("X-Fern-SDK-Name", "cohere")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/v2/rerank = %d %s", resp.StatusCode, b)
	}
	var got struct {
		ID      string `json:"id"`
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
		Meta map[string]any `json:"meta"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	type res struct {
		Index int
		Score float64
	}
	var want []res
	for i, d := range docs {
		want = append(want, res{i, float64(fakenode.Score(query, d))})
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].Score > want[j].Score })
	want = want[:3]
	var gotRes []res
	for _, r := range got.Results {
		gotRes = append(gotRes, res{r.Index, r.RelevanceScore})
	}
	if d := cmp.Diff(want, gotRes, cmpopts.EquateApprox(0, 1e-6)); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if got.ID == "" {
		t.Error("empty id")
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sreq := &relevancev1.ScoreRequest{Query: query}
	for _, d := range docs {
		sreq.Items = append(sreq.Items, &relevancev1.Item{Text: d})
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	sresp, err := relevancev1.NewRankerClient(conn).Score(sctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sresp.GetScores() {
		if s.GetIndex() != uint32(i) || s.GetScore() != fakenode.Score(query, docs[i]) {
			t.Errorf("scores[%d] = index %d score %v, want %d %v", i, s.GetIndex(), s.GetScore(), i, fakenode.Score(query, docs[i]))
		}
	}
	if n := nodes[0].Calls() + nodes[1].Calls() + nodes[2].Calls(); n < 4 {
		t.Errorf("nodes got %d batches for 2 requests of 10 items in batches of <= 4", n)
	}
	// Core errors through the HTTP front: a deadline too short for slow nodes, then no node.
	post := func(path, body string, h map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+httpAddr+path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	for _, n := range nodes {
		n.SetLatency(func(fakenode.Batch) time.Duration { return 300 * time.Millisecond })
	}
	resp, b = post("/v1/rerank", `{"query":"q","documents":["a","b","c"]}`, map[string]string{"X-Request-Timeout-Ms": "30"})
	switch {
	case resp.StatusCode == 504 && strings.Contains(string(b), `"type":"timeout"`):
	case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "": // admission saw it coming
	default:
		t.Errorf("short deadline on slow nodes: %d %s (Retry-After %q), want 504 or 429", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	// A model the proxy does not serve is answered as vLLM answers it, with the served names.
	resp, b = post("/v2/rerank", `{"model":"gpt-4o","query":"q","documents":["a"]}`, nil)
	if resp.StatusCode != 404 || !strings.Contains(string(b), "The model `gpt-4o` does not exist. Served: fakenode, rerank-v3.5, m") {
		t.Errorf("unknown model: %d %s, want 404 naming the served models", resp.StatusCode, b)
	}
	for _, n := range nodes {
		n.SetServing(false)
	}
	if err := waitFor(func() bool { return !core.Ready() }); err != nil {
		t.Fatal("core still ready with every node NOT_SERVING")
	}
	resp, b = post("/v2/rerank", `{"model":"m","query":"q","documents":["a"]}`, nil)
	if resp.StatusCode != 503 || !strings.HasPrefix(string(b), `{"message":`) {
		t.Errorf("no healthy node: %d %s, want 503 in Cohere shape", resp.StatusCode, b)
	}
	if code, _ := getCode(client, "http://"+httpAddr+"/readyz"); code != 503 {
		t.Errorf("/readyz with no healthy node = %d, want 503", code)
	}

	mresp, err := client.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if path, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(exposition))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not on PATH; only testutil.GatherAndLint ran")
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}

type testAdapter struct{ *proxy.Proxy }

func (a testAdapter) NodesJSON() any { return a.Nodes() }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func getCode(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitFor polls cond (a health watch has no event the test can wait on) for up to 5 s.
func waitFor(cond func() bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
