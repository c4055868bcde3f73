// Package front holds what the proxy's two fronts (HTTP in front/httpapi, gRPC in front/grpcapi)
// share: the Core they delegate to, their request metrics, and the mapping from the core's gRPC
// status errors to HTTP statuses. The fronts only decode: the request contract is the core's
// (proxy/request), and so is the ranking. The file configuration that ties the fronts and the core
// together lives in front/serve.
//
// Metrics is safe for concurrent use; Classify is a pure function.
package front

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Core is the part of the proxy core (package proxy) that the fronts call. *proxy.Proxy
// satisfies it; tests use fakes.
type Core interface {
	// Score scores every item of req. Errors are gRPC status errors (see Classify).
	Score(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error)
	// Ready reports whether at least one scorer node is healthy.
	Ready() bool
}

// StatusClientClosed is the non-standard HTTP status (nginx's 499) recorded when the caller
// cancelled the request; the client is gone, so nobody reads it, but metrics and logs do.
const StatusClientClosed = 499

// Failure is an error from the core translated for an HTTP client.
type Failure struct {
	// HTTPStatus is the status to answer with.
	HTTPStatus int
	// Type is a short machine-readable kind ("invalid_request_error", "rate_limit_error", ...).
	Type string
	// Message is the human-readable reason; for bad input it names the field (canonically: a
	// front that speaks another vocabulary renames it, see request.Violation).
	Message string
	// RetryAfter is how long the client should wait before retrying; 0 means no hint.
	RetryAfter time.Duration
}

// Classify maps an error returned by Core.Score to an HTTP answer: INVALID_ARGUMENT and
// FAILED_PRECONDITION → 422 (the JSON parsed but its content is wrong), RESOURCE_EXHAUSTED →
// 429 with the RetryInfo delay, UNAVAILABLE → 503, DEADLINE_EXCEEDED → 504, CANCELED → 499,
// UNIMPLEMENTED → 501, anything else → 500. Plain context errors count as their gRPC codes.
func Classify(err error) Failure {
	if err == nil {
		return Failure{HTTPStatus: http.StatusOK}
	}
	st := statusOf(err)
	f := Failure{Message: st.Message()}
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		f.HTTPStatus, f.Type = http.StatusUnprocessableEntity, "invalid_request_error"
	case codes.ResourceExhausted:
		f.HTTPStatus, f.Type = http.StatusTooManyRequests, "rate_limit_error"
		f.RetryAfter = retryDelay(st)
		if f.RetryAfter <= 0 {
			f.RetryAfter = time.Second
		}
	case codes.Unavailable:
		f.HTTPStatus, f.Type = http.StatusServiceUnavailable, "service_unavailable"
		f.RetryAfter = retryDelay(st)
	case codes.DeadlineExceeded:
		f.HTTPStatus, f.Type = http.StatusGatewayTimeout, "timeout"
	case codes.Canceled:
		f.HTTPStatus, f.Type = StatusClientClosed, "canceled"
	case codes.NotFound:
		// vLLM's answer to an unknown model name.
		f.HTTPStatus, f.Type = http.StatusNotFound, "NotFoundError"
	case codes.Unimplemented:
		f.HTTPStatus, f.Type = http.StatusNotImplemented, "not_implemented"
	default:
		f.HTTPStatus, f.Type = http.StatusInternalServerError, "internal_error"
	}
	if f.Message == "" {
		f.Message = http.StatusText(f.HTTPStatus)
	}
	return f
}

// statusOf returns the gRPC status carried by err, treating bare context errors as their codes.
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	}
	return status.New(codes.Unknown, err.Error())
}

// ToStatusError makes any error a gRPC status error, so the gRPC front never answers UNKNOWN for
// a plain context error.
func ToStatusError(err error) error {
	if err == nil {
		return nil
	}
	return statusOf(err).Err()
}

func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// RetryAfterHeader formats d as a Retry-After value: whole seconds, rounded up, at least 1.
func RetryAfterHeader(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// Metrics are the fronts' request metrics. Build one per registry with NewMetrics and share it
// between the HTTP and gRPC fronts.
type Metrics struct {
	requests     *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	grpcDuration *prometheus.HistogramVec
}

// NewMetrics registers the fronts' metrics on reg:
//
//	relevance_proxy_requests_total{route,code}          HTTP: route path and status; gRPC: full method and code name
//	relevance_proxy_http_request_duration_seconds{route} time in the HTTP handler
//	relevance_proxy_grpc_request_duration_seconds{method} time in the gRPC handler
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("front metrics: nil prometheus.Registerer")
	}
	// Latency buckets from 1 ms to ~16 s: the relevance budget is ~500 ms at p99.
	buckets := prometheus.ExponentialBuckets(0.001, 2, 15)
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relevance_proxy_requests_total",
			Help: "Requests answered by the proxy fronts, by route (HTTP path or gRPC method) and code (HTTP status or gRPC code).",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relevance_proxy_http_request_duration_seconds",
			Help:    "Time spent handling an HTTP request, by route.",
			Buckets: buckets,
		}, []string{"route"}),
		grpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relevance_proxy_grpc_request_duration_seconds",
			Help:    "Time spent handling a gRPC request, by method.",
			Buckets: buckets,
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.httpDuration, m.grpcDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("front metrics: %w", err)
		}
	}
	return m, nil
}

// ObserveHTTP records one HTTP request.
func (m *Metrics) ObserveHTTP(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveGRPC records one gRPC request.
func (m *Metrics) ObserveGRPC(method string, code codes.Code, d time.Duration) {
	m.requests.WithLabelValues(method, code.String()).Inc()
	m.grpcDuration.WithLabelValues(method).Observe(d.Seconds())
}
