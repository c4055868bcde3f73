package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sync/errgroup"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/modelpin"
	"github.com/relevance-scoring/relevance/proxy/request"
)

// Two more wire formats that rerank clients speak, served beside the Jina/vLLM and Cohere ones:
//
//   - Hugging Face TEI's rerank ({"query", "texts", "truncate", "truncation_direction",
//     "raw_scores", "return_text"} → a bare array of {"index", "score", "text"?}, best first), on
//     /rerank and /v1/rerank when the body has "texts" and no "documents" (as llama.cpp's server
//     tells them apart). Haystack's, Milvus's and Dify's TEI rankers send it.
//   - vLLM's score API ({"model", "text_1", "text_2"}, each a string or a list, or the same
//     pairs as data_1 / data_2 or queries with documents or items → {"data": [{"index",
//     "object": "score", "score"}], …} in input order), on /score, and on /v1/score when the
//     body has "text_1", "data_1" or "queries" (otherwise /v1/score is the JSON mirror of
//     Ranker/Score).
//
// Both are mapped onto one or more ScoreRequests for the core, so admission, the cache, the
// model check and the errors' field names work as on every other route.

// teiRequest is TEI's rerank body. Pointers tell "absent" from zero.
type teiRequest struct {
	Query               *string      `json:"query"`
	Texts               documentList `json:"texts"`
	Truncate            *bool        `json:"truncate"`
	TruncationDirection *string      `json:"truncation_direction"`
	RawScores           *bool        `json:"raw_scores"`
	ReturnText          *bool        `json:"return_text"`
	// Extensions, as on the other rerank routes (TEI serves one model and has no model field;
	// a client that sends one gets the model check every route applies).
	Instruction string `json:"instruction"`
	Cache       *bool  `json:"cache"`
	Model       string `json:"model"`
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

// teiError answers as TEI does: {"error", "error_type"}, the type one of TEI's own (validation,
// overloaded, backend; TEI has no others that apply) by status: an unknown model is a
// validation error, a deadline the backend's.
func teiError(f front.Failure) any {
	t := "backend"
	switch {
	case f.HTTPStatus == http.StatusTooManyRequests || f.HTTPStatus == http.StatusServiceUnavailable:
		t = "overloaded"
	case f.HTTPStatus >= 400 && f.HTTPStatus < 500:
		t = "validation"
	}
	return teiErrorBody{Error: f.Message, ErrorType: t}
}

// isTEI reports whether a body sent to a Jina-dialect route is TEI's: "texts" and no
// "documents".
func isTEI(body []byte) bool {
	return hasKey(body, "texts") && !hasKey(body, "documents")
}

// parseTEI decodes a TEI body into a ScoreRequest and the texts.
func parseTEI(body []byte, maxItems int) (*relevancev1.ScoreRequest, []string, teiRequest, error) {
	tr := teiRequest{Texts: documentList{limit: maxItems}}
	if err := checkUTF8(body); err != nil {
		return nil, nil, tr, err
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, nil, tr, jsonError(err)
	}
	switch {
	case tr.Query == nil:
		return nil, nil, tr, unacceptable("query", "is required")
	case !tr.Texts.present:
		return nil, nil, tr, unacceptable("texts", "is required")
	case tr.Texts.overLimit():
		return nil, nil, tr, unacceptable("texts", "more than %d items, limit %d", tr.Texts.limit, tr.Texts.limit)
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
	texts, items, err := itemsOf("texts", tr.Texts.docs)
	if err != nil {
		return nil, nil, tr, err
	}
	req := &relevancev1.ScoreRequest{Query: *tr.Query, Instruction: tr.Instruction, Items: items, Model: tr.Model,
		Options: &relevancev1.ScoreOptions{Truncation: trunc, NoCache: tr.Cache != nil && !*tr.Cache}}
	return req, texts, tr, nil
}

// serveTEI answers a TEI rerank body on a Jina-dialect route, with TEI's names and errors.
func (s *Server) serveTEI(ctx *fasthttp.RequestCtx, rt *route) {
	tei := *rt
	tei.vocab, tei.errShape = teiVocabulary, teiError
	req, texts, tr, err := parseTEI(ctx.PostBody(), s.opts.MaxItems)
	if err != nil {
		s.writeError(ctx, tei.errShape, failureOf(err))
		return
	}
	resp, ok := s.score(ctx, &tei, req)
	if !ok || !s.allScored(ctx, &tei, resp) {
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
	Model string          `json:"model"`
	Text1 json.RawMessage `json:"text_1"`
	Text2 json.RawMessage `json:"text_2"`
	// Newer vLLM takes the same pairs under other names too: data_1 / data_2, and queries with
	// documents or items.
	Data1                json.RawMessage `json:"data_1"`
	Data2                json.RawMessage `json:"data_2"`
	Queries              json.RawMessage `json:"queries"`
	Documents            json.RawMessage `json:"documents"`
	ItemsAlias           json.RawMessage `json:"items"`
	TruncatePromptTokens *int64          `json:"truncate_prompt_tokens"`
	// Extensions, as on the rerank routes.
	Instruction string `json:"instruction"`
	Cache       *bool  `json:"cache"`
}

// vllmScoreVocabulary names the core's fields as vLLM's score clients know them.
var vllmScoreVocabulary = scoreVocabulary("text_1", "text_2")

// scoreVocabulary names the core's fields by the names a vLLM score body used for its two
// sides (text_1 / text_2, data_1 / data_2, queries / documents or items).
func scoreVocabulary(first, second string) vocabulary {
	return vocabulary{
		"query":        first,
		"items":        second,
		"items[]":      second + "[]",
		"items[].text": second + "[]",
		"request_id":   HeaderRequestID,
	}
}

// isVLLMScore reports whether a body sent to a score route is vLLM's: it names its first side
// text_1, data_1 or queries. Our own score body has query and items; one with a top-level "query"
// is ours, whatever other fields it carries (unknown fields are ignored, never reinterpreted).
func isVLLMScore(body []byte) bool {
	return (hasKey(body, "text_1") || hasKey(body, "data_1") || hasKey(body, "queries")) && !hasKey(body, "query")
}

// sides returns the body's two sides and the names it gave them: text_1 / text_2 when either is
// given, else the first other pair present. A field sent as null counts as absent (clients send
// unset options that way).
func (vr *vllmScoreRequest) sides() (first, second json.RawMessage, n1, n2 string) {
	switch {
	case given(vr.Text1) || given(vr.Text2):
	case given(vr.Data1) || given(vr.Data2):
		return vr.Data1, vr.Data2, "data_1", "data_2"
	case given(vr.Queries) && given(vr.ItemsAlias) && !given(vr.Documents):
		return vr.Queries, vr.ItemsAlias, "queries", "items"
	case given(vr.Queries):
		return vr.Queries, vr.Documents, "queries", "documents"
	}
	return vr.Text1, vr.Text2, "text_1", "text_2"
}

// given reports whether a raw JSON field was sent with a value other than null.
func given(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
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
func stringOrList(field string, raw json.RawMessage, limit int) ([]string, error) {
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
	// One element at a time, and no further than one past limit (≤ 0: none): decoded whole, 8 MiB
	// of empty strings took ~840 MiB before the pair limit refused them.
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, malformed(field, "must be a string or a list of strings")
	}
	var out []string
	over, err := eachElement(dec, limit, func(i int, e json.RawMessage) error {
		if len(e) == 0 || e[0] != '"' {
			k := "nothing"
			if len(e) > 0 {
				k = jsonKind(e[0])
			}
			return malformed(fmt.Sprintf("%s[%d]", field, i), "must be a string, got %s", k)
		}
		var s string
		if err := json.Unmarshal(e, &s); err != nil {
			return malformed(fmt.Sprintf("%s[%d]", field, i), "invalid string: %v", err)
		}
		out = append(out, s)
		return nil
	})
	var bi *badInput
	switch {
	case over:
		return nil, unacceptable(field, "more than %d texts, limit %d", limit, limit)
	case errors.As(err, &bi):
		return nil, err
	case err != nil:
		return nil, malformed(field, "must be a string or a list of strings")
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

// parsedScore is a vLLM score body: one core request per distinct query, the number of pairs,
// and the route's vocabulary in the names the body used.
type parsedScore struct {
	groups []scoreGroup
	pairs  int
	vocab  vocabulary
}

// parseVLLMScore decodes a vLLM score body into one ScoreRequest per distinct query (text_1 one
// string, or one per pair). vLLM pairs a single text_1 with every text_2, and lists of equal
// length element by element. maxPairs bounds the pairs of the whole body as one request's items
// are bounded (≤ 0: no bound here).
func parseVLLMScore(body []byte, maxPairs int) (parsedScore, error) {
	var vr vllmScoreRequest
	if err := checkUTF8(body); err != nil {
		return parsedScore{}, err
	}
	if err := json.Unmarshal(body, &vr); err != nil {
		return parsedScore{}, jsonError(err)
	}
	first, second, n1, n2 := vr.sides()
	out := parsedScore{vocab: scoreVocabulary(n1, n2)}
	// Every pair is an item of some core request: the body as a whole is held to one request's
	// limit, however many queries it spreads them over. The second side is read first, so the
	// first is bounded by it (one text, or one per pair: one more is already a mismatch).
	docs, err := stringOrList(n2, second, maxPairs)
	if err != nil {
		return out, err
	}
	q, err := stringOrList(n1, first, len(docs)+1)
	if err != nil {
		return out, err
	}
	switch {
	case len(q) == 0:
		return out, unacceptable(n1, "must not be empty")
	case len(docs) == 0:
		return out, unacceptable(n2, "must not be empty")
	case len(q) > 1 && len(q) != len(docs):
		return out, unacceptable(n1, "has %d texts and %s %d: give one %s or as many as %s", len(q), n2, len(docs), n1, n2)
	case vr.TruncatePromptTokens != nil && *vr.TruncatePromptTokens > 0:
		// vLLM cuts the whole prompt to that many tokens; the nodes cut documents only, so a
		// silently different cut is refused rather than scored.
		return out, unacceptable("truncate_prompt_tokens", "not supported: documents are cut at their end to fit the model (max_tokens_per_doc on /v1/rerank bounds them)")
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
				return out, unacceptable(n1, "has more than %d distinct texts: send them in separate requests", maxScoreQueries)
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
	out.groups, out.pairs = groups, len(docs)
	return out, nil
}

// serveVLLMScore answers vLLM's score API: each distinct text_1 is one core request, at most
// scoreQueriesAtOnce at a time, all under one budget for the HTTP request (X-Request-Timeout-Ms,
// else the core's default from the handler's start) and one model (a modelpin shared by the
// calls); the first failure cancels the rest. The scores are put back in pair order.
func (s *Server) serveVLLMScore(ctx *fasthttp.RequestCtx, rt *route) {
	vr := *rt
	ps, err := parseVLLMScore(ctx.PostBody(), s.opts.MaxItems)
	vr.vocab = ps.vocab
	if err != nil {
		s.writeError(ctx, vr.errShape, failureOf(err))
		return
	}
	groups := ps.groups
	for g := range groups {
		if err := fromHeaders(ctx, groups[g].req); err != nil {
			s.writeError(ctx, vr.errShape, failureOf(err))
			return
		}
		if id := groups[g].req.GetRequestId(); id != "" && len(groups) > 1 {
			groups[g].req.RequestId = fmt.Sprintf("%s-%d", id, g) // one id per core request
		}
	}
	// One budget for the whole HTTP request: each group's core call runs under this context,
	// whose deadline is earlier than the group's own timeout_ms would be from its start.
	budget := s.opts.DefaultBudget
	if ms := groups[0].req.GetTimeoutMs(); ms > 0 {
		budget = time.Duration(ms) * time.Millisecond
	}
	rctx, cancel := s.baseCtx, context.CancelFunc(func() {})
	if budget > 0 {
		rctx, cancel = context.WithTimeout(rctx, budget)
	}
	defer cancel()
	// One model for the whole HTTP request: each core call would pick the cluster's model on its
	// own, and a rolling update between them would put two models' scores in one reply. The
	// calls share a pin (the first served sets it; a later one the model has left fails
	// UNAVAILABLE, retryable, instead of mixing).
	rctx = modelpin.NewContext(rctx, new(modelpin.Pin))
	eg, ectx := errgroup.WithContext(rctx)
	eg.SetLimit(scoreQueriesAtOnce)
	resps := make([]*relevancev1.ScoreResponse, len(groups))
	// The error reported is the first group's to fail and is named by that group's pairs, not
	// one of the cancellations that follow it.
	failed, failErr := -1, error(nil)
	var failMu sync.Mutex
	// A panic in the core on one of the group goroutines is carried to this one and raised
	// again, where handle's recover answers 500: left on its own goroutine, it ended the process.
	var panicked any
	var panicOnce sync.Once
	for g := range groups {
		eg.Go(func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					panicOnce.Do(func() { panicked = fmt.Sprintf("%v\n%s", r, debug.Stack()) })
					err = errors.New("core panicked")
				}
			}()
			if err := ectx.Err(); err != nil {
				return err // an earlier group failed (or the budget ran out) before this one started
			}
			resp, err := s.runCtx(ectx, groups[g].req)
			if err != nil {
				failMu.Lock()
				if failed < 0 {
					failed, failErr = g, err
				}
				failMu.Unlock()
				return err
			}
			resps[g] = resp
			return nil
		})
	}
	err = eg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		g := 0
		if failed >= 0 {
			g, err = failed, failErr
		}
		s.writeError(ctx, vr.errShape, s.groupFailure(&vr, groups[g], err))
		return
	}
	data := make([]vllmScoreData, 0, ps.pairs)
	var usage uint64
	var model, id string
	// A pair too long for the model fails the request, the first in pair order named.
	tooLong, tooLongScore := -1, (*relevancev1.ItemScore)(nil)
	for g, resp := range resps {
		scores := resp.GetScores()
		if len(scores) != len(groups[g].pairs) {
			s.internalError(ctx, &vr, fmt.Errorf("core returned %d scores for %d texts", len(scores), len(groups[g].pairs)))
			return
		}
		for k, p := range groups[g].pairs {
			switch scores[k].GetStatus() {
			case relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG:
				if tooLong < 0 || p < tooLong {
					tooLong, tooLongScore = p, scores[k]
				}
				continue
			case relevancev1.ItemStatus_ITEM_STATUS_FAILED:
				continue // only with partial results allowed: the pair is left out, its index with it
			}
			v := scores[k].GetScore()
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				s.internalError(ctx, &vr, fmt.Errorf("core returned a non-finite score for %s", vr.vocab.name(fmt.Sprintf("items[%d]", p))))
				return
			}
			data = append(data, vllmScoreData{Index: p, Object: "score", Score: shortFloat(v)})
		}
		usage += resp.GetUsage().GetPromptTokens()
		model = resp.GetModel()
		if id == "" {
			id = resp.GetRequestId()
		}
	}
	if tooLong >= 0 {
		s.writeError(ctx, vr.errShape, unscored(&vr, tooLong, tooLongScore))
		return
	}
	slices.SortFunc(data, func(a, b vllmScoreData) int { return cmp.Compare(a.Index, b.Index) })
	if h := ctx.Request.Header.Peek(HeaderRequestID); len(h) > 0 {
		id = string(h) // the caller's id, not one group's
	} else if id == "" {
		id = s.responseID(groups[0].req, resps[0])
	}
	ctx.Response.Header.Set(HeaderRequestID, id)
	s.writeJSON(ctx, &vr, http.StatusOK, vllmScoreResponse{ID: "score-" + id, Object: "list", Created: time.Now().Unix(),
		Model: model, Data: data, Usage: vllmUsage{PromptTokens: usage, TotalTokens: usage}})
}

// groupFailure is the reply to one group's failed core call: a field the core names by the
// group's item index (items[k]) is renamed by the pair it stands for.
func (s *Server) groupFailure(rt *route, g scoreGroup, err error) front.Failure {
	f := s.failure(rt, g.req, err)
	if field, problem, ok := request.Violation(err); ok {
		if k, rest, ok := itemIndex(field); ok && k < len(g.pairs) {
			f.Message = rt.vocab.name(fmt.Sprintf("items[%d]%s", g.pairs[k], rest)) + ": " + problem
		}
	}
	return f
}

// itemIndex splits a canonical field path "items[k]…" into k and the rest.
func itemIndex(field string) (int, string, bool) {
	rest, ok := strings.CutPrefix(field, "items[")
	if !ok {
		return 0, "", false
	}
	n, after, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, "", false
	}
	k, err := strconv.Atoi(n)
	if err != nil || k < 0 {
		return 0, "", false
	}
	return k, after, true
}

// itemProblem is why a scored item has no score (its status's error, else the status).
func itemProblem(sc *relevancev1.ItemScore) string {
	if e := sc.GetError(); e != "" {
		return e
	}
	if sc.GetStatus() == relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG {
		return "longer than the model's prompt limit"
	}
	return "not scored"
}
