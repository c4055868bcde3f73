package compare

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestHeadlineOfABaselineWithoutSuccessIsNotZeroMs: a baseline whose every request failed has
// no latency. Its p99 field is 0, and the headline must not print that as a 0 ms tail with a
// 0.00× "gain" (which reads as the baseline being infinitely faster than the best).
func TestHeadlineOfABaselineWithoutSuccessIsNotZeroMs(t *testing.T) {
	rows := []Row{
		{Config: Baseline.Name(), Load: 0.9, Requests: 100, Errors: 100, ErrorsBy: map[string]int64{"http_504": 100}},
		{Config: Best.Name(), Load: 0.9, Requests: 100, P50ms: 200, P99ms: 300, P999ms: 320, GoodputRatio: 1},
	}
	r := &Report{Emulated: true, SLOms: 500, Rows: rows, Headline: Headline(rows)}
	txt := r.HeadlineText()
	if strings.Contains(txt, "p99 0.0 →") || strings.Contains(txt, "0.00×") {
		t.Errorf("headline prints the failed baseline's missing latency as 0 ms: %q", txt)
	}
	if !strings.Contains(txt, "p99 n/a → 300.0 ms") {
		t.Errorf("headline %q: want the baseline's p99 as n/a (no successful request)", txt)
	}
}

// TestFailuresCountInTheComparedP99: p50/p99/p99.9 are of the successful requests only, so a
// configuration whose slowest requests fail (504 at the proxy deadline) reads fast for it: in
// bench/results/compare-emulated-16 fixed+random at 90 % lost 54 of 249 requests and still
// showed a p99 of 995.8 ms, under the deadline. The table and the headline must also give the
// p99 with each failure counted at the client timeout (load.Result.P99AllMs). The report is read
// from JSON, as `bench compare --replot` does.
func TestFailuresCountInTheComparedP99(t *testing.T) {
	const js = `{"emulated": true, "slo_ms": 500, "rows": [
	  {"config": "fixed+random", "load": 0.9, "requests": 249, "errors": 54, "errors_by_kind": {"http_504": 54},
	   "p50_ms": 824.3, "p99_ms": 995.8, "p999_ms": 999.9, "p99_all_ms": 10000, "goodput_ratio": 0.056},
	  {"config": "cost+least_loaded", "load": 0.9, "requests": 249, "errors": 0,
	   "p50_ms": 287.0, "p99_ms": 730.6, "p999_ms": 778.2, "p99_all_ms": 730.6, "goodput_ratio": 0.94}]}`
	var r Report
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	r.Headline = Headline(r.Rows)
	if tab := r.Table(false); !strings.Contains(tab, "10000.0") {
		t.Errorf("table hides the failures from p99:\n%s", tab)
	}
	if txt := r.HeadlineText(); !strings.Contains(txt, "10000.0 → 730.6 ms") {
		t.Errorf("headline %q: want the p99 counting failures at the timeout too (10000.0 → 730.6 ms)", txt)
	}
}
