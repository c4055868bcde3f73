package proxy

import (
	"github.com/relevance-scoring/relevance/proxy/admit"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
	"github.com/relevance-scoring/relevance/proxy/scorecache"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of admission's second plan (relevance_proxy_admission_replans_total{outcome}).
const (
	replanAdmitted = "admitted"
	replanRefused  = "refused"
	replanNoFiner  = "no_finer_plan"
)

type metrics struct {
	requestDuration *prometheus.HistogramVec
	batchesPerReq   prometheus.Histogram
	imbalance       prometheus.Histogram
	batchDuration   prometheus.Histogram
	estimateRatio   prometheus.Histogram
	retries         prometheus.Counter
	hedges          prometheus.Counter
	hedgeWins       prometheus.Counter
	rescues         prometheus.Counter
	rescuesDeferred prometheus.Counter
	losersKept      *prometheus.CounterVec
	copiesRefused   *prometheus.CounterVec
	requestRatio    prometheus.Histogram
	rejected        *prometheus.CounterVec
	replans         *prometheus.CounterVec
	cacheHits       prometheus.Counter // registered with the score cache's other metrics
}

func newMetrics(reg prometheus.Registerer, p *Proxy) (*metrics, error) {
	m := &metrics{
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relevance_proxy_request_duration_seconds",
			Help:    "Time of Proxy.Score from validation to merged reply, by gRPC code.",
			Buckets: []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2, 5},
		}, []string{"code"}),
		batchesPerReq: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_proxy_batches_per_request",
			Help:    "Batches a request was split into.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128},
		}),
		imbalance: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_proxy_split_imbalance_ratio",
			Help:    "Max over mean, over a request's nodes, of when each is projected to finish its last batch of the request (backlog + estimated cost); 1 is perfect.",
			Buckets: []float64{1, 1.02, 1.05, 1.1, 1.2, 1.3, 1.5, 2, 3, 5},
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_proxy_batch_duration_seconds",
			Help:    "Time of one successful node call (ScoreBatch) seen from the proxy.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		estimateRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_proxy_cost_estimate_ratio",
			Help:    "Measured compute seconds over the proxy's prediction for the batch (1 is exact).",
			Buckets: []float64{0.25, 0.5, 0.67, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 4},
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_retries_total",
			Help: "Failed batches re-sent to another node.",
		}),
		hedges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_hedges_total",
			Help: "Straggling batches duplicated to another node.",
		}),
		hedgeWins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_hedge_wins_total",
			Help: "Hedged batches whose duplicate answered first.",
		}),
		rescues: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_rescues_total",
			Help: "Overdue batches sent to a second node while the deadline still allowed (retry.rescue_factor; also counted in hedges_total).",
		}),
		rescuesDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_rescues_deferred_total",
			Help: "Overdue batches whose rescue waited because their node was still within the schedule of all the work charged to it (a node merges queued batches into one pass).",
		}),
		losersKept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_lost_calls_kept_total",
			Help: "Calls that lost their race to a hedge or rescue while far behind their projection and were left running, detached from their request, as evidence about their node, by how they ended (answered: a late outcome learned from; slow: counted slow at their slow mark and cancelled; failed: another error, such as the deadline).",
		}, []string{"outcome"}),
		copiesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_copies_refused_total",
			Help: "Straggling batches whose hedge or rescue was due but sent nowhere, by kind (hedge, rescue, slow: the rescue when the call is counted slow, stall: the rescue from a node found stalled) and reason (no_node: none eligible; deadline: the best node could not finish before the deadline; not_sooner: no node would finish it before the straggler's own schedule or work ahead; budget: the retry budget was spent).",
		}, []string{"kind", "reason"}),
		requestRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_proxy_request_projection_ratio",
			Help:    "An admitted request's time from planning to its last batch's answer over the plan's projected finish (admission's error at the request level; requests whose nodes had not learned their cost yet are left out).",
			Buckets: []float64{0.5, 0.67, 0.8, 0.9, 1, 1.05, 1.1, 1.2, 1.3, 1.5, 2, 3},
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_rejected_total",
			Help: "Requests rejected at admission, by reason (overload: the backlog makes the deadline unreachable; deadline: even idle nodes could not make it).",
		}, []string{"reason"}),
		replans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_admission_replans_total",
			Help: "Requests whose economical plan missed the budget and were planned again for their earliest finish (admission.replan), by outcome: admitted (the faster plan fit admission.replan_fit of the budget), refused (it did not), no_finer_plan (the faster plan had no more batches than the first).",
		}, []string{"outcome"}),
		// Counted when a reply carries cached items (Proxy.Score), not at lookup: a request
		// refused or failed after its lookup answered nothing from the cache.
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_proxy_score_cache_hits_total",
			Help: "Items answered from the score cache, counted with the reply that carries them (the items of a request refused or failed after its lookup count none).",
		}),
	}
	// admission reads the admitter, which New sets after the metrics exist (none: the value
	// before it does).
	admission := func(name, help string, none float64, v func(*admit.Admitter) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if p.admitter == nil {
				return none
			}
			return v(p.admitter)
		})
	}
	// The margin admission multiplies every plan's projected finish by now (admission.margin_quantile
	// of recent batches' error; 1 while too few were seen): what an operator reads to see why
	// requests are refused while the nodes have time.
	margin := admission("relevance_proxy_admission_margin",
		"The factor admission multiplies a one-batch plan's projected finish by before comparing it with the budget (relevance_proxy_admission_quantile of recent batches' latency over projected finish; 1 while too few batches were seen).",
		1, (*admit.Admitter).Margin)
	// The quantile that margin is taken at: margin_quantile while admitted requests are on time,
	// higher while some run late (admission.on_time_target).
	quantile := admission("relevance_proxy_admission_quantile",
		"The quantile of recent batches' latency over projected finish that admission's margin is taken at for a one-batch plan: admission.margin_quantile while admitted requests are answered in time, higher while some run late (admission.on_time_target).",
		0, (*admit.Admitter).Quantile)
	// The token counter's learned correction: the counts the nodes report over the proxy's own.
	tokenRatio := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "relevance_proxy_token_count_ratio",
		Help: "The scale applied to the proxy's token counts (part: item or prefix): tokens the nodes reported for answered batches over what the proxy counted for them (cost.learn_token_counts); 1 until learned.",
	}, []string{"part"})
	tokenRatios := &gaugeFuncVec{vec: tokenRatio, fill: func(v *prometheus.GaugeVec) {
		item, prefix := 1.0, 1.0
		if p.planner != nil {
			item, prefix = p.planner.TokenRatios()
		}
		v.WithLabelValues("item").Set(item)
		v.WithLabelValues("prefix").Set(prefix)
	}}
	cs := []prometheus.Collector{tokenRatios, m.requestDuration, m.batchesPerReq, m.imbalance, m.batchDuration, m.estimateRatio, m.retries, m.hedges, m.hedgeWins, m.rescues, m.rescuesDeferred, m.losersKept, m.copiesRefused, m.requestRatio, m.rejected, m.replans, margin, quantile, p.cluster.Collector()}
	if c := p.cache; c != nil {
		counter := func(name, help string, v func(scorecache.Stats) uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(c.Stats())) })
		}
		gauge := func(name, help string, v func(scorecache.Stats) int64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(c.Stats())) })
		}
		cs = append(cs,
			m.cacheHits,
			counter("relevance_proxy_score_cache_misses_total", "Items looked up in the score cache and not found (or expired).", func(s scorecache.Stats) uint64 { return s.Misses }),
			counter("relevance_proxy_score_cache_evictions_total", "Score cache entries evicted for the memory budget.", func(s scorecache.Stats) uint64 { return s.Evictions }),
			gauge("relevance_proxy_score_cache_entries", "Items in the score cache.", func(s scorecache.Stats) int64 { return s.Entries }),
			gauge("relevance_proxy_score_cache_bytes", "Memory charged to the score cache's entries.", func(s scorecache.Stats) int64 { return s.Bytes }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range admit.Reasons {
		m.rejected.WithLabelValues(r)
	}
	for _, o := range []string{replanAdmitted, replanRefused, replanNoFiner} {
		m.replans.WithLabelValues(o)
	}
	for _, o := range dispatch.LoserOutcomes {
		m.losersKept.WithLabelValues(o)
	}
	for _, k := range dispatch.CopyKinds {
		for _, r := range dispatch.CopyRefusals {
			m.copiesRefused.WithLabelValues(k, r)
		}
	}
	return m, nil
}

// gaugeFuncVec is a labelled gauge filled at collection time (client_golang has GaugeFunc only
// for a single series).
type gaugeFuncVec struct {
	vec  *prometheus.GaugeVec
	fill func(*prometheus.GaugeVec)
}

func (g *gaugeFuncVec) Describe(ch chan<- *prometheus.Desc) { g.vec.Describe(ch) }

func (g *gaugeFuncVec) Collect(ch chan<- prometheus.Metric) {
	g.fill(g.vec)
	g.vec.Collect(ch)
}
