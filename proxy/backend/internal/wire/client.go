// Package wire holds what the HTTP rerank adapters share, so that each decision is made once:
// one HTTP client per node (connection reuse, the call's deadline, a cap on reply size), the
// mapping from HTTP statuses and transport failures to gRPC codes, the check that a reply names
// every document exactly once, the Qwen3-Reranker pair for template=proxy, the breaking of
// added-token text in user strings that every server's tokenizer would otherwise read as control
// tokens (plainText), and the Prometheus gauge reader. A Client is safe for concurrent use.
package wire

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
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Reply-size caps. A rerank reply may echo every document (vLLM always does), so its cap grows
// with the request: replyBase + replyPerRequestByte × request bytes.
const (
	replyBase           = 1 << 20
	replyPerRequestByte = 2
	probeReplyLimit     = 8 << 20 // /metrics of a busy vLLM runs to hundreds of KiB
)

// Client talks HTTP to one node.
type Client struct {
	node    string
	base    *url.URL
	hc      *http.Client
	timeout time.Duration
}

// Open is every HTTP kind's constructor prologue: spec's kind defaults to kind ("") and must be
// it, spec must validate, and the client is built. It returns the spec with its kind filled in.
func Open(kind string, spec backend.Spec) (*Client, backend.Spec, error) {
	if spec.Kind == "" {
		spec.Kind = kind
	}
	if err := spec.Validate(); err != nil {
		return nil, spec, err
	}
	if spec.Kind != kind {
		return nil, spec, KindError(kind, spec.Kind)
	}
	c, err := NewClient(spec)
	return c, spec, err
}

// NewClient builds the client for spec (an HTTP kind; spec.Validate has passed).
func NewClient(spec backend.Spec) (*Client, error) {
	base, err := backend.BaseURL(spec.Addr)
	if err != nil {
		return nil, fmt.Errorf("addr: %w", err)
	}
	tr := &http.Transport{
		Proxy:               nil, // the node is addressed directly, whatever HTTP_PROXY says
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 512, // one proxy sends many batches to a node at once
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{node: spec.Node(), base: base, hc: &http.Client{Transport: tr}, timeout: spec.TimeoutOr()}, nil
}

// Node is the node's name, "<kind>@<host:port>".
func (c *Client) Node() string { return c.node }

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Errorf is a status error whose message names the node.
func Errorf(node string, code codes.Code, format string, args ...any) error {
	return status.Error(code, "node "+node+": "+fmt.Sprintf(format, args...))
}

// Classifier lets a kind recognise its server's own way of saying "over my limit" (llama.cpp
// answers HTTP 500 for a pair over n_ubatch). ok false keeps the generic mapping (CodeForStatus).
type Classifier func(httpStatus int, msg string, body []byte) (code codes.Code, ok bool)

// PostJSON sends body as JSON to path and returns the reply body of a 200; any other outcome is
// a status error (see CodeForStatus, classify and the package doc of backend).
func (c *Client) PostJSON(ctx context.Context, path string, body any, classify Classifier) ([]byte, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, Errorf(c.node, codes.Internal, "encode request: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(path), bytes.NewReader(payload))
	if err != nil {
		return nil, Errorf(c.node, codes.Internal, "build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// Scoring is idempotent: an empty Idempotency-Key (never sent) lets net/http resend the
	// request when a kept-alive connection turns out to have been closed by the server.
	req.Header["Idempotency-Key"] = nil
	code, raw, err := c.do(ctx, req, replyBase+replyPerRequestByte*int64(len(payload)))
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, c.statusError(code, raw, classify)
	}
	return raw, nil
}

// Get fetches path (health, metrics) and returns the HTTP status and body; err is set only when
// no reply came (status error as for PostJSON).
func (c *Client) Get(ctx context.Context, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path), nil)
	if err != nil {
		return 0, nil, Errorf(c.node, codes.Internal, "build request: %v", err)
	}
	return c.do(ctx, req, probeReplyLimit)
}

// GetOK fetches path and returns its body when the status is 200.
func (c *Client) GetOK(ctx context.Context, path string) ([]byte, bool) {
	code, body, err := c.Get(ctx, path)
	return body, err == nil && code == http.StatusOK
}

func (c *Client) url(path string) string {
	u := *c.base
	u.Path = c.base.Path + path
	return u.String()
}

var errTooLarge = errors.New("reply too large")

func (c *Client) do(ctx context.Context, req *http.Request, limit int64) (int, []byte, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, c.transportError(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(raw)) > limit {
		err = errTooLarge
	}
	switch {
	case errors.Is(err, errTooLarge):
		return 0, nil, Errorf(c.node, codes.Internal, "reply: over %d bytes (HTTP %d)", limit, resp.StatusCode)
	case err != nil:
		return 0, nil, c.transportError(ctx, err)
	}
	return resp.StatusCode, raw, nil
}

// transportError maps a failure to get a reply: the call's deadline, the caller leaving, or a
// node that cannot be reached.
func (c *Client) transportError(ctx context.Context, err error) error {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return Errorf(c.node, codes.Canceled, "call canceled: %v", context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Errorf(c.node, codes.DeadlineExceeded, "no reply within the deadline")
	case errors.As(err, &ne) && ne.Timeout():
		return Errorf(c.node, codes.DeadlineExceeded, "no reply within the deadline: %v", err)
	default:
		return Errorf(c.node, codes.Unavailable, "%v", err)
	}
}

func (c *Client) statusError(httpStatus int, body []byte, classify Classifier) error {
	msg := ErrorMessage(body)
	code := CodeForStatus(httpStatus)
	if classify != nil {
		if k, ok := classify(httpStatus, msg, body); ok {
			code = k
		}
	}
	if code == codes.FailedPrecondition {
		return Errorf(c.node, code, "request over the server's limit (HTTP %d): %s", httpStatus, msg)
	}
	return Errorf(c.node, code, "HTTP %d: %s", httpStatus, msg)
}

// CodeForStatus is the one mapping from an HTTP status to a gRPC code for every HTTP kind.
func CodeForStatus(httpStatus int) codes.Code {
	switch {
	case httpStatus == http.StatusRequestEntityTooLarge:
		return codes.FailedPrecondition // a batch over the server's limit: plan smaller ones
	case httpStatus == http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case httpStatus == http.StatusRequestTimeout || httpStatus == http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case httpStatus == http.StatusUnauthorized:
		return codes.Unauthenticated
	case httpStatus == http.StatusForbidden:
		return codes.PermissionDenied
	case httpStatus == http.StatusNotFound || httpStatus == http.StatusMethodNotAllowed || httpStatus == http.StatusNotImplemented:
		return codes.Unimplemented // wrong endpoint or model name: a misconfigured node
	case httpStatus == http.StatusFailedDependency:
		return codes.Unavailable // TEI: the model backend failed
	case httpStatus >= 400 && httpStatus < 500:
		return codes.InvalidArgument
	default:
		return codes.Unavailable
	}
}

// ErrorMessage extracts the message from the error bodies these servers send:
// {"error": "…"} (TEI), {"error": {"message": "…"}} (vLLM, llama.cpp, Infinity), {"message": "…"}
// (SGLang, older vLLM), {"detail": "…" | [{"loc": […], "msg": "…"}]} (FastAPI validation);
// anything else is quoted, cut to 200 bytes.
func ErrorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		var s string
		var obj struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case e.Message != "":
			return e.Message
		case json.Unmarshal(e.Detail, &s) == nil && s != "":
			return s
		}
		if d := ValidationDetails(body); len(d) > 0 {
			msgs := make([]string, len(d))
			for i, v := range d {
				msgs[i] = v.Field() + ": " + v.Msg
			}
			return strings.Join(msgs, "; ")
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// ValidationDetail is one entry of a FastAPI request-validation error (HTTP 422).
type ValidationDetail struct {
	Type string `json:"type"`
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
}

// Field is the entry's location as a dotted path ("body.documents").
func (d ValidationDetail) Field() string {
	parts := make([]string, len(d.Loc))
	for i, p := range d.Loc {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ".")
}

// ValidationDetails decodes {"detail": [...]} (nil when the body is not one).
func ValidationDetails(body []byte) []ValidationDetail {
	var v struct {
		Detail []ValidationDetail `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	return v.Detail
}
