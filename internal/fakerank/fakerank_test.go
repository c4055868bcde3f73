package fakerank

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, kind string, opts Options) *Server {
	t.Helper()
	s, err := Start(kind, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// call sends body to path and returns the status and the decoded reply (or the text, when it
// is not JSON).
func call(t *testing.T, s *Server, method, path, body string) (int, any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return resp.StatusCode, string(raw)
	}
	return resp.StatusCode, v
}

func TestWireFormats(t *testing.T) {
	pa, pb := Score("q", "a"), Score("q", "b")
	hi, lo, hiIdx, loIdx := pa, pb, 0.0, 1.0
	if pb > pa {
		hi, lo, hiIdx, loIdx = pb, pa, 1, 0
	}
	// f32 is x as TEI's f32 scores read back: the shortest decimal of float32(x).
	f32 := func(x float64) float64 {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
		return v
	}
	logit := func(p float64) float64 {
		for _, d := range []string{"a", "b"} {
			if Score("q", d) == p {
				return Logit("q", d)
			}
		}
		return 0
	}
	for _, tc := range []struct {
		name, kind, path, body string
		opts                   Options
		status                 int
		want                   any
	}{
		{"vllm ranks best first and echoes", KindVLLM, "/rerank", `{"query":"q","documents":["a","b"]}`, Options{}, 200, map[string]any{
			"id": "score-1", "model": "fake-reranker", "usage": map[string]any{"prompt_tokens": 2.0, "total_tokens": 2.0},
			"results": []any{
				map[string]any{"index": hiIdx, "document": map[string]any{"text": []string{"a", "b"}[int(hiIdx)]}, "relevance_score": hi},
				map[string]any{"index": loIdx, "document": map[string]any{"text": []string{"a", "b"}[int(loIdx)]}, "relevance_score": lo},
			}}},
		{"vllm top_n", KindVLLM, "/v1/rerank", `{"query":"q","documents":["a","b"],"top_n":1}`, Options{}, 200, nil},
		{"vllm unknown model", KindVLLM, "/rerank", `{"model":"x","query":"q","documents":["a"]}`, Options{}, 404, map[string]any{
			"error": map[string]any{"message": "The model `x` does not exist.", "type": "NotFoundError", "param": nil, "code": 404.0}}},
		{"sglang empty query", KindSGLang, "/v1/rerank", `{"query":"","documents":["a"]}`, Options{}, 400, map[string]any{
			"object": "error", "message": "Query cannot be empty", "type": "BadRequest", "param": nil, "code": 400.0}},
		{"sglang bare array without documents", KindSGLang, "/v1/rerank", `{"query":"q","documents":["a","b"],"return_documents":false}`, Options{Template: TemplateOff}, 200, []any{
			map[string]any{"score": hi, "index": hiIdx}, map[string]any{"score": lo, "index": loIdx}}},
		{"llamacpp jina format", KindLlamaCpp, "/v1/rerank", `{"query":"q","documents":["a","b"]}`, Options{Template: TemplateOff}, 200, map[string]any{
			"model": "fake-reranker", "object": "list", "usage": map[string]any{"prompt_tokens": 2.0, "total_tokens": 2.0},
			"results": []any{map[string]any{"index": hiIdx, "relevance_score": hi}, map[string]any{"index": loIdx, "relevance_score": lo}}}},
		{"llamacpp tei format", KindLlamaCpp, "/rerank", `{"query":"q","texts":["a","b"],"return_text":true}`, Options{Template: TemplateOff}, 200, []any{
			map[string]any{"index": hiIdx, "score": hi, "text": []string{"a", "b"}[int(hiIdx)]},
			map[string]any{"index": loIdx, "score": lo, "text": []string{"a", "b"}[int(loIdx)]}}},
		{"llamacpp pair over n_ubatch", KindLlamaCpp, "/v1/rerank", `{"query":"q","documents":["` + strings.Repeat("x", 100) + `"]}`, Options{MaxTokens: 10, Template: TemplateOff}, 500, map[string]any{
			"error": map[string]any{"code": 500.0, "message": "input (26 tokens) is too large to process. increase the physical batch size (current batch size: 10)", "type": "server_error"}}},
		{"llamacpp no documents", KindLlamaCpp, "/v1/rerank", `{"query":"q","documents":[]}`, Options{}, 400, map[string]any{
			"error": map[string]any{"code": 400.0, "message": `"documents" must be a non-empty string array`, "type": "invalid_request_error"}}},
		{"tei logits", KindTEI, "/rerank", `{"query":"q","texts":["a","b"],"raw_scores":true}`, Options{}, 200, []any{
			map[string]any{"index": hiIdx, "score": f32(logit(hi))}, map[string]any{"index": loIdx, "score": f32(logit(lo))}}},
		{"tei batch over max_client_batch_size", KindTEI, "/rerank", `{"query":"q","texts":["a","b","c"]}`, Options{MaxItems: 2}, 413, map[string]any{
			"error": "batch size 3 > maximum allowed batch size 2", "error_type": "Validation"}},
		{"tei empty", KindTEI, "/rerank", `{"query":"q","texts":[]}`, Options{}, 400, map[string]any{"error": "`texts` cannot be empty", "error_type": "Empty"}},
		{"tei bad body", KindTEI, "/rerank", `{"query":"q"}`, Options{}, 422, "Failed to deserialize the JSON body into the target type: missing field `texts`"},
		{"infinity too many documents", KindInfinity, "/rerank", `{"query":"q","documents":["a","b","c"]}`, Options{MaxItems: 2}, 422, map[string]any{"detail": []any{map[string]any{
			"type": "too_long", "loc": []any{"body", "documents"}, "msg": "List should have at most 2 items after validation, not 3",
			"ctx": map[string]any{"field_type": "List", "max_length": 2.0, "actual_length": 3.0}}}}},
		{"infinity top_n 0", KindInfinity, "/rerank", `{"query":"q","documents":["a"],"top_n":0}`, Options{}, 422, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, tc.kind, tc.opts)
			status, got := call(t, s, http.MethodPost, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d (body %v)", status, tc.status, got)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestInfinityEnvelope(t *testing.T) {
	s := start(t, KindInfinity, Options{})
	_, got := call(t, s, http.MethodPost, "/rerank", `{"query":"q","documents":["a"],"return_documents":true}`)
	m := got.(map[string]any)
	if m["object"] != "rerank" || m["model"] != "fake-reranker" || m["id"] == nil || m["created"] == nil {
		t.Errorf("envelope = %v", m)
	}
	if r := m["results"].([]any)[0].(map[string]any); r["document"] != "a" || r["relevance_score"] != Score("q", "a") {
		t.Errorf("result = %v", r)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	for _, tc := range []struct {
		kind, metric string
	}{
		{KindVLLM, `vllm:num_requests_waiting{engine="0",model_name="fake-reranker"} 2`},
		{KindSGLang, `sglang:num_queue_reqs{model_name="fake-reranker"} 2`},
		{KindLlamaCpp, `llamacpp:requests_deferred 2`},
		{KindTEI, `te_queue_size 2`},
		{KindInfinity, ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s := start(t, tc.kind, Options{})
			if status, _ := call(t, s, http.MethodGet, "/health", ""); status != 200 {
				t.Errorf("health: %d", status)
			}
			s.SetHealthy(false)
			if status, _ := call(t, s, http.MethodGet, "/health", ""); status != 503 {
				t.Errorf("health when down: %d", status)
			}
			s.SetLoad(2, 1)
			if tc.metric == "" {
				_, got := call(t, s, http.MethodGet, "/models", "")
				stats := got.(map[string]any)["data"].([]any)[0].(map[string]any)["stats"].(map[string]any)
				if stats["queue_absolute"] != 2.0 || stats["results_pending"] != 1.0 {
					t.Errorf("stats = %v", stats)
				}
				return
			}
			_, got := call(t, s, http.MethodGet, "/metrics", "")
			if text, _ := got.(string); !strings.Contains(text, tc.metric+"\n") {
				t.Errorf("/metrics lacks %q:\n%v", tc.metric, got)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	const want = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. " +
		"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, " +
		"retrieve relevant passages that answer the query\n<Query>: q\n<Document>: d<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	for _, kind := range []string{KindVLLM, KindLlamaCpp} {
		s := start(t, kind, Options{Template: TemplateOn})
		if status, _ := call(t, s, http.MethodPost, "/v1/rerank", `{"query":"q","documents":["d"]}`); status != 200 {
			t.Fatalf("%s: %d", kind, status)
		}
		if got := s.Requests()[0].Prompts[0]; got != want {
			t.Errorf("%s renders %q", kind, got)
		}
	}
	s := start(t, KindSGLang, Options{})
	call(t, s, http.MethodPost, "/v1/rerank", `{"query":"q","documents":["d"]}`)
	in, q, d, ok := Parse(s.Requests()[0].Prompts[0])
	if !ok || in != "Given a web search query, retrieve relevant passages that answer the query." || q != "q" || d != "d" {
		t.Errorf("sglang renders %q", s.Requests()[0].Prompts[0])
	}
}

func TestCloseEndsHungCalls(t *testing.T) {
	s, err := Start(KindTEI, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetHang(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post("http://"+s.Addr()+"/rerank", "application/json", strings.NewReader(`{"query":"q","texts":["a"]}`))
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	for s.Calls() == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a hung call outlived Close")
	}
}

func TestScore(t *testing.T) {
	if Score("q", "d") != Score("q", "d") || Score("q", "d") == Score("q", "e") || Score("qd", "") == Score("q", "d") {
		t.Error("Score is not a function of (query, document)")
	}
	for _, d := range []string{"", "a", "b", strings.Repeat("z", 1000)} {
		if p := Score("q", d); p <= 0.01 || p >= 0.99 {
			t.Errorf("Score = %v, outside (0.01, 0.99)", p)
		}
	}
}
