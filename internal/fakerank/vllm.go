package fakerank

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM, from vllm-project/vllm:
//   - vllm/entrypoints/pooling/scoring/api_router.py: POST /rerank, /v1/rerank, /v2/rerank;
//   - vllm/entrypoints/pooling/scoring/protocol.py: RerankRequest {model?, query, documents,
//     top_n (0: all), truncate_prompt_tokens?, use_activation?}; RerankResponse {id, model,
//     usage {prompt_tokens, total_tokens}, results [{index, document {text}, relevance_score}]};
//   - vllm/entrypoints/pooling/scoring/serving.py: results sorted by relevance_score, best
//     first, then cut to top_n; the document is always echoed;
//   - vllm/entrypoints/pooling/scoring/io_processor.py (CrossEncoderIOProcessor.get_score_prompt):
//     with --chat-template the pair is rendered by it (examples/pooling/score/template/
//     qwen3_reranker.jinja), otherwise an "LLM as reranker" model reads query + document;
//   - vllm/model_executor/models/adapters.py (from_2_way_softmax): Qwen3-Reranker's yes/no rows
//     become one logit, and the pooler's default activation makes relevance_score its sigmoid;
//   - vllm/entrypoints/openai/engine/protocol.py: ErrorResponse {error {message, type, param, code}};
//   - GET /health (200), GET /metrics (vllm:num_requests_waiting, vllm:num_requests_running);
//   - vllm/entrypoints/openai/models/serving.py: GET /v1/models {object: "list", data: [{id,
//     object: "model", root, max_model_len, …}]}; a request naming another model is 404 "The
//     model `m` does not exist." (check_model).
func vllmDialect() *dialect {
	return &dialect{
		rerankPaths: []string{"/rerank", "/v1/rerank", "/v2/rerank"},
		healthPath:  "/health",
		template:    TemplateOff,
		parse: func(s *Server, body map[string]any) (parsed, *httpError) {
			bad := func(msg string) (parsed, *httpError) {
				return parsed{}, &httpError{http.StatusBadRequest, vllmError(http.StatusBadRequest, msg)}
			}
			if m, present, ok := str(body, "model"); present && (!ok || m != s.opts.Model) {
				return parsed{}, &httpError{http.StatusNotFound, vllmError(http.StatusNotFound, fmt.Sprintf("The model `%v` does not exist.", body["model"]))}
			}
			q, present, ok := str(body, "query")
			if !present || !ok {
				return bad("query: Field required (a string)")
			}
			docs, present, ok := strList(body, "documents")
			if !present || !ok {
				return bad("documents: Field required (a list of strings)")
			}
			if len(docs) == 0 {
				return bad("At least one text_pair element must be given")
			}
			topN, _, ok := intField(body, "top_n")
			if !ok {
				return bad("top_n: Input should be a valid integer")
			}
			return parsed{query: q, docs: docs, topN: topN, echo: true}, nil
		},
		limit: func(s *Server, p parsed, prompts []string) *httpError {
			for _, text := range prompts {
				if n := tokens(text); s.opts.MaxTokens > 0 && n > s.opts.MaxTokens {
					return &httpError{http.StatusBadRequest, vllmError(http.StatusBadRequest, fmt.Sprintf(
						"This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
						s.opts.MaxTokens, n))}
				}
			}
			return nil
		},
		render:      func(p parsed, doc string) string { return qwen3Rerank(p.query, doc) },
		probability: func(parsed) bool { return true },
		entry: func(_ parsed, index int, score float64, doc string) map[string]any {
			return map[string]any{"index": index, "document": map[string]any{"text": doc}, "relevance_score": score}
		},
		envelope: func(s *Server, _ parsed, entries []any, promptTokens int) any {
			return map[string]any{
				"id":      fmt.Sprintf("score-%d", s.calls.Load()),
				"model":   s.opts.Model,
				"usage":   map[string]any{"prompt_tokens": promptTokens, "total_tokens": promptTokens},
				"results": entries,
			}
		},
		errorBody: vllmError,
		healthOK:  func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) },
		healthDown: func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		load: func(s *Server, mux *http.ServeMux) {
			s.gauges(mux, "vllm:num_requests_waiting", "vllm:num_requests_running", prometheus.Labels{"model_name": s.opts.Model, "engine": "0"})
		},
		scoreKey: func(parsed) string { return "relevance_score" },
		models: func(s *Server, mux *http.ServeMux) {
			mux.HandleFunc("GET /v1/models", s.track(func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
					"id": s.opts.Model, "object": "model", "owned_by": "vllm", "root": s.opts.Model, "max_model_len": s.opts.MaxTokens,
				}}})
			}))
		},
	}
}

func vllmError(status int, msg string) any {
	typ := map[int]string{400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError", 501: "NotImplementedError"}[status]
	if typ == "" {
		typ = http.StatusText(status)
	}
	if status >= 500 && status != 501 {
		typ = "InternalServerError"
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}}
}
