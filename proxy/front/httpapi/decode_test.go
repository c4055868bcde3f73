package httpapi

import (
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestInvalidUTF8IsBadRequest: invalid UTF-8 anywhere in a JSON body is a 400 naming the field on
// every route (encoding/json would have replaced it with U+FFFD and the text would be scored), and
// the core is never called.
func TestInvalidUTF8IsBadRequest(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	tests := []struct {
		name, path, body, want string
	}{
		{"jina query", "/v1/rerank", "{\"query\":\"sho\xffes\",\"documents\":[\"a\"]}", "query: invalid UTF-8"},
		{"jina string document", "/v1/rerank", "{\"query\":\"q\",\"documents\":[\"a\",\"b\",\"x\xffy\"]}", "documents[2]: invalid UTF-8"},
		{"vllm object document", "/rerank", "{\"query\":\"q\",\"documents\":[{\"text\":\"a\"},{\"text\":\"\xc3\x28\"}]}", "documents[1].text: invalid UTF-8"},
		{"vllm instruction", "/rerank", "{\"instruction\":\"\xed\xa0\x80\",\"query\":\"q\",\"documents\":[\"a\"]}", "instruction: invalid UTF-8"},
		{"cohere escaped then bad document", "/v2/rerank", "{\"query\":\"q\",\"documents\":[\"a\\\"b\",\"c\\u00e9\xfe\"]}", "documents[1]: invalid UTF-8"},
		{"cohere ignored field", "/v2/rerank", "{\"query\":\"q\",\"documents\":[\"a\"],\"meta\":{\"tags\":[\"ok\",\"\xff\"]}}", "meta.tags[1]: invalid UTF-8"},
		{"score item text", "/v1/score", "{\"query\":\"q\",\"items\":[{\"id\":\"a\",\"text\":\"ok\"},{\"id\":\"b\",\"text\":\"\xff\"}]}", "items[1].text: invalid UTF-8"},
		{"score item id", "/v1/score", "{\"query\":\"q\",\"items\":[{\"id\":\"\xff\",\"text\":\"ok\"}]}", "items[0].id: invalid UTF-8"},
		{"score member name", "/v1/score", "{\"query\":\"q\",\"items\":[{\"te\xffxt\":\"ok\"}]}", "items[0].te\ufffdxt: invalid UTF-8"},
		{"outside any string", "/v1/score", "{\"query\":\"q\",\"items\":\xff}", "items: invalid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core.mu.Lock()
			before := len(core.got)
			core.mu.Unlock()
			r := e.do(t, "POST", tc.path, tc.body, nil)
			body := decode(t, r.body)
			msg, _ := body["message"].(string)
			if m, ok := body["error"].(map[string]any); ok {
				msg, _ = m["message"].(string)
			}
			if r.code != 400 || msg != tc.want {
				t.Errorf("%d %q, want 400 %q", r.code, msg, tc.want)
			}
			core.mu.Lock()
			defer core.mu.Unlock()
			if len(core.got) != before {
				t.Error("the core got the request")
			}
		})
	}
}

// TestScoreDecodeErrorsNameTheField: /v1/score (protojson) errors name the field by its path,
// where protojson names only the field's own name or none; an unknown enum name, which protojson
// would drop with the unknown fields, is refused.
func TestScoreDecodeErrorsNameTheField(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	tests := []struct {
		name string
		body string
		code int
		want string
	}{
		{"syntax error in a value", `{"query": "q", "top_n": abc}`, 400,
			"top_n: invalid JSON: invalid character 'a' looking for beginning of value"},
		{"truncated", `{"query":"q","items":[{"text":`, 400, "items[0].text: invalid JSON: unexpected end of JSON input"},
		{"malformed member name", `{"query":"q",5:1}`, 400, "invalid JSON body: invalid character '5' looking for beginning of object key string"},
		{"query not a string", `{"query":5}`, 400, "query: must be a string, got number"},
		{"item text not a string", `{"query":"q","items":[{"text":"a"},{"text":true}]}`, 400, "items[1].text: must be a string, got bool"},
		{"items not an array", `{"query":"q","items":{"text":"a"}}`, 400, "items: must be an array, got object"},
		{"item not an object", `{"query":"q","items":["a"]}`, 400, "items[0]: must be an object, got string"},
		{"options not an object", `{"query":"q","items":[{"text":"a"}],"options":[]}`, 400, "options: must be an object, got array"},
		{"bool not a bool", `{"query":"q","items":[{"text":"a"}],"options":{"return_timings":"yes"}}`, 400,
			"options.return_timings: must be a boolean, got string"},
		{"top_n fractional", `{"query":"q","items":[{"text":"a"}],"top_n":1.5}`, 400, "top_n: must be an integer in [0, 4294967295], got 1.5"},
		{"top_n too large", `{"query":"q","items":[{"text":"a"}],"topN":5000000000}`, 400, "topN: must be an integer in [0, 4294967295], got 5000000000"},
		{"field given twice", `{"query":"q","items":[{"text":"a"}],"top_n":1,"topN":2}`, 400, "topN: given twice"},
		{"the rerank routes' cache switch", `{"query":"q","items":[{"text":"a"}],"cache":false}`, 422,
			`cache: is not a /v1/score field: send "options": {"no_cache": true} to bypass the score cache`},
		// Ignored as unknown, a misplaced option would be scored with the default, silently.
		{"an option at the top level", `{"query":"q","items":[{"text":"a"}],"truncation":"TRUNCATION_NONE"}`, 422,
			`truncation: is a field of options, not of the request: send "options": {"truncation": …}`},
		{"an option at the top level, by its JSON name", `{"query":"q","items":[{"text":"a"}],"maxTokensPerItem":5}`, 422,
			`maxTokensPerItem: is a field of options, not of the request: send "options": {"max_tokens_per_item": …}`},
		{"not an object", `[{"query":"q"}]`, 400, "request body: must be a JSON object, got array"},
		{"unknown enum name", `{"query":"q","items":[{"text":"a"}],"options":{"truncation":"BOGUS"}}`, 422,
			`options.truncation: unknown value "BOGUS"`},
		{"unknown enum name beside an unknown field", `{"extra":1,"query":"q","items":[{"text":"a"}],"options":{"truncation":"BOGUS"}}`, 422,
			`options.truncation: unknown value "BOGUS"`},
		// A number is a valid proto3 JSON enum value; the core knows which numbers the enum defines.
		{"unknown enum number", `{"query":"q","items":[{"text":"a"}],"options":{"truncation":7}}`, 422, "options.truncation: unknown value 7"},
		{"trailing data", `{"query":"q","items":[{"text":"a"}]} x`, 400, "invalid JSON body: data after the top-level object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/score", tc.body, nil)
			msg, _ := decode(t, r.body)["error"].(map[string]any)["message"].(string)
			if r.code != tc.code || msg != tc.want {
				t.Errorf("%d %q, want %d %q", r.code, msg, tc.code, tc.want)
			}
		})
	}
}

// TestScoreDecodeAccepts: what protojson accepts still decodes, with unknown fields ignored.
func TestScoreDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *relevancev1.ScoreRequest
	}{
		{"camelCase names, quoted and exponent integers, nulls",
			`{"requestId":"r","query":"q","items":[{"text":"a"}],"topN":"2","timeout_ms":1e2,"options":null,"instruction":null}`,
			&relevancev1.ScoreRequest{RequestId: "r", Query: "q", Items: []*relevancev1.Item{{Text: "a"}}, TopN: 2, TimeoutMs: 100}},
		{"unknown fields at every depth",
			`{"query":"q","x":[1,{"y":null}],"items":[{"text":"a","z":{"w":[]}}],"options":{"truncation":"TRUNCATION_NONE","v":true}}`,
			&relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "a"}},
				Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}}},
		{"enum by number", `{"query":"q","items":[{"text":"a"}],"options":{"truncation":1}}`,
			&relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "a"}},
				Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_END}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeScore([]byte(tc.body), 0)
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
		})
	}
}

func TestPathAt(t *testing.T) {
	body := `{"a":1,"b":[10,{"c":"xyz","d":[[],[5]]}],"e":{},"f":"g"}`
	tests := []struct {
		at   string // the first occurrence of this text in body
		want string
	}{
		{`{"a"`, ""},
		{`"a"`, "a"},
		{`1,`, "a"},
		{`10`, "b[0]"},
		{`{"c"`, "b[1]"},
		{`yz`, "b[1].c"},
		{`[[]`, "b[1].d"},
		{`[],`, "b[1].d[0]"},
		{`5`, "b[1].d[1][0]"},
		{`{}`, "e"},
		{`"g"`, "f"},
	}
	for _, tc := range tests {
		off := strings.Index(body, tc.at)
		if got := pathAt([]byte(body), int64(off)); got != tc.want {
			t.Errorf("pathAt(%q at %d) = %q, want %q", tc.at, off, got, tc.want)
		}
	}
}

func TestVocabulary(t *testing.T) {
	for canonical, want := range map[string]string{
		"items":                       "documents",
		"items[12]":                   "documents[12]",
		"items[3].text":               "documents[3]",
		"items[3].id":                 "items[3].id", // not listed: the canonical name
		"query":                       "query",
		"options.max_tokens_per_item": "max_tokens_per_doc",
		"request_id":                  "X-Request-Id",
		"items[":                      "items[",
	} {
		if got := rerankVocabulary.name(canonical); got != want {
			t.Errorf("rerank name(%q) = %q, want %q", canonical, got, want)
		}
	}
	if got := vocabulary(nil).name("items[3].text"); got != "items[3].text" {
		t.Errorf("nil vocabulary renamed items[3].text to %q", got)
	}
}
