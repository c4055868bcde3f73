package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// rerankRequest is the union of the Jina/vLLM (/v1/rerank, /rerank) and Cohere v2 (/v2/rerank)
// request bodies. Pointers tell "absent" from zero. Unknown fields are ignored.
type rerankRequest struct {
	Model           string     `json:"model"`
	Query           *string    `json:"query"`
	Documents       []document `json:"documents"`
	TopN            *int64     `json:"top_n"`
	ReturnDocuments *bool      `json:"return_documents"`
	MaxTokensPerDoc *int64     `json:"max_tokens_per_doc"`
	Instruction     string     `json:"instruction"`
}

// maxDocTokens caps max_tokens_per_doc to what ScoreOptions.max_tokens_per_item can carry.
const maxDocTokens = 1<<32 - 1

// parseRerank decodes body into a ScoreRequest and the document texts (kept for
// return_documents). A *syntaxError means the body is not the JSON expected (400); a *fieldError
// means it parsed but a field's value is wrong (422).
func parseRerank(body []byte) (*relevancev1.ScoreRequest, []string, rerankRequest, error) {
	var rr rerankRequest
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, nil, rr, jsonError(err)
	}
	switch {
	case rr.Query == nil:
		return nil, nil, rr, fieldErr("query", "is required")
	case *rr.Query == "":
		return nil, nil, rr, fieldErr("query", "must not be empty")
	case rr.Documents == nil:
		return nil, nil, rr, fieldErr("documents", "is required")
	case len(rr.Documents) == 0:
		return nil, nil, rr, fieldErr("documents", "must not be empty")
	case rr.TopN != nil && *rr.TopN < 0:
		return nil, nil, rr, fieldErr("top_n", fmt.Sprintf("must be >= 0, got %d", *rr.TopN))
	case rr.MaxTokensPerDoc != nil && (*rr.MaxTokensPerDoc < 1 || *rr.MaxTokensPerDoc > maxDocTokens):
		return nil, nil, rr, fieldErr("max_tokens_per_doc", fmt.Sprintf("must be in [1, %d], got %d", int64(maxDocTokens), *rr.MaxTokensPerDoc))
	}
	texts := make([]string, len(rr.Documents))
	items := make([]*relevancev1.Item, len(rr.Documents))
	for i, d := range rr.Documents {
		if d.err != nil {
			return nil, nil, rr, fieldErr(fmt.Sprintf("documents[%d]", i), d.err.Error())
		}
		texts[i] = d.text
		items[i] = &relevancev1.Item{Text: d.text}
	}
	req := &relevancev1.ScoreRequest{
		Query:       *rr.Query,
		Instruction: rr.Instruction,
		Items:       items,
		Model:       rr.Model,
	}
	if rr.TopN != nil && *rr.TopN > 0 {
		req.TopN = uint32(min(*rr.TopN, int64(len(items))))
	}
	if rr.MaxTokensPerDoc != nil {
		req.Options = &relevancev1.ScoreOptions{MaxTokensPerItem: uint32(*rr.MaxTokensPerDoc)}
	}
	return req, texts, rr, nil
}

// document is one entry of "documents". Its error is kept rather than returned so that the
// caller can name the entry's index (encoding/json would not).
type document struct {
	text string
	err  error
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *document) UnmarshalJSON(raw []byte) error {
	d.text, d.err = documentText(raw)
	return nil
}

// documentText accepts a document as a JSON string or as an object with a string "text" field
// (Jina, vLLM and older Cohere clients send objects; other fields are ignored).
func documentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("must be a string or an object with a text field")
	}
	switch raw[0] {
	case '"':
		if plainJSONString(raw) {
			return string(raw[1 : len(raw)-1]), nil // string() copies out of the request buffer
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("invalid string: %w", err)
		}
		return s, nil
	case '{':
		var o struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return "", errors.New("text: must be a string")
		}
		if o.Text == nil {
			return "", errors.New("text: is required in a document object")
		}
		return *o.Text, nil
	}
	return "", fmt.Errorf("must be a string or an object with a text field, got %s", jsonKind(raw[0]))
}

// plainJSONString reports whether raw is a quoted JSON string whose content needs no decoding:
// no escapes, no control characters, valid UTF-8 (encoding/json would replace invalid bytes).
// Most documents are, and copying them directly saves a second decoding pass.
func plainJSONString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' || c == '"' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(body)
}

func jsonKind(c byte) string {
	switch c {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '[':
		return "an array"
	default:
		return "a number"
	}
}

// rankedResult is one scored item in rerank order.
type rankedResult struct {
	Index int
	Score float64
}

// rank returns the scored items best first (ties by input order), cut to topN when topN > 0.
// Items the core reports as not scored (too long, failed, non-finite score) are left out: a rerank client cannot
// tell a missing score from a low one otherwise.
func rank(resp *relevancev1.ScoreResponse, n int, topN uint32) ([]rankedResult, error) {
	scores := resp.GetScores()
	if len(scores) != n {
		return nil, fmt.Errorf("core returned %d scores for %d documents", len(scores), n)
	}
	out := make([]rankedResult, 0, n)
	for i, s := range scores {
		switch s.GetStatus() {
		case relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, relevancev1.ItemStatus_ITEM_STATUS_FAILED:
			continue
		}
		// A NaN or infinite score cannot be ranked (NaN compares false and breaks the sort)
		// nor written as JSON: treat it as not scored.
		if v := float64(s.GetScore()); math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, rankedResult{Index: i, Score: shortFloat(s.GetScore())})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Score > out[b].Score })
	if topN > 0 && int(topN) < len(out) {
		out = out[:topN]
	}
	return out, nil
}

// shortFloat widens f to the float64 with the same shortest decimal form, so that a score of
// float32(0.9) is written as 0.9 and not 0.8999999761581421.
func shortFloat(f float32) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	if err != nil { // NaN and ±Inf round-trip too; this is unreachable
		return float64(f)
	}
	return v
}

type rerankDocument struct {
	Text string `json:"text"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *rerankDocument `json:"document,omitempty"`
}

// jinaResponse is the Jina/vLLM rerank reply.
type jinaResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Results []rerankResult `json:"results"`
	Usage   jinaUsage      `json:"usage"`
}

type jinaUsage struct {
	PromptTokens uint64 `json:"prompt_tokens"`
	TotalTokens  uint64 `json:"total_tokens"`
}

// cohereResponse is the Cohere v2 rerank reply.
type cohereResponse struct {
	ID      string         `json:"id"`
	Results []rerankResult `json:"results"`
	Meta    cohereMeta     `json:"meta"`
}

type cohereMeta struct {
	APIVersion  cohereAPIVersion  `json:"api_version"`
	BilledUnits cohereBilledUnits `json:"billed_units"`
}

type cohereAPIVersion struct {
	Version string `json:"version"`
}

type cohereBilledUnits struct {
	SearchUnits int `json:"search_units"`
}

// searchUnits follows Cohere's billing rule: one search unit per query with up to 100 documents.
func searchUnits(docs int) int {
	return max(1, (docs+99)/100)
}

func buildResults(ranked []rankedResult, texts []string, withDocs bool) []rerankResult {
	out := make([]rerankResult, len(ranked))
	for i, r := range ranked {
		out[i] = rerankResult{Index: r.Index, RelevanceScore: r.Score}
		if withDocs {
			out[i].Document = &rerankDocument{Text: texts[r.Index]}
		}
	}
	return out
}
