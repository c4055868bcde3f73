// Package httpapi is the proxy's HTTP front, on fasthttp: POST /v1/score (the JSON mirror of
// relevance.v1.Ranker/Score), POST /v1/rerank and /rerank (Jina/vLLM rerank), POST /v2/rerank
// (Cohere v2 rerank), and GET /healthz, /readyz, /metrics, /v1/nodes.
//
// /v1/score speaks the proto3 JSON mapping (protojson: snake_case names, enums by name, 64-bit
// integers as strings, zero values emitted). The rerank routes accept documents as strings or
// {"text": …} objects and ignore unknown fields; errors name the field: 400 for malformed JSON,
// 422 for a well-formed body with a bad value, 413 over http.max_body_bytes; core errors map as
// in front.Classify. /v2/* answers errors as Cohere does ({"message"}), the rest as
// {"error": {"message", "type", "code"}}.
//
// Every handler copies what it hands to the core (encoding/json and protojson allocate fresh
// strings), because fasthttp reuses a RequestCtx's buffers once the handler returns while the
// core's fan-out may still hold the request (a batch still running after a deadline answer).
//
// A Server is safe for concurrent use; Serve once, then Shutdown.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"google.golang.org/protobuf/encoding/protojson"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
)

// Headers the front reads.
const (
	// HeaderTimeout carries the request's budget in milliseconds (HTTP has no deadline of its own);
	// it overrides ScoreRequest.timeout_ms.
	HeaderTimeout = "X-Request-Timeout-Ms"
	// HeaderRequestID carries the caller's request id; it is echoed on the reply.
	HeaderRequestID = "X-Request-Id"
)

// Options are the HTTP front's collaborators.
type Options struct {
	// Core scores requests. Required.
	Core front.Core
	// Nodes returns the JSON-encodable node table for GET /v1/nodes; nil serves [].
	Nodes func() any
	// Metrics records requests. Required (see front.NewMetrics).
	Metrics *front.Metrics
	// Gatherer is what GET /metrics exposes. Required.
	Gatherer prometheus.Gatherer
	// Logger gets panics and internal errors; nil discards.
	Logger *slog.Logger
}

// Server is the HTTP front.
type Server struct {
	cfg      Config
	opts     Options
	log      *slog.Logger
	fs       *fasthttp.Server
	routes   map[string]*route
	metrics  fasthttp.RequestHandler
	draining atomic.Bool

	// baseCtx parents every core call; cancelled when a drain runs out of time, so that
	// in-flight fan-outs stop instead of outliving the server.
	baseCtx    context.Context
	cancelBase context.CancelFunc
}

// route is one served path.
type route struct {
	name    string
	methods []string
	// cohere selects the Cohere error shape {"message": …}.
	cohere bool
	serve  func(s *Server, ctx *fasthttp.RequestCtx, rt *route)
}

var (
	scoreUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
	// EmitUnpopulated: an item's index 0 or score 0 must appear rather than vanish.
	scoreMarshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
)

// New builds the HTTP front. It does not listen; call Serve.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case opts.Core == nil:
		return nil, errors.New("httpapi: nil Core")
	case opts.Metrics == nil:
		return nil, errors.New("httpapi: nil Metrics")
	case opts.Gatherer == nil:
		return nil, errors.New("httpapi: nil Gatherer")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, opts: opts, log: log}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	post := []string{fasthttp.MethodPost}
	get := []string{fasthttp.MethodGet, fasthttp.MethodHead}
	s.routes = map[string]*route{}
	for _, rt := range []*route{
		{name: "/v1/score", methods: post, serve: (*Server).serveScore},
		{name: "/v1/rerank", methods: post, serve: (*Server).serveJina},
		{name: "/rerank", methods: post, serve: (*Server).serveJina},
		{name: "/v2/rerank", methods: post, cohere: true, serve: (*Server).serveCohere},
		{name: "/healthz", methods: get, serve: (*Server).serveHealthz},
		{name: "/readyz", methods: get, serve: (*Server).serveReadyz},
		{name: "/metrics", methods: get, serve: (*Server).serveMetrics},
		{name: "/v1/nodes", methods: get, serve: (*Server).serveNodes},
	} {
		s.routes[rt.name] = rt
	}
	s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(opts.Gatherer,
		promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	s.fs = &fasthttp.Server{
		Handler:              s.handle,
		ErrorHandler:         s.handleTransportError,
		Name:                 "relevance-proxy",
		MaxRequestBodySize:   cfg.MaxBodyBytes,
		ReadTimeout:          cfg.ReadTimeout,
		WriteTimeout:         cfg.WriteTimeout,
		IdleTimeout:          cfg.IdleTimeout,
		CloseOnShutdown:      true,
		NoDefaultContentType: true,
		Logger:               fasthttpLogger{log},
	}
	return s, nil
}

// Serve answers requests on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.fs.Serve(ln)
}

// SetDraining makes /readyz answer 503 (so load balancers stop sending) while requests are
// still served.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Shutdown marks the server draining, stops accepting, and waits for in-flight requests until
// ctx is done; then it cancels the core calls still running and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetDraining()
	err := s.fs.ShutdownWithContext(ctx)
	s.cancelBase()
	if err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	rt := s.routes[string(ctx.Path())]
	name := "other"
	if rt != nil {
		name = rt.name
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in HTTP handler", "route", name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			ctx.Response.Reset()
			s.writeError(ctx, rt != nil && rt.cohere, front.Failure{HTTPStatus: http.StatusInternalServerError, Type: "internal_error", Message: "internal error"})
		}
		s.opts.Metrics.ObserveHTTP(name, ctx.Response.StatusCode(), time.Since(start))
	}()
	if rt == nil {
		s.writeError(ctx, isCohere(ctx.Path()), front.Failure{HTTPStatus: http.StatusNotFound, Type: "not_found",
			Message: fmt.Sprintf("no route for %s %s", ctx.Method(), ctx.Path())})
		return
	}
	if !allowed(rt.methods, ctx.Method()) {
		ctx.Response.Header.Set("Allow", joinMethods(rt.methods))
		s.writeError(ctx, rt.cohere, front.Failure{HTTPStatus: http.StatusMethodNotAllowed, Type: "method_not_allowed",
			Message: fmt.Sprintf("method %s not allowed on %s; use %s", ctx.Method(), rt.name, joinMethods(rt.methods))})
		return
	}
	rt.serve(s, ctx, rt)
}

// handleTransportError answers what fasthttp could not hand to a handler: a body over the limit
// (413, not fasthttp's default 400), a read timeout (408), malformed HTTP (400). fasthttp has
// reset the request when a chunked body overflowed, so the path may be empty: the generic error
// shape and route "other" are used then.
func (s *Server) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	f := front.Failure{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Message: "malformed HTTP request"}
	var ne net.Error
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		f = front.Failure{HTTPStatus: http.StatusRequestEntityTooLarge, Type: "request_too_large",
			Message: fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
	case errors.As(err, &small):
		f = front.Failure{HTTPStatus: http.StatusRequestHeaderFieldsTooLarge, Type: "request_too_large", Message: "request headers too large"}
	case errors.As(err, &ne) && ne.Timeout():
		f = front.Failure{HTTPStatus: http.StatusRequestTimeout, Type: "timeout", Message: "timed out reading the request"}
	}
	name := "other"
	if rt := s.routes[string(ctx.Path())]; rt != nil {
		name = rt.name
	}
	s.writeError(ctx, isCohere(ctx.Path()), f)
	s.opts.Metrics.ObserveHTTP(name, f.HTTPStatus, 0)
}

func (s *Server) serveScore(ctx *fasthttp.RequestCtx, rt *route) {
	req := &relevancev1.ScoreRequest{}
	if err := scoreUnmarshal.Unmarshal(ctx.PostBody(), req); err != nil {
		s.writeError(ctx, false, badRequest("invalid JSON body: "+err.Error()))
		return
	}
	if err := validateScore(req); err != nil {
		s.writeError(ctx, false, unprocessable(err))
		return
	}
	resp, ok := s.score(ctx, rt, req)
	if !ok {
		return
	}
	if resp.GetRequestId() == "" {
		resp.RequestId = req.GetRequestId()
	}
	b, err := scoreMarshal.Marshal(resp)
	if err != nil {
		s.internalError(ctx, rt, fmt.Errorf("encode score response: %w", err))
		return
	}
	s.writeJSONBytes(ctx, http.StatusOK, b)
}

func validateScore(req *relevancev1.ScoreRequest) error {
	switch {
	case req.GetQuery() == "":
		return fieldErr("query", "must not be empty")
	case len(req.GetItems()) == 0:
		return fieldErr("items", "must not be empty")
	}
	for i, it := range req.GetItems() {
		if it == nil {
			return fieldErr(fmt.Sprintf("items[%d]", i), "must not be null")
		}
	}
	return nil
}

func (s *Server) serveJina(ctx *fasthttp.RequestCtx, rt *route) {
	req, texts, rr, err := parseRerank(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, false, failureOf(err))
		return
	}
	resp, ok := s.score(ctx, rt, req)
	if !ok {
		return
	}
	ranked, err := rank(resp, len(texts), req.GetTopN())
	if err != nil {
		s.internalError(ctx, rt, err)
		return
	}
	model := rr.Model
	if model == "" {
		model = resp.GetModel()
	}
	withDocs := rr.ReturnDocuments == nil || *rr.ReturnDocuments // Jina and vLLM return them by default
	out := jinaResponse{
		ID:      s.responseID(req, resp),
		Model:   model,
		Results: buildResults(ranked, texts, withDocs),
		Usage:   jinaUsage{PromptTokens: resp.GetUsage().GetPromptTokens(), TotalTokens: resp.GetUsage().GetPromptTokens()},
	}
	s.writeJSON(ctx, rt, http.StatusOK, out)
}

func (s *Server) serveCohere(ctx *fasthttp.RequestCtx, rt *route) {
	req, texts, rr, err := parseRerank(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, true, failureOf(err))
		return
	}
	resp, ok := s.score(ctx, rt, req)
	if !ok {
		return
	}
	ranked, err := rank(resp, len(texts), req.GetTopN())
	if err != nil {
		s.internalError(ctx, rt, err)
		return
	}
	withDocs := rr.ReturnDocuments != nil && *rr.ReturnDocuments // Cohere v2 returns none by default
	out := cohereResponse{
		ID:      s.responseID(req, resp),
		Results: buildResults(ranked, texts, withDocs),
		Meta: cohereMeta{
			APIVersion:  cohereAPIVersion{Version: "2"},
			BilledUnits: cohereBilledUnits{SearchUnits: searchUnits(len(texts))},
		},
	}
	s.writeJSON(ctx, rt, http.StatusOK, out)
}

// score runs req on the core under the request's budget. On failure it has written the error
// reply and returns false.
func (s *Server) score(ctx *fasthttp.RequestCtx, rt *route, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, bool) {
	if h := ctx.Request.Header.Peek(HeaderTimeout); len(h) > 0 {
		ms, err := strconv.ParseUint(string(h), 10, 32)
		if err != nil || ms == 0 {
			s.writeError(ctx, rt.cohere, badRequest(fmt.Sprintf("%s: must be a positive integer of milliseconds, got %q", HeaderTimeout, h)))
			return nil, false
		}
		req.TimeoutMs = uint32(ms)
	}
	if req.GetRequestId() == "" {
		req.RequestId = string(ctx.Request.Header.Peek(HeaderRequestID)) // string() copies
	}
	cctx := s.baseCtx
	if req.GetTimeoutMs() > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, time.Duration(req.GetTimeoutMs())*time.Millisecond)
		defer cancel()
	}
	resp, err := s.opts.Core.Score(cctx, req)
	if err == nil && resp == nil {
		err = errors.New("core returned no response")
	}
	if err != nil {
		f := front.Classify(err)
		if f.HTTPStatus == http.StatusUnprocessableEntity && rt.name != "/v1/score" {
			f.Message = documentsField(f.Message)
		}
		if f.HTTPStatus == front.StatusClientClosed && s.baseCtx.Err() != nil {
			// fasthttp does not cancel on disconnect: a cancellation here is the drain's, and
			// the client is still waiting for an answer it may retry elsewhere.
			f = front.Failure{HTTPStatus: http.StatusServiceUnavailable, Type: "service_unavailable", Message: "proxy is shutting down"}
		}
		if f.HTTPStatus >= 500 && f.HTTPStatus != http.StatusServiceUnavailable && f.HTTPStatus != http.StatusGatewayTimeout {
			s.log.Error("score failed", "route", rt.name, "request_id", req.GetRequestId(), "err", err)
		}
		s.writeError(ctx, rt.cohere, f)
		return nil, false
	}
	if id := resp.GetRequestId(); id != "" {
		ctx.Response.Header.Set(HeaderRequestID, id)
	} else if id := req.GetRequestId(); id != "" {
		ctx.Response.Header.Set(HeaderRequestID, id)
	}
	return resp, true
}

// documentsField renames the core's "items…" field in a message to the rerank APIs' name:
// "items[3].text: …" → "documents[3]: …", "items: …" → "documents: …".
func documentsField(msg string) string {
	rest, ok := strings.CutPrefix(msg, "items")
	if !ok {
		return msg
	}
	if i := strings.Index(rest, ":"); i >= 0 {
		rest = strings.Replace(rest[:i], ".text", "", 1) + rest[i:]
	}
	return "documents" + rest
}

// responseID is the core's request id, else the caller's, else a fresh one.
func (s *Server) responseID(req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) string {
	if id := resp.GetRequestId(); id != "" {
		return id
	}
	if id := req.GetRequestId(); id != "" {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func (s *Server) serveHealthz(ctx *fasthttp.RequestCtx, rt *route) {
	s.writeJSONBytes(ctx, http.StatusOK, []byte(`{"status":"ok"}`))
}

func (s *Server) serveReadyz(ctx *fasthttp.RequestCtx, rt *route) {
	switch {
	case s.draining.Load():
		s.writeJSONBytes(ctx, http.StatusServiceUnavailable, []byte(`{"status":"draining"}`))
	case !s.opts.Core.Ready():
		s.writeJSONBytes(ctx, http.StatusServiceUnavailable, []byte(`{"status":"no healthy node"}`))
	default:
		s.writeJSONBytes(ctx, http.StatusOK, []byte(`{"status":"ready"}`))
	}
}

func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx, rt *route) {
	s.metrics(ctx)
}

func (s *Server) serveNodes(ctx *fasthttp.RequestCtx, rt *route) {
	var nodes any = []struct{}{}
	if s.opts.Nodes != nil {
		nodes = s.opts.Nodes()
	}
	s.writeJSON(ctx, rt, http.StatusOK, nodes)
}

func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, rt *route, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.internalError(ctx, rt, fmt.Errorf("encode response: %w", err))
		return
	}
	s.writeJSONBytes(ctx, code, b)
}

func (s *Server) writeJSONBytes(ctx *fasthttp.RequestCtx, code int, b []byte) {
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *Server) internalError(ctx *fasthttp.RequestCtx, rt *route, err error) {
	s.log.Error("internal error", "route", rt.name, "err", err)
	s.writeError(ctx, rt.cohere, front.Failure{HTTPStatus: http.StatusInternalServerError, Type: "internal_error", Message: "internal error: " + err.Error()})
}

// errorBody is the error shape outside /v2: {"error": {"message", "type", "code"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// cohereErrorBody is Cohere's error shape: {"message": …}.
type cohereErrorBody struct {
	Message string `json:"message"`
}

func (s *Server) writeError(ctx *fasthttp.RequestCtx, cohere bool, f front.Failure) {
	var v any = errorBody{Error: errorDetail{Message: f.Message, Type: f.Type, Code: f.HTTPStatus}}
	if cohere {
		v = cohereErrorBody{Message: f.Message}
	}
	b, err := json.Marshal(v)
	if err != nil { // strings always encode; keep a valid body regardless
		b = []byte(`{"message":"internal error"}`)
	}
	if f.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", front.RetryAfterHeader(f.RetryAfter))
	}
	s.writeJSONBytes(ctx, f.HTTPStatus, b)
}

func isCohere(path []byte) bool {
	return len(path) >= 4 && string(path[:4]) == "/v2/"
}

func allowed(methods []string, m []byte) bool {
	for _, x := range methods {
		if x == string(m) {
			return true
		}
	}
	return false
}

func joinMethods(ms []string) string {
	out := ""
	for i, m := range ms {
		if i > 0 {
			out += ", "
		}
		out += m
	}
	return out
}

// fieldError is a semantic error in a well-formed body (422); its message names the field.
type fieldError struct{ field, problem string }

func (e *fieldError) Error() string { return e.field + ": " + e.problem }

func fieldErr(field, problem string) error { return &fieldError{field: field, problem: problem} }

// syntaxError is a body that is not the JSON the route expects (400).
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

// jsonError names the problem in an encoding/json error: the byte offset of a syntax error, or
// the field and types of a type mismatch.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return &syntaxError{fmt.Sprintf("invalid JSON body at byte %d: %v", se.Offset, se)}
	case errors.As(err, &te) && te.Field != "":
		return &syntaxError{fmt.Sprintf("%s: must be %s, got %s", te.Field, jsonTypeName(te.Type.Kind().String()), te.Value)}
	case errors.As(err, &te):
		return &syntaxError{fmt.Sprintf("request body: must be a JSON object, got %s", te.Value)}
	}
	return &syntaxError{"invalid JSON body: " + err.Error()}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a number"
}

func badRequest(msg string) front.Failure {
	return front.Failure{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Message: msg}
}

func unprocessable(err error) front.Failure {
	return front.Failure{HTTPStatus: http.StatusUnprocessableEntity, Type: "invalid_request_error", Message: err.Error()}
}

func failureOf(err error) front.Failure {
	var fe *fieldError
	if errors.As(err, &fe) {
		return unprocessable(err)
	}
	return badRequest(err.Error())
}

// fasthttpLogger sends fasthttp's own log lines to slog.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Warn("fasthttp: " + fmt.Sprintf(format, args...))
}
