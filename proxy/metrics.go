package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
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
	rejected        *prometheus.CounterVec
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
			Help:    "Max over mean of planned batch completion (backlog + estimated cost); 1 is perfect.",
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
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_rejected_total",
			Help: "Requests rejected at admission, by reason (overload: the backlog makes the deadline unreachable; deadline: even idle nodes could not make it).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.requestDuration, m.batchesPerReq, m.imbalance, m.batchDuration, m.estimateRatio, m.retries, m.hedges, m.hedgeWins, m.rejected, &nodeCollector{p: p}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{reasonOverload, reasonDeadline} {
		m.rejected.WithLabelValues(r)
	}
	return m, nil
}

// nodeCollector exports per-node state from the membership snapshot at scrape time, so nodes
// that leave (DNS) leave the exposition too.
type nodeCollector struct{ p *Proxy }

var (
	descInflight = prometheus.NewDesc("relevance_proxy_node_inflight_cost_seconds",
		"Estimated seconds of this proxy's batches in flight on the node.", []string{"node"}, nil)
	descBacklog = prometheus.NewDesc("relevance_proxy_node_backlog_seconds",
		"Estimated outstanding seconds on the node: in flight from this proxy plus the rest the node last reported.", []string{"node"}, nil)
	descSpeed = prometheus.NewDesc("relevance_proxy_node_speed_ratio",
		"Learned speed relative to the configured prior on a reference batch (2: twice as fast).", []string{"node"}, nil)
	descCoef = prometheus.NewDesc("relevance_proxy_node_cost_coefficient",
		"Learned cost coefficient: a (seconds per token), b (seconds per attended pair), c (seconds per batch).", []string{"node", "coef"}, nil)
	descHealthy = prometheus.NewDesc("relevance_proxy_node_healthy",
		"1 when the node's grpc.health.v1 status is SERVING.", []string{"node"}, nil)
	descBreaker = prometheus.NewDesc("relevance_proxy_breaker_state",
		"Circuit breaker state: 0 closed, 1 half-open, 2 open.", []string{"node"}, nil)
	descBatches = prometheus.NewDesc("relevance_proxy_node_batches_total",
		"Batches the node answered successfully.", []string{"node"}, nil)
	descErrors = prometheus.NewDesc("relevance_proxy_node_errors_total",
		"Failed calls to the node (cancellations excluded).", []string{"node"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflight, descBacklog, descSpeed, descCoef, descHealthy, descBreaker, descBatches, descErrors} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, n := range c.p.snapshot() {
		co := n.coeffs.Load()
		h := 0.0
		if n.healthy.Load() {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, n.inflight.Load(), n.addr)
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, n.load(now), n.addr)
		ch <- prometheus.MustNewConstMetric(descSpeed, prometheus.GaugeValue, 1/n.scale(c.p.cfg.Cost.Prior), n.addr)
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.A, n.addr, "a")
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.B, n.addr, "b")
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.C, n.addr, "c")
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, n.addr)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, breakerValue(n.breaker.State()), n.addr)
		ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(n.batches.Load()), n.addr)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(n.errors.Load()), n.addr)
	}
}

func breakerValue(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}
