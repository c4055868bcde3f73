// Package fakerank runs in-process fakes of the rerank servers the proxy can front — vLLM,
// SGLang, llama.cpp server, Hugging Face TEI and Infinity — for tests: one HTTP server on
// 127.0.0.1:0 per Start, speaking that server's rerank API as its source defines it (paths,
// request fields and their validation, reply envelope, sort order, score form, error bodies
// and status codes, batch and token limits, health endpoint, load gauges). Each kind's file
// cites the source it follows.
//
// The "model" is a deterministic function of (query, document), Score, so tests can check that
// scores come back in item order. The fake first rebuilds the text the model would read — the
// server's own template if it applies one, else query and document concatenated, as these
// servers do for a pair — and scores the query and document it finds in it: the score is the
// same whether the proxy or the server rendered the Qwen3-Reranker template, and what the model
// read is recorded (Request.Prompts) so tests can check who rendered it.
//
// Tests steer a running fake: SetLatency (a function of the request), FailNext (the next n
// rerank calls answer an HTTP status with the server's error body), SetHang (calls block until
// the client leaves), SetShape (replies in a wrong shape: missing index, duplicate index, index
// out of range, non-numeric score, missing entry, not JSON), SetHealthy, SetLoad (extra backlog
// in the load gauges); and read Requests and Calls. All methods are safe for concurrent use.
//
// Benchmarks use a fake as a stand-in for a loaded server: Options.Concurrency queues calls as a
// server's scheduler does, and ProfileLatency makes each call take what a measured cost profile
// of our engine predicts for it (`bench fakerank` serves one such fake as a process, and bench
// cluster starts N of them as nodes). Such a fake is EMULATED: its speed is our engine's, its API
// the server's.
//
//	f, err := fakerank.Start(backend.KindTEI, fakerank.Options{})
//	defer f.Close()
//	f.FailNext(1, http.StatusTooManyRequests)
package fakerank

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Kinds of server, named as in proxy configuration.
const (
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindLlamaCpp = "llamacpp"
	KindTEI      = "tei"
	KindInfinity = "infinity"
)

// Template says whether the fake server applies the Qwen3-Reranker template itself.
type Template int

const (
	// TemplateDefault: what the server does when launched as its documentation shows for
	// Qwen3-Reranker: vLLM no (it applies a score template only with --chat-template), SGLang yes
	// (the reranker chat template selects its Qwen3 path), llama.cpp yes (the GGUF's "rerank"
	// template), TEI and Infinity never (they have none).
	TemplateDefault Template = iota
	// TemplateOn: the server renders its template around query and document.
	TemplateOn
	// TemplateOff: the server concatenates query and document.
	TemplateOff
)

// Options configures a fake. The zero value is a healthy server of the kind's default limits
// that answers at once.
type Options struct {
	// Model is the served model's name (in replies and metric labels); "" means "fake-reranker".
	Model string
	// MaxItems is the most documents per request: TEI --max-client-batch-size (0: 32), Infinity's
	// schema limit (0: 2048). Other kinds have none and ignore it.
	MaxItems int
	// MaxTokens is the most tokens one pair's model input may have (counted as bytes/4, rounded
	// up): llama.cpp n_ubatch (0: 512), vLLM --max-model-len, SGLang --context-length, TEI
	// --max-input-length (0: no limit). Infinity truncates silently and ignores it.
	MaxTokens int
	// Template: see Template.
	Template Template
	// NoMetrics serves no load gauges (a server started without metrics).
	NoMetrics bool
	// NoModelList serves no list of the models served (vLLM /v1/models, TEI /info, Infinity
	// /models, which also carries its load): 404, as behind a gateway that routes only the API.
	NoModelList bool
	// Latency, when set, is how long each rerank call takes (ProfileLatency makes one from a
	// measured cost profile). With Concurrency it is the call's processing time, counted from
	// when it leaves the queue.
	Latency func(Request) time.Duration
	// Addr is where to listen (host:port); "" means 127.0.0.1:0.
	Addr string
	// Concurrency, when > 0, is how many rerank calls are processed at a time, as a GPU server's
	// scheduler runs a bounded number of requests per step: later calls wait in a FIFO queue,
	// their documents counted as waiting in the load gauges (as running once processed), and a
	// client that leaves while queued is dropped from it. 0: no limit (every call at once).
	Concurrency int
}

// Request is what the fake received on one rerank call that passed validation.
type Request struct {
	// Path is the URL path called.
	Path string
	// Body is the JSON body as decoded.
	Body map[string]any
	// Query and Documents are the query and documents fields (TEI: texts).
	Query     string
	Documents []string
	// Prompts are the texts the model reads, one per document.
	Prompts []string
}

// Shape is a way a reply can be wrong.
type Shape int

const (
	ShapeOK              Shape = iota
	ShapeMissingIndex          // the first entry has no index field
	ShapeDuplicateIndex        // the second entry repeats the first one's index
	ShapeIndexOutOfRange       // the first entry's index is past the last document
	ShapeNonNumericScore       // the first entry's score is a string
	ShapeMissingEntry          // the last entry is dropped
	ShapeNotJSON               // the body is an HTML page
)

// Server is one running fake.
type Server struct {
	kind string
	d    *dialect
	opts Options
	lis  net.Listener
	srv  *http.Server
	done chan struct{}
	wg   sync.WaitGroup

	mu          sync.Mutex
	latency     func(Request) time.Duration
	failNext    int
	failStatus  int
	hang        bool
	hangRelease chan struct{}
	shape       Shape
	unhealthy   bool
	waiting     float64
	running     float64
	reqs        []Request

	slots    *slots       // nil: no concurrency limit
	queued   atomic.Int64 // documents waiting for a slot
	inflight atomic.Int64 // documents being scored
	calls    atomic.Int64
	closed   atomic.Bool
}

// Start serves a fake of kind on Options.Addr (127.0.0.1:0 by default) until Close.
func Start(kind string, opts Options) (*Server, error) {
	d, ok := dialects[kind]
	if !ok {
		return nil, fmt.Errorf("fakerank: unknown kind %q", kind)
	}
	if opts.Model == "" {
		opts.Model = "fake-reranker"
	}
	if opts.MaxItems == 0 {
		opts.MaxItems = d.maxItems
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = d.maxTokens
	}
	if opts.Template == TemplateDefault {
		opts.Template = d.template
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("fakerank: concurrency must be ≥ 0, got %d", opts.Concurrency)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakerank: listen: %w", err)
	}
	s := &Server{kind: kind, d: d, opts: opts, lis: lis, done: make(chan struct{}), latency: opts.Latency, hangRelease: make(chan struct{})}
	if opts.Concurrency > 0 {
		s.slots = newSlots(opts.Concurrency)
	}
	mux := http.NewServeMux()
	for _, p := range d.rerankPaths {
		mux.HandleFunc("POST "+p, s.track(s.rerank))
	}
	mux.HandleFunc("GET "+d.healthPath, s.track(s.health))
	if d.load != nil {
		d.load(s, mux)
	}
	if d.models != nil && !opts.NoModelList {
		d.models(s, mux)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Addr is the fake's host:port.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the fake at once (hung and sleeping calls end) and waits for its goroutines.
func (s *Server) Close() {
	if s.closed.Swap(true) {
		return
	}
	close(s.done)
	_ = s.srv.Close()
	s.wg.Wait()
}

// SetLatency replaces the latency function (nil: answer at once).
func (s *Server) SetLatency(f func(Request) time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = f
}

// FailNext makes the next n rerank calls that pass validation answer httpStatus with the
// server's error body for that status.
func (s *Server) FailNext(n, httpStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failStatus = n, httpStatus
}

// SetHang makes rerank calls block until the client leaves (on), or releases them (off).
func (s *Server) SetHang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on == s.hang {
		return
	}
	s.hang = on
	if !on {
		close(s.hangRelease)
		s.hangRelease = make(chan struct{})
	}
}

// SetShape makes replies wrong in the given way (ShapeOK: right again).
func (s *Server) SetShape(sh Shape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shape = sh
}

// SetHealthy flips the health endpoint between ready and not.
func (s *Server) SetHealthy(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhealthy = !ok
}

// SetLoad adds backlog to the load gauges: requests waiting on top of the documents queued for
// a slot (Options.Concurrency), and running on top of the documents the fake is scoring now.
func (s *Server) SetLoad(waiting, running float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting, s.running = waiting, running
}

// Requests are the rerank calls received so far that passed validation.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Calls counts rerank calls received, valid or not.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Score is the fake model's relevance of document to query: a deterministic value in
// (0.01, 0.99), the probability sigmoid(Logit).
func Score(query, document string) float64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, query)
	_, _ = h.Write([]byte{0})
	_, _ = io.WriteString(h, document)
	return 0.01 + 0.98*float64(h.Sum64()%1000003)/1000003
}

// Logit is the fake model's log-odds of document being relevant to query.
func Logit(query, document string) float64 {
	p := Score(query, document)
	return math.Log(p / (1 - p))
}

// Parse finds instruction, query and document in a Qwen3-Reranker prompt ("<Instruct>: …\n
// <Query>: …\n<Document>: …<|im_end|>"); ok is false when text is not one.
func Parse(text string) (instruction, query, document string, ok bool) {
	const in, q, d, end = "<Instruct>: ", "\n<Query>: ", "\n<Document>: ", "<|im_end|>\n<|im_start|>assistant\n"
	i := strings.Index(text, in)
	j := strings.Index(text, q)
	k := strings.Index(text, d)
	e := strings.LastIndex(text, end)
	if i < 0 || j < i || k < j || e < k {
		return "", "", "", false
	}
	return text[i+len(in) : j], text[j+len(q) : k], text[k+len(d) : e], true
}

// tokens is the fake tokenizer's count: bytes/4, rounded up.
func tokens(s string) int { return (len(s) + 3) / 4 }

// httpError is a reply other than 200.
type httpError struct {
	status int
	body   any
}

// parsed is a rerank request in the terms every kind shares.
type parsed struct {
	query, instruct string
	docs            []string
	topN            int  // 0: all
	raw             bool // raw scores (TEI, Infinity)
	echo            bool // return the documents
	teiFormat       bool // llama.cpp given "texts": answer in TEI's format
	truncate        bool // TEI: cut inputs over the token limit instead of failing
}

// dialect is one kind's API.
type dialect struct {
	rerankPaths []string
	healthPath  string
	maxItems    int
	maxTokens   int
	template    Template
	// parse validates a decoded body.
	parse func(s *Server, body map[string]any) (parsed, *httpError)
	// limit checks the request against the server's limits (the model inputs are known).
	limit func(s *Server, p parsed, prompts []string) *httpError
	// render is the text the model reads for one pair when the server applies its template.
	render func(p parsed, doc string) string
	// form says whether a score is sent as a probability.
	probability func(p parsed) bool
	// entry is one ranked document in the reply.
	entry func(p parsed, index int, score float64, doc string) map[string]any
	// envelope wraps the ranked entries.
	envelope func(s *Server, p parsed, entries []any, promptTokens int) any
	// errorBody is the server's body for an error status.
	errorBody func(status int, msg string) any
	// healthOK and healthDown are the health endpoint's replies, ready and not.
	healthOK, healthDown func(w http.ResponseWriter)
	// load registers the load-gauge endpoint(s).
	load func(s *Server, mux *http.ServeMux)
	// models registers the endpoint that says what the server serves (nil: none, or load's).
	models func(s *Server, mux *http.ServeMux)
	// scoreKey names the entry's score field (the one ShapeNonNumericScore corrupts).
	scoreKey func(p parsed) string
}

var dialects = map[string]*dialect{
	KindVLLM:     vllmDialect(),
	KindSGLang:   sglangDialect(),
	KindLlamaCpp: llamacppDialect(),
	KindTEI:      teiDialect(),
	KindInfinity: infinityDialect(),
}

// track counts a handler so that Close can wait for it.
func (s *Server) track(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		h(w, r)
	}
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	down := s.unhealthy
	s.mu.Unlock()
	if down {
		s.d.healthDown(w)
		return
	}
	s.d.healthOK(w)
}

func (s *Server) rerank(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		writeJSON(w, http.StatusBadRequest, s.d.errorBody(http.StatusBadRequest, "invalid JSON body: "+err.Error()))
		return
	}
	p, herr := s.d.parse(s, body)
	if herr != nil {
		writeJSON(w, herr.status, herr.body)
		return
	}
	prompts := make([]string, len(p.docs))
	for i, doc := range p.docs {
		if s.opts.Template == TemplateOn && s.d.render != nil {
			prompts[i] = s.d.render(p, doc)
		} else {
			prompts[i] = p.query + doc
		}
	}
	if s.d.limit != nil {
		if herr := s.d.limit(s, p, prompts); herr != nil {
			writeJSON(w, herr.status, herr.body)
			return
		}
	}
	req := Request{Path: r.URL.Path, Body: body, Query: p.query, Documents: p.docs, Prompts: prompts}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	fail, failStatus := s.failNext > 0, s.failStatus
	if fail {
		s.failNext--
	}
	hang, release, latency, shape := s.hang, s.hangRelease, s.latency, s.shape
	s.mu.Unlock()

	if fail {
		writeJSON(w, failStatus, s.d.errorBody(failStatus, fmt.Sprintf("injected failure (HTTP %d)", failStatus)))
		return
	}
	if s.slots != nil {
		s.queued.Add(int64(len(p.docs)))
		ok := s.slots.acquire(r.Context().Done(), s.done)
		s.queued.Add(-int64(len(p.docs)))
		if !ok {
			return
		}
		defer s.slots.release()
	}
	s.inflight.Add(int64(len(p.docs)))
	defer s.inflight.Add(-int64(len(p.docs)))
	if hang {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-release:
		}
	}
	if latency != nil {
		t := time.NewTimer(latency(req))
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
		}
	}

	type ranked struct {
		index int
		score float64
	}
	rs := make([]ranked, len(p.docs))
	promptTokens := 0
	for i, text := range prompts {
		q, d := p.query, p.docs[i]
		if _, pq, pd, ok := Parse(text); ok {
			q, d = pq, pd
		}
		v := Logit(q, d)
		if s.d.probability(p) {
			v = Score(q, d)
		}
		rs[i] = ranked{i, v}
		promptTokens += tokens(text)
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].score > rs[b].score }) // every kind answers best first
	if p.topN > 0 && p.topN < len(rs) {
		rs = rs[:p.topN]
	}
	entries := make([]map[string]any, len(rs))
	for i, e := range rs {
		entries[i] = s.d.entry(p, e.index, e.score, p.docs[e.index])
	}
	if shape == ShapeNotJSON {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
		return
	}
	entries = corrupt(entries, shape, s.d.scoreKey(p), len(p.docs))
	list := make([]any, len(entries))
	for i, e := range entries {
		list[i] = e
	}
	writeJSON(w, http.StatusOK, s.d.envelope(s, p, list, promptTokens))
}

// corrupt makes entries wrong in the way shape says.
func corrupt(entries []map[string]any, shape Shape, scoreKey string, n int) []map[string]any {
	if len(entries) == 0 {
		return entries
	}
	switch shape {
	case ShapeMissingIndex:
		delete(entries[0], "index")
	case ShapeDuplicateIndex:
		if len(entries) > 1 {
			entries[1]["index"] = entries[0]["index"]
		}
	case ShapeIndexOutOfRange:
		entries[0]["index"] = n + 3
	case ShapeNonNumericScore:
		entries[0][scoreKey] = "high"
	case ShapeMissingEntry:
		entries = entries[:len(entries)-1]
	}
	return entries
}

// writeJSON writes v as JSON, or as plain text when it is a string (axum's own rejections).
func writeJSON(w http.ResponseWriter, status int, v any) {
	if text, ok := v.(string); ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, text)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// gauges registers the kind's two load gauges on a registry of the fake's own and serves it at
// /metrics (404, as a server without metrics, when Options.NoMetrics).
func (s *Server) gauges(mux *http.ServeMux, waiting, running string, labels prometheus.Labels) {
	if s.opts.NoMetrics {
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: waiting, Help: "Requests waiting.", ConstLabels: labels}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.waiting + float64(s.queued.Load())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: running, Help: "Requests running.", ConstLabels: labels}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.running + float64(s.inflight.Load())
		}),
	)
	mux.Handle("GET /metrics", s.track(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP))
}

// Field readers for request validation: they report whether the field has the right JSON type.

func str(body map[string]any, key string) (string, bool, bool) {
	v, present := body[key]
	if !present || v == nil {
		return "", false, true
	}
	s, ok := v.(string)
	return s, true, ok
}

func strList(body map[string]any, key string) ([]string, bool, bool) {
	v, present := body[key]
	if !present || v == nil {
		return nil, false, true
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, true, false
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, true, false
		}
		out[i] = s
	}
	return out, true, true
}

func intField(body map[string]any, key string) (int, bool, bool) {
	v, present := body[key]
	if !present || v == nil {
		return 0, false, true
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) {
		return 0, true, false
	}
	return int(f), true, true
}

func boolField(body map[string]any, key string, def bool) (bool, bool) {
	v, present := body[key]
	if !present || v == nil {
		return def, true
	}
	b, ok := v.(bool)
	return b, ok
}
