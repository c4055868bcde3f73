package fakerank

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// SGLang, from sgl-project/sglang:
//   - python/sglang/srt/entrypoints/openai/protocol.py: V1RerankReqInput {query, documents,
//     instruct?, top_n? (must be > 0), return_documents (default true)}; RerankResponse {score,
//     document? (left out when None), index, meta_info?}; the reply is a bare JSON array;
//   - python/sglang/srt/entrypoints/openai/serving_rerank.py: POST /v1/rerank; validation
//     ("Query cannot be empty", "Documents cannot be empty", "Each document must be a non-empty
//     string"); a Qwen3 reranker chat template (examples/chat_template/qwen3_reranker.jinja)
//     selects the decoder path, scoring p(yes)/(p(yes)+p(no)) — sigmoid(logit yes − no) — with
//     `instruct` rendered into the template; otherwise [query, document] pairs go to a
//     cross-encoder; results sorted by score, best first, then cut to top_n;
//   - python/sglang/srt/entrypoints/openai/serving_base.py: errors as ErrorResponse {object:
//     "error", message, type, param, code} (400 "BadRequest" for validation);
//   - GET /health; GET /metrics with --enable-metrics (sglang:num_queue_reqs,
//     sglang:num_running_reqs).
func sglangDialect() *dialect {
	return &dialect{
		rerankPaths: []string{"/v1/rerank"},
		healthPath:  "/health",
		template:    TemplateOn,
		parse: func(s *Server, body map[string]any) (parsed, *httpError) {
			bad := func(msg string) (parsed, *httpError) {
				return parsed{}, &httpError{http.StatusBadRequest, sglangError(http.StatusBadRequest, msg)}
			}
			q, present, ok := str(body, "query")
			if !present || !ok {
				return bad("query: Field required")
			}
			docs, present, ok := strList(body, "documents")
			if !present || !ok {
				return bad("documents: Field required")
			}
			instruct, _, ok := str(body, "instruct")
			if !ok {
				return bad("instruct: Input should be a valid string")
			}
			topN, present, ok := intField(body, "top_n")
			if !ok || (present && topN < 1) {
				return bad("Value error, parameter top_n should be larger than 0.")
			}
			echo, ok := boolField(body, "return_documents", true)
			if !ok {
				return bad("return_documents: Input should be a valid boolean")
			}
			switch {
			case q == "":
				return bad("Query cannot be empty")
			case strings.TrimSpace(q) == "":
				return bad("Query cannot be empty or whitespace only")
			case len(docs) == 0:
				return bad("Documents cannot be empty")
			}
			for _, d := range docs {
				if d == "" {
					return bad("Each document must be a non-empty string")
				}
				if strings.TrimSpace(d) == "" {
					return bad("Each document cannot be empty or whitespace only")
				}
			}
			return parsed{query: q, instruct: instruct, docs: docs, topN: topN, echo: echo}, nil
		},
		limit: func(s *Server, _ parsed, prompts []string) *httpError {
			for _, text := range prompts {
				if n := tokens(text); s.opts.MaxTokens > 0 && n > s.opts.MaxTokens {
					return &httpError{http.StatusBadRequest, sglangError(http.StatusBadRequest, fmt.Sprintf(
						"The input (%d tokens) is longer than the model's context length (%d tokens).", n, s.opts.MaxTokens))}
				}
			}
			return nil
		},
		render:      func(p parsed, doc string) string { return sglangRerank(p.instruct, p.query, doc) },
		probability: func(parsed) bool { return true },
		entry: func(p parsed, index int, score float64, doc string) map[string]any {
			e := map[string]any{"score": score, "index": index}
			if p.echo {
				e["document"] = doc
			}
			return e
		},
		envelope:   func(_ *Server, _ parsed, entries []any, _ int) any { return entries },
		errorBody:  sglangError,
		healthOK:   func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) },
		healthDown: func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		load: func(s *Server, mux *http.ServeMux) {
			s.gauges(mux, "sglang:num_queue_reqs", "sglang:num_running_reqs", prometheus.Labels{"model_name": s.opts.Model})
		},
		scoreKey: func(parsed) string { return "score" },
	}
}

func sglangError(status int, msg string) any {
	typ := "BadRequest"
	if status >= 500 {
		typ = "InternalServerError"
	} else if status != http.StatusBadRequest {
		typ = http.StatusText(status)
	}
	return map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status}
}
