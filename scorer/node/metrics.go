package node

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/relevance-scoring/relevance/scorer"
)

type metrics struct {
	batchDuration  prometheus.Histogram
	queueWait      prometheus.Histogram
	forwardSeconds prometheus.Histogram
	estimateRatio  prometheus.Histogram
	tokens         *prometheus.CounterVec
	forwardPasses  prometheus.Counter
	merged         prometheus.Histogram
	errors         *prometheus.CounterVec
	requests       *prometheus.CounterVec
	moeBlockM      *prometheus.CounterVec
	moePadding     prometheus.Gauge
	info           *prometheus.GaugeVec
	ready          prometheus.Gauge
}

// Error reasons for relevance_scorer_errors_total.
const (
	reasonInvalid     = "invalid_argument"
	reasonOverloaded  = "queue_full"
	reasonUnavailable = "unavailable"
	reasonCancelled   = "cancelled"
	reasonDeadline    = "deadline"
	reasonForward     = "forward"
	reasonTokenize    = "tokenize"
	reasonPanic       = "panic"
)

func newMetrics(reg prometheus.Registerer, s *scheduler) (*metrics, error) {
	m := &metrics{
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_scorer_batch_duration_seconds",
			Help:    "Time from receiving a ScoreBatch call to its reply (validation, tokenizing, queue, forward).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_scorer_queue_wait_seconds",
			Help:    "Time a batch waited in the scheduler queue before its forward pass started.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		forwardSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_scorer_forward_duration_seconds",
			Help:    "Wall time of one forward pass (possibly several merged batches).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		// Log-spaced around 1, a quarter-octave apart: 0.25 (4× too fast) … 4 (4× too slow).
		estimateRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_scorer_estimate_ratio",
			Help:    "Estimated ÷ measured seconds of each forward pass: the node's cost model error (1 is exact; above 1 it thought itself slower than it is).",
			Buckets: prometheus.ExponentialBucketsRange(0.25, 4, 17),
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_scorer_tokens_total",
			Help: "Prompt tokens by kind: prefix (computed), item (computed), reused (prefix not recomputed).",
		}, []string{"kind"}),
		forwardPasses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_scorer_forward_passes_total",
			Help: "Forward passes run (successful or not).",
		}),
		merged: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relevance_scorer_forward_merged_batches",
			Help:    "Request batches merged into one forward pass.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 32},
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_scorer_errors_total",
			Help: "ScoreBatch failures by reason.",
		}, []string{"reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_scorer_requests_total",
			Help: "ScoreBatch calls by gRPC status code.",
		}, []string{"code"}),
		// The design's name relevance_scorer_moe_block_m_total fails promlint ("_m_" reads as
		// metres), and `promtool check metrics` must pass, so the unit-like "_m" is joined.
		moeBlockM: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_scorer_moe_blockm_total",
			Help: "MoE layer kernel choices by tile variant (blockM).",
		}, []string{"block_m"}),
		moePadding: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relevance_scorer_moe_padding_ratio",
			Help: "Mean MoE padding overhead ratio of the last forward pass (padded rows / routed rows; 0 when dense).",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relevance_scorer_info",
			Help: "The loaded engine (value 1).",
		}, []string{"node_id", "model", "arch", "dtype", "kernels", "moe_policy", "emulated"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relevance_scorer_ready",
			Help: "1 when the engine is loaded and the node is not draining.",
		}),
	}
	queueDepth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relevance_scorer_queue_depth",
		Help: "Batches waiting in the scheduler queue.",
	}, func() float64 { return float64(s.load().QueuedBatches) })
	queuedCost := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relevance_scorer_queued_cost_seconds",
		Help: "Estimated seconds of work waiting in the queue.",
	}, func() float64 { return s.load().QueuedCostSeconds })
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relevance_scorer_inflight_batches",
		Help: "Batches in the forward pass now running.",
	}, func() float64 { return float64(s.load().InflightBatches) })
	for _, k := range []string{"prefix", "item", "reused"} {
		m.tokens.WithLabelValues(k)
	}
	// Every reason from the start, so that a rate over it is 0, not absent, before the first.
	for _, r := range []string{reasonInvalid, reasonOverloaded, reasonUnavailable, reasonCancelled, reasonDeadline, reasonForward, reasonTokenize, reasonPanic} {
		m.errors.WithLabelValues(r)
	}
	for _, c := range []codes.Code{codes.OK, codes.InvalidArgument, codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Internal} {
		m.requests.WithLabelValues(c.String())
	}
	for _, col := range []prometheus.Collector{
		m.batchDuration, m.queueWait, m.forwardSeconds, m.estimateRatio, m.tokens, m.forwardPasses, m.merged, m.errors,
		m.requests, m.moeBlockM, m.moePadding, m.info, m.ready, queueDepth, queuedCost, inflight,
	} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("node metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) setInfo(nodeID string, in scorer.Info) {
	m.info.Reset()
	m.info.WithLabelValues(nodeID, in.Model, in.Architecture, in.DType, in.Kernels, in.MoEPolicy, strconv.FormatBool(in.Emulated)).Set(1)
}

// observePass records one forward pass's statistics.
func (m *metrics) observePass(st scorer.ForwardStats, batches int, seconds float64) {
	m.forwardPasses.Inc()
	m.forwardSeconds.Observe(seconds)
	m.merged.Observe(float64(batches))
	m.tokens.WithLabelValues("prefix").Add(float64(st.PrefixTokens))
	m.tokens.WithLabelValues("item").Add(float64(st.ItemTokens))
	m.tokens.WithLabelValues("reused").Add(float64(st.PrefixReused))
	for v, n := range st.MoEVariants {
		m.moeBlockM.WithLabelValues(v).Add(float64(n))
	}
	if len(st.MoEVariants) > 0 || st.MoEPaddingRatio > 0 {
		m.moePadding.Set(st.MoEPaddingRatio)
	}
}
