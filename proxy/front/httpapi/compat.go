package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
)

// Two more wire formats that rerank clients speak, served beside the Jina/vLLM and Cohere ones:
//
//   - Hugging Face TEI's rerank ({"query", "texts", "truncate", "truncation_direction",
//     "raw_scores", "return_text"} → a bare array of {"index", "score", "text"?}, best first), on
//     /rerank and /v1/rerank when the body has "texts" and no "documents" (as llama.cpp's server
//     tells them apart). Haystack's, Milvus's and Dify's TEI rankers send it.
//   - vLLM's score API ({"model", "text_1", "text_2"}, each a string or a list → {"data":
//     [{"index", "object": "score", "score"}], …} in input order), on /score, and on /v1/score
//     when the body has "text_1" (otherwise /v1/score is the JSON mirror of Ranker/Score).
//
// Both are mapped onto one or more ScoreRequests for the core, so admission, the cache, the
// model check and the errors' field names work as on every other route.

// teiRequest is TEI's rerank body. Pointers tell "absent" from zero.
type teiRequest struct {
	Query               *string    `json:"query"`
	Texts               []document `json:"texts"`
	Truncate            *bool      `json:"truncate"`
	TruncationDirection *string    `json:"truncation_direction"`
	RawScores           *bool      `json:"raw_scores"`
	ReturnText          *bool      `json:"return_text"`
	// Extensions, as on the other rerank routes.
	Instruction string `json:"instruction"`
	Cache       *bool  `json:"cache"`
}

// teiVocabulary names the core's fields as TEI's clients know them.
var teiVocabulary = vocabulary{
	"items":        "texts",
	"items[]":      "texts[]",
	"items[].text": "texts[]",
	"request_id":   HeaderRequestID,
}

// teiRank is one entry of TEI's reply.
type teiRank struct {
	Index int     `json:"index"`
	Score float64 `json:"score"`
	Text  *string `json:"text,omitempty"`
}

// teiErrorBody is TEI's error shape.
type teiErrorBody struct {
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
}

// teiError answers as TEI does: {"error", "error_type"}, the type one of TEI's (validation,
// overloaded, backend, …) by status.
func teiError(f front.Failure) any {
	t := "backend"
	switch {
	case f.HTTPStatus == http.StatusTooManyRequests || f.HTTPStatus == http.StatusServiceUnavailable:
		t = "overloaded"
	case f.HTTPStatus == http.StatusNotFound:
		t = "not_found"
	case f.HTTPStatus == http.StatusGatewayTimeout:
		t = "timeout"
	case f.HTTPStatus >= 400 && f.HTTPStatus < 500:
		t = "validation"
	}
	return teiErrorBody{Error: f.Message, ErrorType: t}
}

// hasKey reports whether body, a JSON object, has the top-level key. The byte search first keeps
// the common case (a body without the key anywhere) to one scan; a hit is confirmed by decoding
// the top level, so a key inside a document's text does not count.
func hasKey(body []byte, key string) bool {
	if !bytes.Contains(body, []byte(`"`+key+`"`)) {
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	_, ok := top[key]
	return ok
}

// isTEI reports whether a body sent to a Jina-dialect route is TEI's: "texts" and no
// "documents".
func isTEI(body []byte) bool {
	return hasKey(body, "texts") && !hasKey(body, "documents")
}

// parseTEI decodes a TEI body into a ScoreRequest and the texts.
func parseTEI(body []byte) (*relevancev1.ScoreRequest, []string, teiRequest, error) {
	var tr teiRequest
	if err := checkUTF8(body); err != nil {
		return nil, nil, tr, err
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, nil, tr, jsonError(err)
	}
	switch {
	case tr.Query == nil:
		return nil, nil, tr, unacceptable("query", "is required")
	case tr.Texts == nil:
		return nil, nil, tr, unacceptable("texts", "is required")
	}
	// TEI refuses a text over the model's limit unless truncate is true, and then cuts it from
	// the side truncation_direction names. The nodes cut documents at their end only.
	trunc := relevancev1.Truncation_TRUNCATION_NONE
	if tr.Truncate != nil && *tr.Truncate {
		trunc = relevancev1.Truncation_TRUNCATION_END
	}
	if d := tr.TruncationDirection; d != nil && !strings.EqualFold(*d, "right") {
		if !strings.EqualFold(*d, "left") {
			return nil, nil, tr, unacceptable("truncation_direction", "must be right or left, got %q", *d)
		}
		if trunc != relevancev1.Truncation_TRUNCATION_NONE {
			return nil, nil, tr, unacceptable("truncation_direction", "left is not supported: documents are cut at their end (right)")
		}
	}
	texts, items, err := itemsOf("texts", tr.Texts)
	if err != nil {
		return nil, nil, tr, err
	}
	req := &relevancev1.ScoreRequest{Query: *tr.Query, Instruction: tr.Instruction, Items: items,
		Options: &relevancev1.ScoreOptions{Truncation: trunc, NoCache: tr.Cache != nil && !*tr.Cache}}
	return req, texts, tr, nil
}

// serveTEI answers a TEI rerank body on a Jina-dialect route, with TEI's names and errors.
func (s *Server) serveTEI(ctx *fasthttp.RequestCtx, rt *route) {
	tei := *rt
	tei.vocab, tei.errShape = teiVocabulary, teiError
	req, texts, tr, err := parseTEI(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, tei.errShape, failureOf(err))
		return
	}
	resp, ok := s.score(ctx, &tei, req)
	if !ok {
		return
	}
	results, err := rankedResults(resp, texts, false, tr.RawScores != nil && *tr.RawScores)
	if err != nil {
		s.internalError(ctx, &tei, err)
		return
	}
	withText := tr.ReturnText != nil && *tr.ReturnText
	out := make([]teiRank, len(results))
	for k, r := range results {
		out[k] = teiRank{Index: r.Index, Score: r.RelevanceScore}
		if withText {
			out[k].Text = &texts[r.Index]
		}
	}
	s.writeJSON(ctx, &tei, http.StatusOK, out)
}

// vllmScoreRequest is vLLM's score body. text_1 and text_2 are each a string or a list of
// strings.
type vllmScoreRequest struct {
	Model                string          `json:"model"`
	Text1                json.RawMessage `json:"text_1"`
	Text2                json.RawMessage `json:"text_2"`
	TruncatePromptTokens *int64          `json:"truncate_prompt_tokens"`
	// Extensions, as on the rerank routes.
	Instruction string `json:"instruction"`
	Cache       *bool  `json:"cache"`
}

// vllmScoreVocabulary names the core's fields as vLLM's score clients know them.
var vllmScoreVocabulary = vocabulary{
	"query":        "text_1",
	"items":        "text_2",
	"items[]":      "text_2[]",
	"items[].text": "text_2[]",
	"request_id":   HeaderRequestID,
}

// vllmScoreResponse is vLLM's score reply.
type vllmScoreResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []vllmScoreData `json:"data"`
	Usage   vllmUsage       `json:"usage"`
}

type vllmScoreData struct {
	Index  int     `json:"index"`
	Object string  `json:"object"`
	Score  float64 `json:"score"`
}

type vllmUsage struct {
	PromptTokens     uint64 `json:"prompt_tokens"`
	TotalTokens      uint64 `json:"total_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
}

// stringOrList decodes a JSON string or list of strings.
func stringOrList(field string, raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, unacceptable(field, "is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, malformed(field, "invalid string: %v", err)
		}
		return []string{s}, nil
	}
	if raw[0] != '[' {
		return nil, malformed(field, "must be a string or a list of strings, got %s", jsonKind(raw[0]))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, malformed(field, "must be a string or a list of strings")
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '"' {
			k := "nothing"
			if len(e) > 0 {
				k = jsonKind(e[0])
			}
			return nil, malformed(fmt.Sprintf("%s[%d]", field, i), "must be a string, got %s", k)
		}
		if err := json.Unmarshal(e, &out[i]); err != nil {
			return nil, malformed(fmt.Sprintf("%s[%d]", field, i), "invalid string: %v", err)
		}
	}
	return out, nil
}

// Bounds on a vLLM score request with several text_1: each distinct one is a request of its own
// to the core (planned, admitted and split over the nodes), so a body of a thousand one-pair
// queries would be a thousand requests. Up to maxScoreQueries are accepted, run at most
// scoreQueriesAtOnce at a time.
const (
	maxScoreQueries    = 64
	scoreQueriesAtOnce = 8
)

// scoreGroup is one query's share of a vLLM score request: the pairs it is text_1 of.
type scoreGroup struct {
	req   *relevancev1.ScoreRequest
	pairs []int // the pair index of each item
}

// parseVLLMScore decodes a vLLM score body into one ScoreRequest per distinct query (text_1 one
// string, or one per pair) and the number of pairs. vLLM pairs a single text_1 with every
// text_2, and lists of equal length element by element.
func parseVLLMScore(body []byte) ([]scoreGroup, int, error) {
	var vr vllmScoreRequest
	if err := checkUTF8(body); err != nil {
		return nil, 0, err
	}
	if err := json.Unmarshal(body, &vr); err != nil {
		return nil, 0, jsonError(err)
	}
	q, err := stringOrList("text_1", vr.Text1)
	if err != nil {
		return nil, 0, err
	}
	docs, err := stringOrList("text_2", vr.Text2)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case len(q) == 0:
		return nil, 0, unacceptable("text_1", "must not be empty")
	case len(docs) == 0:
		return nil, 0, unacceptable("text_2", "must not be empty")
	case len(q) > 1 && len(q) != len(docs):
		return nil, 0, unacceptable("text_1", "has %d texts and text_2 %d: give one text_1 or as many as text_2", len(q), len(docs))
	case vr.TruncatePromptTokens != nil && *vr.TruncatePromptTokens > 0:
		// vLLM cuts the whole prompt to that many tokens; the nodes cut documents only, so a
		// silently different cut is refused rather than scored.
		return nil, 0, unacceptable("truncate_prompt_tokens", "is not supported: documents are cut at their end to fit the model (max_tokens_per_doc on /v1/rerank bounds them)")
	}
	var groups []scoreGroup
	byQuery := map[string]int{}
	for i, d := range docs {
		query := q[0]
		if len(q) > 1 {
			query = q[i]
		}
		g, ok := byQuery[query]
		if !ok {
			if len(groups) == maxScoreQueries {
				return nil, 0, unacceptable("text_1", "has more than %d distinct texts: send them in separate requests", maxScoreQueries)
			}
			g = len(groups)
			byQuery[query] = g
			req := &relevancev1.ScoreRequest{Query: query, Instruction: vr.Instruction, Model: vr.Model}
			if vr.Cache != nil && !*vr.Cache {
				req.Options = &relevancev1.ScoreOptions{NoCache: true}
			}
			groups = append(groups, scoreGroup{req: req})
		}
		groups[g].req.Items = append(groups[g].req.Items, &relevancev1.Item{Text: d})
		groups[g].pairs = append(groups[g].pairs, i)
	}
	return groups, len(docs), nil
}

// serveVLLMScore answers vLLM's score API: each distinct text_1 is one core request (run at
// once, each under the request's budget), the scores put back in pair order.
func (s *Server) serveVLLMScore(ctx *fasthttp.RequestCtx, rt *route) {
	vr := *rt
	vr.vocab = vllmScoreVocabulary
	groups, n, err := parseVLLMScore(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, vr.errShape, failureOf(err))
		return
	}
	type result struct {
		resp *relevancev1.ScoreResponse
		err  error
	}
	for g := range groups {
		if err := fromHeaders(ctx, groups[g].req); err != nil {
			s.writeError(ctx, vr.errShape, failureOf(err))
			return
		}
		if id := groups[g].req.GetRequestId(); id != "" && len(groups) > 1 {
			groups[g].req.RequestId = fmt.Sprintf("%s-%d", id, g) // one id per core request
		}
	}
	results := make([]result, len(groups))
	if len(groups) == 1 {
		results[0].resp, results[0].err = s.run(groups[0].req)
	} else {
		var wg sync.WaitGroup
		slots := make(chan struct{}, scoreQueriesAtOnce)
		for g := range groups {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				results[g].resp, results[g].err = s.run(groups[g].req)
			})
		}
		wg.Wait()
	}
	data := make([]vllmScoreData, n)
	var usage uint64
	var model, id string
	for g, r := range results {
		if r.err != nil {
			s.writeError(ctx, vr.errShape, s.failure(&vr, groups[g].req, r.err))
			return
		}
		scores := r.resp.GetScores()
		if len(scores) != len(groups[g].pairs) {
			s.internalError(ctx, &vr, fmt.Errorf("core returned %d scores for %d texts", len(scores), len(groups[g].pairs)))
			return
		}
		for k, p := range groups[g].pairs {
			v := scores[k].GetScore()
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				s.internalError(ctx, &vr, fmt.Errorf("core returned a non-finite score for text_2[%d]", p))
				return
			}
			data[p] = vllmScoreData{Index: p, Object: "score", Score: shortFloat(v)}
		}
		usage += r.resp.GetUsage().GetPromptTokens()
		model = r.resp.GetModel()
		if id == "" {
			id = r.resp.GetRequestId()
		}
	}
	if h := ctx.Request.Header.Peek(HeaderRequestID); len(h) > 0 {
		id = string(h) // the caller's id, not one group's
	} else if id == "" {
		id = s.responseID(groups[0].req, results[0].resp)
	}
	ctx.Response.Header.Set(HeaderRequestID, id)
	s.writeJSON(ctx, &vr, http.StatusOK, vllmScoreResponse{ID: "score-" + id, Object: "list", Created: time.Now().Unix(),
		Model: model, Data: data, Usage: vllmUsage{PromptTokens: usage, TotalTokens: usage}})
}
