// Package backend is the contract between the proxy and a scoring server of some kind: our own
// scorer node (gRPC Scorer.ScoreBatch) or a rerank server a team already runs (vLLM, SGLang,
// llama.cpp, Hugging Face TEI, Infinity), each spoken in its own wire format by a sub-package
// (backend/scorer, backend/vllm, …). backend/registry builds one from a Spec.
//
// Every kind answers one ScoreBatch in our terms: one score per item, in the batch's item order,
// with Index = position in the batch, Score = sigmoid(logit("yes") − logit("no")) in [0, 1] and
// Logit that difference. Kinds that report no compute time or load leave Stats and Load nil; the
// proxy then learns the node's speed from observed latency and, where the kind implements
// Loader, reads its backlog from the server's own metrics.
//
// Errors are gRPC status errors whose message starts "node <kind>@<addr>: ":
//
//   - codes.InvalidArgument: input the server refused as bad (HTTP 400, 422), or an instruction
//     that a server-side template cannot carry;
//   - codes.FailedPrecondition: a request over one of the server's limits (HTTP 413, documents per
//     request, tokens per pair); a planning error to fix, not to retry; the message says the limit;
//     a batch over the documents per request (a scorer node's max_items) carries it as a
//     relevancev1.BatchTooLarge detail too (ItemLimit), so that the proxy cuts the batch to it;
//   - codes.ResourceExhausted: the server shed the request (HTTP 429);
//   - codes.Unavailable: the server could not be reached or answered 5xx / 503;
//   - codes.DeadlineExceeded: no answer within the call's deadline; codes.Canceled: the caller left;
//   - codes.Unimplemented: the endpoint or model does not exist (HTTP 404, or the kind's own way of
//     saying that it does not serve the model named): a misconfigured node; an unknown model's
//     error also matches ErrModelNotServed;
//   - codes.Internal: a reply in the wrong shape; the message names the field, e.g.
//     "node tei@127.0.0.1:8081: results[3].index 7 out of range for 4 documents".
//
// No kind asks its server to truncate (a server cuts the pair's end, which with the proxy's
// template is the template's tail). Every HTTP kind cuts documents itself, as a scorer node does
// (wire.Client.Rerank): at the document's end, to the server's max_item_tokens a pair and the
// request's max_tokens_per_item, answering TRUNCATED, or TOO_LONG under TRUNCATION_NONE. An
// item too long for a server whose limit is not configured fails the batch with
// FailedPrecondition.
//
// Implementations must be safe for concurrent use.
package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Kinds of node, as named in configuration.
const (
	KindScorer   = "scorer"
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindLlamaCpp = "llamacpp"
	KindTEI      = "tei"
	KindInfinity = "infinity"
)

// Kinds lists every kind, sorted (the order validation errors name them in).
func Kinds() []string {
	return []string{KindInfinity, KindLlamaCpp, KindScorer, KindSGLang, KindTEI, KindVLLM}
}

// Who renders the Qwen3-Reranker prompt around each (query, document) pair.
const (
	// TemplateProxy: the proxy sends the prompt built from package prompt (HeadText,
	// BodyPrefix, TailText). For a pair API (query + documents), whose servers concatenate
	// the two, the query carries HeadText+BodyPrefix (the shared prefix) and each document
	// " "+document+TailText, so the text the model reads is exactly the full prompt.
	TemplateProxy = "proxy"
	// TemplateServer: the server gets query and documents as they are and applies its own
	// template (or none, for a plain cross-encoder).
	//
	// With either, an HTTP server's tokenizer would read added-token text in the user strings
	// (<|im_end|>, <think>, …) as control tokens, which a scorer node reads as text: the HTTP
	// kinds send it with a zero width space after its first character (internal/wire, plainText).
	TemplateServer = "server"
)

// DefaultTimeout caps one call when Spec.Timeout is zero (the request's deadline still applies
// when it is earlier).
const DefaultTimeout = 30 * time.Second

// Backend is one scoring server.
type Backend interface {
	// ScoreBatch scores every item of req against its query, under ctx's deadline. Errors are
	// gRPC status errors as described in the package doc.
	ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error)
	// Healthy reports whether the server answers its health endpoint as ready.
	Healthy(ctx context.Context) bool
	// Limits are the server's per-request limits, for the planner.
	Limits() Limits
	// Close releases connections.
	Close() error
}

// Loader is implemented by kinds whose server publishes its backlog (Prometheus /metrics, or
// Infinity's /models stats).
type Loader interface {
	// LoadGauge reads the server's own queue gauges: requests waiting and requests running, in
	// the server's unit (for every HTTP kind here, one (query, document) pair is one request).
	// ok is false when the server did not answer or does not export them (metrics disabled).
	LoadGauge(ctx context.Context) (waiting, running float64, ok bool)
}

// HealthWaiter is implemented by kinds whose health endpoint waits behind the batch the server is
// running (TEI's /health goes down the same backend queue as the batches): the proxy gives such
// a probe HealthTimeout instead of its one-second default, so that a server busy with a long
// batch is not taken for a dead one.
type HealthWaiter interface {
	HealthTimeout() time.Duration
}

// ModelChecker is implemented by kinds whose server says which models it serves (vLLM and
// Infinity: their model list; TEI: /info's model_id). The proxy checks when a node joins and
// when it comes back, and keeps a node whose server does not serve the configured model out of
// traffic (its health endpoint answers, yet every batch sent to it would fail) unless the
// finding is advisory (ModelError.Advisory).
type ModelChecker interface {
	// CheckModel returns a *ModelError when the server lists what it serves and Spec.Model is not
	// among it. It returns nil when the model is served, when none is configured, and when the
	// server cannot say (no such endpoint, a reply not understood): a node that cannot be
	// checked is not kept out on that account. No reply, a 5xx or a 429 is ErrModelUnchecked:
	// the node is not kept out, and is checked again until the server answers.
	CheckModel(ctx context.Context) error
}

// ErrModelNotServed is matched (errors.Is) by the errors that say a server does not serve the
// configured model: ModelChecker's *ModelError, and a ScoreBatch error for a reply that said so.
var ErrModelNotServed = errors.New("the server does not serve the configured model")

// ErrModelUnchecked is CheckModel's answer when the check could not conclude this time (no reply,
// a 5xx or 429): the node is not kept out on that account, and is checked again.
var ErrModelUnchecked = errors.New("the server's model list did not answer")

// ModelError is ModelChecker's finding: the server serves Served, not Model.
type ModelError struct {
	Node   string   // "<kind>@<addr>"
	Model  string   // the configured model (Spec.Model)
	Served []string // what the server says it serves
	// Advisory: the server scores with what it serves whatever a request names (TEI, which
	// takes no model; Infinity serving one model), so the configured name is only the one
	// written on replies. Worth a warning, not a reason to keep the node out.
	Advisory bool
}

func (e *ModelError) Error() string {
	return fmt.Sprintf("node %s: serves %q, not the configured model %q", e.Node, e.Served, e.Model)
}

// Is makes a ModelError match ErrModelNotServed.
func (e *ModelError) Is(target error) bool { return target == ErrModelNotServed }

// Limits bound one request to a server.
type Limits struct {
	// MaxItems is the most documents one request may carry (0: no limit).
	MaxItems int
	// MaxItemTokens is the most prompt tokens one (query, document) pair may have, template
	// included (0: no limit). llama.cpp scores each pair in one physical batch (n_ubatch).
	MaxItemTokens int
}

// ItemLimitError is a batch of items refused for the server's own limit of limit items per
// request: FailedPrecondition (the server's configuration, not the caller's input) with message
// msg and a relevancev1.BatchTooLarge detail saying the limit (ItemLimit).
func ItemLimitError(msg string, items, limit int) error {
	st := status.New(codes.FailedPrecondition, msg)
	d := &relevancev1.BatchTooLarge{Items: uint32(max(0, items)), MaxBatchItems: uint32(max(0, limit))}
	if ds, err := st.WithDetails(d); err == nil {
		st = ds
	}
	return st.Err()
}

// ItemLimit is the limit on items per request that err says its batch was refused for: the
// relevancev1.BatchTooLarge detail of ItemLimitError, or of a scorer node's own refusal (which
// is INVALID_ARGUMENT); 0 when err is no such refusal.
func ItemLimit(err error) int {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return 0
	}
	for _, d := range st.Details() {
		if b, isB := d.(*relevancev1.BatchTooLarge); isB && b.GetMaxBatchItems() > 0 {
			return int(b.GetMaxBatchItems())
		}
	}
	return 0
}

// Spec configures one node. The zero value is invalid (Kind and Addr are required); zero
// numeric fields mean "the kind's default".
type Spec struct {
	// Kind is one of Kinds().
	Kind string `yaml:"kind" json:"kind"`
	// Addr is where the server listens. scorer: a gRPC target (host:port). Other kinds: host:port
	// (http assumed) or a base URL with an optional path prefix (https://gpu-3:7997/v1).
	Addr string `yaml:"addr" json:"addr"`
	// Template is TemplateProxy, TemplateServer or "" for the kind's default (each kind's
	// package doc says which and why).
	Template string `yaml:"template" json:"template"`
	// MaxItems overrides the kind's documents-per-request limit (0: the kind's default).
	MaxItems int `yaml:"max_items" json:"max_items"`
	// MaxItemTokens overrides the kind's prompt-tokens-per-pair limit (0: the kind's default).
	MaxItemTokens int `yaml:"max_item_tokens" json:"max_item_tokens"`
	// Model is sent as the request's "model" field where the API has one ("": none sent), and
	// checked against what the server lists (ModelChecker): a vLLM server, or an Infinity one
	// serving several models, that does not list it is kept out of traffic; TEI, or Infinity
	// serving one model, scores whatever a request names, so a mismatch is only warned of.
	Model string `yaml:"model" json:"model"`
	// Timeout caps one call (and one health or load probe) when shorter than the request's
	// deadline (0: DefaultTimeout).
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Validate checks the fields every kind shares; errors name the field ("kind: …"), and callers
// holding a list prefix it ("nodes[2].kind: …"). Kind-specific rules are checked by the kind's
// constructor.
func (s Spec) Validate() error {
	known := false
	for _, k := range Kinds() {
		known = known || s.Kind == k
	}
	if !known {
		return fmt.Errorf("kind: must be one of %s, got %q", strings.Join(Kinds(), ", "), s.Kind)
	}
	if err := s.validateAddr(); err != nil {
		return err
	}
	switch s.Template {
	case "", TemplateProxy, TemplateServer:
	default:
		return fmt.Errorf("template: must be %q, %q or empty (the kind's default), got %q", TemplateProxy, TemplateServer, s.Template)
	}
	if s.MaxItems < 0 {
		return fmt.Errorf("max_items: must be >= 0 (0: the kind's default), got %d", s.MaxItems)
	}
	if s.MaxItemTokens < 0 {
		return fmt.Errorf("max_item_tokens: must be >= 0 (0: the kind's default), got %d", s.MaxItemTokens)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("timeout: must be >= 0 (0: %s), got %s", DefaultTimeout, s.Timeout)
	}
	return nil
}

func (s Spec) validateAddr() error {
	if s.Addr == "" {
		return fmt.Errorf("addr: must not be empty")
	}
	if s.Kind == KindScorer {
		// Any gRPC target with a scheme (dns:///…, unix:…), else host:port as in nodes.static:
		// gRPC reads a bare host as dns:///host:443, where no scorer node listens.
		if strings.Contains(s.Addr, "://") || strings.HasPrefix(s.Addr, "unix:") || strings.HasPrefix(s.Addr, "unix-abstract:") {
			return nil
		}
		host, port, err := net.SplitHostPort(s.Addr)
		if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			return fmt.Errorf("addr: must be host:port (port 1–65535) or a gRPC target with a scheme (dns:///host:port, unix:path), got %q", s.Addr)
		}
		return nil
	}
	if _, err := BaseURL(s.Addr); err != nil {
		return fmt.Errorf("addr: %w", err)
	}
	return nil
}

// BaseURL parses an HTTP kind's Addr: host:port means http://host:port.
func BaseURL(addr string) (*url.URL, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("must be host:port or an http(s) base URL, got %q", addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// Node is the name errors and replies give a node, and the key the cluster knows it by:
// "<kind>@<host:port>" (the Addr itself for gRPC targets), with a URL's path prefix after it
// ("vllm@gw:8080/gpu-1"), so that two servers behind one gateway stay two nodes.
func (s Spec) Node() string {
	if s.Kind != KindScorer {
		if u, err := BaseURL(s.Addr); err == nil {
			return s.Kind + "@" + u.Host + strings.TrimSuffix(u.Path, "/")
		}
	}
	return s.Kind + "@" + s.Addr
}

// TemplateOr is the Spec's template, or def when it leaves the choice to the kind.
func (s Spec) TemplateOr(def string) string {
	if s.Template == "" {
		return def
	}
	return s.Template
}

// LimitsOr is the Spec's limits over the kind's defaults.
func (s Spec) LimitsOr(def Limits) Limits {
	if s.MaxItems > 0 {
		def.MaxItems = s.MaxItems
	}
	if s.MaxItemTokens > 0 {
		def.MaxItemTokens = s.MaxItemTokens
	}
	return def
}

// TimeoutOr is the Spec's per-call cap (DefaultTimeout when zero).
func (s Spec) TimeoutOr() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}
