package fakerank

import (
	"fmt"
	"net/http"
	"time"
)

// Infinity (infinity_emb v2), from michaelfeil/infinity:
//   - libs/infinity_emb/infinity_emb/fastapi_schemas/pymodels.py: RerankInput {query, documents
//     (1…2048 strings, ITEMS_LIMIT), return_documents (false), raw_scores (false), model, top_n
//     (> 0)}; ReRankResult {object: "rerank", results [{relevance_score, index, document?}],
//     model, usage {prompt_tokens, total_tokens}, id, created};
//   - libs/infinity_emb/infinity_emb/inference/batch_handler.py (rerank): the cross-encoder's
//     logit, through a sigmoid unless raw_scores; sorted by score, best first, cut to top_n;
//   - libs/infinity_emb/infinity_emb/infinity_server.py: POST /rerank (under --url-prefix),
//     GET /health {"unix": t}, GET /models {data: [{id, stats {queue_fraction, queue_absolute,
//     results_pending, batch_size}, …}]}; "model overloaded" 429 and errors as
//     fastapi_schemas/errors.py OpenAIException {error {message, type, param, code}}; a body
//     that fails RerankInput is FastAPI's 422 {"detail": [{type, loc, msg, …}]}.
func infinityDialect() *dialect {
	return &dialect{
		rerankPaths: []string{"/rerank"},
		healthPath:  "/health",
		maxItems:    2048,
		template:    TemplateOff,
		parse: func(s *Server, body map[string]any) (parsed, *httpError) {
			invalid := func(typ string, loc string, msg string, ctx map[string]any) (parsed, *httpError) {
				d := map[string]any{"type": typ, "loc": []any{"body", loc}, "msg": msg}
				if ctx != nil {
					d["ctx"] = ctx
				}
				return parsed{}, &httpError{http.StatusUnprocessableEntity, map[string]any{"detail": []any{d}}}
			}
			q, present, ok := str(body, "query")
			if !present {
				return invalid("missing", "query", "Field required", nil)
			}
			if !ok {
				return invalid("string_type", "query", "Input should be a valid string", nil)
			}
			docs, present, ok := strList(body, "documents")
			if !present {
				return invalid("missing", "documents", "Field required", nil)
			}
			if !ok {
				return invalid("list_type", "documents", "Input should be a valid list", nil)
			}
			if len(docs) < 1 {
				return invalid("too_short", "documents", "List should have at least 1 item after validation, not 0",
					map[string]any{"field_type": "List", "min_length": 1, "actual_length": 0})
			}
			if len(docs) > s.opts.MaxItems {
				return invalid("too_long", "documents",
					fmt.Sprintf("List should have at most %d items after validation, not %d", s.opts.MaxItems, len(docs)),
					map[string]any{"field_type": "List", "max_length": s.opts.MaxItems, "actual_length": len(docs)})
			}
			topN, present, ok := intField(body, "top_n")
			if !ok || (present && topN <= 0) {
				return invalid("greater_than", "top_n", "Input should be greater than 0", map[string]any{"gt": 0})
			}
			raw, ok1 := boolField(body, "raw_scores", false)
			echo, ok2 := boolField(body, "return_documents", false)
			if !ok1 || !ok2 {
				return invalid("bool_type", "raw_scores", "Input should be a valid boolean", nil)
			}
			if m, present, _ := str(body, "model"); present && m != "default/not-specified" && m != s.opts.Model {
				// As a server of several models (engine.py, AsyncEngineArray.__getitem__); one of
				// a single model would score with it whatever the name.
				return parsed{}, &httpError{http.StatusBadRequest, infinityError(http.StatusBadRequest,
					fmt.Sprintf("Invalid model: Engine for model name `%s` not found. Available model names are ['%s']", m, s.opts.Model))}
			}
			return parsed{query: q, docs: docs, topN: topN, raw: raw, echo: echo}, nil
		},
		probability: func(p parsed) bool { return !p.raw },
		entry: func(p parsed, index int, score float64, doc string) map[string]any {
			e := map[string]any{"relevance_score": score, "index": index}
			if p.echo {
				e["document"] = doc
			}
			return e
		},
		envelope: func(s *Server, _ parsed, entries []any, promptTokens int) any {
			return map[string]any{
				"object":  "rerank",
				"results": entries,
				"model":   s.opts.Model,
				"usage":   map[string]any{"prompt_tokens": promptTokens, "total_tokens": promptTokens},
				"id":      fmt.Sprintf("infinity-%d", s.calls.Load()),
				"created": time.Now().Unix(),
			}
		},
		errorBody: infinityError,
		healthOK: func(w http.ResponseWriter) {
			writeJSON(w, http.StatusOK, map[string]any{"unix": float64(time.Now().UnixNano()) / 1e9})
		},
		healthDown: func(w http.ResponseWriter) {
			writeJSON(w, http.StatusServiceUnavailable, infinityError(http.StatusServiceUnavailable, "model not ready"))
		},
		load: func(s *Server, mux *http.ServeMux) {
			if s.opts.NoMetrics || s.opts.NoModelList {
				return
			}
			mux.HandleFunc("GET /models", s.track(func(w http.ResponseWriter, _ *http.Request) {
				s.mu.Lock()
				waiting, running := s.waiting, s.running+float64(s.inflight.Load())
				s.mu.Unlock()
				writeJSON(w, http.StatusOK, map[string]any{
					"object": "list",
					"data": []any{map[string]any{
						"id": s.opts.Model, "object": "model", "owned_by": "infinity", "created": time.Now().Unix(),
						"backend": "torch", "capabilities": []string{"rerank"},
						"stats": map[string]any{"queue_fraction": waiting / 32000, "queue_absolute": waiting, "results_pending": running, "batch_size": 32},
					}},
				})
			}))
		},
		scoreKey: func(parsed) string { return "relevance_score" },
	}
}

func infinityError(status int, msg string) any {
	return map[string]any{"error": map[string]any{"message": msg, "type": nil, "param": nil, "code": status}}
}
