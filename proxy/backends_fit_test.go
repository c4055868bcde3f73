package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// TestDocumentsAreCutToAServersLimits: a llama.cpp node configured with max_item_tokens 512 (its
// n_ubatch), which answers 500 "input (N tokens) is too large" to a longer pair. A long document
// is cut to fit, as a scorer node cuts its own, and marked TRUNCATED; max_tokens_per_item cuts it
// shorter; under TRUNCATION_NONE it is not sent and is TOO_LONG while the short one is scored. It
// used to go out whole, fail its batch on every node, and reach the caller as a retryable 503.
func TestDocumentsAreCutToAServersLimits(t *testing.T) {
	var longest atomic.Int64
	srv := fakeLlamaCpp(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Query     string   `json:"query"`
			Documents []string `json:"documents"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		var res []string
		for i, d := range body.Documents {
			words := int64(len(strings.Fields(d)))
			if words > longest.Load() {
				longest.Store(words)
			}
			if words > 512 {
				w.WriteHeader(500)
				fmt.Fprintf(w, `{"error":{"code":500,"message":"input (%d tokens) is too large to process","type":"server_error"}}`, words)
				return
			}
			res = append(res, fmt.Sprintf(`{"index":%d,"relevance_score":0.5}`, i))
		}
		fmt.Fprintf(w, `{"model":"m","object":"list","usage":{"prompt_tokens":1,"total_tokens":1},"results":[%s]}`, strings.Join(res, ","))
	})
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindLlamaCpp, Addr: srv.URL, MaxItemTokens: 512}}
	p, _ := startProxy(t, cfg)
	items := []*relevancev1.Item{{Id: "short", Text: "a b c"}, {Id: "long", Text: strings.Repeat("word ", 2000)}}
	for _, c := range []struct {
		name       string
		opts       *relevancev1.ScoreOptions
		maxWords   int64
		wantStatus relevancev1.ItemStatus
	}{
		{"the server's limit", nil, 512, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED},
		{"max_tokens_per_item 64", &relevancev1.ScoreOptions{MaxTokensPerItem: 64}, 64, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED},
		{"truncation NONE", &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE, AllowPartial: true}, 3, relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG},
	} {
		longest.Store(0)
		resp, err := p.Score(context.Background(), &relevancev1.ScoreRequest{Query: "q", Items: items, Options: c.opts})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if longest.Load() > c.maxWords {
			t.Errorf("%s: a document of %d words was sent, want at most %d", c.name, longest.Load(), c.maxWords)
		}
		short, long := resp.GetScores()[0], resp.GetScores()[1]
		if short.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_OK || long.GetStatus() != c.wantStatus {
			t.Errorf("%s: statuses %v, %v; want OK, %v", c.name, short.GetStatus(), long.GetStatus(), c.wantStatus)
		}
		if c.wantStatus == relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED && long.GetTruncatedTokens() < 2000-uint32(c.maxWords) {
			t.Errorf("%s: %d tokens cut from a 2000-token document", c.name, long.GetTruncatedTokens())
		}
	}
}

// TestBatchesNothingWasSentForTeachNothing: a batch whose every document is too long to send
// (TOO_LONG under TRUNCATION_NONE) is answered without a call to the server; its few
// microseconds do not reach the node's cost model (priced at the batch's whole work, five such
// batches made a llama.cpp node look ~500× faster than it is).
func TestBatchesNothingWasSentForTeachNothing(t *testing.T) {
	var calls atomic.Int64
	srv := fakeLlamaCpp(t, func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(500)
	})
	cfg := testConfig(nil)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindLlamaCpp, Addr: srv.URL}} // default max_item_tokens 512
	p, _ := startProxy(t, cfg)
	n := p.cluster.Snapshot()[0]
	before := n.Samples()
	items := []*relevancev1.Item{{Id: "a", Text: strings.Repeat("word ", 2000)}, {Id: "b", Text: strings.Repeat("other ", 2000)}}
	for range 5 {
		resp, err := p.Score(context.Background(), &relevancev1.ScoreRequest{Query: "q", Items: items,
			Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE, AllowPartial: true}})
		if err != nil || resp.GetScores()[0].GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG {
			t.Fatalf("two documents over the server's limit under TRUNCATION_NONE: %v, %v; want both TOO_LONG", resp.GetScores(), err)
		}
	}
	if calls.Load() != 0 {
		t.Fatalf("%d calls to the server for documents none of which fits it", calls.Load())
	}
	if got := n.Samples(); got != before {
		t.Errorf("cost model learned %d samples from batches the server never ran (coeffs now %+v)", got-before, n.Coeffs())
	}
}

// fakeLlamaCpp is a llama.cpp server for the proxy's backend tests: healthy, rerank answered by
// rerank, anything else 404. It closes with the test.
func fakeLlamaCpp(t *testing.T, rerank http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		case "/v1/rerank":
			rerank(w, r)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}
