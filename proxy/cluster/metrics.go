package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// Collector exports every node's state (relevance_proxy_node_*, relevance_proxy_breaker_state)
// from the membership snapshot at scrape time, so nodes that leave (DNS) leave the exposition too.
func (c *Cluster) Collector() prometheus.Collector { return &nodeCollector{c: c} }

// nodeCollector exports per-node state from the membership snapshot at scrape time, so nodes
// that leave (DNS) leave the exposition too.
type nodeCollector struct{ c *Cluster }

var (
	// DESIGN's example names it relevance_proxy_node_inflight_cost; its own rule
	// (relevance_<component>_<name>_<unit>) gives the unit, seconds.
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
	descTransitions = prometheus.NewDesc("relevance_proxy_breaker_transitions_total",
		"Circuit breaker state changes, by the state entered: a breaker that flaps between open and half-open shows here, not in the sampled state gauge.", []string{"node", "to"}, nil)
	descBatches = prometheus.NewDesc("relevance_proxy_node_batches_total",
		"Batches the node answered successfully.", []string{"node"}, nil)
	descErrors = prometheus.NewDesc("relevance_proxy_node_errors_total",
		"Failed calls to the node (cancellations excluded).", []string{"node"}, nil)
	descStalls = prometheus.NewDesc("relevance_proxy_node_stalls_total",
		"Times the node was found stalled: no answer to a health check within outlier.stall_timeout while its batches were overdue.", []string{"node"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflight, descBacklog, descSpeed, descCoef, descHealthy, descBreaker, descTransitions, descBatches, descErrors, descStalls} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, n := range c.c.Snapshot() {
		co := n.coeffs.Load()
		h := 0.0
		if n.healthy.Load() {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, n.Inflight(), n.addr)
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, n.Load(now), n.addr)
		ch <- prometheus.MustNewConstMetric(descSpeed, prometheus.GaugeValue, 1/n.ownScale(c.c.cfg.Prior), n.addr)
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.A, n.addr, "a")
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.B, n.addr, "b")
		ch <- prometheus.MustNewConstMetric(descCoef, prometheus.GaugeValue, co.C, n.addr, "c")
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, n.addr)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, breakerValue(n.breaker.State()), n.addr)
		for _, st := range []gobreaker.State{gobreaker.StateClosed, gobreaker.StateHalfOpen, gobreaker.StateOpen} {
			ch <- prometheus.MustNewConstMetric(descTransitions, prometheus.CounterValue, float64(n.transitions[st].Load()), n.addr, st.String())
		}
		ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(n.batches.Load()), n.addr)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(n.errors.Load()), n.addr)
		ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(n.stalls.Load()), n.addr)
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
