package load

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"
)

// deadTarget is an HTTP target on a port nothing listens on.
func deadTarget(t *testing.T) Target {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return newTarget(t, "http://"+addr+"/v1/rerank", 4)
}

// TestNoSuccessfulRequests: when every request fails there is no latency to report, so neither
// the summary nor the JSON may show percentiles (a p50 of 0 ms would read as instant replies),
// and the run fails its error check.
func TestNoSuccessfulRequests(t *testing.T) {
	res, err := Run(context.Background(), Config{Target: deadTarget(t), Trace: smallTrace(t), Rate: 200, Duration: 100 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Errors == 0 {
		t.Fatalf("ok %d errors %d, want only errors", res.OK, res.Errors)
	}

	sum := res.Summary()
	if !strings.Contains(sum, "no successful requests") || strings.Contains(sum, "p50") {
		t.Errorf("summary:\n%s\nwant %q and no percentiles", sum, "no successful requests")
	}

	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms"} {
		v, ok := m[k]
		if !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	for _, k := range []string{"requests", "errors", "throughput_rps", "goodput_rps", "errors_by_kind"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result JSON lacks %q", k)
		}
	}
	tl, _ := m["timeline"].([]any)
	if len(tl) == 0 {
		t.Fatal("no timeline")
	}
	for _, w := range tl {
		if w := w.(map[string]any); w["p50_ms"] != nil || w["p99_ms"] != nil {
			t.Errorf("timeline window %v: percentiles of a second without a success, want null", w)
		}
	}
	// Readers (bench report, compare) decode the nulls as 0 without error.
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Errors != res.Errors || back.P50ms != 0 {
		t.Errorf("round trip: %v, errors %d p50 %v", err, back.Errors, back.P50ms)
	}

	err = res.CheckErrors(0.01)
	if err == nil || !strings.Contains(err.Error(), KindConnection) {
		t.Errorf("CheckErrors = %v, want a failure naming %q", err, KindConnection)
	}
}

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		name     string
		requests int64
		errs     map[string]int64
		max      float64
		want     string // substring of the error; "" for none
	}{
		{name: "clean", requests: 100, max: 0.01},
		{name: "at the limit", requests: 100, errs: map[string]int64{"http_504": 1}, max: 0.01},
		{name: "over the limit", requests: 25, errs: map[string]int64{"http_504": 19, "http_429": 3}, max: 0.01,
			want: "22 of 25 requests failed (88.0 %, above --max-error-rate 1.0 %): 19× http_504, 3× http_429"},
		{name: "zero tolerance", requests: 1000, errs: map[string]int64{"timeout": 1}, max: 0, want: "1 of 1000"},
		{name: "all failures allowed", requests: 5, errs: map[string]int64{"connection": 5}, max: 1},
		{name: "nothing measured", requests: 0, max: 1, want: "no request was measured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Result{Requests: tt.requests, ErrorsBy: tt.errs}
			for _, n := range tt.errs {
				r.Errors += n
			}
			r.OK = r.Requests - r.Errors
			err := r.CheckErrors(tt.max)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckErrors(%v) = %v, want nil", tt.max, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckErrors(%v) = %v, want it to contain %q", tt.max, err, tt.want)
			}
		})
	}
}

// TestSummaryWithSuccesses keeps the percentile line when something succeeded.
func TestSummaryWithSuccesses(t *testing.T) {
	r := &Result{Requests: 2, OK: 1, Errors: 1, ErrorsBy: map[string]int64{"http_504": 1}, P50ms: 12.5, P99ms: 40}
	if s := r.Summary(); !strings.Contains(s, "latency of the ok p50 12.5 ms") || strings.Contains(s, "no successful") {
		t.Errorf("summary:\n%s", s)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"p50_ms":12.5`) {
		t.Errorf("JSON %s lacks p50_ms 12.5", b)
	}
}

// TestSummarySaysWhereLatencyIsMeasuredFrom: open-loop latency counts from each request's
// intended send time (a late generator's delay is charged to the server, no coordinated
// omission), closed-loop latency from the actual send; the same figure means different things,
// so the printed summary says which.
func TestSummarySaysWhereLatencyIsMeasuredFrom(t *testing.T) {
	for mode, want := range map[string]string{"open": "intended send time", "closed": "actual send"} {
		r := &Result{Mode: mode, Requests: 1, OK: 1, ErrorsBy: map[string]int64{}, P50ms: 3}
		if s := r.Summary(); !strings.Contains(s, want) {
			t.Errorf("%s loop summary does not say latency is from the %s:\n%s", mode, want, s)
		}
	}
}
