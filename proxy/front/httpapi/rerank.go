package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// rerankRequest is the union of the Jina/vLLM (/v1/rerank, /rerank) and Cohere v2 (/v2/rerank)
// request bodies. Pointers tell "absent" from zero. Unknown fields are ignored.
type rerankRequest struct {
	Model           string       `json:"model"`
	Query           *string      `json:"query"`
	Documents       documentList `json:"documents"`
	TopN            *int64       `json:"top_n"`
	ReturnDocuments *bool        `json:"return_documents"`
	MaxTokensPerDoc *int64       `json:"max_tokens_per_doc"`
	Instruction     string       `json:"instruction"`
	// Cache false bypasses the proxy's score cache (an extension, like instruction).
	Cache *bool `json:"cache"`
}

// maxDocTokens caps max_tokens_per_doc to what ScoreOptions.max_tokens_per_item can carry.
const maxDocTokens = 1<<32 - 1

// rerankVocabulary names the core's fields as the rerank APIs do.
var rerankVocabulary = vocabulary{
	"items":                       "documents",
	"items[]":                     "documents[]",
	"items[].text":                "documents[]",
	"options.max_tokens_per_item": "max_tokens_per_doc",
	"request_id":                  HeaderRequestID, // the rerank bodies have none: it came from the header
}

// rerankDialect is what tells the rerank APIs apart; the handler is the same for all.
type rerankDialect struct {
	// returnDocuments is return_documents when the body leaves it out.
	returnDocuments bool
	// reply builds the response body.
	reply func(rerankReply) any
}

// rerankReply is what every rerank response is built from.
type rerankReply struct {
	id, model string
	results   []rerankResult
	documents int
	usage     *relevancev1.Usage
}

var (
	// jinaDialect is Jina's and vLLM's rerank API: documents returned unless asked not to.
	jinaDialect = &rerankDialect{returnDocuments: true, reply: func(r rerankReply) any {
		return jinaResponse{ID: r.id, Model: r.model, Results: r.results,
			Usage: jinaUsage{PromptTokens: r.usage.GetPromptTokens(), TotalTokens: r.usage.GetPromptTokens()}}
	}}
	// cohereDialect is Cohere's v2 rerank API: no documents unless asked for.
	cohereDialect = &rerankDialect{returnDocuments: false, reply: func(r rerankReply) any {
		return cohereResponse{ID: r.id, Results: r.results, Meta: cohereMeta{
			APIVersion:  cohereAPIVersion{Version: "2"},
			BilledUnits: cohereBilledUnits{SearchUnits: searchUnits(r.documents)},
		}}
	}}
)

// parseRerank decodes body into a ScoreRequest and the document texts (kept for
// return_documents). It checks only what the decoding itself needs: the JSON, the types, the
// fields the shape requires, and the numbers the ScoreRequest cannot carry; the rest is the core's.
func parseRerank(body []byte, maxItems int) (*relevancev1.ScoreRequest, []string, rerankRequest, error) {
	rr := rerankRequest{Documents: documentList{limit: maxItems}}
	if err := checkUTF8(body); err != nil {
		return nil, nil, rr, err
	}
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, nil, rr, jsonError(err)
	}
	switch {
	case rr.Query == nil:
		return nil, nil, rr, unacceptable("query", "is required")
	case !rr.Documents.present:
		return nil, nil, rr, unacceptable("documents", "is required")
	case rr.Documents.overLimit():
		return nil, nil, rr, unacceptable("documents", "more than %d items, limit %d", rr.Documents.limit, rr.Documents.limit)
	case rr.TopN != nil && *rr.TopN < 0:
		return nil, nil, rr, unacceptable("top_n", "must be >= 0, got %d", *rr.TopN)
	case rr.MaxTokensPerDoc != nil && (*rr.MaxTokensPerDoc < 1 || *rr.MaxTokensPerDoc > maxDocTokens):
		return nil, nil, rr, unacceptable("max_tokens_per_doc", "must be in [1, %d], got %d", int64(maxDocTokens), *rr.MaxTokensPerDoc)
	}
	texts, items, err := itemsOf("documents", rr.Documents.docs)
	if err != nil {
		return nil, nil, rr, err
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
	if rr.Cache != nil && !*rr.Cache {
		if req.Options == nil {
			req.Options = &relevancev1.ScoreOptions{}
		}
		req.Options.NoCache = true
	}
	return req, texts, rr, nil
}

// itemsOf turns the decoded entries of a list of documents (named field in the route's
// vocabulary) into their texts and the core's items; the first entry that did not decode is the
// error, named by its index.
func itemsOf(field string, docs []document) ([]string, []*relevancev1.Item, error) {
	texts := make([]string, len(docs))
	items := make([]*relevancev1.Item, len(docs))
	for i, d := range docs {
		if d.err != nil {
			return nil, nil, unacceptable(fmt.Sprintf("%s[%d]", field, i), "%v", d.err)
		}
		texts[i] = d.text
		items[i] = &relevancev1.Item{Text: d.text}
	}
	return texts, items, nil
}

// documentList is a "documents" (or TEI "texts") array, decoded one entry at a time and no
// further than limit entries (0: no limit; one more marks it over, which the parser refuses). Decoded whole,
// an 8 MiB body of empty strings (2.8 million documents) took ~790 MiB before the core's item
// limit refused it.
type documentList struct {
	docs    []document
	limit   int
	present bool // given, and not null
	over    bool // held more than limit entries (the rest unread)
}

// overLimit reports whether the array held more entries than the limit.
func (l *documentList) overLimit() bool { return l.over }

// UnmarshalJSON implements json.Unmarshaler. A value that is not an array is a type error that
// encoding/json names by the field.
func (l *documentList) UnmarshalJSON(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil // null: absent
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return &json.UnmarshalTypeError{Value: kindOf(t), Type: reflect.TypeFor[[]string]()}
	}
	l.present, l.docs = true, l.docs[:0]
	l.over, err = eachElement(dec, l.limit, func(_ int, m json.RawMessage) error {
		var d document
		d.text, d.err = documentText(m)
		l.docs = append(l.docs, d)
		return nil
	})
	return err
}

// eachElement calls f on the elements of the JSON array whose '[' dec has just read, in order,
// and reads its closing bracket; it stops before the element past limit (≤ 0: none) and reports
// that there was one — the rest need not be read (encoding/json, or the caller, has checked the
// syntax), so a huge array costs no more than limit elements.
func eachElement(dec *json.Decoder, limit int, f func(i int, e json.RawMessage) error) (over bool, err error) {
	for i := 0; dec.More(); i++ {
		if limit > 0 && i == limit {
			return true, nil
		}
		var e json.RawMessage
		if err := dec.Decode(&e); err != nil {
			return false, err
		}
		if err := f(i, e); err != nil {
			return false, err
		}
	}
	_, err = dec.Token() // the closing bracket
	return false, err
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
// no escapes, no control characters (the body is already known to be valid UTF-8). Most
// documents are, and copying them directly saves a second decoding pass.
func plainJSONString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c == '"' || c < 0x20 {
			return false
		}
	}
	return true
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

// rankedResults lists the core's ranking (best first, cut to top_n, unscored items left out:
// ScoreResponse.ranking) as rerank results, with the documents' texts when withDocs, each
// scored with its logit instead of its sigmoid when raw (which ranks the same).
func rankedResults(resp *relevancev1.ScoreResponse, texts []string, withDocs, raw bool) ([]rerankResult, error) {
	scores := resp.GetScores()
	if len(scores) != len(texts) {
		return nil, fmt.Errorf("core returned %d scores for %d documents", len(scores), len(texts))
	}
	out := make([]rerankResult, 0, len(resp.GetRanking()))
	for _, i := range resp.GetRanking() {
		if int(i) >= len(scores) {
			return nil, fmt.Errorf("core ranked item %d of %d", i, len(scores))
		}
		v := scores[i].GetScore()
		if raw {
			v = scores[i].GetLogit()
		}
		// A NaN or infinite score cannot be written as JSON. The core refuses node replies that
		// hold one; should one get through, the item is left out as if unscored.
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		r := rerankResult{Index: int(i), RelevanceScore: shortFloat(v)}
		if withDocs {
			r.Document = &rerankDocument{Text: texts[i]}
		}
		out = append(out, r)
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
