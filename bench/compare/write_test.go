package compare

import (
	"strings"
	"testing"
)

// TestTableNoSuccess: a run in which every request failed shows n/a, not a 0 ms latency.
func TestTableNoSuccess(t *testing.T) {
	rep := &Report{SLOms: 500, Rows: []Row{
		{Config: "cost+least_loaded", Load: 0.5, Requests: 10, P50ms: 120, P99ms: 300, P999ms: 310},
		{Config: "fixed+random", Load: 0.5, Requests: 10, Errors: 10, ErrorsBy: map[string]int64{"http_504": 10}},
	}}
	lines := strings.Split(rep.Table(false), "\n")
	if !strings.Contains(lines[1], "120.0") || strings.Contains(lines[1], "n/a") {
		t.Errorf("row with successes: %q", lines[1])
	}
	if strings.Count(lines[2], "n/a") != 3 || strings.Contains(lines[2], " 0.0 ") {
		t.Errorf("row without successes: %q, want n/a for p50, p99 and p99.9", lines[2])
	}
}
