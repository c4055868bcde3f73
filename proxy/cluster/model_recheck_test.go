package cluster

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/backend"
)

// TestKeptOutNodeWhoseListFailsIsAskedOnlyEveryRecheck: a node kept out for a conclusive finding
// whose model list then answers 503 stays out and is asked at most every modelRecheck; it was
// asked on every poll.
func TestKeptOutNodeWhoseListFailsIsAskedOnlyEveryRecheck(t *testing.T) {
	p, r := pollEvery, modelRecheck
	t.Cleanup(func() { pollEvery, modelRecheck = p, r })
	pollEvery, modelRecheck = 10*time.Millisecond, 300*time.Millisecond
	var fail atomic.Bool
	var checks atomic.Int64
	c := startBackendCluster(t, backend.Spec{Kind: backend.KindVLLM, Model: "org/wanted"}, vllmListing(func() (int, string) {
		checks.Add(1)
		if fail.Load() {
			return http.StatusServiceUnavailable, ""
		}
		return http.StatusOK, "org/other"
	}))
	waitKeptOut(t, c)
	fail.Store(true)
	time.Sleep(400 * time.Millisecond) // past the first recheck
	before := checks.Load()
	time.Sleep(600 * time.Millisecond) // two modelRecheck periods
	got := checks.Load() - before
	st := c.Status()[0]
	if st.Healthy {
		t.Errorf("let in: %+v", st)
	}
	if got > 4 {
		t.Errorf("%d model-list requests in 600 ms with modelRecheck 300 ms (poll 10 ms): asked every poll", got)
	}
}

// TestKeptOutNodeStaysOutAfterAHealthBlipAndAnUnansweredList: a node kept out for a conclusive
// finding, whose health misses one probe and whose model list then does not answer, stays out:
// the finding outlives the blip. It was let into traffic on the inconclusive check.
func TestKeptOutNodeStaysOutAfterAHealthBlipAndAnUnansweredList(t *testing.T) {
	p, r := pollEvery, modelRecheck
	t.Cleanup(func() { pollEvery, modelRecheck = p, r })
	pollEvery, modelRecheck = 10*time.Millisecond, 5*time.Second
	var phase atomic.Int64 // 0: serving other; 1: health down once; 2: list 503
	c := startBackendCluster(t, backend.Spec{Kind: backend.KindVLLM, Model: "org/wanted"}, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if phase.Load() == 1 {
				phase.Store(2)
				w.WriteHeader(503)
				return
			}
			w.WriteHeader(200)
		case "/v1/models":
			if phase.Load() == 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, `{"object":"list","data":[{"id":"org/other","object":"model"}]}`)
		default:
			http.NotFound(w, r)
		}
	})
	waitKeptOut(t, c)
	phase.Store(1)
	time.Sleep(200 * time.Millisecond)
	if st := c.Status()[0]; st.Healthy {
		t.Errorf("node found serving org/other is in traffic after one missed health probe and a 503 model list: %+v", st)
	}
}
