package httpapi

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/modelpin"
)

// logitScores is the fake core's default scoring with a logit that is not the score (10·score −
// 5), so that a reply can show which of the two it carries.
func logitScores(_ context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	resp := defaultScores(req)
	for _, s := range resp.Scores {
		s.Logit = 10*s.Score - 5
	}
	return resp, nil
}

func decodeAny(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("reply is not JSON: %v: %s", err, b)
	}
	return v
}

// TestTEIRerankBodyGetsTEIsReply sends what Hugging Face TEI's clients send to /rerank and
// /v1/rerank ("texts", "truncate", "raw_scores", "return_text") and wants TEI's reply: a bare
// array of {index, score, text?}, best first, the score the raw logit when raw_scores is set.
func TestTEIRerankBodyGetsTEIsReply(t *testing.T) {
	core := newFakeCore()
	core.fn = logitScores
	e := startServer(t, DefaultConfig(), core, nil)
	tests := []struct {
		name, path, body string
		want             any
		wantTrunc        relevancev1.Truncation
	}{
		{
			name: "texts returned, truncated at the end",
			path: "/rerank",
			body: `{"query":"fruit","texts":["apple","banana","cherry"],"return_text":true,"truncate":true,"truncation_direction":"Right"}`,
			want: []any{
				map[string]any{"index": 1.0, "score": 0.9, "text": "banana"},
				map[string]any{"index": 2.0, "score": 0.5, "text": "cherry"},
				map[string]any{"index": 0.0, "score": 0.2, "text": "apple"},
			},
			wantTrunc: relevancev1.Truncation_TRUNCATION_END,
		},
		{
			name: "raw scores, no texts, TEI's default of no truncation",
			path: "/v1/rerank",
			body: `{"query":"fruit","texts":["apple","banana","cherry"],"raw_scores":true}`,
			want: []any{
				map[string]any{"index": 1.0, "score": 4.0},
				map[string]any{"index": 2.0, "score": 0.0},
				map[string]any{"index": 0.0, "score": -3.0},
			},
			wantTrunc: relevancev1.Truncation_TRUNCATION_NONE,
		},
		{
			name: "llama.cpp's path",
			path: "/v1/reranking",
			body: `{"query":"fruit","texts":["cherry"],"truncate":false,"truncation_direction":"left"}`,
			want: []any{
				map[string]any{"index": 0.0, "score": 0.5},
			},
			wantTrunc: relevancev1.Truncation_TRUNCATION_NONE,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", tc.path, tc.body, nil)
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			if d := gocmp.Diff(tc.want, decodeAny(t, r.body)); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
			if got := e.core.last(t).GetOptions().GetTruncation(); got != tc.wantTrunc {
				t.Errorf("truncation to core %v, want %v", got, tc.wantTrunc)
			}
		})
	}
}

// TestTEIErrorsSpeakTEI: a TEI body's errors come in TEI's shape ({"error", "error_type"}) and
// TestTEIBodyModelGoesToTheModelCheck: a TEI body that names a model gets the model check every
// route applies (it was dropped, and "gpt" was scored by the served model).
func TestTEIBodyModelGoesToTheModelCheck(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	e.do(t, "POST", "/rerank", `{"model":"gpt","query":"q","texts":["a"]}`, nil)
	if got := core.last(t).GetModel(); got != "gpt" {
		t.Errorf("core got model %q from a TEI body naming gpt", got)
	}
}

// name TEI's fields, whether the front or the core found them.
func TestTEIErrorsSpeakTEI(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	many := make([]string, 1001)
	for i := range many {
		many[i] = "x"
	}
	manyJSON, _ := json.Marshal(many)
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"left cut refused", `{"query":"q","texts":["a"],"truncate":true,"truncation_direction":"left"}`, 422, "truncation_direction: left is not supported"},
		{"unknown direction", `{"query":"q","texts":["a"],"truncation_direction":"up"}`, 422, `truncation_direction: must be right or left, got "up"`},
		{"no query", `{"texts":["a"]}`, 422, "query: is required"},
		{"a text of the wrong type", `{"query":"q","texts":["a",7]}`, 422, "texts[1]: must be a string"},
		{"the core's limit, named as TEI names it", `{"query":"q","texts":` + string(manyJSON) + `}`, 422, "texts: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/rerank", tc.body, nil)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.body)
			}
			var body struct {
				Error     string `json:"error"`
				ErrorType string `json:"error_type"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("error body is not TEI's shape: %v: %s", err, r.body)
			}
			if !strings.Contains(body.Error, tc.want) || body.ErrorType != "validation" {
				t.Errorf("error %q (type %q), want one containing %q of type validation", body.Error, body.ErrorType, tc.want)
			}
		})
	}
}

// TestJinaBodyMentioningTextsStaysJina: only a top-level "texts" without "documents" makes a
// body TEI's; the word inside a document, or beside "documents", does not.
func TestJinaBodyMentioningTextsStaysJina(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	for _, body := range []string{
		`{"query":"q","documents":["the \"texts\" key"]}`,
		`{"query":"q","documents":["apple"],"texts":["ignored"]}`,
	} {
		r := e.do(t, "POST", "/rerank", body, nil)
		if r.code != 200 {
			t.Fatalf("%s: status %d: %s", body, r.code, r.body)
		}
		if _, ok := decode(t, r.body)["results"]; !ok {
			t.Errorf("%s: not a Jina reply: %s", body, r.body)
		}
	}
}

// TestVLLMScoreAPI sends vLLM's score bodies to /score and /v1/score and wants vLLM's reply:
// the scores in pair order, one core request per distinct text_1.
func TestVLLMScoreAPI(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	for _, path := range []string{"/score", "/v1/score"} {
		t.Run(path, func(t *testing.T) {
			r := e.do(t, "POST", path, `{"model":"qwen3-reranker","text_1":"fruit","text_2":["apple","banana","cherry"]}`, nil)
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			got := decode(t, r.body)
			if id, _ := got["id"].(string); !strings.HasPrefix(id, "score-") {
				t.Errorf("id %v, want score-…", got["id"])
			}
			if c, _ := got["created"].(float64); c < 1e9 {
				t.Errorf("created %v, want a Unix time", got["created"])
			}
			delete(got, "id")
			delete(got, "created")
			want := map[string]any{"object": "list", "model": "qwen3-reranker-tiny",
				"data": []any{
					map[string]any{"index": 0.0, "object": "score", "score": 0.2},
					map[string]any{"index": 1.0, "object": "score", "score": 0.9},
					map[string]any{"index": 2.0, "object": "score", "score": 0.5},
				},
				"usage": map[string]any{"prompt_tokens": 30.0, "total_tokens": 30.0, "completion_tokens": 0.0}}
			if d := gocmp.Diff(want, got); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
			wantReq := &relevancev1.ScoreRequest{Query: "fruit", Model: "qwen3-reranker",
				Items: []*relevancev1.Item{{Text: "apple"}, {Text: "banana"}, {Text: "cherry"}}}
			if d := gocmp.Diff(wantReq, e.core.lastFor(t, wantReq), protocmp.Transform()); d != "" {
				t.Errorf("request to core (-want +got):\n%s", d)
			}
		})
	}

	t.Run("pairs of several queries", func(t *testing.T) {
		core := newFakeCore()
		e := startServer(t, DefaultConfig(), core, nil)
		r := e.do(t, "POST", "/score", `{"text_1":["q1","q2","q1"],"text_2":["apple","banana","cherry"]}`,
			map[string]string{HeaderRequestID: "pairs"})
		if r.code != 200 {
			t.Fatalf("status %d: %s", r.code, r.body)
		}
		var got vllmScoreResponse
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if want := []float64{0.2, 0.9, 0.5}; len(got.Data) != 3 || got.Data[0].Score != want[0] || got.Data[1].Score != want[1] || got.Data[2].Score != want[2] {
			t.Errorf("data %+v, want scores %v in pair order", got.Data, want)
		}
		if got.ID != "score-pairs" || got.Usage.PromptTokens != 30 {
			t.Errorf("id %q usage %+v, want score-pairs and 30 prompt tokens", got.ID, got.Usage)
		}
		core.mu.Lock()
		defer core.mu.Unlock()
		byQuery := map[string][]string{}
		ids := map[string]bool{}
		for _, req := range core.got {
			for _, it := range req.GetItems() {
				byQuery[req.GetQuery()] = append(byQuery[req.GetQuery()], it.GetText())
			}
			ids[req.GetRequestId()] = true
		}
		if d := gocmp.Diff(map[string][]string{"q1": {"apple", "cherry"}, "q2": {"banana"}}, byQuery); d != "" || len(core.got) != 2 {
			t.Errorf("%d core requests, items by query (-want +got):\n%s", len(core.got), d)
		}
		if len(ids) != 2 {
			t.Errorf("core request ids %v, want one per core request", ids)
		}
	})
}

// TestVLLMScoreErrorsNameItsFields: a bad vLLM score body is refused naming text_1, text_2 or
// the option, whether the front or the core found it.
func TestVLLMScoreErrorsNameItsFields(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	tests := []struct {
		body string
		code int
		want string
	}{
		{`{"text_1":"q"}`, 422, "text_2: is required"},
		{`{"text_1":["a","b"],"text_2":["x","y","z"]}`, 422, "text_1: has 2 texts and text_2 3"},
		{`{"text_1":"q","text_2":[]}`, 422, "text_2: must not be empty"},
		{`{"text_1":"q","text_2":[1]}`, 400, "text_2[0]: must be a string, got a number"},
		{`{"text_1":5,"text_2":"a"}`, 400, "text_1: must be a string or a list of strings, got a number"},
		{`{"text_1":"q","text_2":"a","truncate_prompt_tokens":16}`, 422, "truncate_prompt_tokens: not supported"},
		{`{"text_1":"","text_2":"a"}`, 422, "text_1: "},
		{manyQueries(maxScoreQueries + 1), 422, "text_1: has more than 64 distinct texts"},
	}
	for _, tc := range tests {
		r := e.do(t, "POST", "/score", tc.body, nil)
		if r.code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.body, r.code, tc.code, r.body)
			continue
		}
		var body errorBody
		if err := json.Unmarshal(r.body, &body); err != nil || !strings.Contains(body.Error.Message, tc.want) {
			t.Errorf("%s: error %s, want one containing %q", tc.body, r.body, tc.want)
		}
	}
	// The JSON mirror of Ranker/Score still answers on /v1/score.
	r := e.do(t, "POST", "/v1/score", `{"query":"fruit","items":[{"id":"a","text":"banana"}]}`, nil)
	if r.code != 200 || !strings.Contains(string(r.body), `"scores"`) {
		t.Errorf("/v1/score with a Ranker body: %d %s", r.code, r.body)
	}
}

// manyQueries is a vLLM score body of n pairs, each with a text_1 of its own.
func manyQueries(n int) string {
	q := make([]string, n)
	d := make([]string, n)
	for i := range q {
		q[i], d[i] = "query "+strconv.Itoa(i), "apple"
	}
	qj, _ := json.Marshal(q)
	dj, _ := json.Marshal(d)
	return `{"text_1":` + string(qj) + `,"text_2":` + string(dj) + `}`
}

// TestVLLMScoreQueriesRunAFewAtATime: a score body of many distinct text_1 runs them as core
// requests at most scoreQueriesAtOnce at a time, and answers every pair.
func TestVLLMScoreQueriesRunAFewAtATime(t *testing.T) {
	core := newFakeCore()
	var inflight, peak atomic.Int32
	core.fn = func(_ context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		return defaultScores(req), nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	r := e.do(t, "POST", "/score", manyQueries(maxScoreQueries), nil)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var got vllmScoreResponse
	if err := json.Unmarshal(r.body, &got); err != nil || len(got.Data) != maxScoreQueries {
		t.Fatalf("%d scores (%v), want %d", len(got.Data), err, maxScoreQueries)
	}
	if p := peak.Load(); p > scoreQueriesAtOnce || p < 2 {
		t.Errorf("at most %d core requests at once, want 2..%d", p, scoreQueriesAtOnce)
	}
}

// TestModelsListsTheServedNames: GET /v1/models answers OpenAI's and vLLM's model list with the
// names a request may give, so that a client can find the one to send.
func TestModelsListsTheServedNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := front.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(DefaultConfig(), Options{Core: newFakeCore(), Metrics: m, Gatherer: reg,
		Models: func() []string { return []string{"qwen3-reranker-0.6b", "rerank"} }})
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/v1/models")
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	srv.handle(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	var got modelList
	if err := json.Unmarshal(ctx.Response.Body(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Object != "list" || len(got.Data) != 2 || got.Data[0].ID != "qwen3-reranker-0.6b" || got.Data[1].ID != "rerank" ||
		got.Data[0].Object != "model" || got.Data[0].Created < 1e9 {
		t.Errorf("model list %+v, want the two names as model cards", got)
	}
}

// statusScores answers as the core does when some items could not be scored: the texts named
// in tooLong are ITEM_STATUS_TOO_LONG and those in failed ITEM_STATUS_FAILED (left out of the
// ranking), each with the node's error.
func statusScores(tooLong, failed string) func(context.Context, *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	return func(_ context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		resp := defaultScores(req)
		for i, it := range req.GetItems() {
			switch it.GetText() {
			case tooLong:
				resp.Scores[i].Status, resp.Scores[i].Score = relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, 0
				resp.Scores[i].Error = "prompt of 9000 tokens exceeds the model's 8192"
			case failed:
				resp.Scores[i].Status, resp.Scores[i].Score = relevancev1.ItemStatus_ITEM_STATUS_FAILED, 0
				resp.Scores[i].Error = "node lost"
			}
		}
		return withRanking(resp, req.GetTopN()), nil
	}
}

// TestTooLongDocumentIsRefusedNotDropped: a rerank reply is a ranked list with no place for an
// item's status, so a document the nodes could not score for its length (sent without
// truncation) fails the request with a 422 naming it, in each dialect's own name, instead of
// vanishing from a 200.
func TestTooLongDocumentIsRefusedNotDropped(t *testing.T) {
	core := newFakeCore()
	core.fn = statusScores("banana", "")
	e := startServer(t, DefaultConfig(), core, nil)
	for _, tc := range []struct{ path, body, want string }{
		{"/rerank", `{"query":"q","texts":["apple","banana","cherry"]}`, "texts[1]: prompt of 9000 tokens"},
		{"/v1/rerank", `{"query":"q","documents":["apple","banana","cherry"]}`, "documents[1]: prompt of 9000 tokens"},
		{"/v2/rerank", `{"query":"q","documents":["apple","banana"]}`, "documents[1]: prompt of 9000 tokens"},
		{"/score", `{"text_1":"q","text_2":["apple","banana"]}`, "text_2[1]: prompt of 9000 tokens"},
	} {
		r := e.do(t, "POST", tc.path, tc.body, nil)
		if r.code != 422 || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s: %d %s, want 422 naming %q", tc.path, r.code, r.body, tc.want)
		}
	}
}

// TestVLLMScoreLeavesOutFailedPairs: with partial results allowed the core answers the items of a
// failed batch as ITEM_STATUS_FAILED; vLLM's data has no status, so the pair is left out (its
// index with it) rather than reported as a score of 0.
func TestVLLMScoreLeavesOutFailedPairs(t *testing.T) {
	core := newFakeCore()
	core.fn = statusScores("", "banana")
	e := startServer(t, DefaultConfig(), core, nil)
	r := e.do(t, "POST", "/score", `{"text_1":["q1","q2","q1"],"text_2":["apple","banana","cherry"]}`, nil)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var got vllmScoreResponse
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 2 || got.Data[0].Index != 0 || got.Data[1].Index != 2 || got.Data[1].Score != 0.5 {
		t.Errorf("data %+v, want pairs 0 and 2 only, in order", got.Data)
	}
}

// TestVLLMScoreHoldsAllQueriesToOneLimit: the pairs of a score body are bounded as one request's
// items are, however many text_1 they are spread over.
func TestVLLMScoreHoldsAllQueriesToOneLimit(t *testing.T) {
	e := startServerWith(t, DefaultConfig(), Options{Core: newFakeCore(), MaxItems: 5})
	r := e.do(t, "POST", "/score", manyQueries(6), nil)
	if r.code != 422 || !strings.Contains(string(r.body), "text_2: more than 5 texts, limit 5") {
		t.Errorf("6 pairs over 6 queries, limit 5: %d %s, want 422 naming text_2", r.code, r.body)
	}
	if r := e.do(t, "POST", "/score", manyQueries(5), nil); r.code != 200 {
		t.Errorf("5 pairs, limit 5: %d %s", r.code, r.body)
	}
}

// TestVLLMScoreKeepsOneBudget: the queries of one score body share the HTTP request's budget (the
// X-Request-Timeout-Ms header, else the core's default): they do not each get it afresh when they
// start, which let 64 queries of a slow core answer after ~8 budgets.
func TestVLLMScoreKeepsOneBudget(t *testing.T) {
	slow := func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		select {
		case <-time.After(60 * time.Millisecond):
			return defaultScores(req), nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	for _, tc := range []struct {
		name    string
		budget  time.Duration
		headers map[string]string
	}{
		{"header", 0, map[string]string{HeaderTimeout: "150"}},
		{"core's default", 150 * time.Millisecond, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := newFakeCore()
			core.fn = slow
			e := startServerWith(t, DefaultConfig(), Options{Core: core, DefaultBudget: tc.budget})
			start := time.Now()
			r := e.do(t, "POST", "/score", manyQueries(maxScoreQueries), tc.headers)
			took := time.Since(start)
			// 64 queries 8 at a time at 60 ms each need ~480 ms: over the 150 ms budget.
			if r.code != 504 {
				t.Errorf("status %d (%s), want 504", r.code, r.body)
			}
			if took > time.Second {
				t.Errorf("answered after %v, want soon after the 150 ms budget", took)
			}
		})
	}
}

// TestVLLMScoreFirstFailureStopsTheRest: when one query's core request fails, the queries not yet
// started are not sent, and the reply is that failure's.
func TestVLLMScoreFirstFailureStopsTheRest(t *testing.T) {
	core := newFakeCore()
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		if req.GetQuery() == "query 0" {
			return nil, status.Error(codes.ResourceExhausted, "admission: overload")
		}
		<-ctx.Done() // the others run until the failure cancels them, however late query 0 runs
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	e := startServer(t, DefaultConfig(), core, nil)
	r := e.do(t, "POST", "/score", manyQueries(maxScoreQueries), nil)
	if r.code != 429 || !strings.Contains(string(r.body), "overload") {
		t.Errorf("status %d (%s), want the first failure's 429", r.code, r.body)
	}
	core.mu.Lock()
	n := len(core.got)
	core.mu.Unlock()
	if n > scoreQueriesAtOnce {
		t.Errorf("the core got %d of %d requests, want at most %d: none sent after the first failure", n, maxScoreQueries, scoreQueriesAtOnce)
	}
}

// TestVLLMScoreCallsShareOneModelPin: the core calls of one vLLM score request carry one
// modelpin.Pin, so that the core serves them all by one model; another request gets its own.
func TestVLLMScoreCallsShareOneModelPin(t *testing.T) {
	core := newFakeCore()
	var mu sync.Mutex
	pins := map[string][]*modelpin.Pin{} // by the HTTP request's id
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		id, _, _ := strings.Cut(req.GetRequestId(), "-")
		mu.Lock()
		pins[id] = append(pins[id], modelpin.FromContext(ctx))
		mu.Unlock()
		return logitScores(ctx, req)
	}
	e := startServer(t, DefaultConfig(), core, nil)
	for _, id := range []string{"a", "b"} {
		if r := e.do(t, "POST", "/score", manyQueries(3), map[string]string{HeaderRequestID: id}); r.code != 200 {
			t.Fatalf("status %d: %s", r.code, r.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, ps := range pins {
		if len(ps) != 3 || ps[0] == nil || ps[1] != ps[0] || ps[2] != ps[0] {
			t.Errorf("request %s: core calls carried pins %v, want one pin shared by its 3 calls", id, ps)
		}
	}
	if len(pins["a"]) == 0 || len(pins["b"]) == 0 || pins["a"][0] == pins["b"][0] {
		t.Errorf("requests a and b shared a pin, or made no call: %v", pins)
	}
}

// TestVLLMScoreCoreErrorsNameThePair: an error the core finds in one query's items (named by the
// item's place in that core request) names the pair it came from in text_2.
func TestVLLMScoreCoreErrorsNameThePair(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	long := strings.Repeat("x", testLimits.MaxItemBytes+1)
	r := e.do(t, "POST", "/score", `{"text_1":["q1","q2","q1"],"text_2":["a","b","`+long+`"]}`, nil)
	if r.code != 422 || !strings.Contains(string(r.body), "text_2[2]") {
		t.Errorf("pair 2 over the size limit (item 1 of q1's request): %d %s, want 422 naming text_2[2]", r.code, r.body)
	}
}

// TestVLLMScoreAcceptsItsOtherFieldNames: newer vLLM takes the pairs as data_1 / data_2 and as
// queries with documents or items; each is answered, and errors use the names the body used.
func TestVLLMScoreAcceptsItsOtherFieldNames(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	for _, body := range []string{
		`{"data_1":"fruit","data_2":["apple","banana"]}`,
		`{"queries":"fruit","documents":["apple","banana"]}`,
		`{"queries":["fruit","fruit"],"items":["apple","banana"]}`,
	} {
		for _, path := range []string{"/score", "/v1/score"} {
			r := e.do(t, "POST", path, body, nil)
			var got vllmScoreResponse
			if r.code != 200 || json.Unmarshal(r.body, &got) != nil || len(got.Data) != 2 || got.Data[1].Score != 0.9 {
				t.Errorf("%s %s: %d %s", path, body, r.code, r.body)
			}
		}
	}
	// Unset fields sent as null do not take the body over.
	for _, body := range []string{
		`{"text_1":"fruit","text_2":["apple","banana"],"data_1":null,"queries":null}`,
		`{"data_1":"fruit","data_2":["apple","banana"],"text_1":null}`,
	} {
		r := e.do(t, "POST", "/score", body, nil)
		var got vllmScoreResponse
		if r.code != 200 || json.Unmarshal(r.body, &got) != nil || len(got.Data) != 2 {
			t.Errorf("%s: %d %s", body, r.code, r.body)
		}
	}
	for body, want := range map[string]string{
		`{"queries":"fruit"}`:                   "documents: is required",
		`{"data_1":"fruit","data_2":[]}`:        "data_2: must not be empty",
		`{"queries":["a","b"],"items":["x"]}`:   "queries: has 2 texts and items 1",
		`{"queries":"q","documents":["a",[1]]}`: "documents[1]: must be a string",
	} {
		r := e.do(t, "POST", "/v1/score", body, nil)
		if !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s, want an error containing %q", body, r.code, r.body, want)
		}
	}
}
