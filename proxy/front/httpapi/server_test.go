package httpapi

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/request"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its Date header from one process-wide goroutine started on first use.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// fasthttp's worker-pool cleaner notices a stop only after its sleep (MaxIdleWorkerDuration,
		// 10 s): it exits on its own, after the test binary would.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The benchmark's fasthttp client: same kind of sleeping cleaners, gone within seconds.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}

// testScores are the fake core's scores by document text; other texts score 0.01.
var testScores = map[string]float32{
	"Carson City is the capital city of the American state of Nevada.":                                                                                                        0.12,
	"The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean. Its capital is Saipan.":                                                     0.03,
	"Washington, D.C. (also known as simply Washington or D.C., and officially as the District of Columbia) is the capital of the United States. It is a federal district.":   0.98,
	"Capitalization or capitalisation in English grammar is the use of a capital letter at the start of a word. English usage varies from capitalization in other languages.": 0.01,
	"Capital punishment has existed in the United States since beforethe United States was a country. As of 2017, capital punishment is legal in 30 of the 50 states.":        0.4,
	"apple":  0.2,
	"banana": 0.9,
	"cherry": 0.5,
}

// testLimits are the proxy's default limits.
var testLimits = request.Limits{MaxItems: 1000, MaxItemBytes: 32 << 10, MaxQueryBytes: 8 << 10}

// fakeCore validates requests as the core does (request.Validate), scores from testScores,
// counts 10 prompt tokens per item, ranks as the core does, and records requests.
type fakeCore struct {
	ready atomic.Bool
	// fn, when set, replaces the default scoring.
	fn func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error)

	mu  sync.Mutex
	got []*relevancev1.ScoreRequest
}

func newFakeCore() *fakeCore {
	c := &fakeCore{}
	c.ready.Store(true)
	return c
}

func (c *fakeCore) Ready() bool { return c.ready.Load() }

func (c *fakeCore) Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	c.mu.Lock()
	c.got = append(c.got, req)
	c.mu.Unlock()
	if err := request.Validate(req, testLimits); err != nil {
		return nil, err
	}
	if c.fn != nil {
		return c.fn(ctx, req)
	}
	return defaultScores(req), nil
}

// lastFor is the last request the core got, compared against want: when want names no request
// id, the id the front generated for it (32 hex digits) is left out.
func (c *fakeCore) lastFor(t testing.TB, want *relevancev1.ScoreRequest) *relevancev1.ScoreRequest {
	t.Helper()
	got := c.last(t)
	if want.GetRequestId() == "" && len(got.GetRequestId()) == 32 {
		if _, err := hex.DecodeString(got.GetRequestId()); err == nil {
			got = proto.Clone(got).(*relevancev1.ScoreRequest)
			got.RequestId = ""
		}
	}
	return got
}

func (c *fakeCore) last(t testing.TB) *relevancev1.ScoreRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) == 0 {
		t.Fatal("core got no request")
	}
	return c.got[len(c.got)-1]
}

func defaultScores(req *relevancev1.ScoreRequest) *relevancev1.ScoreResponse {
	resp := &relevancev1.ScoreResponse{RequestId: "req-fake", Model: "qwen3-reranker-tiny",
		Usage: &relevancev1.Usage{PromptTokens: uint64(10 * len(req.GetItems()))}}
	for i, it := range req.GetItems() {
		s, ok := testScores[it.GetText()]
		if !ok {
			s = 0.01
		}
		resp.Scores = append(resp.Scores, &relevancev1.ItemScore{Index: uint32(i), Id: it.GetId(), Score: s,
			Status: relevancev1.ItemStatus_ITEM_STATUS_OK, Tokens: 10})
	}
	return withRanking(resp, req.GetTopN())
}

// withRanking fills resp.Ranking as the core does: the items whose status is not TOO_LONG or
// FAILED, best first, ties by lower index, cut to topN when > 0.
func withRanking(resp *relevancev1.ScoreResponse, topN uint32) *relevancev1.ScoreResponse {
	resp.Ranking = nil
	for i, s := range resp.GetScores() {
		switch s.GetStatus() {
		case relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, relevancev1.ItemStatus_ITEM_STATUS_FAILED:
		default:
			resp.Ranking = append(resp.Ranking, uint32(i))
		}
	}
	slices.SortStableFunc(resp.Ranking, func(a, b uint32) int {
		return cmp.Compare(resp.Scores[b].GetScore(), resp.Scores[a].GetScore())
	})
	if topN > 0 && int(topN) < len(resp.Ranking) {
		resp.Ranking = resp.Ranking[:topN]
	}
	return resp
}

type env struct {
	srv    *Server
	core   *fakeCore
	reg    *prometheus.Registry
	base   string
	addr   string
	client *http.Client
	served chan error
}

func startServer(t testing.TB, cfg Config, core *fakeCore, nodes func() any) *env {
	t.Helper()
	return startServerWith(t, cfg, Options{Core: core, Nodes: nodes})
}

// startServerWith starts a server with opts (its Metrics and Gatherer filled in here); opts.Core
// must be a *fakeCore.
func startServerWith(t testing.TB, cfg Config, opts Options) *env {
	t.Helper()
	core := opts.Core.(*fakeCore)
	reg := prometheus.NewRegistry()
	m, err := front.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:0"
	opts.Metrics, opts.Gatherer = m, reg
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, core: core, reg: reg, addr: ln.Addr().String(), base: "http://" + ln.Addr().String(),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}, served: make(chan error, 1)}
	go func() { e.served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-e.served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return e
}

type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (e *env) do(t testing.TB, method, path, body string, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

func decode(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("reply is not a JSON object: %v: %s", err, b)
	}
	return m
}

// TestCohereClientRequest sends what cohere-python's ClientV2.rerank sends (Fern-generated:
// POST v2/rerank, compact JSON without the omitted optional fields, its X-Fern-* and bearer
// headers) and checks every field of the reply and of what reached the core.
func TestCohereClientRequest(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	docs := []string{
		"Carson City is the capital city of the American state of Nevada.",
		"The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean. Its capital is Saipan.",
		"Washington, D.C. (also known as simply Washington or D.C., and officially as the District of Columbia) is the capital of the United States. It is a federal district.",
		"Capitalization or capitalisation in English grammar is the use of a capital letter at the start of a word. English usage varies from capitalization in other languages.",
		"Capital punishment has existed in the United States since beforethe United States was a country. As of 2017, capital punishment is legal in 30 of the 50 states.",
	}
	docsJSON, _ := json.Marshal(docs)
	body := `{"model":"rerank-v3.5","query":"What is the capital of the United States?","documents":` + string(docsJSON) + `,"top_n":3,"max_tokens_per_doc":4096}`
	r := e.do(t, "POST", "/v2/rerank", body, map[string]string{
		"Authorization":      "Bearer co-test-key",
		"X-Fern-Language":    "Python",
		"X-Fern-SDK-Name":    "cohere",
		"X-Fern-SDK-Version": "5.15.0",
		"User-Agent":         "cohere/5.15.0",
		"X-Client-Name":      "relevance-test",
		"Accept":             "*/*",
		"Accept-Encoding":    "gzip, deflate",
	})
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	want := map[string]any{
		"id": "req-fake",
		"results": []any{
			map[string]any{"index": 2.0, "relevance_score": 0.98},
			map[string]any{"index": 4.0, "relevance_score": 0.4},
			map[string]any{"index": 0.0, "relevance_score": 0.12},
		},
		"meta": map[string]any{
			"api_version":  map[string]any{"version": "2"},
			"billed_units": map[string]any{"search_units": 1.0},
		},
	}
	if d := gocmp.Diff(want, decode(t, r.body)); d != "" {
		t.Errorf("reply (-want +got):\n%s", d)
	}
	wantReq := &relevancev1.ScoreRequest{
		Query: "What is the capital of the United States?", Model: "rerank-v3.5", TopN: 3,
		Options: &relevancev1.ScoreOptions{MaxTokensPerItem: 4096},
	}
	for _, d := range docs {
		wantReq.Items = append(wantReq.Items, &relevancev1.Item{Text: d})
	}
	if d := gocmp.Diff(wantReq, e.core.lastFor(t, wantReq), protocmp.Transform()); d != "" {
		t.Errorf("request to core (-want +got):\n%s", d)
	}
}

func TestRerank(t *testing.T) {
	tests := []struct {
		name string
		path string
		body string
		want map[string]any
		// wantCore, when set, is checked against what reached the core.
		wantCore *relevancev1.ScoreRequest
	}{
		{
			name: "jina strings default return_documents",
			path: "/v1/rerank",
			body: `{"model":"jina-reranker-v2","query":"fruit","documents":["apple","banana","cherry"]}`,
			want: map[string]any{"id": "req-fake", "model": "qwen3-reranker-tiny",
				"results": []any{
					map[string]any{"index": 1.0, "relevance_score": 0.9, "document": map[string]any{"text": "banana"}},
					map[string]any{"index": 2.0, "relevance_score": 0.5, "document": map[string]any{"text": "cherry"}},
					map[string]any{"index": 0.0, "relevance_score": 0.2, "document": map[string]any{"text": "apple"}},
				},
				"usage": map[string]any{"prompt_tokens": 30.0, "total_tokens": 30.0}},
		},
		{
			name: "vllm objects top_n no documents instruction unknown fields",
			path: "/rerank",
			body: `{"query":"fruit","documents":[{"text":"apple","meta":1},{"text":"banana"},"cherry"],"top_n":2,` +
				`"return_documents":false,"instruction":"Find fruit","truncate_prompt_tokens":-1,"priority":0,"extra":{"a":[1]}}`,
			want: map[string]any{"id": "req-fake", "model": "qwen3-reranker-tiny",
				"results": []any{
					map[string]any{"index": 1.0, "relevance_score": 0.9},
					map[string]any{"index": 2.0, "relevance_score": 0.5},
				},
				"usage": map[string]any{"prompt_tokens": 30.0, "total_tokens": 30.0}},
			wantCore: &relevancev1.ScoreRequest{Query: "fruit", Instruction: "Find fruit", TopN: 2,
				Items: []*relevancev1.Item{{Text: "apple"}, {Text: "banana"}, {Text: "cherry"}}},
		},
		{
			name: "escapes decode like encoding/json",
			path: "/v1/rerank",
			body: "{\"query\":\"q\",\"documents\":[\"a\\\"b\\u00e9\\n\",\"x\\ud800y\",\"caf\u00e9\"],\"return_documents\":false}",
			want: map[string]any{"id": "req-fake", "model": "qwen3-reranker-tiny",
				"results": []any{
					map[string]any{"index": 0.0, "relevance_score": 0.01},
					map[string]any{"index": 1.0, "relevance_score": 0.01},
					map[string]any{"index": 2.0, "relevance_score": 0.01},
				},
				"usage": map[string]any{"prompt_tokens": 30.0, "total_tokens": 30.0}},
			wantCore: &relevancev1.ScoreRequest{Query: "q",
				Items: []*relevancev1.Item{{Text: "a\"b\u00e9\n"}, {Text: "x\ufffdy"}, {Text: "caf\u00e9"}}},
		},
		{
			name: "cache false bypasses the score cache",
			path: "/v1/rerank",
			body: `{"query":"q","documents":["apple"],"return_documents":false,"cache":false}`,
			want: map[string]any{"id": "req-fake", "model": "qwen3-reranker-tiny",
				"results": []any{map[string]any{"index": 0.0, "relevance_score": 0.2}},
				"usage":   map[string]any{"prompt_tokens": 10.0, "total_tokens": 10.0}},
			wantCore: &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "apple"}},
				Options: &relevancev1.ScoreOptions{NoCache: true}},
		},
		{
			name: "top_n larger than documents and zero",
			path: "/v1/rerank",
			body: `{"query":"fruit","documents":["apple","banana"],"top_n":50,"return_documents":true}`,
			want: map[string]any{"id": "req-fake", "model": "qwen3-reranker-tiny",
				"results": []any{
					map[string]any{"index": 1.0, "relevance_score": 0.9, "document": map[string]any{"text": "banana"}},
					map[string]any{"index": 0.0, "relevance_score": 0.2, "document": map[string]any{"text": "apple"}},
				},
				"usage": map[string]any{"prompt_tokens": 20.0, "total_tokens": 20.0}},
		},
		{
			name: "cohere objects and return_documents",
			path: "/v2/rerank",
			body: `{"model":"rerank-v3.5","query":"fruit","documents":[{"text":"apple"},"cherry"],"top_n":0,"return_documents":true}`,
			want: map[string]any{"id": "req-fake",
				"results": []any{
					map[string]any{"index": 1.0, "relevance_score": 0.5, "document": map[string]any{"text": "cherry"}},
					map[string]any{"index": 0.0, "relevance_score": 0.2, "document": map[string]any{"text": "apple"}},
				},
				"meta": map[string]any{"api_version": map[string]any{"version": "2"}, "billed_units": map[string]any{"search_units": 1.0}}},
		},
	}
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", tc.path, tc.body, nil)
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			if d := gocmp.Diff(tc.want, decode(t, r.body)); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
			if tc.wantCore != nil {
				if d := gocmp.Diff(tc.wantCore, e.core.lastFor(t, tc.wantCore), protocmp.Transform()); d != "" {
					t.Errorf("request to core (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestRerankSkipsUnscoredItems(t *testing.T) {
	core := newFakeCore()
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		resp := defaultScores(req)
		resp.Scores[1].Status = relevancev1.ItemStatus_ITEM_STATUS_FAILED
		resp.Scores[1].Score = 0
		return withRanking(resp, req.GetTopN()), nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	r := e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["apple","banana","cherry"],"return_documents":false}`, nil)
	got := decode(t, r.body)["results"]
	want := []any{map[string]any{"index": 2.0, "relevance_score": 0.5}, map[string]any{"index": 0.0, "relevance_score": 0.2}}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
}

func TestScore(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	body := `{"request_id":"abc","query":"fruit","items":[{"id":"a","text":"apple"},{"id":"b","text":"banana"}],` +
		`"top_n":1,"options":{"truncation":"TRUNCATION_END","return_timings":true},"timeout_ms":250,"unknown_field":{"x":1}}`
	r := e.do(t, "POST", "/v1/score", body, nil)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	got := decode(t, r.body)
	scores, _ := got["scores"].([]any)
	if len(scores) != 2 {
		t.Fatalf("scores = %v, want 2 entries", got["scores"])
	}
	first := scores[0].(map[string]any)
	// index 0 and snake_case names must appear even for zero values.
	for _, k := range []string{"index", "id", "score", "logit", "status", "tokens", "truncated_tokens", "error"} {
		if _, ok := first[k]; !ok {
			t.Errorf("scores[0] lacks %q: %v", k, first)
		}
	}
	if first["id"] != "a" || first["index"] != 0.0 || first["status"] != "ITEM_STATUS_OK" {
		t.Errorf("scores[0] = %v", first)
	}
	if got["request_id"] != "req-fake" || got["model"] != "qwen3-reranker-tiny" {
		t.Errorf("request_id/model = %v/%v", got["request_id"], got["model"])
	}
	if r.header.Get(HeaderRequestID) != "req-fake" {
		t.Errorf("%s header = %q", HeaderRequestID, r.header.Get(HeaderRequestID))
	}
	want := &relevancev1.ScoreRequest{RequestId: "abc", Query: "fruit", TopN: 1, TimeoutMs: 250,
		Items:   []*relevancev1.Item{{Id: "a", Text: "apple"}, {Id: "b", Text: "banana"}},
		Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_END, ReturnTimings: true}}
	if d := gocmp.Diff(want, e.core.lastFor(t, want), protocmp.Transform()); d != "" {
		t.Errorf("request to core (-want +got):\n%s", d)
	}
}

func TestTimeoutBecomesDeadline(t *testing.T) {
	tests := []struct {
		name   string
		header string
		body   string
		want   time.Duration // 0: no deadline
	}{
		{name: "header", header: "300", body: `{"query":"q","documents":["a"]}`, want: 300 * time.Millisecond},
		{name: "body timeout_ms", body: `{"query":"q","items":[{"text":"a"}],"timeout_ms":700}`, want: 700 * time.Millisecond},
		{name: "header overrides body", header: "200", body: `{"query":"q","items":[{"text":"a"}],"timeout_ms":700}`, want: 200 * time.Millisecond},
		{name: "none", body: `{"query":"q","documents":["a"]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core := newFakeCore()
			var left time.Duration
			var has bool
			core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
				var dl time.Time
				dl, has = ctx.Deadline()
				left = time.Until(dl)
				return defaultScores(req), nil
			}
			e := startServer(t, DefaultConfig(), core, nil)
			path := "/v1/rerank"
			if strings.Contains(tc.body, "items") {
				path = "/v1/score"
			}
			h := map[string]string{}
			if tc.header != "" {
				h[HeaderTimeout] = tc.header
			}
			if r := e.do(t, "POST", path, tc.body, h); r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			if has != (tc.want > 0) {
				t.Fatalf("deadline set = %v, want %v", has, tc.want > 0)
			}
			// Generous lower bound: the box may be loaded between the handler and the core.
			if has && (left > tc.want || left < tc.want/3) {
				t.Errorf("time left = %s, want about %s", left, tc.want)
			}
		})
	}
}

func retryInfoErr(t testing.TB, c codes.Code, msg string, d time.Duration) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestErrors(t *testing.T) {
	type want struct {
		code                     int
		body                     map[string]any
		retryAfter, retryAfterMs string
		allow                    string
	}
	errShape := func(code int, typ, msg string) map[string]any {
		return map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": float64(code)}}
	}
	cohere := func(msg string) map[string]any { return map[string]any{"message": msg} }
	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		header  map[string]string
		coreErr error
		panics  bool
		want    want
	}{
		{name: "malformed json", method: "POST", path: "/v1/rerank", body: `{"query":`,
			want: want{code: 400, body: errShape(400, "invalid_request_error", "invalid JSON body at byte 9: unexpected end of JSON input")}},
		{name: "malformed json cohere", method: "POST", path: "/v2/rerank", body: `{"query": "q", "documents": [}`,
			want: want{code: 400, body: cohere("invalid JSON body at byte 30: invalid character '}' looking for beginning of value")}},
		{name: "wrong type", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"],"top_n":"3"}`,
			want: want{code: 400, body: errShape(400, "invalid_request_error", `top_n: must be a number, got string`)}},
		{name: "number out of range", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"],"top_n":99999999999999999999}`,
			want: want{code: 400, body: errShape(400, "invalid_request_error", `top_n: out of range: 99999999999999999999`)}},
		{name: "documents not array", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":"a"}`,
			want: want{code: 400, body: cohere(`documents: must be an array, got string`)}},
		{name: "not an object", method: "POST", path: "/rerank", body: `[1,2]`,
			want: want{code: 400, body: errShape(400, "invalid_request_error", `request body: must be a JSON object, got array`)}},
		{name: "score malformed", method: "POST", path: "/v1/score", body: `{"query":5}`,
			want: want{code: 400}},
		{name: "empty documents", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":[]}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "documents: empty")}},
		{name: "missing documents cohere", method: "POST", path: "/v2/rerank", body: `{"model":"m","query":"q"}`,
			want: want{code: 422, body: cohere("documents: is required")}},
		{name: "empty query", method: "POST", path: "/v2/rerank", body: `{"query":"","documents":["a"]}`,
			want: want{code: 422, body: cohere("query: empty")}},
		{name: "missing query", method: "POST", path: "/v1/rerank", body: `{"documents":["a"]}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "query: is required")}},
		{name: "negative top_n", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"],"top_n":-1}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "top_n: must be >= 0, got -1")}},
		{name: "bad max_tokens_per_doc", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":["a"],"max_tokens_per_doc":0}`,
			want: want{code: 422, body: cohere("max_tokens_per_doc: must be in [1, 4294967295], got 0")}},
		{name: "bad document", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a",{"title":"x"},3]}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "documents[1]: text: is required in a document object")}},
		{name: "null document", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":["a",null]}`,
			want: want{code: 422, body: cohere("documents[1]: must be a string or an object with a text field, got null")}},
		{name: "number document", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":[3]}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "documents[0]: must be a string or an object with a text field, got a number")}},
		{name: "score empty items", method: "POST", path: "/v1/score", body: `{"query":"q"}`,
			want: want{code: 422, body: errShape(422, "invalid_request_error", "items: empty")}},
		{name: "score null item", method: "POST", path: "/v1/score", body: `{"query":"q","items":[{"text":"a"},null]}`,
			want: want{code: 400, body: errShape(400, "invalid_request_error", "items[1]: must not be null")}},
		{name: "bad timeout header", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"]}`,
			header: map[string]string{HeaderTimeout: "soon"},
			want:   want{code: 400, body: errShape(400, "invalid_request_error", `X-Request-Timeout-Ms: must be a positive integer of milliseconds, got "soon"`)}},
		{name: "core invalid argument", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: request.FieldError("items[0].text", "invalid UTF-8"),
			want:    want{code: 422, body: errShape(422, "invalid_request_error", "documents[0]: invalid UTF-8")}},
		{name: "core overloaded", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: retryInfoErr(t, codes.ResourceExhausted, "projected completion 900ms exceeds deadline 500ms", 1500*time.Millisecond),
			want:    want{code: 429, retryAfter: "2", retryAfterMs: "1500", body: cohere("projected completion 900ms exceeds deadline 500ms")}},
		{name: "core overloaded no hint", method: "POST", path: "/v1/score", body: `{"query":"q","items":[{"text":"a"}]}`,
			coreErr: status.Error(codes.ResourceExhausted, "busy"),
			want:    want{code: 429, retryAfter: "1", retryAfterMs: "1000", body: errShape(429, "rate_limit_error", "busy")}},
		{name: "no node", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: status.Error(codes.Unavailable, "no healthy scorer node"),
			want:    want{code: 503, body: errShape(503, "service_unavailable", "no healthy scorer node")}},
		{name: "deadline", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: status.Error(codes.DeadlineExceeded, "deadline exceeded after 500ms"),
			want:    want{code: 504, body: cohere("deadline exceeded after 500ms")}},
		{name: "bare context deadline", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: fmt.Errorf("batch 3: %w", context.DeadlineExceeded),
			want:    want{code: 504, body: errShape(504, "timeout", "batch 3: context deadline exceeded")}},
		{name: "internal", method: "POST", path: "/v1/rerank", body: `{"query":"q","documents":["a"]}`,
			coreErr: errors.New("boom"),
			want:    want{code: 500, body: errShape(500, "internal_error", "boom")}},
		{name: "panic", method: "POST", path: "/v2/rerank", body: `{"query":"q","documents":["a"]}`, panics: true,
			want: want{code: 500, body: cohere("internal error")}},
		{name: "wrong method", method: "GET", path: "/v1/rerank",
			want: want{code: 405, allow: "POST", body: errShape(405, "method_not_allowed", "method GET not allowed on /v1/rerank; use POST")}},
		{name: "wrong method get route", method: "POST", path: "/healthz",
			want: want{code: 405, allow: "GET, HEAD", body: errShape(405, "method_not_allowed", "method POST not allowed on /healthz; use GET, HEAD")}},
		{name: "unknown path", method: "GET", path: "/v1/nope",
			want: want{code: 404, body: errShape(404, "not_found", "no route for GET /v1/nope")}},
		{name: "unknown path cohere", method: "POST", path: "/v2/embed",
			want: want{code: 404, body: cohere("no route for POST /v2/embed")}},
	}
	core := newFakeCore()
	var mu sync.Mutex
	var coreErr error
	var panics bool
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		mu.Lock()
		err, p := coreErr, panics
		mu.Unlock()
		if p {
			panic("fake core panic")
		}
		if err != nil {
			return nil, err
		}
		return defaultScores(req), nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			coreErr, panics = tc.coreErr, tc.panics
			mu.Unlock()
			r := e.do(t, tc.method, tc.path, tc.body, tc.header)
			if r.code != tc.want.code {
				t.Fatalf("status = %d, want %d: %s", r.code, tc.want.code, r.body)
			}
			got := decode(t, r.body)
			if tc.want.body != nil {
				if d := gocmp.Diff(tc.want.body, got); d != "" {
					t.Errorf("body (-want +got):\n%s", d)
				}
			} else if msg, _ := got["error"].(map[string]any)["message"].(string); msg == "" {
				t.Errorf("error body has no message: %s", r.body)
			}
			if g := r.header.Get("Retry-After"); g != tc.want.retryAfter {
				t.Errorf("Retry-After = %q, want %q", g, tc.want.retryAfter)
			}
			if g := r.header.Get("Retry-After-Ms"); g != tc.want.retryAfterMs {
				t.Errorf("Retry-After-Ms = %q, want %q", g, tc.want.retryAfterMs)
			}
			if g := r.header.Get("Allow"); g != tc.want.allow {
				t.Errorf("Allow = %q, want %q", g, tc.want.allow)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

// dialRaw opens a TCP connection to addr for a hand-written request, closed when the test ends,
// with a 10 s deadline on everything it reads and writes.
func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}

// rawPost writes a request with a body of n bytes on a fresh connection, ignoring write errors
// (the server may answer and close before the body is through), and reads the reply.
func rawPost(t testing.TB, addr, path string, n int, chunked bool) reply {
	t.Helper()
	conn := dialRaw(t, addr)
	body := bytes.Repeat([]byte("x"), n)
	go func() {
		if chunked {
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", path)
			for off := 0; off < len(body); off += 64 << 10 {
				chunk := body[off:min(off+64<<10, len(body))]
				if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(conn, "0\r\n\r\n")
			return
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, n)
		_, _ = conn.Write(body)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

func TestBodyTooLarge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	e := startServer(t, cfg, newFakeCore(), nil)
	tests := []struct {
		name    string
		path    string
		chunked bool
		want    map[string]any
	}{
		{name: "content-length", path: "/v1/rerank", want: map[string]any{"error": map[string]any{
			"message": "request body exceeds 65536 bytes", "type": "request_too_large", "code": 413.0}}},
		// A chunked body has no length to check up front: it is read to one byte past the limit,
		// and answered in its route's shape (Cohere's on /v2).
		{name: "chunked", path: "/v2/rerank", chunked: true, want: map[string]any{
			"message": "request body exceeds 65536 bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rawPost(t, e.addr, tc.path, 1<<20, tc.chunked)
			if r.code != 413 {
				t.Fatalf("status = %d, want 413: %s", r.code, r.body)
			}
			if d := gocmp.Diff(tc.want, decode(t, r.body)); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
		})
	}
	// A body just under the limit is still read (and rejected for its content, not its size).
	if r := rawPost(t, e.addr, "/v1/rerank", 60<<10, false); r.code != 400 {
		t.Errorf("under the limit: status = %d, want 400 (not JSON): %s", r.code, r.body)
	}
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP relevance_proxy_requests_total Requests answered by the proxy fronts, by route (HTTP path or gRPC method) and code (HTTP status or gRPC code).
# TYPE relevance_proxy_requests_total counter
relevance_proxy_requests_total{code="400",route="/v1/rerank"} 1
relevance_proxy_requests_total{code="413",route="/v1/rerank"} 1
relevance_proxy_requests_total{code="413",route="/v2/rerank"} 1
`), "relevance_proxy_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestBodyTooLargeReachesAClientStillSending: Go's HTTP client writes the whole body before it
// reads a reply, so a server that closes the connection on a body over its limit with the rest
// unread resets it, and the client gets "connection reset by peer" instead of the 413. Every
// try must get the 413, in the route's shape, and a body within the limit on the next
// connection is still served.
func TestBodyTooLargeReachesAClientStillSending(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	e := startServer(t, cfg, newFakeCore(), nil)
	big := `{"query":"q","documents":["` + strings.Repeat("x", 4<<20) + `"]}` // 64× the limit
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 {
		resp, err := client.Post("http://"+e.addr+"/v1/rerank", "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatalf("try %d: %v (want a 413 reply)", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "request body exceeds 65536 bytes") {
			t.Fatalf("try %d: %d %s, want 413 naming the limit", i, resp.StatusCode, b)
		}
	}
	resp, err := client.Post("http://"+e.addr+"/v1/rerank", "application/json", strings.NewReader(`{"query":"q","documents":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a small body after the 413s: %d, want 200", resp.StatusCode)
	}
}

// TestUnreadBodiesDoNotLeakIntoTheNextRequest: routes that never look at the body (no route, a
// method not allowed, a GET route) still consume it, so the next request on the same keep-alive
// connection is parsed from its own first byte. Bodies reach the handler as streams past their
// first 8 KB, and a stream left unread would be read as the next request.
func TestUnreadBodiesDoNotLeakIntoTheNextRequest(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	big := strings.Repeat("x", 64<<10)
	small := `{"query":"q","documents":["a"]}`
	for _, tc := range []struct {
		name, method, path string
		chunked            bool
		want               int
	}{
		{"no route", "POST", "/v1/nope", false, 404},
		{"method not allowed", "POST", "/healthz", false, 405},
		{"GET route", "GET", "/healthz", false, 200},
		{"no route, chunked", "POST", "/v1/nope", true, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, e.addr)
			var req bytes.Buffer
			if tc.chunked {
				fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", tc.method, tc.path, len(big), big)
			} else {
				fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s", tc.method, tc.path, len(big), big)
			}
			fmt.Fprintf(&req, "POST /v1/rerank HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(small), small)
			go func() { _, _ = conn.Write(req.Bytes()) }()
			br := bufio.NewReader(conn)
			for i, want := range []int{tc.want, 200} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("reply %d: %d %s, want %d", i, resp.StatusCode, b, want)
				}
			}
		})
	}
}

// TestBodyCutShortClosesTheConnection: a body whose read fails before its Content-Length is in
// (the read timed out, or the client left) is answered 408 / 400 on a connection that then
// closes. Handed to the route as a body (fasthttp puts the error's text there), it was scored
// and answered 200, and the rest of the body, arriving later, was parsed as a request of its own
// on the same connection.
func TestBodyCutShortClosesTheConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadTimeout = 300 * time.Millisecond
	e := startServer(t, cfg, newFakeCore(), nil)
	smuggled := "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"
	const n = 40000
	head := `{"query":"q","documents":["` + strings.Repeat("x", 20000)
	tail := strings.Repeat("y", n-len(head)-len(smuggled)-3) + `"]}` + smuggled
	for _, tc := range []struct {
		name string
		cut  func(net.Conn)
		want int
	}{
		{"read timeout", func(c net.Conn) { time.Sleep(2 * cfg.ReadTimeout); _, _ = io.WriteString(c, tail) }, http.StatusRequestTimeout},
		{"client left", func(c net.Conn) { _ = c.(*net.TCPConn).CloseWrite() }, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, e.addr)
			fmt.Fprintf(conn, "POST /v1/rerank HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n, head)
			go tc.cut(conn)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reply: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || !resp.Close {
				t.Fatalf("reply %d (close %v): %s; want %d and the connection closed", resp.StatusCode, resp.Close, b, tc.want)
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				t.Errorf("a second reply on the connection: %d (the body's rest parsed as a request)", resp.StatusCode)
			}
		})
	}
}

// TestMultipartBodyOverTheLimit: a multipart/form-data body is held to http.max_body_bytes like
// any other (fasthttp reads such a body whole before the handler unless told not to).
func TestMultipartBodyOverTheLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	e := startServer(t, cfg, newFakeCore(), nil)
	var body bytes.Buffer
	body.WriteString("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n")
	body.WriteString(strings.Repeat("x", 1<<20))
	body.WriteString("\r\n--b--\r\n")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+e.addr+"/v1/rerank", "multipart/form-data; boundary=b", &body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("1 MB multipart body against a 64 KB limit: %d %s, want 413", resp.StatusCode, b)
	}
}

// TestRequestOutlivesHandler checks that nothing the core keeps points into fasthttp's
// per-connection buffers: the core keeps every request and returns at once (as a core does on a
// deadline while its batches still run); later requests on the same keep-alive connections,
// with other bodies of the same size, must not change what it kept. A zero-copy []byte→string
// conversion anywhere on the way would make this fail.
func TestRequestOutlivesHandler(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	const conns, perConn = 4, 25
	type sent struct {
		query string
		docs  []string
		id    string
	}
	var mu sync.Mutex
	var all []sent
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for i := range perConn {
				tag := fmt.Sprintf("%02d-%03d", c, i)
				s := sent{query: "query-" + tag, docs: []string{"doc-a-" + tag, "doc-b-" + tag}, id: "id-" + tag}
				paths := []string{"/v1/rerank", "/v2/rerank", "/v1/score"}
				path := paths[i%3]
				body := fmt.Sprintf(`{"query":%q,"documents":[%q,{"text":%q}]}`, s.query, s.docs[0], s.docs[1])
				if path == "/v1/score" {
					body = fmt.Sprintf(`{"query":%q,"items":[{"text":%q},{"text":%q}]}`, s.query, s.docs[0], s.docs[1])
				}
				req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
				req.Header.Set(HeaderRequestID, s.id)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("%s: status %d", path, resp.StatusCode)
				}
				mu.Lock()
				all = append(all, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	byID := map[string]sent{}
	for _, s := range all {
		byID[s.id] = s
	}
	core.mu.Lock()
	defer core.mu.Unlock()
	if len(core.got) != conns*perConn {
		t.Fatalf("core got %d requests, want %d", len(core.got), conns*perConn)
	}
	for _, req := range core.got {
		s, ok := byID[req.GetRequestId()]
		if !ok {
			t.Errorf("kept request has request_id %q, which no client sent", req.GetRequestId())
			continue
		}
		got := sent{query: req.GetQuery(), id: req.GetRequestId()}
		for _, it := range req.GetItems() {
			got.docs = append(got.docs, it.GetText())
		}
		if d := gocmp.Diff(s, got, gocmp.AllowUnexported(sent{})); d != "" {
			t.Errorf("kept request changed after its handler returned (-sent +kept):\n%s", d)
		}
	}
}

func TestHealthReadyNodesMetrics(t *testing.T) {
	type node struct {
		Addr    string `json:"addr"`
		Healthy bool   `json:"healthy"`
	}
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, func() any { return []node{{Addr: "10.0.0.1:9000", Healthy: true}} })
	check := func(path string, code int, body string) {
		t.Helper()
		r := e.do(t, "GET", path, "", nil)
		if r.code != code || string(r.body) != body {
			t.Errorf("GET %s = %d %s, want %d %s", path, r.code, r.body, code, body)
		}
	}
	check("/healthz", 200, `{"status":"ok"}`)
	check("/readyz", 200, `{"status":"ready"}`)
	core.ready.Store(false)
	check("/readyz", 503, `{"status":"no healthy node"}`)
	check("/healthz", 200, `{"status":"ok"}`)
	core.ready.Store(true)
	check("/v1/nodes", 200, `[{"addr":"10.0.0.1:9000","healthy":true}]`)
	e.srv.SetDraining()
	check("/readyz", 503, `{"status":"draining"}`)

	e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["a"]}`, nil)
	r := e.do(t, "GET", "/metrics", "", nil)
	if r.code != 200 {
		t.Fatalf("/metrics status %d", r.code)
	}
	for _, want := range []string{
		`relevance_proxy_requests_total{code="200",route="/v1/rerank"} 1`,
		`relevance_proxy_requests_total{code="503",route="/readyz"} 2`,
		`relevance_proxy_http_request_duration_seconds_count{route="/v1/rerank"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	problems, err := testutil.GatherAndLint(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	promtoolCheck(t, r.body)
}

// promtoolCheck runs `promtool check metrics` on an exposition when promtool is on PATH.
func promtoolCheck(t testing.TB, exposition []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not on PATH; only testutil.GatherAndLint ran")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestNodesDefaultEmpty(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	if r := e.do(t, "GET", "/v1/nodes", "", nil); r.code != 200 || string(r.body) != `[]` {
		t.Errorf("GET /v1/nodes = %d %s, want 200 []", r.code, r.body)
	}
}

// TestShutdownDrains: a request in the core when Shutdown starts still gets its answer, readiness
// is already false, and new connections are refused.
func TestShutdownDrains(t *testing.T) {
	core := newFakeCore()
	entered := make(chan struct{})
	release := make(chan struct{})
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		close(entered)
		<-release
		return defaultScores(req), nil
	}
	reg := prometheus.NewRegistry()
	m, _ := front.NewMetrics(reg)
	srv, err := New(DefaultConfig(), Options{Core: core, Metrics: m, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/rerank", "application/json", strings.NewReader(`{"query":"q","documents":["apple"]}`))
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	// Serve returns as soon as the listener is closed; the in-flight request is still held.
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !srv.draining.Load() {
		t.Error("not draining after Shutdown began")
	}
	// The listener must be closed: Accept on it fails at once. (Dialing its port instead would be
	// flaky: another process may bind the freed ephemeral port.)
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		if err == nil {
			t.Error("listener still accepting during drain")
		}
	case <-time.After(2 * time.Second):
		ln.Close()
		<-accepted
		t.Error("listener still open during drain")
	}
	close(release)
	if code := <-got; code != 200 {
		t.Errorf("in-flight request got %d, want 200", code)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := front.NewMetrics(reg)
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{name: "addr", edit: func(c *Config) { c.Addr = "8080" }, want: `http.addr: must be host:port, got "8080"`},
		{name: "body", edit: func(c *Config) { c.MaxBodyBytes = 0 }, want: "http.max_body_bytes: must be > 0, got 0"},
		{name: "timeout", edit: func(c *Config) { c.IdleTimeout = -time.Second }, want: "http.idle_timeout: must be >= 0, got -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			_, err := New(cfg, Options{Core: newFakeCore(), Metrics: m, Gatherer: reg})
			if err == nil || err.Error() != tc.want {
				t.Errorf("New() error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReadTimeout: a client that stalls mid-body gets 408 once read_timeout passes, and the
// connection is closed instead of holding a worker.
func TestReadTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadTimeout = 200 * time.Millisecond
	e := startServer(t, cfg, newFakeCore(), nil)
	conn, err := net.DialTimeout("tcp", e.addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "POST /v1/rerank HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"query\":"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status = %d, want 408", resp.StatusCode)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("answered after %s, want about read_timeout", waited)
	}
}

// TestShutdownTimeoutCancelsCore: when the drain runs out of time, the core calls still running
// are cancelled rather than left to outlive the server.
func TestShutdownTimeoutCancelsCore(t *testing.T) {
	core := newFakeCore()
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	reg := prometheus.NewRegistry()
	m, _ := front.NewMetrics(reg)
	srv, err := New(DefaultConfig(), Options{Core: core, Metrics: m, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/rerank", "application/json", strings.NewReader(`{"query":"q","documents":["a"]}`))
		if err != nil {
			got <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want deadline exceeded", err)
	}
	<-cancelled
	// The client is still there: the cancellation was the server's, so it gets a retryable 503,
	// not 499 (which says the client went away).
	if code := <-got; code != http.StatusServiceUnavailable && code != 0 {
		t.Errorf("request cancelled by the drain got %d, want 503 or a closed connection", code)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestRerankNonFiniteScore: a NaN score (a broken node) cannot be ranked or written as JSON; the
// item is left out like an unscored one, and the others stay in score order.
func TestRerankNonFiniteScore(t *testing.T) {
	core := newFakeCore()
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		resp := defaultScores(req)
		resp.Scores[1].Score = float32(math.NaN())
		return withRanking(resp, req.GetTopN()), nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	for _, path := range []string{"/v1/rerank", "/v2/rerank"} {
		r := e.do(t, "POST", path, `{"query":"q","documents":["apple","banana","cherry"],"return_documents":false}`, nil)
		if r.code != 200 {
			t.Fatalf("%s: status %d: %s", path, r.code, r.body)
		}
		got := decode(t, r.body)["results"]
		want := []any{map[string]any{"index": 2.0, "relevance_score": 0.5}, map[string]any{"index": 0.0, "relevance_score": 0.2}}
		if d := gocmp.Diff(want, got); d != "" {
			t.Errorf("%s results (-want +got):\n%s", path, d)
		}
	}
}

// TestRerankErrorsNameDocuments: the core names its fields canonically ("items[1].text"); a rerank
// client sent "documents", so the 422 names the field it knows, from the route's vocabulary.
// /v1/score speaks the canonical names.
func TestRerankErrorsNameDocuments(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	for _, tc := range []struct {
		coreErr         error
		want, wantScore string
	}{
		{request.FieldError("items[1].text", "40000 bytes, limit 32768"), "documents[1]: 40000 bytes, limit 32768", "items[1].text: 40000 bytes, limit 32768"},
		{request.FieldError("items", "1001 items, limit 1000"), "documents: 1001 items, limit 1000", "items: 1001 items, limit 1000"},
		{request.FieldError("items[0]", "missing"), "documents[0]: missing", "items[0]: missing"},
		{request.FieldError("options.max_tokens_per_item", "too many"), "max_tokens_per_doc: too many", "options.max_tokens_per_item: too many"},
		{request.FieldError("query", "empty"), "query: empty", "query: empty"},
		// An INVALID_ARGUMENT without a field violation names no field: its message is passed on as it is.
		{status.Error(codes.InvalidArgument, "items[1].text: odd"), "items[1].text: odd", "items[1].text: odd"},
	} {
		core.fn = func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
			return nil, tc.coreErr
		}
		r := e.do(t, "POST", "/v2/rerank", `{"query":"q","documents":["a","b"]}`, nil)
		if got := decode(t, r.body)["message"]; r.code != 422 || got != tc.want {
			t.Errorf("/v2/rerank core %v: %d %v, want 422 %q", tc.coreErr, r.code, got, tc.want)
		}
		r = e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["a","b"]}`, nil)
		if got := decode(t, r.body)["error"].(map[string]any)["message"]; r.code != 422 || got != tc.want {
			t.Errorf("/v1/rerank core %v: %d %v, want 422 %q", tc.coreErr, r.code, got, tc.want)
		}
		r = e.do(t, "POST", "/v1/score", `{"query":"q","items":[{"text":"a"}]}`, nil)
		if got := decode(t, r.body)["error"].(map[string]any)["message"]; r.code != 422 || got != tc.wantScore {
			t.Errorf("/v1/score core %v: %d %v, want 422 %q", tc.coreErr, r.code, got, tc.wantScore)
		}
	}
	// The same through the core's own validation (the fake runs request.Validate).
	core.fn = nil
	long := strings.Repeat("x", 40000)
	r := e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["a",{"text":"`+long+`"}]}`, nil)
	if got := decode(t, r.body)["error"].(map[string]any)["message"]; r.code != 422 || got != "documents[1]: 40000 bytes, limit 32768" {
		t.Errorf("/v1/rerank long document: %d %v", r.code, got)
	}
	// A rerank body has no request_id: the core's "request_id" is the header the client sent.
	r = e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["a"]}`, map[string]string{HeaderRequestID: "id\xff"})
	if got := decode(t, r.body)["error"].(map[string]any)["message"]; r.code != 422 || got != "X-Request-Id: invalid UTF-8" {
		t.Errorf("/v1/rerank bad request id header: %d %v", r.code, got)
	}
}

// TestRerankFollowsCoreRanking: the rerank routes return the core's ranking as it is (order, cut,
// what is left out); they do not sort again.
func TestRerankFollowsCoreRanking(t *testing.T) {
	core := newFakeCore()
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		resp := defaultScores(req)
		resp.Ranking = []uint32{0, 2} // apple 0.2 before cherry 0.5, banana 0.9 left out
		return resp, nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	want := []any{
		map[string]any{"index": 0.0, "relevance_score": 0.2, "document": map[string]any{"text": "apple"}},
		map[string]any{"index": 2.0, "relevance_score": 0.5, "document": map[string]any{"text": "cherry"}},
	}
	for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		r := e.do(t, "POST", path, `{"query":"q","documents":["apple","banana","cherry"],"return_documents":true}`, nil)
		if r.code != 200 {
			t.Fatalf("%s: status %d: %s", path, r.code, r.body)
		}
		if d := gocmp.Diff(want, decode(t, r.body)["results"]); d != "" {
			t.Errorf("%s results (-want +got):\n%s", path, d)
		}
	}
	// A ranking that points past the scores is the core's bug: 500, not a panic or a guess.
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		resp := defaultScores(req)
		resp.Ranking = []uint32{3}
		return resp, nil
	}
	if r := e.do(t, "POST", "/v1/rerank", `{"query":"q","documents":["apple","banana","cherry"]}`, nil); r.code != 500 {
		t.Errorf("ranking out of range: status %d, want 500: %s", r.code, r.body)
	}
}

// A request sent on a kept-alive connection just as the drain begins is answered (with
// Connection: close), not reset by the drain closing the connection as idle, and the drain ends
// as soon as that connection has closed rather than waiting out its grace.
func TestDrainAnswersARequestOnAnIdleKeepAliveConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DrainIdleGrace = time.Minute
	e := startServer(t, cfg, newFakeCore(), nil)
	conn := dialRaw(t, e.addr)
	br := bufio.NewReader(conn)
	body := `{"query":"q","documents":["apple"]}`
	send := func() (*http.Response, error) {
		if _, err := fmt.Fprintf(conn, "POST /v1/rerank HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, nil
	}
	first, err := send()
	if err != nil || first.StatusCode != 200 || first.Close {
		t.Fatalf("before the drain: %v, %+v", err, first)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- e.srv.Shutdown(ctx)
	}()
	for !e.srv.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	// fasthttp's own Shutdown closes idle connections at once: this is past that moment.
	time.Sleep(50 * time.Millisecond)
	resp, err := send()
	if err != nil {
		t.Fatalf("request on a kept-alive connection at the drain: %v", err)
	}
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("got %d, Connection: close %v; want 200 and close", resp.StatusCode, resp.Close)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the drain waited out its grace after the last connection closed")
	}
}
