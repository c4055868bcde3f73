package compare

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// nodeMetrics is a scorer node's exposition with the counters a cell reads.
func nodeMetrics(forwardSum, hits, misses, tHits, tMisses, prefix, reused, item float64) string {
	// ScoreBatch calls by code and forward passes: a tenth of the forward seconds' sum, and half that.
	return fmt.Sprintf(`# TYPE relevance_scorer_requests_total counter
relevance_scorer_requests_total{code="OK"} %g
relevance_scorer_requests_total{code="Canceled"} 1
# TYPE relevance_scorer_forward_passes_total counter
relevance_scorer_forward_passes_total %g
# TYPE relevance_scorer_forward_duration_seconds histogram
relevance_scorer_forward_duration_seconds_bucket{le="0.5"} 1
relevance_scorer_forward_duration_seconds_bucket{le="+Inf"} 2
relevance_scorer_forward_duration_seconds_sum %g
relevance_scorer_forward_duration_seconds_count 2
# TYPE relevance_scorer_prefix_cache_hits_total counter
relevance_scorer_prefix_cache_hits_total %g
# TYPE relevance_scorer_prefix_cache_misses_total counter
relevance_scorer_prefix_cache_misses_total %g
# TYPE relevance_scorer_prefix_cache_template_hits_total counter
relevance_scorer_prefix_cache_template_hits_total %g
# TYPE relevance_scorer_prefix_cache_template_misses_total counter
relevance_scorer_prefix_cache_template_misses_total %g
# TYPE relevance_scorer_tokens_total counter
relevance_scorer_tokens_total{kind="prefix"} %g
relevance_scorer_tokens_total{kind="reused"} %g
relevance_scorer_tokens_total{kind="item"} %g
# TYPE relevance_scorer_inflight_batches gauge
relevance_scorer_inflight_batches 0
# TYPE relevance_scorer_queue_depth gauge
relevance_scorer_queue_depth 0
`, 10*forwardSum, 5*forwardSum, forwardSum, hits, misses, tHits, tMisses, prefix, reused, item)
}

func proxyMetrics(hits, misses float64) string {
	return fmt.Sprintf(`# TYPE relevance_proxy_score_cache_hits_total counter
relevance_proxy_score_cache_hits_total %g
# TYPE relevance_proxy_score_cache_misses_total counter
relevance_proxy_score_cache_misses_total %g
`, hits, misses)
}

// server serves the exposition that *body holds at the time of each scrape.
func server(t *testing.T, body *string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, *body) }))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// TestNodeFiguresDifferenceTheCell: a cell's node side is the difference of two scrapes,
// summed over the nodes: node-seconds per request is Σ Δforward seconds ÷ the requests sent,
// and each hit rate is Δhits ÷ Δlookups of its level (template, whole query prefix, the proxy's
// score cache in items).
func TestNodeFiguresDifferenceTheCell(t *testing.T) {
	n1, n2 := nodeMetrics(10, 5, 5, 1, 4, 1000, 500, 3000), nodeMetrics(20, 0, 10, 0, 10, 2000, 0, 6000)
	px := proxyMetrics(100, 100)
	sc := newScraper([]string{server(t, &n1), server(t, &n2)})
	pa := server(t, &px)
	before, err := sc.snapshot(context.Background(), pa)
	if err != nil {
		t.Fatal(err)
	}
	// During the cell: node 1 computed 3 s, node 2 5 s; 6 of 10 prefix lookups hit, 3 of the 4
	// template lookups that followed a miss; 150 of 200 items came from the score cache.
	n1, n2 = nodeMetrics(13, 10, 7, 3, 5, 1100, 900, 3500), nodeMetrics(25, 1, 12, 1, 10, 2050, 100, 6400)
	px = proxyMetrics(250, 150)
	after, err := sc.settled(context.Background(), pa, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f := nodeFigures(before, after, 40)
	if f == nil {
		t.Fatal("no figures")
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	secs, batches := f.NodeSecondsPerRequest, f.BatchesPerRequest
	check("node-seconds per request", &secs, 8.0/40)
	check("batches per request", &batches, 80.0/40)
	check("query-prefix hit rate", f.QueryPrefixHitRate, 6.0/10)
	check("template hit rate", f.TemplateHitRate, 3.0/4)
	check("score-cache hit rate", f.ScoreCacheHitRate, 150.0/200)
	if f.ComputeSeconds != 8 || f.Requests != 40 || f.Batches != 80 || f.Passes != 40 || f.PrefixTokens != 150 || f.ReusedTokens != 500 || f.ItemTokens != 900 || !f.ScoreCache {
		t.Errorf("figures %+v", *f)
	}
}

// TestNodeFiguresWithoutLookups: no score cache in the proxy, no prefix lookup in the cell:
// the rates are n/a (nil), not 0 %, and the table says so; a row whose nodes could not be read
// has no figures at all.
func TestNodeFiguresWithoutLookups(t *testing.T) {
	n := nodeMetrics(10, 5, 5, 1, 4, 1000, 500, 3000)
	sc := newScraper([]string{server(t, &n)})
	empty := "# TYPE relevance_proxy_requests_total counter\nrelevance_proxy_requests_total 1\n"
	pa := server(t, &empty)
	before, err := sc.snapshot(context.Background(), pa)
	if err != nil {
		t.Fatal(err)
	}
	f := nodeFigures(before, before, 10)
	if f.ScoreCache || f.ScoreCacheHitRate != nil || f.QueryPrefixHitRate != nil || f.TemplateHitRate != nil || f.NodeSecondsPerRequest != 0 {
		t.Errorf("figures %+v, want no rates", *f)
	}
	if nodeFigures(snapshot{}, before, 10) != nil {
		t.Error("figures from a failed scrape")
	}
	rep := &Report{SLOms: 500, Rows: []Row{
		{Config: "cost+least_loaded", Load: 0.5, Requests: 10, P50ms: 1, Node: f},
		{Config: "cost+prefix_affinity", Load: 0.5, Requests: 10, P50ms: 1},
	}}
	lines := strings.Split(rep.Table(false), "\n")
	if !strings.Contains(lines[0], "node-s/req") || !strings.Contains(lines[0], "score-cache hits") {
		t.Errorf("header %q lacks the node columns", lines[0])
	}
	if strings.Count(lines[1], "n/a") != 3 || !strings.Contains(lines[1], "0.000") || strings.Count(lines[2], "n/a") != 5 {
		t.Errorf("rows %q and %q: want n/a for the rates without lookups and for the row without figures", lines[1], lines[2])
	}
}

// TestTableShowsNodeFigures: the markdown table carries the node side in the units the columns
// name, and a report without any (older reports, fake nodes) keeps the old columns.
func TestTableShowsNodeFigures(t *testing.T) {
	r := func(x float64) *float64 { return &x }
	rep := &Report{SLOms: 500, Rows: []Row{{Config: "cost+prefix_affinity", Load: 0.9, Requests: 400, P50ms: 50, P99ms: 200,
		Node: &NodeFigures{NodeSecondsPerRequest: 0.4567, BatchesPerRequest: 3.25, TemplateHitRate: r(0.95), QueryPrefixHitRate: r(0.625), ScoreCacheHitRate: r(0.3), ScoreCache: true}}}}
	md := rep.Table(true)
	for _, s := range []string{" 0.457 |", " 3.25 |", " 95.0% |", " 62.5% |", " 30.0% |"} {
		if !strings.Contains(md, s) {
			t.Errorf("table lacks %q:\n%s", s, md)
		}
	}
	rep.Rows[0].Node = nil
	if strings.Contains(rep.Table(true), "node-s/req") {
		t.Error("node columns without node figures")
	}
}
