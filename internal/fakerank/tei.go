package fakerank

import (
	"fmt"
	"net/http"
)

// Hugging Face Text Embeddings Inference, from huggingface/text-embeddings-inference:
//   - router/src/http/types.rs: RerankRequest {query, texts, truncate?, truncation_direction,
//     raw_scores (default false), return_text (default false)}; RerankResponse is a bare array
//     of Rank {index, text?, score};
//   - router/src/http/server.rs (rerank): POST /rerank; "`texts` cannot be empty" (Empty, 400);
//     more texts than --max-client-batch-size (default 32) fails with Validation "batch size N >
//     maximum allowed batch size M"; every text is scored and the ranks are sorted by score, best
//     first (no top_n); GET /health (503 {"error": "unhealthy", "error_type": "Unhealthy"});
//   - router/src/lib.rs: ErrorResponse {error, error_type}, error_type → status: Unhealthy 503,
//     Backend 424, Overloaded 429, Tokenizer 422, Validation 413, Empty 400;
//   - core/src/tokenization.rs: an input over --max-input-length with truncate false is a
//     Validation error ("`inputs` must have less than M tokens. Given: N");
//   - a single-label classifier's score is its logit with raw_scores, else its sigmoid;
//   - core/src/queue.rs, router/src/prometheus.rs: te_queue_size, te_batch_current_size;
//   - router/src/lib.rs (Info), router/src/http/server.rs (get_model_info): GET /info {model_id,
//     model_sha, model_dtype, model_type {reranker {id2label, label2id}}, max_client_batch_size, …}.
func teiDialect() *dialect {
	return &dialect{
		rerankPaths: []string{"/rerank"},
		healthPath:  "/health",
		maxItems:    32,
		template:    TemplateOff,
		parse: func(s *Server, body map[string]any) (parsed, *httpError) {
			unprocessable := func(msg string) (parsed, *httpError) {
				// axum's Json extractor rejects a body that does not fit RerankRequest with 422, as text.
				return parsed{}, &httpError{http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: " + msg}
			}
			q, present, ok := str(body, "query")
			if !present || !ok {
				return unprocessable("missing field `query`")
			}
			texts, present, ok := strList(body, "texts")
			if !present || !ok {
				return unprocessable("missing field `texts`")
			}
			raw, ok1 := boolField(body, "raw_scores", false)
			echo, ok2 := boolField(body, "return_text", false)
			if !ok1 || !ok2 {
				return unprocessable("invalid type: expected a boolean")
			}
			if len(texts) == 0 {
				return parsed{}, &httpError{http.StatusBadRequest, teiError(http.StatusBadRequest, "`texts` cannot be empty")}
			}
			if len(texts) > s.opts.MaxItems {
				return parsed{}, &httpError{http.StatusRequestEntityTooLarge, teiError(http.StatusRequestEntityTooLarge,
					fmt.Sprintf("batch size %d > maximum allowed batch size %d", len(texts), s.opts.MaxItems))}
			}
			truncate, _ := boolField(body, "truncate", false)
			return parsed{query: q, docs: texts, raw: raw, echo: echo, truncate: truncate}, nil
		},
		limit: func(s *Server, p parsed, prompts []string) *httpError {
			if p.truncate {
				return nil
			}
			for _, text := range prompts {
				if n := tokens(text); s.opts.MaxTokens > 0 && n > s.opts.MaxTokens {
					return &httpError{http.StatusRequestEntityTooLarge, teiError(http.StatusRequestEntityTooLarge,
						fmt.Sprintf("`inputs` must have less than %d tokens. Given: %d", s.opts.MaxTokens, n))}
				}
			}
			return nil
		},
		probability: func(p parsed) bool { return !p.raw },
		entry: func(p parsed, index int, score float64, doc string) map[string]any {
			e := map[string]any{"index": index, "score": float32(score)}
			if p.echo {
				e["text"] = doc
			}
			return e
		},
		envelope:  func(_ *Server, _ parsed, entries []any, _ int) any { return entries },
		errorBody: teiError,
		healthOK:  func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) },
		healthDown: func(w http.ResponseWriter) {
			writeJSON(w, http.StatusServiceUnavailable, teiError(http.StatusServiceUnavailable, "unhealthy"))
		},
		load: func(s *Server, mux *http.ServeMux) {
			s.gauges(mux, "te_queue_size", "te_batch_current_size", nil)
		},
		scoreKey: func(parsed) string { return "score" },
		models: func(s *Server, mux *http.ServeMux) {
			mux.HandleFunc("GET /info", s.track(func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, map[string]any{
					"model_id": s.opts.Model, "model_sha": nil, "model_dtype": "float16",
					"model_type":            map[string]any{"reranker": map[string]any{"id2label": map[string]any{"0": "LABEL_0"}, "label2id": map[string]any{"LABEL_0": 0}}},
					"max_client_batch_size": s.opts.MaxItems, "max_input_length": s.opts.MaxTokens,
				})
			}))
		},
	}
}

func teiError(status int, msg string) any {
	typ := map[int]string{503: "Unhealthy", 424: "Backend", 429: "Overloaded", 422: "Tokenizer", 413: "Validation", 400: "Empty"}[status]
	if typ == "" {
		typ = "Backend"
	}
	return map[string]any{"error": msg, "error_type": typ}
}
