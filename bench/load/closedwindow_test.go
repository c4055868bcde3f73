package load

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/bench/workload"
)

// sleepTarget answers every request after a fixed latency.
type sleepTarget struct{ lat time.Duration }

func (t sleepTarget) Prepare(r *workload.Request) (Prepared, error) {
	return Prepared{items: len(r.Items), want: len(r.Items), req: r}, nil
}
func (t sleepTarget) Do(ctx context.Context, _ Prepared) error {
	select {
	case <-time.After(t.lat):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (sleepTarget) Close() error   { return nil }
func (sleepTarget) String() string { return "sleep" }

// TestClosedLoopThroughputCountsEveryReplyInTheWindow: a closed loop of C workers against a
// server that answers in L sustains C/L replies per second, and that is what it reports. The
// replies that arrive in the measurement window to requests sent in the warm-up are replies in
// the window too: left out, the rate (the fault suite's and compare's capacity probe) reads low
// by about L over the window.
func TestClosedLoopThroughputCountsEveryReplyInTheWindow(t *testing.T) {
	const workers, lat = 4, 300 * time.Millisecond
	cfg := Config{Target: sleepTarget{lat}, Trace: smallTrace(t), Concurrency: workers,
		Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, SLO: time.Second}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := workers / lat.Seconds() // 13.3 req/s
	if res.ThroughputRPS < 0.9*want || res.ThroughputRPS > 1.1*want {
		t.Errorf("closed-loop throughput %.2f req/s (%d measured), want %.2f ± 10 %% (%d workers, %v each)",
			res.ThroughputRPS, res.Requests, want, workers, lat)
	}
	if res.GoodputRPS < 0.9*want {
		t.Errorf("closed-loop goodput %.2f req/s, want ≈ %.2f (every reply within the SLO)", res.GoodputRPS, want)
	}
}

// TestResultIsEmulatedWhenTheProxySaysSo: a run whose proxy reports (in /v1/nodes) a node on the
// emulated engine is labelled emulated without --emulated; one whose nodes are real is not.
func TestResultIsEmulatedWhenTheProxySaysSo(t *testing.T) {
	for _, emulated := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `[{"addr":"127.0.0.1:7101","inflight_cost_seconds":0,"emulated":%v}]`, emulated)
		}))
		cfg := Config{Target: sleepTarget{10 * time.Millisecond}, Trace: smallTrace(t), Concurrency: 1,
			Duration: 300 * time.Millisecond, SLO: time.Second, NodesURL: srv.URL, NodesEvery: 20 * time.Millisecond}
		res, err := Run(context.Background(), cfg)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Emulated != emulated {
			t.Errorf("proxy reporting emulated=%v: result emulated %v", emulated, res.Emulated)
		}
	}
}

// TestResultIsEmulatedWhenTheRunEndsBeforeTheFirstPoll: the proxy says a node is emulated only
// once it has answered (the flag comes with a node's replies), and the poller asked every
// NodesEvery: a run whose replies all came after the last poll (here, one shorter than the
// interval) was not labelled EMULATED. The poller asks once more as the run ends.
func TestResultIsEmulatedWhenTheRunEndsBeforeTheFirstPoll(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"addr":"127.0.0.1:7101","inflight_cost_seconds":0,"emulated":true}]`)
	}))
	defer srv.Close()
	cfg := Config{Target: sleepTarget{10 * time.Millisecond}, Trace: smallTrace(t), Rate: 100,
		Duration: 100 * time.Millisecond, SLO: time.Second, Seed: 1, NodesURL: srv.URL, NodesEvery: time.Second}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Emulated {
		t.Errorf("a %v run against a proxy reporting an emulated node: result not labelled emulated", cfg.Duration)
	}
}
