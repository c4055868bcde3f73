package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Entry is one document's score as the reply gave it.
type Entry struct {
	// Score is the raw value (a probability or a logit, by kind).
	Score float64
	// Path names the score in the reply, for errors ("results[3].relevance_score").
	Path string
}

// Ranked decodes a rerank reply that scores n documents by index: the array at key arrayKey of
// the top-level object, or the top-level array itself when arrayKey is "" (errors call that
// array "results" too). Each element is an object with an integer indexKey and a numeric
// scoreKey, in any order. Every index 0…n-1 must appear exactly once; the result is in item
// order. Errors name the field and are meant for Shape.
func Ranked(body []byte, arrayKey, indexKey, scoreKey string, n int) ([]Entry, error) {
	label, list := "results", json.RawMessage(body)
	if arrayKey != "" {
		label = arrayKey
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			return nil, fmt.Errorf("reply: not a JSON object: %v", err)
		}
		var ok bool
		if list, ok = top[arrayKey]; !ok {
			return nil, fmt.Errorf("%s: missing", arrayKey)
		}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(list, &elems); err != nil || elems == nil {
		return nil, fmt.Errorf("%s: not an array", label)
	}
	out := make([]Entry, n)
	from := make([]int, n) // position in elems + 1 of the element holding each index
	for i, raw := range elems {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("%s[%d]: not an object", label, i)
		}
		idxRaw, ok := fields[indexKey]
		if !ok {
			return nil, fmt.Errorf("%s[%d].%s: missing", label, i, indexKey)
		}
		idx, err := integer(idxRaw)
		if err != nil {
			return nil, fmt.Errorf("%s[%d].%s: not an integer: %s", label, i, indexKey, idxRaw)
		}
		if idx < 0 || idx >= int64(n) {
			return nil, fmt.Errorf("%s[%d].%s %d out of range for %d documents", label, i, indexKey, idx, n)
		}
		if j := from[idx]; j != 0 {
			return nil, fmt.Errorf("%s[%d].%s %d repeats %s[%d].%s", label, i, indexKey, idx, label, j-1, indexKey)
		}
		from[idx] = i + 1
		scoreRaw, ok := fields[scoreKey]
		if !ok {
			return nil, fmt.Errorf("%s[%d].%s: missing", label, i, scoreKey)
		}
		path := fmt.Sprintf("%s[%d].%s", label, i, scoreKey)
		v, err := number(scoreRaw)
		if err != nil {
			return nil, fmt.Errorf("%s: not a number: %s", path, scoreRaw)
		}
		out[idx] = Entry{Score: v, Path: path}
	}
	if len(elems) != n {
		for idx, j := range from {
			if j == 0 {
				return nil, fmt.Errorf("%s: %d entries for %d documents (index %d missing)", label, len(elems), n, idx)
			}
		}
	}
	return out, nil
}

func integer(raw json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	f, err := number(raw) // 3.0 and 3e0 are integers too
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer")
	}
	return int64(f), nil
}

// number accepts a JSON number only (not a quoted one, not null); overflow to ±Inf is an error.
func number(raw json.RawMessage) (float64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, fmt.Errorf("not a number")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("not a finite number")
	}
	return f, nil
}

// Shape wraps a Ranked error as the Internal status error naming the node.
func Shape(node string, err error) error {
	return Errorf(node, codes.Internal, "%v", err)
}

// Form says what a kind's score values are.
type Form int

const (
	// Probability: sigmoid(logit yes − logit no), in [0, 1].
	Probability Form = iota
	// Logit: logit yes − logit no (a raw classifier output).
	Logit
)

// Scores turns entries (item order) into ItemScores for req's items: Score a probability,
// Logit its log-odds. A probability outside [0, 1] is a reply in the wrong shape (most often a
// server configured to return raw logits).
func Scores(node string, req *relevancev1.ScoreBatchRequest, entries []Entry, form Form) ([]*relevancev1.ItemScore, error) {
	items := req.GetItems()
	out := make([]*relevancev1.ItemScore, len(entries))
	for i, e := range entries {
		var p, logit float64
		switch form {
		case Probability:
			if e.Score < 0 || e.Score > 1 {
				return nil, Errorf(node, codes.Internal, "%s %g outside [0, 1]: the server is not returning probabilities", e.Path, e.Score)
			}
			p, logit = e.Score, logitOf(e.Score)
		case Logit:
			p, logit = sigmoid(e.Score), e.Score
		}
		out[i] = &relevancev1.ItemScore{
			Index:  uint32(i),
			Id:     items[i].GetId(),
			Score:  float32(p),
			Logit:  float32(logit),
			Status: relevancev1.ItemStatus_ITEM_STATUS_OK,
		}
	}
	return out, nil
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// logitOf is the log-odds of p, with p kept 1e-7 away from 0 and 1 so that a saturated
// probability gives a finite logit (±16.1).
func logitOf(p float64) float64 {
	p = math.Min(math.Max(p, 1e-7), 1-1e-7)
	return math.Log(p) - math.Log1p(-p)
}

// Response is the reply to req: scores in item order, and what the server said of itself.
func Response(node, model string, promptTokens uint64, scores []*relevancev1.ItemScore) *relevancev1.ScoreBatchResponse {
	resp := &relevancev1.ScoreBatchResponse{Scores: scores, Model: model, NodeId: node}
	if promptTokens > 0 {
		resp.Usage = &relevancev1.Usage{PromptTokens: promptTokens}
	}
	return resp
}

// Usage reads {"usage": {"prompt_tokens": n}} where a reply has it (0 otherwise).
func Usage(body []byte) uint64 {
	var u struct {
		Usage struct {
			PromptTokens uint64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(body, &u) // a bare array or no usage: 0
	return u.Usage.PromptTokens
}

// ModelName reads {"model": "…"} where a reply has it ("" otherwise).
func ModelName(body []byte) string {
	var m struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &m)
	return m.Model
}

// Exchange is one kind's rerank call: where it goes, how its body is built from the formed
// (query, documents) pairs and how its reply is read. Every HTTP adapter's ScoreBatch is
// Client.Rerank with its own Exchange.
type Exchange struct {
	// Path is the rerank endpoint; Classify maps its kind-specific errors (nil: none).
	Path     string
	Classify Classifier
	// UnknownModel recognises the server's answer that it does not serve the model the request
	// names (nil: the kind sends none, or its server takes any): the error is then
	// codes.Unimplemented and matches backend.ErrModelNotServed.
	UnknownModel func(httpStatus int, msg string) bool
	// Template and Instruction form the pairs (Pair).
	Template    string
	Instruction Instruction
	// Body is the request body for the formed query and documents.
	Body func(query string, docs []string, req *relevancev1.ScoreBatchRequest) any
	// ArrayKey, IndexKey and ScoreKey locate the ranked entries (Ranked); Form is their scores'.
	ArrayKey, IndexKey, ScoreKey string
	Form                         Form
	// Model is the configured model name; with ReplyModel the reply's own name wins when it
	// has one.
	Model      string
	ReplyModel bool
}

// modelNotServed is the status error of a reply saying that the server does not serve the
// requested model; it matches backend.ErrModelNotServed, so that the proxy takes the node out of
// traffic instead of counting the failure.
type modelNotServed struct{ st *status.Status }

func (e *modelNotServed) Error() string              { return e.st.Err().Error() }
func (e *modelNotServed) GRPCStatus() *status.Status { return e.st }
func (e *modelNotServed) Is(target error) bool       { return target == backend.ErrModelNotServed }

// Rerank scores req's items with one call of x under limits: added-token text in the query,
// instruction and documents broken so that the server reads it as plain text (plainText),
// documents cut to the server's limits (fit), pairs formed, the body posted, the reply's entries
// read back in item order, with the reply's usage (when it has any). req is not changed.
func (c *Client) Rerank(ctx context.Context, req *relevancev1.ScoreBatchRequest, limits backend.Limits, x Exchange) (*relevancev1.ScoreBatchResponse, error) {
	// Broken before fit, so that limits count what the server will tokenize.
	send, err := plainText(c.Node(), req)
	if err != nil {
		return nil, err
	}
	f, err := fit(c.Node(), send, limits)
	switch {
	case err != nil:
		return nil, err
	case f == nil:
		return c.rerank(ctx, send, limits, x)
	}
	resp, err := c.rerank(ctx, f.send, limits, x)
	if err != nil {
		return nil, err
	}
	f.reply(req, resp)
	return resp, nil
}

// rerank is Rerank once the documents fit.
func (c *Client) rerank(ctx context.Context, req *relevancev1.ScoreBatchRequest, limits backend.Limits, x Exchange) (*relevancev1.ScoreBatchResponse, error) {
	node, n := c.Node(), len(req.GetItems())
	if n == 0 {
		return Response(node, x.Model, 0, nil), nil
	}
	if err := CheckItems(node, n, limits); err != nil {
		return nil, err
	}
	query, docs, err := Pair(node, x.Template, x.Instruction, req)
	if err != nil {
		return nil, err
	}
	classify, unknown := x.Classify, false
	if x.UnknownModel != nil {
		classify = func(httpStatus int, msg string, body []byte) (codes.Code, bool) {
			if unknown = x.UnknownModel(httpStatus, msg); unknown {
				return codes.Unimplemented, true
			}
			if x.Classify != nil {
				return x.Classify(httpStatus, msg, body)
			}
			return 0, false
		}
	}
	body, err := c.PostJSON(ctx, x.Path, x.Body(query, docs, req), classify)
	if err != nil {
		if unknown {
			err = &modelNotServed{st: status.Convert(err)}
		}
		return nil, err
	}
	entries, err := Ranked(body, x.ArrayKey, x.IndexKey, x.ScoreKey, n)
	if err != nil {
		return nil, Shape(node, err)
	}
	scores, err := Scores(node, req, entries, x.Form)
	if err != nil {
		return nil, err
	}
	model := x.Model
	if x.ReplyModel {
		if m := ModelName(body); m != "" {
			model = m
		}
	}
	return Response(node, model, Usage(body), scores), nil
}
