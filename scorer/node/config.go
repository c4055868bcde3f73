package node

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/yamlconf"
	"github.com/relevance-scoring/relevance/kernels"
)

// Engine kinds for Config.Engine.
const (
	EngineReal     = "real"
	EngineEmulated = "emulated"
)

// Config is a scorer node's configuration (configs/scorer.yaml). Load applies Default, then the
// YAML (unknown keys are errors), then Validate.
type Config struct {
	// GRPCAddr is where gRPC (Scorer, health, reflection) listens, host:port; port 0 picks one.
	GRPCAddr string `yaml:"grpc_addr"`
	// HTTPAddr is where /healthz, /readyz, /metrics and /v1/status listen, host:port.
	HTTPAddr string `yaml:"http_addr"`
	// NodeID names the node in replies and logs; "" means the host name and gRPC port.
	NodeID string `yaml:"node_id"`
	// Engine is "real" (load Model) or "emulated" (sleep per CostProfile; no model needed).
	Engine string `yaml:"engine"`
	// Model is the Hugging Face checkpoint folder (engine real); the emulated engine uses it only
	// as a name.
	Model string `yaml:"model"`
	// CostProfile is the JSON cost profile file the emulated engine sleeps by (required then).
	CostProfile string `yaml:"cost_profile"`
	// Threads is the forward pass's worker threads; 0 means GOMAXPROCS.
	Threads int `yaml:"threads"`
	// MaxTokens is the longest prompt (prefix + item) in tokens; 0 means the engine's own limit.
	MaxTokens int `yaml:"max_tokens"`
	// MaxItemBytes is the largest item text accepted, in bytes; must be > 0.
	MaxItemBytes int `yaml:"max_item_bytes"`
	// MaxItems is the most items one batch may hold; must be > 0.
	MaxItems int `yaml:"max_items"`
	// MaxBatchTokens is the token budget of one merged forward pass: queued batches are merged
	// while the total stays within it and merging pays (see mergePays; a single larger batch
	// still runs alone); must be > 0.
	MaxBatchTokens int `yaml:"max_batch_tokens"`
	// MergePolicy is when queued batches merge into one pass: MergeCost (the default) while the
	// cost model says the merge answers the queue sooner (see mergePays), MergeFill whenever
	// they fit MaxBatchTokens — for an engine whose pass costs its longest batch, not their sum.
	MergePolicy string `yaml:"merge_policy"`
	// MaxQueueBatches is how many batches may wait (queued, or accepted and still tokenizing);
	// beyond it calls get RESOURCE_EXHAUSTED before any work is spent on them; > 0.
	MaxQueueBatches int `yaml:"max_queue_batches"`
	// MoEPolicy is the MoE kernel policy: auto (a cost table measured at load picks the cheapest
	// variant per batch), threshold (blockM 128, 64 when padding at 128 exceeds 1.5: the GPU
	// reference behaviour) or fixed:<128|64|32|16|exact>. The default is auto; a file that sets
	// it to "" gets the kernels' own default (threshold), not auto.
	MoEPolicy string `yaml:"moe_policy"`
	// BF16Matmul is how bf16 weights are multiplied: auto (AMX with f32 accuracy where the CPU
	// has it, else AVX-512), widen (AVX-512, f32 activations) or bf16 (bf16 dot products:
	// fastest, activations rounded to bf16). See kernels.SetBF16Matmul.
	BF16Matmul string `yaml:"bf16_matmul"`
	// PrefixCacheBytes is the cross-request prefix KV cache budget in bytes; 0 disables it.
	PrefixCacheBytes int64 `yaml:"prefix_cache_bytes"`
	// DrainTimeout bounds how long a shutdown waits for queued and running work; 0 means no wait
	// (stop at once).
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxRequestBytes is gRPC's maximum received message size in bytes; 0 means derived from
	// MaxItems × MaxItemBytes plus 1 MiB of headroom.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// RecvTimeout bounds how long a gRPC call's request message may take to arrive, from its
	// headers (for a stream, its first message). A ScoreBatch's deadline applies only from the
	// handler on, once the message has arrived, and grpc-go has no bound of its own: a client
	// that sent headers and part of a message, with no deadline, held its stream and the bytes
	// it had sent (up to the receive limit, max_request_bytes) for as long as it kept the
	// connection open. Such a call is ended CANCELLED (internal/grpcrecv). The proxy always
	// sends deadlines; this is for the other callers a node may be exposed to. 0: no limit.
	RecvTimeout time.Duration `yaml:"recv_timeout"`
	// MaxConcurrentStreams bounds the calls one gRPC connection may have open at once (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS; a client that ignores it has the extra streams refused
	// with REFUSED_STREAM). grpc-go's default is no limit: one connection could open streams
	// without end, each a goroutine and buffers on the node. 0 means derived (see
	// maxConcurrentStreams): the most a proxy can usefully have open, so that the limit never
	// holds back a call the node would take; -1 means no limit; a value set must be at least
	// the derived one.
	MaxConcurrentStreams int64 `yaml:"max_concurrent_streams"`
	// Cost is the real engine's cost coefficients (a s/token, b s/attended pair, c s/batch),
	// measured elsewhere (`bench calibrate`); the node starts from them instead of timing passes
	// at start-up, then learns from every pass. All zero means none. The emulated engine starts
	// from its cost_profile, so Cost is an error there.
	Cost costmodel.Coeffs `yaml:"cost"`
	// Calibrate makes a node whose engine has only a guess of its speed (the real engine without
	// Cost) time forward passes of its own model on synthetic prompts after loading it, before it
	// reports ready, and start its learned cost model from that fit. false keeps the guess.
	Calibrate bool `yaml:"calibrate"`
	// CalibrationBudget bounds the start-up calibration's time; 0 disables it (like Calibrate
	// false). A pass that would not finish within it is not started.
	CalibrationBudget time.Duration `yaml:"calibration_budget"`
	// CalibrationCache is a folder where the start-up calibration's fit is kept, and reused at the
	// next start of a node with the same model fingerprint, kernels, bf16 matmul mode, MoE policy,
	// thread count, calibration budget, CPU and binary instead of timing passes again (one
	// warm-up pass still runs): a node restarted after a crash or `make run` is ready a
	// calibration budget sooner. The node learns from every pass either way. A MoE model's kernel
	// cost table (moe_policy auto) is kept there too (KeptMoECostTables). "" keeps nothing.
	CalibrationCache string `yaml:"calibration_cache"`
	// CalibrationCacheMaxAge is the oldest kept calibration (or MoE cost table) reused; older
	// ones are measured again (and replaced). 0 means any age.
	CalibrationCacheMaxAge time.Duration `yaml:"calibration_cache_max_age"`
	// FaultInjection enables GET/POST /debug/fault on the HTTP port (slow, stalled or failing
	// node on demand, for fault tests; see Fault). false: no route, no hook.
	FaultInjection bool `yaml:"fault_injection"`
	// MemoryLimit is the Go runtime's soft memory limit (debug.SetMemoryLimit) in bytes; 0 means
	// derived from prefix_cache_bytes and max_batch_tokens (see DeriveMemoryLimit); -1 means none.
	// A GOMEMLIMIT environment variable wins over both and is left alone.
	MemoryLimit int64 `yaml:"memory_limit"`
	// PProf serves net/http/pprof under /debug/pprof/ on the HTTP port; false: no route.
	PProf bool `yaml:"pprof"`
}

// Default returns the defaults every field starts from.
// Merge policies (Config.MergePolicy).
const (
	MergeCost = "cost"
	MergeFill = "fill"
)

func Default() Config {
	return Config{
		GRPCAddr:          "127.0.0.1:7070",
		HTTPAddr:          "127.0.0.1:7071",
		Engine:            EngineReal,
		MaxTokens:         0,
		MaxItemBytes:      64 << 10,
		MaxItems:          1024,
		MaxBatchTokens:    8192,
		MergePolicy:       MergeCost,
		MaxQueueBatches:   256,
		MoEPolicy:         "auto",
		BF16Matmul:        kernels.BF16MatmulAuto,
		PrefixCacheBytes:  256 << 20,
		DrainTimeout:      30 * time.Second,
		RecvTimeout:       10 * time.Second,
		Calibrate:         true,
		CalibrationBudget: 3 * time.Second,
		// A day: long enough for every restart of a working day, short enough that a host
		// whose load or clocks changed is measured again.
		CalibrationCacheMaxAge: 24 * time.Hour,
	}
}

// Load reads a YAML config file over the defaults; path "" gives the defaults. It does not
// validate, so that flags can override first: call Validate after.
func Load(path string) (Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("load config: %w", err)
	}
	if err := cfg.Decode(b); err != nil {
		return cfg, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, nil
}

// Decode decodes YAML over c's current values (unknown keys are errors) but does not validate:
// callers apply their overrides (flags) first, then call Validate.
func (c *Config) Decode(b []byte) error {
	return yamlconf.Decode(b, c)
}

// MinMaxTokens is the smallest max_tokens a node accepts: room for the prompt template (~75
// tokens with the default instruction), a query and a document.
const MinMaxTokens = 128

// Validate reports every bad field, each naming the key (as the file spells it) and its value.
func (c *Config) Validate() error {
	var errs []error
	for _, a := range []struct{ name, v string }{{"grpc_addr", c.GRPCAddr}, {"http_addr", c.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: must be host:port, got %q", a.name, a.v))
		}
	}
	switch c.Engine {
	case EngineReal:
		if c.Model == "" {
			errs = append(errs, errors.New(`model: required with engine "real", got ""`))
		}
	case EngineEmulated:
		if c.CostProfile == "" {
			errs = append(errs, errors.New(`cost_profile: required with engine "emulated", got ""`))
		}
	default:
		errs = append(errs, fmt.Errorf("engine: must be %q or %q, got %q", EngineReal, EngineEmulated, c.Engine))
	}
	if c.MergePolicy != MergeCost && c.MergePolicy != MergeFill {
		errs = append(errs, fmt.Errorf("merge_policy: must be %q or %q, got %q", MergeCost, MergeFill, c.MergePolicy))
	}
	if c.MaxTokens != 0 && c.MaxTokens < MinMaxTokens {
		// Below the template's own tokens every batch would fail, with an INVALID_ARGUMENT the
		// proxy hands its callers as their own 422, while the node reports ready.
		errs = append(errs, fmt.Errorf("max_tokens: must be 0 (the engine's limit) or ≥ %d (the prompt template alone takes ~75 tokens), got %d", MinMaxTokens, c.MaxTokens))
	}
	for _, f := range []struct {
		name string
		v    int64
		min  int64
	}{
		{"threads", int64(c.Threads), 0},

		{"max_item_bytes", int64(c.MaxItemBytes), 1},
		{"max_items", int64(c.MaxItems), 1},
		{"max_batch_tokens", int64(c.MaxBatchTokens), 1},
		{"max_queue_batches", int64(c.MaxQueueBatches), 1},
		{"prefix_cache_bytes", c.PrefixCacheBytes, 0},
		{"max_request_bytes", int64(c.MaxRequestBytes), 0},
		{"memory_limit", c.MemoryLimit, -1},
		{"max_concurrent_streams", c.MaxConcurrentStreams, -1},
	} {
		if f.v < f.min {
			errs = append(errs, fmt.Errorf("%s: must be ≥ %d, got %d", f.name, f.min, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"drain_timeout", c.DrainTimeout},
		{"recv_timeout", c.RecvTimeout},
		{"calibration_budget", c.CalibrationBudget},
		{"calibration_cache_max_age", c.CalibrationCacheMaxAge},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be ≥ 0, got %v", f.name, f.v))
		}
	}
	if need := c.neededStreams(); c.MaxConcurrentStreams > 0 && c.MaxConcurrentStreams < need {
		// A proxy's calls past the limit would wait in its own connection for a free stream
		// (grpc-go's client queues them, spending their deadlines) instead of being queued or
		// refused by the node, which the proxy routes around.
		errs = append(errs, fmt.Errorf("max_concurrent_streams: must be 0 (derived: %d), -1 (no limit) or ≥ %d (max_queue_batches %d + max_batch_tokens %d / %d + %d: the calls a proxy can have open on this node), got %d",
			need, need, c.MaxQueueBatches, c.MaxBatchTokens, minBatchTokens, streamsReserve, c.MaxConcurrentStreams))
	}
	if c.MaxConcurrentStreams > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("max_concurrent_streams: must be ≤ %d, got %d", uint32(math.MaxUint32), c.MaxConcurrentStreams))
	}
	if c.MoEPolicy != "" {
		if _, err := kernels.ParseMoEPolicy(c.MoEPolicy); err != nil {
			errs = append(errs, fmt.Errorf("moe_policy: %w", err))
		}
	}
	if err := kernels.CheckBF16Matmul(c.BF16Matmul); err != nil {
		errs = append(errs, fmt.Errorf("bf16_matmul: %w", err))
	}
	if err := c.Cost.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cost: %w", err))
	}
	if c.Engine == EngineEmulated && c.Cost != (costmodel.Coeffs{}) {
		errs = append(errs, fmt.Errorf("cost: the emulated engine starts from cost_profile; got cost %+v too", c.Cost))
	}
	return errors.Join(errs...)
}

// maxRecvBytes is the gRPC receive limit the config implies.
func (c *Config) maxRecvBytes() int {
	if c.MaxRequestBytes > 0 {
		return c.MaxRequestBytes
	}
	n := int64(c.MaxItems)*int64(c.MaxItemBytes+64) + 1<<20
	if n > 1<<30 {
		n = 1 << 30
	}
	return int(n)
}

// minBatchTokens is fewer tokens than any batch holds in a forward pass: each holds its prompt
// template (~75 tokens with the default instruction, ~60 with an empty one), its query and an
// item. It bounds how many batches one pass runs: max_batch_tokens / minBatchTokens.
const minBatchTokens = 32

// streamsReserve is the streams kept beside the node's work for calls that hold one briefly:
// health checks, and calls being received, refused (queue full, draining) or answered.
const streamsReserve = 64

// neededStreams is the most streams the node's own limits let a caller usefully hold open on one
// connection: a call per batch the queue takes (max_queue_batches, queued or tokenizing), per
// batch the running pass holds (max_batch_tokens / minBatchTokens; one pass at a time), and
// streamsReserve. Past it every call is refused at once by the node (RESOURCE_EXHAUSTED, queue
// full), so a stream limit of at least this never holds back work the node would take. A proxy
// has no cap of its own on its calls to a node (it opens one connection per node, see
// proxy/cluster, and sends each batch when it is planned), and a gRPC client that reaches a
// connection's limit does not fail the call: it waits for a stream to free, silently spending the
// call's deadline. At the defaults: 256 + 8192/32 + 64 = 576.
func (c *Config) neededStreams() int64 {
	return int64(c.MaxQueueBatches) + (int64(c.MaxBatchTokens)+minBatchTokens-1)/minBatchTokens + streamsReserve
}

// maxConcurrentStreams is the HTTP/2 stream limit per connection the config implies; 0: none.
func (c *Config) maxConcurrentStreams() uint32 {
	switch {
	case c.MaxConcurrentStreams < 0:
		return 0
	case c.MaxConcurrentStreams == 0:
		return uint32(min(c.neededStreams(), math.MaxUint32))
	default:
		return uint32(c.MaxConcurrentStreams)
	}
}
