package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

func faultConfig() Config {
	cfg := testConfig()
	cfg.FaultInjection = true
	return cfg
}

func post(t *testing.T, h *harness, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+h.n.HTTPAddr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestFaultOffByDefault(t *testing.T) {
	h := start(t, testConfig(), loadEngine(newFake()), true)
	if code, _ := get(t, h, "/debug/fault"); code != http.StatusNotFound {
		t.Errorf("GET /debug/fault without fault_injection = %d, want 404", code)
	}
	if code, _ := post(t, h, "/debug/fault", `{"fail_next":1}`); code != http.StatusNotFound {
		t.Errorf("POST /debug/fault without fault_injection = %d, want 404", code)
	}
	if h.n.sched.fault != nil {
		t.Error("scheduler has a fault hook without fault_injection")
	}
}

func TestFaultAPI(t *testing.T) {
	h := start(t, faultConfig(), loadEngine(newFake()), true)
	tests := []struct {
		name     string
		body     string
		wantCode int
		want     string // substring of the reply
	}{
		{"defaults", "", 0, `{"slowdown":1,"stall":false,"fail_next":0,"fail_code":"UNAVAILABLE"}`},
		{"set all", `{"slowdown":10,"stall":true,"fail_next":2,"fail_code":"RESOURCE_EXHAUSTED"}`, 200,
			`{"slowdown":10,"stall":true,"fail_next":2,"fail_code":"RESOURCE_EXHAUSTED"}`},
		{"absent fields kept", `{"stall":false}`, 200, `{"slowdown":10,"stall":false,"fail_next":2,"fail_code":"RESOURCE_EXHAUSTED"}`},
		{"slowdown 0 is none", `{"slowdown":0,"fail_code":""}`, 200, `{"slowdown":1,"stall":false,"fail_next":2,"fail_code":"UNAVAILABLE"}`},
		{"bad slowdown", `{"slowdown":0.5}`, 400, "fault.slowdown"},
		{"bad fail_next", `{"fail_next":-1}`, 400, "fault.fail_next"},
		{"bad fail_code", `{"fail_code":"BOGUS"}`, 400, "fault.fail_code"},
		{"OK is no failure", `{"fail_code":"OK"}`, 400, "fault.fail_code"},
		{"unknown field", `{"slowness":3}`, 400, "slowness"},
		{"unchanged after errors", "", 0, `{"slowdown":1,"stall":false,"fail_next":2,"fail_code":"UNAVAILABLE"}`},
	}
	for _, tc := range tests {
		var code int
		var body string
		if tc.wantCode == 0 {
			code, body = get(t, h, "/debug/fault")
			tc.wantCode = 200
		} else {
			code, body = post(t, h, "/debug/fault", tc.body)
		}
		if code != tc.wantCode || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d containing %s", tc.name, code, body, tc.wantCode, tc.want)
		}
	}
}

func TestFaultFailNext(t *testing.T) {
	h := start(t, faultConfig(), loadEngine(newFake()), true)
	if code, body := post(t, h, "/debug/fault", `{"fail_next":2,"fail_code":"RESOURCE_EXHAUSTED"}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	var got []codes.Code
	for range 3 {
		_, err := h.client.ScoreBatch(ctxT(t), batch("q", "doc"))
		got = append(got, status.Code(err))
	}
	if diff := cmp.Diff([]codes.Code{codes.ResourceExhausted, codes.ResourceExhausted, codes.OK}, got); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
	if _, body := get(t, h, "/debug/fault"); !strings.Contains(body, `"fail_next":0`) {
		t.Errorf("after the failures: %s, want fail_next 0", body)
	}
}

// TestFaultSlowdown: a pass of d (the engine's own measure) waits (k−1)·d more on the fault's
// clock and is reported, and learned, as k·d.
func TestFaultSlowdown(t *testing.T) {
	f := newFake()
	f.started = nil
	f.truth = costmodel.Coeffs{A: 1e-3} // the fake reports 1 ms per token without sleeping
	s := newScheduler(1000, 10, false)
	s.fault = newFaults(nil)
	var mu sync.Mutex
	var waits []time.Duration
	s.fault.sleep = func(_ context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return nil
	}
	k := 10.0
	if _, err := s.fault.apply(faultPatch{Slowdown: &k}); err != nil {
		t.Fatal(err)
	}
	g, err := f.Tokenize("", "q", []string{"document"}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Duration(f.truth.Seconds(f.CostFeatures([]*scorer.Group{g})) * float64(time.Second))
	if err := s.admit(); err != nil {
		t.Fatal(err)
	}
	j, err := s.submit(context.Background(), f, g, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cost := newCostModel(calibration{}, scorer.CostPrior{Coeffs: costmodel.Coeffs{A: 1e-3}, Source: "test"})
	s.start(f, cost)
	defer s.stop()
	if r := <-j.done; r.err != nil {
		t.Fatal(r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 1 || waits[0] < time.Duration(float64(d)*(k-1))-time.Microsecond || waits[0] > time.Duration(float64(d)*(k-1))+time.Microsecond {
		t.Errorf("slowdown waits %v, want one of %v ((k−1)·d with d = %v)", waits, time.Duration(float64(d)*(k-1)), d)
	}
	// The learned model saw the slow pass: its estimate for the same work is above the prior's.
	if got, prior := cost.seconds(f.CostFeatures([]*scorer.Group{g})), d.Seconds(); !(got > prior*1.5) {
		t.Errorf("learned estimate %.4fs after a 10× pass, want well above the prior's %.4fs", got, prior)
	}
}

// TestFaultSlowdownRealTime: through the node, a slowdown of 3 on a fake pass of 20 ms makes the
// call take at least the extra 40 ms.
func TestFaultSlowdownRealTime(t *testing.T) {
	f := newFake()
	f.started = nil
	h := start(t, faultConfig(), loadEngine(f), true)
	g, _ := f.Tokenize("", "q", []string{"document"}, scorer.TokenizeOptions{})
	tokens := f.CostFeatures([]*scorer.Group{g})
	f.truth = costmodel.Coeffs{A: 0.020 / costmodel.Coeffs{A: 1}.Seconds(tokens)} // 20 ms for this batch
	if code, body := post(t, h, "/debug/fault", `{"slowdown":3}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	t0 := time.Now()
	resp, err := h.client.ScoreBatch(ctxT(t), batch("q", "document"))
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if took < 40*time.Millisecond {
		t.Errorf("call took %v, want ≥ 40 ms ((3−1) × 20 ms)", took)
	}
	if fs := resp.GetStats().GetForwardSeconds(); fs < 0.040 {
		t.Errorf("reported forward_seconds %.3f, want ≥ 0.040", fs)
	}
}

// TestFaultStall: a stalled node holds its passes (the engine is not called) until the stall is
// cleared; the held call then succeeds.
func TestFaultStall(t *testing.T) {
	f := newFake()
	h := start(t, faultConfig(), loadEngine(f), true)
	if code, body := post(t, h, "/debug/fault", `{"stall":true}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	ch := goCall(ctxT(t), h, batch("q", "doc"))
	waitSched(t, h.n.sched, "a running pass", func(l loadSnapshot) bool { return l.InflightBatches == 1 })
	select {
	case <-f.started:
		t.Fatal("the engine ran a pass while the node was stalled")
	case r := <-ch:
		t.Fatalf("the call returned while the node was stalled: %v", r.err)
	default:
	}
	if code, body := post(t, h, "/debug/fault", `{"stall":false}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	if r := <-ch; r.err != nil {
		t.Fatalf("after the stall cleared: %v", r.err)
	}
	<-f.started
}

// TestFaultStallCallerGone: a caller that gives up on a stalled pass gets its context's error,
// and the pass never reaches the engine.
func TestFaultStallCallerGone(t *testing.T) {
	f := newFake()
	h := start(t, faultConfig(), loadEngine(f), true)
	post(t, h, "/debug/fault", `{"stall":true}`)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch := goCall(ctx, h, batch("q", "doc"))
	waitSched(t, h.n.sched, "a running pass", func(l loadSnapshot) bool { return l.InflightBatches == 1 })
	cancel()
	if r := <-ch; status.Code(r.err) != codes.Canceled {
		t.Fatalf("cancelled call: %v, want CANCELED", r.err)
	}
	waitSched(t, h.n.sched, "idle", func(l loadSnapshot) bool { return l.InflightBatches == 0 })
	if n := len(f.passCounts()); n != 0 {
		t.Errorf("engine ran %d passes, want 0", n)
	}
}
