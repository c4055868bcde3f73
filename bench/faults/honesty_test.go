package faults

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/bench/load"
	"github.com/relevance-scoring/relevance/bench/workload"
)

// TestScenarioWithNoRequestsDoesNotPass: a run that measured no request at all (tiny
// --capacity, an interrupted load, a window that missed every call) has 0 failures and no p99:
// it must not pass.
func TestScenarioWithNoRequestsDoesNotPass(t *testing.T) {
	r := Result{Name: "slow10", HasLoad: true, Summary: summarize(nil, 500*time.Millisecond, nil)}
	r.require("failed", "==", 0)
	r.Criteria = append(r.Criteria, Criterion{Figure: "p99_impact", Op: "<=", Limit: 0.2, Optional: true})
	r.judge()
	if r.Verdict == Pass {
		t.Errorf("verdict %s with 0 requests measured: a scenario that sent nothing passes", r.Verdict)
	}
}

// TestBaselineFailingEveryRequestDoesNotPass: a cluster that fails every request, the same way
// when idle (a 503 from a broken deploy), must not pass the baseline for want of failures an
// idle cluster would not have.
func TestBaselineFailingEveryRequestDoesNotPass(t *testing.T) {
	t0 := time.Now()
	var cs []call
	for i := 0; i < 300; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		cs = append(cs, call{start: at, end: at.Add(2 * time.Millisecond), kind: "http_503"})
	}
	r := Result{Name: "baseline", HasLoad: true, Summary: summarize(cs, 500*time.Millisecond, nil)}
	// what runBaseline adds when the idle re-send of the first 100 fails as well
	r.add("failed_idle_served", 0, "req")
	r.add("failed_idle_unserved", 100, "req")
	r.require("failed_idle_served", "==", 0)
	r.require("goodput", ">=", 0.9) // as runBaseline requires
	r.judge()
	if r.Verdict == Pass {
		t.Errorf("baseline %s with %d of %d requests failed (goodput %.0f %%)", r.Verdict, r.Failed, r.Requests, 100*r.Goodput)
	}
}

// TestMemoryRestartIsCounted: the memory scenario restarts a node's series when its pid
// changes, so a node that grows until it is killed and is restarted is judged on its new
// process's growth: the restart itself is counted (runMemory requires none).
func TestMemoryRestartIsCounted(t *testing.T) {
	var s rssSeries
	s.add(100, 40<<20)
	s.add(100, 300<<20)
	s.add(100, 900<<20) // then killed for memory
	s.add(200, 40<<20)  // restarted by the supervisor
	s.add(200, 41<<20)
	if s.restarts != 1 {
		t.Errorf("restarts = %d after a new pid, want 1", s.restarts)
	}
}

// TestOverflowedRequestsReachTheSummary: a request the open loop could not send (the in-flight
// cap) never reaches the target's Do; it must still reach the recorder the scenario is judged
// from, as a failure.
func TestOverflowedRequestsReachTheSummary(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Documents []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		<-release
		type res struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		}
		out := struct {
			Results []res `json:"results"`
		}{}
		for i := range req.Documents {
			out.Results = append(out.Results, res{i, 0.5})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	rec := &recorder{}
	defer rec.close()
	tg, err := rec.target(srv.URL+"/v1/rerank", 0)
	if err != nil {
		t.Fatal(err)
	}
	spec := workload.Default()
	spec.TraceSize = 16
	tr, err := workload.New(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); close(release) }()
	res, err := load.Run(context.Background(), load.Config{Target: tg, Trace: tr, Rate: 200, Duration: 200 * time.Millisecond, MaxInFlight: 2, Seed: 1, Overflow: tg.(*recTarget).overflowed})
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(rec.snapshot(), 500*time.Millisecond, nil)
	if s.Requests != res.Requests || s.Failed != res.Errors {
		t.Errorf("scenario summary: %d requests, %d failed; the load sent %d with %d errors %v", s.Requests, s.Failed, res.Requests, res.Errors, res.ErrorsBy)
	}
}
