package fakerank

import (
	"fmt"
	"net/http"
	"strings"
)

// llama.cpp server (llama-server --reranking), from ggml-org/llama.cpp:
//   - tools/server/server.cpp: POST /rerank, /reranking, /v1/rerank, /v1/reranking; GET /health
//     (200 {"status": "ok"}; 503 unavailable_error "Loading model"); GET /metrics with --metrics
//     (llamacpp:requests_processing, llamacpp:requests_deferred), else 501;
//   - tools/server/server-context.cpp (handle_rerank): "query" must be a string, "documents"
//     (or "texts", which switches to TEI's reply format) a non-empty string array, top_n
//     defaults to all;
//   - tools/server/server-common.cpp: format_prompt_rerank substitutes {query} and {document}
//     into the GGUF's "rerank" chat template when it has one, else joins the two (with BOS/EOS/SEP
//     only where the vocabulary asks for them; Qwen3's asks for none); format_response_rerank
//     answers {model, object: "list", usage, results [{index, relevance_score}]} (TEI format:
//     [{index, score, text?}]) sorted by score, best first, cut to top_n;
//     format_error_response gives {"error": {code, message, type}};
//   - a pair longer than the physical batch fails with HTTP 500 server_error "input (N tokens)
//     is too large to process. increase the physical batch size (current batch size: B)";
//   - src/llama-graph.cpp (build_pooling, RANK): for Qwen3 the yes/no head (convert_hf_to_gguf.py
//     stacks the "yes" row first) goes through a softmax and the score is P(yes).
func llamacppDialect() *dialect {
	return &dialect{
		rerankPaths: []string{"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"},
		healthPath:  "/health",
		maxTokens:   512, // llama-server's default n_ubatch
		template:    TemplateOn,
		parse: func(_ *Server, body map[string]any) (parsed, *httpError) {
			bad := func(msg string) (parsed, *httpError) {
				return parsed{}, &httpError{http.StatusBadRequest, llamacppError(http.StatusBadRequest, msg)}
			}
			_, tei := body["texts"]
			q, present, ok := str(body, "query")
			if !present {
				return bad(`"query" must be provided`)
			}
			if !ok {
				return bad(`"query" must be a string`)
			}
			docs, _, ok := strList(body, "documents")
			if docs == nil && ok {
				docs, _, ok = strList(body, "texts")
			}
			if !ok || len(docs) == 0 {
				return bad(`"documents" must be a non-empty string array`)
			}
			topN, present, ok := intField(body, "top_n")
			if !ok || !present {
				topN = len(docs)
			}
			echo, _ := boolField(body, "return_text", false)
			return parsed{query: q, docs: docs, topN: topN, echo: tei && echo, teiFormat: tei}, nil
		},
		limit: func(s *Server, _ parsed, prompts []string) *httpError {
			for _, text := range prompts {
				if n := tokens(text); s.opts.MaxTokens > 0 && n > s.opts.MaxTokens {
					return &httpError{http.StatusInternalServerError, llamacppError(http.StatusInternalServerError, fmt.Sprintf(
						"input (%d tokens) is too large to process. increase the physical batch size (current batch size: %d)", n, s.opts.MaxTokens))}
				}
			}
			return nil
		},
		render: func(p parsed, doc string) string {
			// string_replace_all, {query} first then {document}, as llama-server does.
			return strings.ReplaceAll(strings.ReplaceAll(qwen3RerankTemplate, "{query}", p.query), "{document}", doc)
		},
		probability: func(parsed) bool { return true },
		entry: func(p parsed, index int, score float64, doc string) map[string]any {
			if p.teiFormat {
				e := map[string]any{"index": index, "score": score}
				if p.echo {
					e["text"] = doc
				}
				return e
			}
			return map[string]any{"index": index, "relevance_score": score}
		},
		envelope: func(s *Server, p parsed, entries []any, promptTokens int) any {
			if p.teiFormat {
				return entries
			}
			return map[string]any{
				"model":   s.opts.Model,
				"object":  "list",
				"usage":   map[string]any{"prompt_tokens": promptTokens, "total_tokens": promptTokens},
				"results": entries,
			}
		},
		errorBody: llamacppError,
		healthOK:  func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, map[string]any{"status": "ok"}) },
		healthDown: func(w http.ResponseWriter) {
			writeJSON(w, http.StatusServiceUnavailable, llamacppError(http.StatusServiceUnavailable, "Loading model"))
		},
		load: func(s *Server, mux *http.ServeMux) {
			if s.opts.NoMetrics {
				mux.HandleFunc("GET /metrics", s.track(func(w http.ResponseWriter, _ *http.Request) {
					writeJSON(w, http.StatusNotImplemented, llamacppError(http.StatusNotImplemented,
						"This server does not support metrics endpoint. Start it with `--metrics`"))
				}))
				return
			}
			s.gauges(mux, "llamacpp:requests_deferred", "llamacpp:requests_processing", nil)
		},
		scoreKey: func(p parsed) string {
			if p.teiFormat {
				return "score"
			}
			return "relevance_score"
		},
	}
}

func llamacppError(status int, msg string) any {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 501: "not_supported_error", 503: "unavailable_error",
	}[status]
	if typ == "" {
		typ = "server_error"
	}
	return map[string]any{"error": map[string]any{"code": status, "message": msg, "type": typ}}
}
