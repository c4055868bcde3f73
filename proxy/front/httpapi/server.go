// Package httpapi is the proxy's HTTP front, on fasthttp: POST /v1/score (the JSON mirror of
// relevance.v1.Ranker/Score), POST /v1/rerank and /rerank (Jina/vLLM rerank; also
// /reranking and /v1/reranking, as llama.cpp names them), POST /v2/rerank (Cohere v2 rerank),
// and GET /healthz, /readyz, /metrics, /v1/nodes, /v1/models. Hugging Face TEI's rerank body is answered
// in TEI's format on /rerank and /v1/rerank, and vLLM's score API on /score and /v1/score
// (compat.go).
//
// /v1/score speaks the proto3 JSON mapping (protojson: snake_case names, enums by name, 64-bit
// integers as strings, zero values emitted). The rerank routes accept documents as strings or
// {"text": …} objects. Unknown fields are ignored everywhere; unknown enum names are not.
//
// The front only decodes: the request contract is the core's (proxy/request), and so is the
// ranking (ScoreResponse.ranking, which the rerank routes return as it is). Errors name the field
// in the route's vocabulary ("documents[2]" on the rerank routes for the core's "items[2].text"):
// 400 for a body that is not the JSON expected (malformed, a wrong type, invalid UTF-8 anywhere),
// 422 for a well-formed body with a bad value, 413 over http.max_body_bytes; core errors map as
// in front.Classify. /v2/* answers errors as Cohere does ({"message"}), a TEI body as TEI does
// ({"error", "error_type"}), the rest as {"error": {"message", "type", "code"}}.
//
// Every handler copies what it hands to the core (encoding/json and protojson allocate fresh
// strings), because fasthttp reuses a RequestCtx's buffers once the handler returns while the
// core's fan-out may still hold the request (a batch still running after a deadline answer).
//
// A Server is safe for concurrent use; Serve once, then Shutdown.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/relevance-scoring/relevance/internal/reqid"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/front"
	"github.com/relevance-scoring/relevance/proxy/request"
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
	// Models returns the model names GET /v1/models lists (OpenAI's and vLLM's model list, which
	// clients read to find the name to send); nil lists none.
	Models func() []string
	// Metrics records requests. Required (see front.NewMetrics).
	Metrics *front.Metrics
	// Gatherer is what GET /metrics exposes. Required.
	Gatherer prometheus.Gatherer
	// Logger gets panics and internal errors; nil discards.
	Logger *slog.Logger
	// DefaultBudget is the core's budget for a request that sets none (the proxy's SLO): what a
	// route that makes several core calls for one HTTP request (vLLM's score API with several
	// text_1) holds the whole request to. 0: no bound beyond each call's own.
	DefaultBudget time.Duration
	// MaxItems is the most items the core takes in one request: a vLLM score body, whose pairs
	// may be spread over several core requests, is held to it as a whole. 0: no bound here.
	MaxItems int
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

	// conns holds every open connection and its state (fasthttp's ConnState): a drain waits for
	// them to close before it closes the idle ones (Shutdown), and one that ran out of time waits
	// for those with a request in progress (StateActive: read, handled or being answered) to be
	// answered after it cancels their core calls.
	connsMu sync.Mutex
	conns   map[net.Conn]fasthttp.ConnState
	// ln is the listener Serve was given, closable once by either Shutdown or fasthttp.
	ln *onceCloseListener
}

// answerGrace bounds how long a drain that ran out of time waits, once it has cancelled the core
// calls still running, for their requests to be answered.
const answerGrace = 2 * time.Second

// route is one served path.
type route struct {
	name    string
	methods []string
	serve   func(s *Server, ctx *fasthttp.RequestCtx, rt *route)
	// errShape shapes the route's error replies (genericError or cohereError).
	errShape func(front.Failure) any
	// vocab names the core's fields as the route's clients know them; nil keeps the canonical names.
	vocab vocabulary
	// rerank is the rerank API the route speaks; nil on other routes.
	rerank *rerankDialect
}

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
		{name: "/v1/rerank", methods: post, serve: (*Server).serveRerank, vocab: rerankVocabulary, rerank: jinaDialect},
		{name: "/rerank", methods: post, serve: (*Server).serveRerank, vocab: rerankVocabulary, rerank: jinaDialect},
		{name: "/v2/rerank", methods: post, serve: (*Server).serveRerank, vocab: rerankVocabulary, rerank: cohereDialect},
		// llama.cpp's server names its rerank routes so too.
		{name: "/reranking", methods: post, serve: (*Server).serveRerank, vocab: rerankVocabulary, rerank: jinaDialect},
		{name: "/v1/reranking", methods: post, serve: (*Server).serveRerank, vocab: rerankVocabulary, rerank: jinaDialect},
		{name: "/score", methods: post, serve: (*Server).serveVLLMScore, vocab: vllmScoreVocabulary},
		{name: "/healthz", methods: get, serve: (*Server).serveHealthz},
		{name: "/readyz", methods: get, serve: (*Server).serveReadyz},
		{name: "/metrics", methods: get, serve: (*Server).serveMetrics},
		{name: "/v1/nodes", methods: get, serve: (*Server).serveNodes},
		{name: "/v1/models", methods: get, serve: (*Server).serveModels},
	} {
		rt.errShape = errorShape(rt.name)
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
		ConnState:            s.connState,
		NoDefaultContentType: true,
		// Bodies reach the handler as streams, read there (readBody), so that one over the
		// limit is read to its end and answered 413 instead of the connection being closed on it.
		StreamRequestBody: true,
		// In streaming mode fasthttp would read a multipart/form-data body whole before the
		// handler, with no size check; no route takes forms, so they are bodies like any other.
		DisablePreParseMultipartForm: true,
		Logger:                       fasthttpLogger{log},
	}
	return s, nil
}

// Serve answers requests on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	ocl := &onceCloseListener{Listener: ln}
	s.connsMu.Lock()
	s.ln = ocl
	s.connsMu.Unlock()
	return s.fs.Serve(ocl)
}

// onceCloseListener closes its listener once: the drain closes it before fasthttp's Shutdown,
// which closes it again and would report the second close as its error.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// SetDraining makes /readyz answer 503 (so load balancers stop sending) while requests are
// still served.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Shutdown marks the server draining, stops accepting, and waits for in-flight requests until
// ctx is done; then it cancels the core calls still running, waits (up to answerGrace) for their
// requests to be answered — 503 now — and returns ctx's error. Without that wait the caller went
// on to close the core and exit with handlers still running: their clients got a reset instead
// of the retryable 503.
//
// Keep-alive connections are not closed at once: for up to DrainIdleGrace (at most half of what
// ctx leaves) they stay open, each request on them answered with Connection: close, and only those
// still open then are closed. Closing an idle connection at the signal resets a request its
// client has just sent on it (a POST, which no client retries by itself): the fault suite's
// sigterm-proxy saw one such reset in three runs, a request sent within 1 ms of the signal.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetDraining()
	s.connsMu.Lock()
	ln := s.ln
	s.connsMu.Unlock()
	if ln != nil {
		_ = ln.Close() // no new connections; fasthttp's Serve returns nil
		grace := s.cfg.DrainIdleGrace
		if dl, ok := ctx.Deadline(); ok {
			// Half of what the drain has left at most: the rest is for the requests in flight
			// and the idle connections' closing, or a drain with nothing in flight and a
			// timeout under the grace was reported as timed out, its calls cancelled.
			grace = min(grace, time.Until(dl)/2)
		}
		s.awaitConnsClosed(ctx, grace)
	}
	err := s.fs.ShutdownWithContext(ctx)
	s.cancelBase()
	if err != nil {
		for deadline := time.Now().Add(answerGrace); s.inProgress() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// connState tracks the open connections and their states (fasthttp.Server.ConnState).
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	switch st {
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(s.conns, c)
	default:
		if s.conns == nil {
			s.conns = map[net.Conn]fasthttp.ConnState{}
		}
		s.conns[c] = st
	}
}

// inProgress is how many connections have a request in progress.
func (s *Server) inProgress() int {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	n := 0
	for _, st := range s.conns {
		if st == fasthttp.StateActive {
			n++
		}
	}
	return n
}

// awaitConnsClosed waits until no connection is open, grace has passed or ctx is done. While
// draining, every reply closes its connection, so a client that keeps sending leaves on its
// next answer.
func (s *Server) awaitConnsClosed(ctx context.Context, grace time.Duration) {
	if grace <= 0 {
		return
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s.connsMu.Lock()
		open := len(s.conns)
		s.connsMu.Unlock()
		if open == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
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
			s.writeError(ctx, errorShape(name), front.Failure{HTTPStatus: http.StatusInternalServerError, Type: "internal_error", Message: "internal error"})
		}
		if s.draining.Load() {
			// Its client takes the next request elsewhere (a new connection, which a load
			// balancer sends to a proxy still serving) instead of racing the drain's close.
			ctx.SetConnectionClose()
		}
		s.opts.Metrics.ObserveHTTP(name, ctx.Response.StatusCode(), time.Since(start))
	}()
	shape := errorShape(string(ctx.Path()))
	if !s.readBody(ctx, shape) {
		return
	}
	if rt == nil {
		s.writeError(ctx, shape, front.Failure{HTTPStatus: http.StatusNotFound, Type: "not_found",
			Message: fmt.Sprintf("no route for %s %s", ctx.Method(), ctx.Path())})
		return
	}
	if !slices.Contains(rt.methods, string(ctx.Method())) {
		allow := strings.Join(rt.methods, ", ")
		ctx.Response.Header.Set("Allow", allow)
		s.writeError(ctx, rt.errShape, front.Failure{HTTPStatus: http.StatusMethodNotAllowed, Type: "method_not_allowed",
			Message: fmt.Sprintf("method %s not allowed on %s; use %s", ctx.Method(), rt.name, allow)})
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
	s.writeError(ctx, errorShape(string(ctx.Path())), f)
	s.opts.Metrics.ObserveHTTP(name, f.HTTPStatus, 0)
}

// drainBytes bounds how much of a body over the limit is read (and dropped) before its 413 is
// sent (readBody); the connection's read timeout bounds the time.
const drainBytes = 64 << 20

// readBody makes the request's whole body, at most http.max_body_bytes, what ctx.PostBody()
// returns, before any route runs; otherwise it answers (413 over the limit, 400 for a body cut
// short or malformed, 408 when reading it timed out) and reports false. The server streams bodies
// (StreamRequestBody) for two reasons. On its own fasthttp closes the connection on a body over
// its limit with the rest unread, and a connection closed with unread data is reset: a client
// still sending the body — Go's net/http and Python's clients send it all before they read a
// reply — got "connection reset by peer" instead of the 413 (a 20 MB body against the 8 MB
// default, 2 of 3 tries); so a body over the limit is read to its end (up to drainBytes) and
// answered on a connection that closes after the reply. And a body left unread in its stream would
// be parsed as the next request on a keep-alive connection, so every route's body is read here, a
// 404's and a 405's too. The stream is read here, not through ctx.PostBody(), which would hand a
// failed read's error text to the route as the body and keep the connection, now out of step with
// the client's framing, open for the rest of it to be parsed as a request.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, shape func(front.Failure) any) bool {
	if !ctx.Request.IsBodyStream() {
		return true
	}
	limit := s.cfg.MaxBodyBytes
	stream := ctx.RequestBodyStream()
	var b []byte
	var err error
	switch cl := ctx.Request.Header.ContentLength(); {
	case cl > limit:
		return s.refuseBody(ctx, shape, stream)
	case cl >= 0:
		b, err = readAsItArrives(stream, cl)
	default: // chunked: one byte past the limit at most
		if hasContentLength(&ctx.Request.Header) {
			// Content-Length as well as chunked: an intermediary that frames by the length would
			// take the rest of this body as the next request (request smuggling). fasthttp
			// follows the chunking and would keep the connection; RFC 9112 §6.1 says to close it
			// after answering, and the request is refused rather than guessed at.
			_, _ = io.Copy(io.Discard, io.LimitReader(stream, drainBytes))
			ctx.SetConnectionClose()
			s.writeError(ctx, shape, front.Failure{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error",
				Message: "request has both Content-Length and Transfer-Encoding: chunked"})
			return false
		}
		b, err = io.ReadAll(io.LimitReader(stream, int64(limit)+1))
		if err == nil && len(b) > limit {
			return s.refuseBody(ctx, shape, stream)
		}
	}
	if err != nil {
		ctx.SetConnectionClose()
		f := front.Failure{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Message: "request body cut short or malformed: " + err.Error()}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			f = front.Failure{HTTPStatus: http.StatusRequestTimeout, Type: "timeout", Message: "timed out reading the request body"}
		}
		s.writeError(ctx, shape, f)
		return false
	}
	ctx.Request.SetBodyRaw(b)
	return true
}

// hasContentLength reports whether the request's headers, as received, include Content-Length
// (fasthttp's ContentLength is -1 for a chunked request, whichever of the two came first).
func hasContentLength(h *fasthttp.RequestHeader) bool {
	for k := range h.AllInOrder() {
		if strings.EqualFold(string(k), fasthttp.HeaderContentLength) {
			return true
		}
	}
	return false
}

// readAsItArrives reads a body of cl bytes, its buffer grown as the bytes arrive (doubling, to
// exactly cl), not made at the length the header claims: a client that sends the headers of an
// 8 MiB body and stalls would hold 8 MiB per connection until the read timeout. (bytes.Buffer
// would end a full body in twice its size.)
func readAsItArrives(stream io.Reader, cl int) ([]byte, error) {
	b := make([]byte, 0, min(cl, 64<<10))
	for len(b) < cl {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(cl, 2*cap(b)))
			copy(nb, b)
			b = nb
		}
		k, err := stream.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		switch {
		case err == io.EOF && len(b) < cl:
			return b, io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return b, err
		}
	}
	return b, nil
}

// refuseBody answers 413 to a body over the limit, after reading the rest of it (up to
// drainBytes) so that the client, still sending, can read the reply; the connection then closes.
func (s *Server) refuseBody(ctx *fasthttp.RequestCtx, shape func(front.Failure) any, stream io.Reader) bool {
	_, _ = io.Copy(io.Discard, io.LimitReader(stream, drainBytes))
	ctx.SetConnectionClose()
	s.writeError(ctx, shape, front.Failure{HTTPStatus: http.StatusRequestEntityTooLarge, Type: "request_too_large",
		Message: fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes)})
	return false
}

func (s *Server) serveScore(ctx *fasthttp.RequestCtx, rt *route) {
	if isVLLMScore(ctx.PostBody()) {
		s.serveVLLMScore(ctx, rt) // vLLM's score API shares the path
		return
	}
	req, err := decodeScore(ctx.PostBody(), s.opts.MaxItems)
	if err != nil {
		s.writeError(ctx, rt.errShape, failureOf(err))
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

// serveRerank serves every rerank API; rt.rerank holds what tells them apart.
func (s *Server) serveRerank(ctx *fasthttp.RequestCtx, rt *route) {
	if rt.rerank == jinaDialect && isTEI(ctx.PostBody()) {
		s.serveTEI(ctx, rt)
		return
	}
	req, texts, rr, err := parseRerank(ctx.PostBody(), s.opts.MaxItems)
	if err != nil {
		s.writeError(ctx, rt.errShape, failureOf(err))
		return
	}
	resp, ok := s.score(ctx, rt, req)
	if !ok || !s.allScored(ctx, rt, resp) {
		return
	}
	withDocs := rt.rerank.returnDocuments
	if rr.ReturnDocuments != nil {
		withDocs = *rr.ReturnDocuments
	}
	results, err := rankedResults(resp, texts, withDocs, false)
	if err != nil {
		s.internalError(ctx, rt, err)
		return
	}
	// The served model's name (the core's), never the caller's: a client that sent an alias
	// learns what really scored its documents.
	model := resp.GetModel()
	s.writeJSON(ctx, rt, http.StatusOK, rt.rerank.reply(rerankReply{
		id: s.responseID(req, resp), model: model, results: results, documents: len(texts), usage: resp.GetUsage(),
	}))
}

// allScored answers 422 naming the first item a rerank reply could not rank for being too long
// (asked for without truncation), and reports whether there is none. A ranked list has no place
// for an item's status: left out, the document would vanish from a 200 without a word. (Items of
// failed batches, which come back only when partial results are allowed, are left out of the
// ranking as partial results promise.)
func (s *Server) allScored(ctx *fasthttp.RequestCtx, rt *route, resp *relevancev1.ScoreResponse) bool {
	for i, sc := range resp.GetScores() {
		if sc.GetStatus() == relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG {
			s.writeError(ctx, rt.errShape, unscored(rt, i, sc))
			return false
		}
	}
	return true
}

// unscored is the 422 for item i of a reply that could not be scored (sc's status), named in
// rt's vocabulary.
func unscored(rt *route, i int, sc *relevancev1.ItemScore) front.Failure {
	return failureOf(unacceptable(rt.vocab.name(fmt.Sprintf("items[%d]", i)), "%s", itemProblem(sc)))
}

// score runs req on the core under the request's budget. On failure it has written the error
// reply and returns false.
func (s *Server) score(ctx *fasthttp.RequestCtx, rt *route, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, bool) {
	resp, err := s.coreScore(ctx, req)
	if err != nil {
		s.writeError(ctx, rt.errShape, s.failure(rt, req, err))
		return nil, false
	}
	if id := resp.GetRequestId(); id != "" {
		ctx.Response.Header.Set(HeaderRequestID, id)
	} else if id := req.GetRequestId(); id != "" {
		ctx.Response.Header.Set(HeaderRequestID, id)
	}
	return resp, true
}

// coreScore runs req on the core under the request's budget (X-Request-Timeout-Ms, else the
// core's default), with the caller's X-Request-Id unless req has an id.
func (s *Server) coreScore(ctx *fasthttp.RequestCtx, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if err := fromHeaders(ctx, req); err != nil {
		return nil, err
	}
	return s.run(req)
}

// fromHeaders sets req's budget from X-Request-Timeout-Ms and its id from X-Request-Id (unless
// it has one), else a fresh id: the reply carries it either way, errors included, and the core
// logs under it.
func fromHeaders(ctx *fasthttp.RequestCtx, req *relevancev1.ScoreRequest) error {
	if h := ctx.Request.Header.Peek(HeaderTimeout); len(h) > 0 {
		ms, err := strconv.ParseUint(string(h), 10, 32)
		if err != nil || ms == 0 {
			return malformed(HeaderTimeout, "must be a positive integer of milliseconds, got %q", h)
		}
		req.TimeoutMs = uint32(ms)
	}
	if req.GetRequestId() == "" {
		req.RequestId = string(ctx.Request.Header.Peek(HeaderRequestID)) // string() copies
	}
	if req.GetRequestId() == "" {
		req.RequestId = freshID()
	}
	if len(ctx.Response.Header.Peek(HeaderRequestID)) == 0 && utf8.ValidString(req.GetRequestId()) {
		ctx.Response.Header.Set(HeaderRequestID, req.GetRequestId())
	}
	return nil
}

// run runs req on the core under its budget. It touches no RequestCtx, so several may run at
// once for one HTTP request.
func (s *Server) run(req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	return s.runCtx(s.baseCtx, req)
}

// runCtx is run under a context of the caller's (a descendant of baseCtx): its deadline, when
// earlier than req's budget, wins.
func (s *Server) runCtx(cctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
	if req.GetTimeoutMs() > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, time.Duration(req.GetTimeoutMs())*time.Millisecond)
		defer cancel()
	}
	resp, err := s.opts.Core.Score(cctx, req)
	if err == nil && resp == nil {
		err = errors.New("core returned no response")
	}
	return resp, err
}

// failure is the reply to a failed core call on rt (or to a bad budget header): the core's
// status mapped by front.Classify, a violated field named in the route's vocabulary.
func (s *Server) failure(rt *route, req *relevancev1.ScoreRequest, err error) front.Failure {
	var bi *badInput
	if errors.As(err, &bi) {
		return failureOf(err)
	}
	f := front.Classify(err)
	if field, problem, ok := request.Violation(err); ok {
		f.Message = rt.vocab.name(field) + ": " + problem
	}
	if f.HTTPStatus == front.StatusClientClosed && s.baseCtx.Err() != nil {
		// fasthttp does not cancel on disconnect: a cancellation here is the drain's, and
		// the client is still waiting for an answer it may retry elsewhere.
		f = front.Failure{HTTPStatus: http.StatusServiceUnavailable, Type: "service_unavailable", Message: "proxy is shutting down"}
	}
	if f.HTTPStatus >= 500 && f.HTTPStatus != http.StatusServiceUnavailable && f.HTTPStatus != http.StatusGatewayTimeout {
		s.log.Error("score failed", "route", rt.name, "request_id", req.GetRequestId(), "err", err)
	}
	return f
}

// responseID is the core's request id, else the caller's, else a fresh one.
func (s *Server) responseID(req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) string {
	if id := resp.GetRequestId(); id != "" {
		return id
	}
	if id := req.GetRequestId(); id != "" {
		return id
	}
	return freshID()
}

// freshID is a new random request id.
func freshID() string { return reqid.New() }

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

// modelCard is one entry of GET /v1/models, in OpenAI's and vLLM's shape.
type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

func (s *Server) serveModels(ctx *fasthttp.RequestCtx, rt *route) {
	out := modelList{Object: "list", Data: []modelCard{}}
	if s.opts.Models != nil {
		now := time.Now().Unix()
		for _, m := range s.opts.Models() {
			out.Data = append(out.Data, modelCard{ID: m, Object: "model", Created: now, OwnedBy: "relevance"})
		}
	}
	s.writeJSON(ctx, rt, http.StatusOK, out)
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
	s.writeError(ctx, rt.errShape, front.Failure{HTTPStatus: http.StatusInternalServerError, Type: "internal_error", Message: "internal error: " + err.Error()})
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

// genericError is the error shape outside /v2.
func genericError(f front.Failure) any {
	return errorBody{Error: errorDetail{Message: f.Message, Type: f.Type, Code: f.HTTPStatus}}
}

// cohereError is Cohere's error shape, for /v2.
func cohereError(f front.Failure) any { return cohereErrorBody{Message: f.Message} }

// errorShape is the error shape for a path, served or not.
func errorShape(path string) func(front.Failure) any {
	if strings.HasPrefix(path, "/v2/") {
		return cohereError
	}
	return genericError
}

func (s *Server) writeError(ctx *fasthttp.RequestCtx, shape func(front.Failure) any, f front.Failure) {
	b, err := json.Marshal(shape(f))
	if err != nil { // strings always encode; keep a valid body regardless
		b = []byte(`{"message":"internal error"}`)
	}
	// The caller's id is echoed on errors too, or a fresh one given: those are the replies it
	// most wants to find in its logs and ours.
	if len(ctx.Response.Header.Peek(HeaderRequestID)) == 0 {
		if id := ctx.Request.Header.Peek(HeaderRequestID); len(id) > 0 && utf8.Valid(id) {
			ctx.Response.Header.SetBytesV(HeaderRequestID, id)
		} else {
			ctx.Response.Header.Set(HeaderRequestID, freshID())
		}
	}
	if f.RetryAfter > 0 {
		// Retry-After has whole seconds only; Retry-After-Ms (as OpenAI's and Azure's APIs send
		// it) carries the backlog's real delay, often tens of milliseconds.
		ctx.Response.Header.Set("Retry-After", front.RetryAfterHeader(f.RetryAfter))
		ctx.Response.Header.Set("Retry-After-Ms", strconv.FormatInt(max(1, f.RetryAfter.Milliseconds()), 10))
	}
	s.writeJSONBytes(ctx, f.HTTPStatus, b)
}

// failureOf is the reply to a body the front could not decode.
func failureOf(err error) front.Failure {
	status := http.StatusBadRequest
	var bi *badInput
	if errors.As(err, &bi) {
		status = bi.status
	}
	return front.Failure{HTTPStatus: status, Type: "invalid_request_error", Message: err.Error()}
}

// fasthttpLogger sends fasthttp's own log lines to slog.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Warn("fasthttp: " + fmt.Sprintf(format, args...))
}
