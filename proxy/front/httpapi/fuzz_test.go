package httpapi

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/relevance-scoring/relevance/proxy/front"
)

// FuzzDecodeBodies feeds arbitrary bodies to every scoring route through the real handler (in
// process, a fake core that validates as the core does): whatever the body, the answer is 200,
// 400 or 422 (never a panic, a 5xx or a hang), its body is valid JSON, an error names a
// problem, and a 200 is a well-formed reply over valid UTF-8 input.
func FuzzDecodeBodies(f *testing.F) {
	for _, seed := range []string{
		`{"query":"apple","documents":["banana","cherry"],"top_n":1}`,
		`{"query":"apple","documents":[{"text":"banana"},{"text":"x"}],"return_documents":true}`,
		`{"model":"m","query":"q","documents":["a"],"max_tokens_per_doc":4}`,
		`{"query":"q","items":[{"id":"a","text":"banana"}],"options":{"truncation":"TRUNCATION_END"}}`,
		`{"query":"q","items":[{"text":5}]}`,
		`{"query":"q","documents":[null]}`,
		"{\"query\":\"\xff\",\"documents\":[\"a\"]}",
		`{"query":"\ud800","documents":["a"]}`,
		`[]`, `{`, `{"query":"q","documents":"a"}`, `{"top_n":-1}`,
		`{"query":"q","texts":["a","b"],"return_text":true,"raw_scores":true,"truncate":true}`,
		`{"query":"q","texts":["a"],"truncation_direction":"left"}`,
		`{"model":"m","text_1":"q","text_2":["a","b"]}`,
		`{"text_1":["q","r"],"text_2":["a","b"]}`,
		`{"text_1":"q","text_2":[1]}`,
		`{"data_1":"q","data_2":["a"]}`,
		`{"queries":["q","r"],"documents":["a","b"]}`,
		`{"queries":"q","items":["a",null]}`,
	} {
		for _, route := range []uint8{0, 1, 2, 3, 4, 5} {
			f.Add(route, []byte(seed))
		}
	}
	reg := prometheus.NewRegistry()
	m, err := front.NewMetrics(reg)
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(DefaultConfig(), Options{Core: newFakeCore(), Metrics: m, Gatherer: reg, MaxItems: 1000}) // as in production: limits.max_items > 0 counts items on the bytes first
	if err != nil {
		f.Fatal(err)
	}
	routes := []string{"/v1/score", "/v1/rerank", "/rerank", "/v2/rerank", "/score", "/reranking"}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := routes[int(route)%len(routes)]
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		s.handle(&ctx)
		code, out := ctx.Response.StatusCode(), ctx.Response.Body()
		var reply any
		if err := json.Unmarshal(out, &reply); err != nil {
			t.Fatalf("%s %q: %d with a body that is not JSON: %q", path, body, code, out)
		}
		v, _ := reply.(map[string]any)
		if _, isList := reply.([]any); v == nil && !(isList && code == 200) {
			// Only a TEI reply is a bare array.
			t.Fatalf("%s %q: %d with a body that is not a JSON object: %q", path, body, code, out)
		}
		switch code {
		case 200:
			if !utf8.Valid(body) {
				// Invalid bytes inside a JSON string are refused; outside strings the JSON is
				// malformed. Either way not a 200.
				t.Errorf("%s %q: 200 for a body with invalid UTF-8", path, body)
			}
			_, results := v["results"].([]any)
			_, data := v["data"].([]any)
			_, tei := reply.([]any)
			if path != "/v1/score" && !results && !data && !tei {
				t.Errorf("%s: 200 without results, data or a TEI ranking: %s", path, out)
			}
		case 400, 422:
			msg := ""
			switch e := v["error"].(type) {
			case map[string]any:
				msg, _ = e["message"].(string)
			case string: // TEI's {"error", "error_type"}
				msg = e
			default:
				msg, _ = v["message"].(string)
			}
			if msg == "" {
				t.Errorf("%s %q: %d without a message: %s", path, body, code, out)
			}
		default:
			t.Errorf("%s %q: status %d (%s), want 200, 400 or 422", path, body, code, out)
		}
	})
}
