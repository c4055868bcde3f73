package faults

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/bench/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJudge(t *testing.T) {
	load := Summary{Requests: 300, OK: 298, Failed: 2, FailedBy: map[string]int64{"http_504": 2}, P50ms: 120, P99ms: 310, Goodput: 0.99}
	tests := []struct {
		name        string
		r           Result
		want        Verdict
		wantReasons []string
		wantNot     []string
	}{
		{
			name: "every criterion holds",
			r: Result{Figures: []Figure{{"back_in_traffic_s", 0.4, "s"}}, Criteria: []Criterion{
				{Figure: "back_in_traffic_s", Op: "<=", Limit: 1}, {Figure: "failed", Op: "==", Limit: 0}},
				Summary: Summary{Requests: 10, OK: 10}, HasLoad: true},
			want: Pass,
		},
		{
			name: "summary figures are judged",
			r: Result{Summary: load, HasLoad: true, Criteria: []Criterion{
				{Figure: "failed", Op: "==", Limit: 0}, {Figure: "goodput", Op: ">=", Limit: 0.99}, {Figure: "p99_ms", Op: "<=", Limit: 300}}},
			want:        Fail,
			wantReasons: []string{"failed == 0: got 2", "p99_ms <= 300: got 310"},
		},
		{
			name:        "a required figure that was not measured fails",
			r:           Result{Criteria: []Criterion{{Figure: "back_in_traffic_s", Op: "<=", Limit: 1}}},
			want:        Fail,
			wantReasons: []string{"back_in_traffic_s <= 1: not measured"},
		},
		{
			name: "an optional figure that was not measured is not judged",
			r: Result{Summary: Summary{Requests: 5, OK: 5}, HasLoad: true, Criteria: []Criterion{
				{Figure: "failed", Op: "==", Limit: 0}, {Figure: "p99_impact", Op: "<=", Limit: 0.2, Optional: true}}},
			want:    Pass,
			wantNot: []string{"p99_impact <= 0.2 (not measured)"},
		},
		{
			name: "an optional figure that was measured is judged",
			r: Result{Figures: []Figure{{"p99_impact", 0.35, ""}}, Criteria: []Criterion{
				{Figure: "p99_impact", Op: "<=", Limit: 0.2, Optional: true}}},
			want:        Fail,
			wantReasons: []string{"p99_impact <= 0.2: got 0.35"},
		},
		{
			name: "at the limit holds",
			r: Result{Figures: []Figure{{"accepted_within_slo", 0.99, ""}, {"recovery_s", 1, "s"}}, Criteria: []Criterion{
				{Figure: "accepted_within_slo", Op: ">=", Limit: 0.99}, {Figure: "recovery_s", Op: "<=", Limit: 1}}},
			want: Pass,
		},
		{
			name:        "the suite's own error fails",
			r:           Result{Err: "restart proxy: boom", Figures: []Figure{{"x", 1, ""}}, Criteria: []Criterion{{Figure: "x", Op: "==", Limit: 1}}},
			want:        Fail,
			wantReasons: []string{"suite error: restart proxy: boom"},
		},
		{
			name:        "no criteria is no pass",
			r:           Result{Figures: []Figure{{"x", 1, ""}}},
			want:        Fail,
			wantReasons: []string{"no pass criteria"},
		},
		{
			name: "load figures are absent without load",
			r:    Result{Criteria: []Criterion{{Figure: "failed", Op: "==", Limit: 0}}},
			want: Fail, wantReasons: []string{"failed == 0: not measured"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.judge()
			if r.Verdict != tc.want {
				t.Errorf("verdict %s, want %s (reasons %q)", r.Verdict, tc.want, r.Reasons)
			}
			if diff := cmp.Diff(tc.wantReasons, r.Reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNot, r.NotJudged); diff != "" {
				t.Errorf("not judged (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSkipIsNotJudged(t *testing.T) {
	r := Result{Name: "prefix-crash", Criteria: []Criterion{{Figure: "dirty_reads", Op: "==", Limit: 0}}}
	r.skip("needs real nodes")
	r.judge()
	if r.Verdict != Skip || r.Line() != "SKIP prefix-crash: needs real nodes" {
		t.Errorf("got %s, line %q", r.Verdict, r.Line())
	}
}

func TestLine(t *testing.T) {
	r := Result{Name: "sigkill", HasLoad: true, RateRPS: 9.04,
		Summary:  Summary{Requests: 358, OK: 351, Failed: 7, FailedBy: map[string]int64{"http_504": 5, "http_429": 2}, P50ms: 181.4, P99ms: 402.6, Goodput: 0.978},
		Figures:  []Figure{{"back_in_traffic_s", 2.8, "s"}},
		Criteria: []Criterion{{Figure: "failed", Op: "==", Limit: 0}, {Figure: "back_in_traffic_s", Op: "<=", Limit: 1}}}
	r.judge()
	want := "FAIL sigkill: 358 req at 9.0/s, failed 7 (http_504 5, http_429 2), p50 181 ms, p99 403 ms, goodput 97.8 %; " +
		"back_in_traffic_s=2.80 s — FAILED: failed == 0: got 7; back_in_traffic_s <= 1: got 2.80"
	if got := r.Line(); got != want {
		t.Errorf("line\n got %s\nwant %s", got, want)
	}
}

// calls builds canned calls: each entry is (seconds after t0 the call was sent, latency ms, kind).
func calls(t0 time.Time, spec ...any) []call {
	var out []call
	for i := 0; i+2 < len(spec); i += 3 {
		at := t0.Add(time.Duration(spec[i].(float64) * float64(time.Second)))
		out = append(out, call{start: at, end: at.Add(time.Duration(spec[i+1].(int)) * time.Millisecond), kind: spec[i+2].(string)})
	}
	return out
}

func TestSummarize(t *testing.T) {
	t0 := time.Now()
	cs := calls(t0, 0.1, 100, "", 0.2, 300, "", 0.3, 700, "", 0.4, 20, "http_429", 0.5, 500, "http_504")
	got := summarize(cs, 500*time.Millisecond, rejectedKinds)
	want := Summary{Requests: 5, OK: 3, Failed: 1, FailedBy: map[string]int64{"http_504": 1}, P50ms: 300, P99ms: 700, Goodput: 0.4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if got := summarize(nil, time.Second, nil); got.Requests != 0 || got.P99ms != 0 || got.FailedBy != nil {
		t.Errorf("empty summary: %+v", got)
	}
}

func TestJudgeOverload(t *testing.T) {
	t0 := time.Now()
	tEnd := t0.Add(20 * time.Second)
	slo := 500 * time.Millisecond
	p1 := calls(t0, 1.0, 200, "", 2.0, 30, "http_429", 3.0, 400, "", 4.0, 900, "", 5.0, 10, "grpc_resourceexhausted", 6.0, 500, "grpc_deadline_exceeded")
	tests := []struct {
		name string
		p2   []call
		want map[string]float64
	}{
		{"recovered at once", calls(tEnd, 0.2, 100, "", 1.5, 120, "", 5.0, 90, ""),
			map[string]float64{"rejected": 2, "accepted_within_slo": 0.5, "recovery_s": 0, "after_bad": 0}},
		{"slow replies for two seconds", calls(tEnd, 0.2, 800, "", 1.5, 600, "", 5.0, 90, ""),
			map[string]float64{"rejected": 2, "accepted_within_slo": 0.5, "recovery_s": 2, "after_bad": 2}},
		{"a rejection after the overload counts against recovery", calls(tEnd, 3.2, 5, "http_429"),
			map[string]float64{"recovery_s": 4, "after_bad": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{Figures: judgeOverload(p1, tc.p2, tEnd, slo)}
			for name, want := range tc.want {
				got, ok := r.figure(name)
				if !ok || got != want {
					t.Errorf("%s = %v (measured %v), want %v; figures %+v", name, got, ok, want, r.Figures)
				}
			}
		})
	}
}

func TestSelectScenarios(t *testing.T) {
	got, err := selectScenarios([]string{"malformed", "baseline"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.name)
	}
	if diff := cmp.Diff([]string{"baseline", "malformed"}, names); diff != "" {
		t.Errorf("selection keeps the suite's order (-want +got):\n%s", diff)
	}
	_, err = selectScenarios([]string{"slow11"})
	if err == nil || !strings.Contains(err.Error(), `"slow11"`) || !strings.Contains(err.Error(), "sigkill") {
		t.Errorf("unknown scenario: %v, want an error naming it and the known ones", err)
	}
	all, _ := selectScenarios(nil)
	if len(all) != len(Names()) {
		t.Errorf("no selection runs %d scenarios, want all %d", len(all), len(Names()))
	}
}

func TestMalformedCases(t *testing.T) {
	cs := malformedCases()
	if len(cs) < 200 {
		t.Errorf("%d cases, want about 200 or more", len(cs))
	}
	seen := map[string]bool{}
	var grpc, node int
	for _, c := range cs {
		key := c.route + " " + c.name
		if seen[key] {
			t.Errorf("duplicate case %s", key)
		}
		seen[key] = true
		switch {
		case c.grpc && c.code == 0:
			t.Errorf("%s: gRPC case without an expected code", key)
		case !c.grpc && len(c.status) == 0:
			t.Errorf("%s: HTTP case without expected statuses", key)
		}
		if c.grpc {
			grpc++
		}
		if c.toNode {
			node++
		}
	}
	if grpc < 20 || node < 3 {
		t.Errorf("%d gRPC cases (%d to a node), want ≥ 20 and ≥ 3", grpc, node)
	}
}

func TestMalformedResultCheck(t *testing.T) {
	c := mcase{name: "query is a number", route: "/v1/rerank", status: s4xx, field: "query"}
	tests := []struct {
		name string
		m    mresult
		want bool
	}{
		{"names the field", mresult{c: c, status: 400, message: "query: must be a string, got number"}, true},
		{"wrong status", mresult{c: c, status: 500, message: "query: boom"}, false},
		{"does not name the field", mresult{c: c, status: 422, message: "bad request"}, false},
		{"no message", mresult{c: c, status: 400}, false},
	}
	for _, tc := range tests {
		if got := tc.m.ok(); got != tc.want {
			t.Errorf("%s: ok() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCounterDeltas(t *testing.T) {
	before := map[string]float64{`rejected_total{reason="overload"}`: 3, "retries_total": 5}
	after := map[string]float64{`rejected_total{reason="overload"}`: 10, `rejected_total{reason="deadline"}`: 1, "retries_total": 5}
	if got, want := counterDeltas(before, after), `rejected_total{reason="deadline"} +1, rejected_total{reason="overload"} +7`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// A proxy restarted in between: counters went back; nothing is reported.
	if got := counterDeltas(after, before); got != "" {
		t.Errorf("after a restart: %q, want nothing", got)
	}
}

// The scenarios judged against the baseline replay its arrivals and requests, each with queries
// no cache has seen; every other load draws fresh ones.
func TestPairedLoadsReplayTheBaselinesRequestsUnderNewQueries(t *testing.T) {
	spec, err := workload.Load("../../configs/workloads/compare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{o: Options{Seed: 5}, seed: 5}
	base, baseArr, err := e.loadPlan(15, 10*time.Second, true, spec)
	if err != nil {
		t.Fatal(err)
	}
	fresh, freshArr, err := e.loadPlan(15, 10*time.Second, false, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, againArr, err := e.loadPlan(15, 10*time.Second, true, spec)
	if err != nil {
		t.Fatal(err)
	}
	if baseArr != againArr || freshArr == baseArr {
		t.Errorf("arrival seeds: paired %d and %d, fresh %d; want the paired equal, the fresh apart", baseArr, againArr, freshArr)
	}
	if base.Len() != again.Len() || base.Len() < 150 {
		t.Fatalf("paired traces of %d and %d requests", base.Len(), again.Len())
	}
	for i := range base.Len() {
		b, a := base.At(i), again.At(i)
		bq, ok1 := strings.CutPrefix(b.Query, "r01 ")
		aq, ok2 := strings.CutPrefix(a.Query, "r02 ")
		if !ok1 || !ok2 || bq != aq || !slices.Equal(b.Items, a.Items) {
			t.Fatalf("request %d: %q %q and %q %q; want the same request under the prefixes r01, r02", i, b.Query, b.Items, a.Query, a.Items)
		}
		if i == 0 && slices.Equal(fresh.At(0).Items, b.Items) {
			t.Errorf("a fresh load replays the paired trace")
		}
	}
}
