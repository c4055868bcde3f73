package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/relevance-scoring/relevance/bench/workload"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Target sends one prepared request to the system under test. Implementations are safe for
// concurrent use.
type Target interface {
	// Prepare encodes r once, before the clock starts, so encoding cost stays out of the
	// measured latency and the generator's CPU budget.
	Prepare(r *workload.Request) (Prepared, error)
	// Do sends p and waits for a valid reply; errors are *Error values with a Kind.
	Do(ctx context.Context, p Prepared) error
	// Close releases connections.
	Close() error
	// String names the target for reports.
	String() string
}

// Prepared is a request encoded for one target.
type Prepared struct {
	body  []byte                    // HTTP body
	grpc  *relevancev1.ScoreRequest // gRPC message
	items int                       // items sent
	want  int                       // results expected in the reply
	req   *workload.Request         // what was encoded
}

// Request is the workload request p encodes (nil for a zero Prepared).
func (p Prepared) Request() *workload.Request { return p.req }

// Items is the number of items the request scores.
func (p Prepared) Items() int { return p.items }

// Body is the encoded HTTP body (nil for gRPC targets); crosscheck tools send it verbatim.
func (p Prepared) Body() []byte { return p.body }

// Error is a failed request, classified by Kind for the report's errors-by-kind table.
type Error struct {
	Kind string
	Err  error
}

func (e *Error) Error() string { return e.Kind + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Error kinds that are not a status code.
const (
	KindOverflow    = "overflow"     // open loop: the in-flight cap was reached, request not sent
	KindTimeout     = "timeout"      // client-side timeout
	KindConnection  = "connection"   // dial/reset/EOF
	KindBadResponse = "bad_response" // 200 but the body is not the expected answer
	KindOther       = "other"
)

// KindOf returns the kind of err (KindOther for errors that are not *Error).
func KindOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindOther
}

func classifyTransport(ctx context.Context, err error) *Error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || os.IsTimeout(err):
		return &Error{KindTimeout, err}
	case errors.Is(err, context.Canceled):
		return &Error{"canceled", err}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return &Error{KindConnection, err}
	}
	return &Error{KindOther, err}
}

// TargetOption changes what every request of a target asks for.
type TargetOption func(*targetOptions)

type targetOptions struct{ noCache bool }

// NoScoreCache makes every request bypass the proxy's score cache (`"cache": false` on the
// rerank shapes, options.no_cache on /v1/score and gRPC), so that the nodes score every item:
// a closed loop cycles through its trace, and the cache would answer the repeats (a capacity
// probe once measured 5,783 req/s of a 29 req/s cluster that way).
func NoScoreCache() TargetOption { return func(o *targetOptions) { o.noCache = true } }

// NewTarget returns the target for a URL: http(s)://host:port[/v1/rerank|/rerank|/v2/rerank|/v1/score]
// (path defaults to /v1/rerank) or grpc://host:port (Ranker.Score). maxConns bounds the HTTP
// connection pool (the load's concurrency).
func NewTarget(raw string, maxConns int, opts ...TargetOption) (Target, error) {
	var o targetOptions
	for _, f := range opts {
		f(&o)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", raw, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("target %q: want http://host:port/path or grpc://host:port", raw)
	}
	switch u.Scheme {
	case "http", "https":
		path := u.Path
		if path == "" || path == "/" {
			path = "/v1/rerank"
		}
		var shape string
		switch path {
		case "/v1/rerank", "/rerank":
			shape = "rerank"
		case "/v2/rerank":
			shape = "cohere"
		case "/v1/score":
			shape = "score"
		default:
			return nil, fmt.Errorf("target %q: path must be /v1/rerank, /rerank, /v2/rerank or /v1/score, got %q", raw, path)
		}
		u.Path = path
		if maxConns < 1 {
			maxConns = 1
		}
		tr := &http.Transport{
			Proxy:               nil, // never route load through an environment proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
		return &httpTarget{url: u.String(), shape: shape, client: &http.Client{Transport: tr}, noCache: o.noCache}, nil
	case "grpc":
		cc, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", raw, err)
		}
		return &grpcTarget{addr: u.Host, cc: cc, client: relevancev1.NewRankerClient(cc), noCache: o.noCache}, nil
	default:
		return nil, fmt.Errorf("target %q: scheme must be http, https or grpc, got %q", raw, u.Scheme)
	}
}

type httpTarget struct {
	url     string
	shape   string // rerank, cohere, score
	client  *http.Client
	noCache bool
}

func (t *httpTarget) String() string { return t.url }
func (t *httpTarget) Close() error   { t.client.CloseIdleConnections(); return nil }

func expected(r *workload.Request) int {
	if r.TopN > 0 && r.TopN < len(r.Items) {
		return r.TopN
	}
	return len(r.Items)
}

func (t *httpTarget) Prepare(r *workload.Request) (Prepared, error) {
	var v any
	switch t.shape {
	case "rerank", "cohere":
		m := map[string]any{"query": r.Query, "documents": r.Items}
		if t.shape == "cohere" {
			m["model"] = "rerank" // the proxy's default alias of the served model (Cohere requires a name)
		}
		if r.TopN > 0 {
			m["top_n"] = r.TopN
		}
		if r.Instruction != "" {
			m["instruction"] = r.Instruction
		}
		if t.noCache {
			m["cache"] = false
		}
		v = m
	case "score":
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(scoreRequest(r, t.noCache))
		if err != nil {
			return Prepared{}, fmt.Errorf("encode score request: %w", err)
		}
		return Prepared{body: b, items: len(r.Items), want: len(r.Items), req: r}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Prepared{}, fmt.Errorf("encode rerank request: %w", err)
	}
	return Prepared{body: b, items: len(r.Items), want: expected(r), req: r}, nil
}

// reply is the part of every HTTP answer the tool checks: the rerank shapes list results, the
// native shape lists scores (one per item).
type reply struct {
	Results []json.RawMessage `json:"results"`
	Scores  []json.RawMessage `json:"scores"`
}

func (t *httpTarget) Do(ctx context.Context, p Prepared) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(p.body))
	if err != nil {
		return &Error{KindOther, err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return classifyTransport(ctx, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return classifyTransport(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &Error{fmt.Sprintf("http_%d", resp.StatusCode), fmt.Errorf("%s", truncate(body, 200))}
	}
	var rep reply
	if err := json.Unmarshal(body, &rep); err != nil {
		return &Error{KindBadResponse, fmt.Errorf("decode reply: %w", err)}
	}
	got := len(rep.Results)
	if t.shape == "score" {
		got = len(rep.Scores)
	}
	if got != p.want {
		return &Error{KindBadResponse, fmt.Errorf("reply has %d results, want %d", got, p.want)}
	}
	return nil
}

func truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

type grpcTarget struct {
	addr    string
	cc      *grpc.ClientConn
	client  relevancev1.RankerClient
	noCache bool
}

func (t *grpcTarget) String() string { return "grpc://" + t.addr }
func (t *grpcTarget) Close() error   { return t.cc.Close() }

func scoreRequest(r *workload.Request, noCache bool) *relevancev1.ScoreRequest {
	m := &relevancev1.ScoreRequest{Query: r.Query, Instruction: r.Instruction, TopN: uint32(r.TopN),
		Items: make([]*relevancev1.Item, len(r.Items))}
	if noCache {
		m.Options = &relevancev1.ScoreOptions{NoCache: true}
	}
	for i, it := range r.Items {
		m.Items[i] = &relevancev1.Item{Text: it}
	}
	return m
}

func (t *grpcTarget) Prepare(r *workload.Request) (Prepared, error) {
	return Prepared{grpc: scoreRequest(r, t.noCache), items: len(r.Items), want: len(r.Items), req: r}, nil
}

func (t *grpcTarget) Do(ctx context.Context, p Prepared) error {
	resp, err := t.client.Score(ctx, p.grpc)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return &Error{KindTimeout, err}
			}
		case codes.Unavailable:
			if strings.Contains(st.Message(), "connection") || strings.Contains(st.Message(), "dial") {
				return &Error{KindConnection, err}
			}
		}
		return &Error{"grpc_" + strings.ToLower(st.Code().String()), err}
	}
	if len(resp.GetScores()) != p.want {
		return &Error{KindBadResponse, fmt.Errorf("reply has %d scores, want %d", len(resp.GetScores()), p.want)}
	}
	return nil
}
