package compare

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The counters a cell's node-side figures are differenced from: the scorer nodes' (scorer/node,
// scorer/prefixcache) and the proxy's score cache (proxy/metrics.go).
const (
	mForwardSeconds = "relevance_scorer_forward_duration_seconds" // histogram: its _sum
	mPrefixHits     = "relevance_scorer_prefix_cache_hits_total"
	mPrefixMisses   = "relevance_scorer_prefix_cache_misses_total"
	mTemplateHits   = "relevance_scorer_prefix_cache_template_hits_total"
	mTemplateMisses = "relevance_scorer_prefix_cache_template_misses_total"
	mTokens         = "relevance_scorer_tokens_total"   // by kind: prefix, item (computed), reused
	mBatches        = "relevance_scorer_requests_total" // ScoreBatch calls, by code
	mPasses         = "relevance_scorer_forward_passes_total"
	mInflight       = "relevance_scorer_inflight_batches"
	mQueueDepth     = "relevance_scorer_queue_depth"
	mScoreHits      = "relevance_proxy_score_cache_hits_total"
	mScoreMisses    = "relevance_proxy_score_cache_misses_total"
)

// counters is one scrape: each family's value summed over its series (a histogram's sum of
// observations under name_sum), and each series of a one-label family also under
// name{label="value"}.
type counters map[string]float64

// parseMetrics reads a Prometheus text exposition.
func parseMetrics(r io.Reader) (counters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := counters{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			var v float64
			key := name
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				v, key = m.GetHistogram().GetSampleSum(), name+"_sum"
			default:
				continue
			}
			out[key] += v
			if l := m.GetLabel(); len(l) == 1 {
				out[fmt.Sprintf("%s{%s=%q}", key, l[0].GetName(), l[0].GetValue())] += v
			}
		}
	}
	return out, nil
}

// snapshot is the cluster's counters at one instant: the scorer nodes' summed, the proxy's.
// A nil map means a scrape failed (or, for nodes, that there are none to scrape).
type snapshot struct {
	nodes, proxy counters
}

// scraper reads the nodes' and the proxy's /metrics.
type scraper struct {
	client *http.Client
	nodes  []string // the scorer nodes' HTTP addresses
}

func newScraper(nodes []string) *scraper {
	// No keep-alive: a few scrapes per cell, and no idle connection outlives the comparison.
	tr := &http.Transport{DisableKeepAlives: true}
	return &scraper{client: &http.Client{Timeout: 3 * time.Second, Transport: tr}, nodes: nodes}
}

func (s *scraper) get(ctx context.Context, addr string) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// snapshot scrapes every node (summed) and the proxy at proxyAddr.
func (s *scraper) snapshot(ctx context.Context, proxyAddr string) (snapshot, error) {
	var snap snapshot
	var firstErr error
	if len(s.nodes) > 0 {
		snap.nodes = counters{}
		for _, a := range s.nodes {
			c, err := s.get(ctx, a)
			if err != nil {
				snap.nodes, firstErr = nil, err
				break
			}
			for k, v := range c {
				snap.nodes[k] += v
			}
		}
	}
	c, err := s.get(ctx, proxyAddr)
	if err == nil {
		snap.proxy = c
	} else if firstErr == nil {
		firstErr = err
	}
	return snap, firstErr
}

// settled scrapes until no node has a batch queued or in a pass (work the cell started, such as
// a hedge's loser, is then counted in the cell), or until wait has passed.
func (s *scraper) settled(ctx context.Context, proxyAddr string, wait time.Duration) (snapshot, error) {
	deadline := time.Now().Add(wait)
	for {
		snap, err := s.snapshot(ctx, proxyAddr)
		if err != nil || snap.nodes == nil || snap.nodes[mInflight]+snap.nodes[mQueueDepth] == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return snap, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NodeFigures is what the nodes and the proxy's score cache did during one cell: counter
// differences over the whole cell, warm-up included (the counters cannot be read at the warm-up's
// end without stopping the load), divided by the requests sent in that same span.
type NodeFigures struct {
	// Requests is the number of requests the cell sent, warm-up included: the denominator of the
	// per-request figures (Row.Requests counts the measured ones only).
	Requests int64 `json:"requests"`
	// ComputeSeconds is Σ over nodes of their forward passes' seconds
	// (relevance_scorer_forward_duration_seconds_sum): the nodes' busy time, failed passes
	// included. Emulated nodes sleep the replayed time, so it is the emulated compute.
	ComputeSeconds float64 `json:"compute_s"`
	// NodeSecondsPerRequest is ComputeSeconds / Requests.
	NodeSecondsPerRequest float64 `json:"node_seconds_per_request"`
	// Batches is the ScoreBatch calls the nodes answered (every status), Passes their forward
	// passes (merged batches share one); BatchesPerRequest is Batches / Requests. Each batch
	// pays the per-batch cost once, so a route that splits requests finer costs node time even
	// when it hits more prefixes.
	Batches           float64 `json:"batches"`
	Passes            float64 `json:"passes"`
	BatchesPerRequest float64 `json:"batches_per_request"`
	// Prefix-cache lookups: whole prefixes (query level), and templates (looked up when a whole
	// prefix missed). A prefix repeated within one forward pass is computed once and not looked
	// up again, so it counts in neither.
	PrefixHits     float64 `json:"prefix_hits"`
	PrefixMisses   float64 `json:"prefix_misses"`
	TemplateHits   float64 `json:"template_hits"`
	TemplateMisses float64 `json:"template_misses"`
	// Prompt tokens: prefix tokens computed and not computed (reused: cached or shared within a
	// pass), item tokens computed.
	PrefixTokens float64 `json:"prefix_tokens"`
	ReusedTokens float64 `json:"reused_tokens"`
	ItemTokens   float64 `json:"item_tokens"`
	// Score-cache lookups in the proxy, in items; absent when the proxy has no score cache.
	ScoreCache       bool    `json:"score_cache"`
	ScoreCacheHits   float64 `json:"score_cache_hits"`
	ScoreCacheMisses float64 `json:"score_cache_misses"`
	// The hit rates: hits ÷ lookups; nil when there was no lookup (or no score cache).
	TemplateHitRate    *float64 `json:"template_hit_rate,omitempty"`
	QueryPrefixHitRate *float64 `json:"query_prefix_hit_rate,omitempty"`
	ScoreCacheHitRate  *float64 `json:"score_cache_hit_rate,omitempty"`
}

// nodeFigures differences two snapshots of one cell that sent requests requests; nil when the
// nodes could not be read at both ends (fake nodes of another server have none of these).
func nodeFigures(before, after snapshot, requests int64) *NodeFigures {
	if before.nodes == nil || after.nodes == nil {
		return nil
	}
	dn := func(k string) float64 { return after.nodes[k] - before.nodes[k] }
	f := &NodeFigures{
		Requests:       requests,
		ComputeSeconds: dn(mForwardSeconds + "_sum"),
		Batches:        dn(mBatches), Passes: dn(mPasses),
		PrefixHits: dn(mPrefixHits), PrefixMisses: dn(mPrefixMisses),
		TemplateHits: dn(mTemplateHits), TemplateMisses: dn(mTemplateMisses),
		PrefixTokens: dn(mTokens + `{kind="prefix"}`), ReusedTokens: dn(mTokens + `{kind="reused"}`), ItemTokens: dn(mTokens + `{kind="item"}`),
	}
	if requests > 0 {
		f.NodeSecondsPerRequest = f.ComputeSeconds / float64(requests)
		f.BatchesPerRequest = f.Batches / float64(requests)
	}
	f.TemplateHitRate = hitRate(f.TemplateHits, f.TemplateMisses)
	f.QueryPrefixHitRate = hitRate(f.PrefixHits, f.PrefixMisses)
	_, hasBefore := before.proxy[mScoreHits]
	_, hasAfter := after.proxy[mScoreHits]
	if hasBefore && hasAfter {
		f.ScoreCache = true
		f.ScoreCacheHits = after.proxy[mScoreHits] - before.proxy[mScoreHits]
		f.ScoreCacheMisses = after.proxy[mScoreMisses] - before.proxy[mScoreMisses]
		f.ScoreCacheHitRate = hitRate(f.ScoreCacheHits, f.ScoreCacheMisses)
	}
	return f
}

func hitRate(hits, misses float64) *float64 {
	if hits+misses <= 0 {
		return nil
	}
	r := hits / (hits + misses)
	return &r
}

// text is the figures for the progress log ("" when nil).
func (f *NodeFigures) text() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("  node-s/req %.3f  batches/req %.2f  hits: template %s, query prefix %s, score %s",
		f.NodeSecondsPerRequest, f.BatchesPerRequest, percent(f.TemplateHitRate), percent(f.QueryPrefixHitRate), percent(f.ScoreCacheHitRate))
}

// percent renders a hit rate, or n/a when there was no lookup.
func percent(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100**r)
}
