package faults

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Verdict is a scenario's outcome.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// Summary is what the client saw of a scenario's measured requests.
type Summary struct {
	Requests int64 `json:"requests"`
	OK       int64 `json:"ok"`
	// Failed counts the failures the scenario judges (for overload: rejections excluded).
	Failed   int64            `json:"failed"`
	FailedBy map[string]int64 `json:"failed_by_kind,omitempty"`
	// P50ms and P99ms are over successful replies; 0 when there was none.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// Goodput is the share of measured requests answered successfully within the SLO.
	Goodput float64 `json:"goodput"`
}

// Figure is one measured number of a scenario.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

// Criterion is one pass condition: Figure Op Limit.
type Criterion struct {
	Figure string  `json:"figure"`
	Op     string  `json:"op"` // "<=", ">=" or "=="
	Limit  float64 `json:"limit"`
	// Optional criteria are not judged when their figure was not measured (a comparison whose
	// reference scenario did not run); the others then fail.
	Optional bool `json:"optional,omitempty"`
}

func (c Criterion) String() string { return fmt.Sprintf("%s %s %s", c.Figure, c.Op, num(c.Limit)) }

func (c Criterion) holds(v float64) bool {
	const eps = 1e-9
	switch c.Op {
	case "<=":
		return v <= c.Limit+eps
	case ">=":
		return v >= c.Limit-eps
	case "==":
		return math.Abs(v-c.Limit) <= eps
	}
	return false
}

// Result is one scenario's outcome and figures.
type Result struct {
	Name    string  `json:"name"`
	Goal    string  `json:"goal"`
	Verdict Verdict `json:"verdict"`
	// Reasons are the criteria that failed, the skip reason, or the suite's error.
	Reasons []string `json:"reasons,omitempty"`
	// NotJudged lists optional criteria whose figure was not measured.
	NotJudged []string `json:"not_judged,omitempty"`
	Summary
	RateRPS  float64     `json:"rate_rps,omitempty"`
	Figures  []Figure    `json:"figures"`
	Criteria []Criterion `json:"criteria"`
	// Details are extra lines for the report (events with their times, unexpected cases).
	Details []string `json:"details,omitempty"`
	WallSec float64  `json:"wall_s"`
	// Err is set when the suite itself could not run the scenario; the verdict is then FAIL.
	Err string `json:"error,omitempty"`
	// hasLoad: Summary is meaningful (the scenario sent load).
	HasLoad bool `json:"has_load"`
}

// add records a figure.
func (r *Result) add(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{name, v, unit})
}

// require adds a pass condition.
func (r *Result) require(figure, op string, limit float64) {
	r.Criteria = append(r.Criteria, Criterion{Figure: figure, Op: op, Limit: limit})
}

// figure looks a figure up: the scenario's own, else the summary's (requests, failed, p50_ms,
// p99_ms, goodput).
func (r *Result) figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	if r.HasLoad {
		switch name {
		case "requests":
			return float64(r.Requests), true
		case "failed":
			return float64(r.Failed), true
		case "p50_ms":
			return r.P50ms, r.OK > 0
		case "p99_ms":
			return r.P99ms, r.OK > 0
		case "goodput":
			return r.Goodput, r.Requests > 0
		}
	}
	return 0, false
}

// judge sets the verdict from the criteria: FAIL when the suite could not run the scenario, when a
// criterion does not hold, or when a required figure is missing; SKIP stays SKIP; else PASS.
func (r *Result) judge() {
	if r.Verdict == Skip {
		return
	}
	r.Reasons, r.NotJudged = nil, nil
	if r.Err != "" {
		r.Reasons = append(r.Reasons, "suite error: "+r.Err)
	}
	if len(r.Criteria) == 0 && r.Err == "" {
		r.Reasons = append(r.Reasons, "no pass criteria")
	}
	if r.HasLoad && r.Requests == 0 {
		r.Reasons = append(r.Reasons, "no request measured")
	}
	for _, c := range r.Criteria {
		v, ok := r.figure(c.Figure)
		switch {
		case !ok && c.Optional:
			r.NotJudged = append(r.NotJudged, c.String()+" (not measured)")
		case !ok:
			r.Reasons = append(r.Reasons, c.String()+": not measured")
		case !c.holds(v):
			r.Reasons = append(r.Reasons, fmt.Sprintf("%s: got %s", c, num(v)))
		}
	}
	r.Verdict = Pass
	if len(r.Reasons) > 0 {
		r.Verdict = Fail
	}
}

// skip marks the scenario skipped for reason.
func (r *Result) skip(reason string) {
	r.Verdict = Skip
	r.Reasons = []string{reason}
}

// Line is the one-line report: "PASS name: figures".
func (r *Result) Line() string {
	line := fmt.Sprintf("%s %s: ", r.Verdict, r.Name)
	if r.Verdict == Skip {
		return line + strings.Join(r.Reasons, "; ")
	}
	line += r.FiguresText()
	if len(r.Reasons) > 0 {
		line += " — FAILED: " + strings.Join(r.Reasons, "; ")
	}
	return line
}

// FiguresText is the load's figures, then the scenario's own.
func (r *Result) FiguresText() string {
	var parts []string
	if r.HasLoad {
		parts = append(parts, r.loadFigures())
	}
	if f := r.ownFigures(); f != "" {
		parts = append(parts, f)
	}
	return strings.Join(parts, "; ")
}

// loadFigures is "N req, failed F (kind n, …), p50 … ms, p99 … ms, goodput …%".
func (r *Result) loadFigures() string {
	s := fmt.Sprintf("%d req", r.Requests)
	if r.RateRPS > 0 {
		s += fmt.Sprintf(" at %.1f/s", r.RateRPS)
	}
	s += fmt.Sprintf(", failed %d", r.Failed)
	if len(r.FailedBy) > 0 {
		s += " (" + kinds(r.FailedBy) + ")"
	}
	if r.OK > 0 {
		s += fmt.Sprintf(", p50 %.0f ms, p99 %.0f ms", r.P50ms, r.P99ms)
	}
	return s + fmt.Sprintf(", goodput %.1f %%", 100*r.Goodput)
}

// ownFigures is "name=value unit, …".
func (r *Result) ownFigures() string {
	var parts []string
	for _, f := range r.Figures {
		p := f.Name + "=" + num(f.Value)
		if f.Unit != "" {
			p += " " + f.Unit
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// kinds lists counts by kind, largest first, then by name.
func kinds(m map[string]int64) string {
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// num prints a figure compactly: integers as integers, others with three significant digits.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%d", int64(v))
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
