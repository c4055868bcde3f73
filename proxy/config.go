package proxy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/registry"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
)

// Config is the proxy core's configuration (the HTTP/gRPC fronts have their own). Durations in
// YAML are Go duration strings ("500ms"). Start from DefaultConfig, unmarshal over it, then
// Validate.
type Config struct {
	Nodes     NodesConfig     `yaml:"nodes" json:"nodes"`
	Split     SplitConfig     `yaml:"split" json:"split"`
	Route     RouteConfig     `yaml:"route" json:"route"`
	Breaker   BreakerConfig   `yaml:"breaker" json:"breaker"`
	Retry     RetryConfig     `yaml:"retry" json:"retry"`
	Hedge     HedgeConfig     `yaml:"hedge" json:"hedge"`
	Admission AdmissionConfig `yaml:"admission" json:"admission"`
	Outlier   OutlierConfig   `yaml:"outlier" json:"outlier"`
	Model     ModelConfig     `yaml:"model" json:"model"`
	Cache     CacheConfig     `yaml:"score_cache" json:"score_cache"`
	Cost      CostConfig      `yaml:"cost" json:"cost"`
	Limits    LimitsConfig    `yaml:"limits" json:"limits"`
	// SLO is the budget of a request that carries no deadline (and no timeout_ms); that budget
	// bounds every node call. A caller's own deadline or timeout_ms replaces it (it is not a
	// cap). Must be > 0. Default 500ms.
	SLO time.Duration `yaml:"slo" json:"slo"`
	// OnPartialFailure is "fail" (default: a failed batch fails the request with its reason) or
	// "partial" (return the scores obtained, failed items marked ITEM_STATUS_FAILED; when every
	// batch fails the request still fails). A request's options.allow_partial forces "partial".
	OnPartialFailure string `yaml:"on_partial_failure" json:"on_partial_failure"`
}

// NodesConfig says where the scorer nodes are: a static list, a DNS name, or both.
type NodesConfig struct {
	// Static lists node addresses (host:port) of our scorer.
	Static []string `yaml:"static" json:"static"`
	// Backends lists nodes of any kind, each with its own wire format: our scorer
	// (kind: scorer, gRPC) or a rerank server a team already runs (vllm, sglang, llamacpp, tei,
	// infinity; see package proxy/backend and configs/backends/). Mixed clusters work.
	Backends []backend.Spec `yaml:"backends" json:"backends"`
	// DNS is a name:port whose A/AAAA records are the nodes (a Kubernetes headless service);
	// empty: no DNS membership.
	DNS string `yaml:"dns" json:"dns"`
	// DNSInterval is how often DNS is re-resolved. Default 10s.
	DNSInterval time.Duration `yaml:"dns_interval" json:"dns_interval"`
}

// SplitConfig chooses how a request is cut into batches.
type SplitConfig struct {
	// Strategy is "cost" (default) or "fixed".
	Strategy string `yaml:"strategy" json:"strategy"`
	// MaxBatchItems caps the items of one batch (and is the chunk size of "fixed"). Default 32.
	MaxBatchItems int `yaml:"max_batch_items" json:"max_batch_items"`
	// TargetBatchSeconds is the smallest estimated batch cost worth its own batch (each batch
	// pays the prefix and overhead again); 0: no floor. Default 0.005.
	TargetBatchSeconds float64 `yaml:"target_batch_seconds" json:"target_batch_seconds"`
}

// RouteConfig chooses how a batch picks its node.
type RouteConfig struct {
	// Strategy is "least_loaded" (default: the earliest projected finish — the node's outstanding
	// work plus the batch's cost there), "prefix_affinity" (the same, crediting a node that holds
	// the query prefix in its cache), "round_robin" or "random".
	Strategy string `yaml:"strategy" json:"strategy"`
	// FullScanMax: least_loaded scans all candidates up to this many, then uses the power of two
	// choices. Default 64: a scan of 16–64 atomic loads costs well under a microsecond, and two
	// random choices at 16 nodes queued batches behind busy nodes while others were idle.
	FullScanMax int `yaml:"full_scan_max" json:"full_scan_max"`
}

// BreakerConfig configures the per-node circuit breakers (sony/gobreaker).
type BreakerConfig struct {
	// ConsecutiveFailures trips the breaker. Default 5.
	ConsecutiveFailures uint32 `yaml:"consecutive_failures" json:"consecutive_failures"`
	// OpenTimeout is how long a breaker stays open before half-opening. Default 5s.
	OpenTimeout time.Duration `yaml:"open_timeout" json:"open_timeout"`
	// HalfOpenProbes is how many calls a half-open breaker lets through. Default 1.
	HalfOpenProbes uint32 `yaml:"half_open_probes" json:"half_open_probes"`
}

// RetryConfig bounds retries of failed batches (once, on another node).
type RetryConfig struct {
	// Disabled turns retries off.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// BudgetRatio is the share of batches that may be retried or hedged over time (a token
	// bucket filled by BudgetRatio per batch). Default 0.1.
	BudgetRatio float64 `yaml:"budget_ratio" json:"budget_ratio"`
	// BudgetBurst is the bucket size (retries available at once): 0 (no retries) or ≥ 1.
	// Default 10.
	BudgetBurst float64 `yaml:"budget_burst" json:"budget_burst"`
	// RescueFactor: a batch still unanswered after RescueFactor × its projected finish (and at
	// least RescueMinLate past it) is sent to a second node too, once, under the retry budget —
	// at the latest when the deadline leaves just the batch's own time (×1.25, +10 ms) for the
	// second node. It does not wait for the batch to count as slow (outlier.slow_factor, 3×):
	// with a 500 ms budget and batches projected at ~150 ms, the slow mark comes too late for
	// any rescue to finish. 0 turns it off (the slow rescue stays). Default 1.5.
	RescueFactor float64 `yaml:"rescue_factor" json:"rescue_factor"`
	// RescueMinLate is the least a batch must be overdue before it is rescued. Default 25ms.
	RescueMinLate time.Duration `yaml:"rescue_min_late" json:"rescue_min_late"`
}

// HedgeConfig configures hedged batches.
type HedgeConfig struct {
	// Enabled turns hedging on (default off).
	Enabled bool `yaml:"enabled" json:"enabled"`
	// Quantile of recent (batch latency ÷ predicted cost) ratios after which a batch is
	// duplicated. Default 0.95.
	Quantile float64 `yaml:"quantile" json:"quantile"`
	// MinDelay is the shortest hedge delay. Default 2ms.
	MinDelay time.Duration `yaml:"min_delay" json:"min_delay"`
	// MinSamples is how many batches must be observed before hedging starts. Default 20.
	MinSamples int `yaml:"min_samples" json:"min_samples"`
}

// AdmissionConfig configures load shedding at the door.
type AdmissionConfig struct {
	// Disabled turns admission control off.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// Headroom multiplies the deadline: reject when projected completion > Headroom·budget.
	// Default 1.0.
	Headroom float64 `yaml:"headroom" json:"headroom"`
	// MinSamples: a node's prediction is trusted for admission only after it has learned from this
	// many batches (priors may be far off). Default 10.
	MinSamples int `yaml:"min_samples" json:"min_samples"`
	// MarginQuantile: projections are stretched by this quantile of recent batches' observed
	// latency ÷ projected finish (their measured error) before admission compares them with the
	// budget; 0 turns the margin off. Default 0.9.
	MarginQuantile float64 `yaml:"margin_quantile" json:"margin_quantile"`
	// OnTimeTarget is the share of admitted requests that should be answered within their
	// deadline; the margin's quantile adapts to hold it, from MarginQuantile (nothing late) up
	// (package admit). 0 (the default) keeps MarginQuantile fixed. Off by default because it
	// measured neutral: on the fault suite (8 emulated nodes, identical traces, two runs each)
	// 0.99 gave 100 / 97.7 % of admitted requests within the SLO at 2× overload against 99.0 /
	// 98.7 % with the fixed 0.9, and 4–6 refusals at 70 % load against 5–6
	// (bench/results/README.md §10c). A fixed 0.99 instead refused 11 at 70 % load.
	OnTimeTarget float64 `yaml:"on_time_target" json:"on_time_target"`
	// Replan: before refusing a request, plan it for the earliest finish (more, smaller batches)
	// and admit that plan if it fits within ReplanFit of the budget. Default on, with ReplanFit
	// 0.8: at 70 % load Poisson bursts push the largest requests' economical plans just past the
	// budget while a faster plan fits; under 2× overload, admitting fast plans up to the whole
	// budget let borderline work in (admitted within the SLO fell from 99.6 % to 97.5 %,
	// bench/results/README.md §10), which the 0.8 fit keeps out.
	Replan bool `yaml:"replan" json:"replan"`
	// ReplanFit is the share of the budget a re-planned request must fit in, in (0, 1]. Default 0.8.
	ReplanFit float64 `yaml:"replan_fit" json:"replan_fit"`
}

// OutlierConfig configures outlier detection (as Envoy's): a node whose batches run far beyond
// their projected finish, or that misses deadlines, several times in a row is ejected — taken out
// of routing — for a growing interval, and comes back on probation.
type OutlierConfig struct {
	// Disabled turns outlier detection off.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// ConsecutiveSlow is how many slow outcomes in a row eject a node. Default 3.
	ConsecutiveSlow int `yaml:"consecutive_slow" json:"consecutive_slow"`
	// SlowFactor: a batch still unanswered after SlowFactor × its projected finish (and at least
	// SlowMin) is slow — counted at that moment, before it ends, and rescued on another node
	// while the deadline allows. Default 3.
	SlowFactor float64 `yaml:"slow_factor" json:"slow_factor"`
	// SlowMin is the shortest time a batch must run to count as slow. Default 50ms.
	SlowMin time.Duration `yaml:"slow_min" json:"slow_min"`
	// BaseEjection is the first ejection's length; the n-th lasts n × BaseEjection, up to
	// MaxEjection, counting from the last time the node served well for MaxEjection after an
	// ejection. Default 1s and 30s.
	BaseEjection time.Duration `yaml:"base_ejection" json:"base_ejection"`
	MaxEjection  time.Duration `yaml:"max_ejection" json:"max_ejection"`
	// MaxEjectionPercent bounds the share of nodes ejected, or back on probation and not yet
	// past their probe, at once (at least one node may always
	// be ejected when there are two or more). Default 10, as Envoy's: detection must never take
	// a loaded cluster's capacity away wholesale.
	MaxEjectionPercent int `yaml:"max_ejection_percent" json:"max_ejection_percent"`
	// StallTimeout: a node whose batch is overdue, and that has answered nothing for this long,
	// gets this long to answer a health check; silent, it is stalled (a stopped or frozen
	// process): it takes no batches until it answers again, and the batches waiting on it are
	// rescued elsewhere at once while their deadlines allow. Not an ejection, and not turned
	// off by Disabled. 0: no stall detection. Default 50ms (a live node, even one saturated with
	// work, answers in a few milliseconds: its gRPC server runs beside the compute).
	StallTimeout time.Duration `yaml:"stall_timeout" json:"stall_timeout"`
}

// ModelConfig names the model the proxy serves. A request naming another model is answered as
// vLLM does: NOT_FOUND (HTTP 404) with the served names. Replies always carry the served name,
// never the caller's.
type ModelConfig struct {
	// Name is the served model's name; "" serves the name the nodes report (the checkpoint's
	// folder name, or a node's --model-name), and accepts any name until a node has answered.
	Name string `yaml:"name" json:"name"`
	// Aliases are other names a request may use for the served model (e.g. a hosted API's model
	// name that clients send). Default: ["rerank"].
	Aliases []string `yaml:"aliases" json:"aliases"`
}

// CacheConfig configures the score cache (package proxy/scorecache): a (model fingerprint,
// instruction, truncation, query, item) scored before is answered without a node. A request opts
// out with options.no_cache (HTTP: "cache": false).
type CacheConfig struct {
	// BudgetBytes is the cache's memory budget; 0 disables it. Default 64 MiB (~400,000 items).
	BudgetBytes int64 `yaml:"budget_bytes" json:"budget_bytes"`
	// TTL is how long an entry is served; 0: until evicted. Default 10m.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
}

// CostConfig configures the cost model.
type CostConfig struct {
	// TokenCounter is "estimate" (default: tokenizer.EstimateTokens, no BPE) or "exact" (the
	// shipped Qwen3 tokenizer).
	TokenCounter string `yaml:"token_counter" json:"token_counter"`
	// LearnTokenCounts scales the counter's counts by the ratio of the tokens the nodes report
	// for answered batches to what the proxy counted for them (items and prefix apart), so that
	// a counter's steady bias on the traffic does not bias every projection. Default true.
	LearnTokenCounts bool `yaml:"learn_token_counts" json:"learn_token_counts"`
	// Prior is the starting coefficients of every node, refined online from replies.
	Prior costmodel.Coeffs `yaml:"prior" json:"prior"`
	// Forgetting is the learner's per-sample forgetting factor in (0, 1]. Default 0.99.
	Forgetting float64 `yaml:"forgetting" json:"forgetting"`
	// WarmSamples: a node that joins, or comes back to traffic (breaker closed again, health
	// regained), is priced at its trusted peers' mean cost model, blended into its own over its
	// first WarmSamples replies. Without it a node whose first replies after a fault were slow
	// looks dearer than its peers, least_loaded never picks it while they keep up, and it never
	// gets the replies that would correct it. 0: a node's own model from its first reply.
	// Default 10.
	WarmSamples int `yaml:"warm_samples" json:"warm_samples"`
	// Prime sends every scorer node that becomes healthy one tiny batch, whose reply brings the
	// node's calibrated cost model before the first request: admission then trusts projections
	// from the first request instead of admitting everything until each node has answered one.
	// Default true.
	Prime bool `yaml:"prime" json:"prime"`
}

// LimitsConfig bounds requests.
type LimitsConfig struct {
	// MaxItems per request. Default 1000.
	MaxItems int `yaml:"max_items" json:"max_items"`
	// MaxItemBytes per item text. Default 65536, the scorer's default: documents up to it are
	// cut to the model's prompt limit rather than refused.
	MaxItemBytes int `yaml:"max_item_bytes" json:"max_item_bytes"`
	// MaxQueryBytes for the query and for the instruction. Default 8192.
	MaxQueryBytes int `yaml:"max_query_bytes" json:"max_query_bytes"`
}

// Partial-failure modes.
const (
	PartialFail    = "fail"
	PartialPartial = "partial"
)

// Token counters.
const (
	TokensEstimate = prompt.CountEstimate
	TokensExact    = prompt.CountExact
)

// DefaultPrior is the calibrated cost profile of the default `small` model (qwen3_moe, seed 1)
// on one CPU thread with the engine's default MoE policy (auto):
// bench/results/profile-small-auto.json. It only prices a node's first batches: each node's
// replies carry the cost model the node learned of itself, which replaces it.
var DefaultPrior = costmodel.Coeffs{A: 6.354651120656312e-4, B: 4.291845021520365e-7, C: 0.01944098870734028}

// DefaultConfig is the configuration with every default filled in and no nodes.
func DefaultConfig() Config {
	return Config{
		Nodes:     NodesConfig{DNSInterval: 10 * time.Second},
		Split:     SplitConfig{Strategy: cost.Type, MaxBatchItems: 32, TargetBatchSeconds: 0.005},
		Route:     RouteConfig{Strategy: leastloaded.Type, FullScanMax: leastloaded.DefaultFullScanMax},
		Breaker:   BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second, HalfOpenProbes: 1},
		Retry:     RetryConfig{BudgetRatio: 0.1, BudgetBurst: 10, RescueFactor: 1.5, RescueMinLate: 25 * time.Millisecond},
		Hedge:     HedgeConfig{Quantile: 0.95, MinDelay: 2 * time.Millisecond, MinSamples: 20},
		Admission: AdmissionConfig{Headroom: 1, MinSamples: 10, MarginQuantile: 0.9, Replan: true, ReplanFit: 0.8},
		Outlier: OutlierConfig{ConsecutiveSlow: 3, SlowFactor: 3, SlowMin: 50 * time.Millisecond,
			BaseEjection: time.Second, MaxEjection: 30 * time.Second, MaxEjectionPercent: 10,
			StallTimeout: 50 * time.Millisecond},
		Cost: CostConfig{
			TokenCounter:     TokensEstimate,
			LearnTokenCounts: true,
			// The calibrated profile of the default `small` model, one thread per node
			// (bench/results/profile-small-auto.json), until each node's first reply brings the
			// node's own model; then learned per node from the replies.
			Prior:       DefaultPrior,
			Forgetting:  0.99,
			WarmSamples: 10,
			Prime:       true,
		},
		Model:            ModelConfig{Aliases: []string{"rerank"}},
		Cache:            CacheConfig{BudgetBytes: 64 << 20, TTL: 10 * time.Minute},
		Limits:           LimitsConfig{MaxItems: 1000, MaxItemBytes: 64 << 10, MaxQueryBytes: 8 << 10},
		SLO:              500 * time.Millisecond,
		OnPartialFailure: PartialFail,
	}
}

// Validate checks every field; errors name the field and the bad value.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, want string, got any) {
		errs = append(errs, fmt.Errorf("proxy.%s: %s, got %v", field, want, got))
	}
	if len(c.Nodes.Static) == 0 && c.Nodes.DNS == "" && len(c.Nodes.Backends) == 0 {
		errs = append(errs, errors.New("proxy.nodes: need nodes.static, nodes.dns or nodes.backends (or --nodes host:port,...)"))
	}
	if err := registry.Validate(c.Nodes.Backends); err != nil {
		errs = append(errs, fmt.Errorf("proxy.nodes.backends: %w", err))
	}
	for i, a := range c.Nodes.Static {
		if err := checkHostPort(a); err != nil {
			bad(fmt.Sprintf("nodes.static[%d]", i), "must be host:port ("+err.Error()+")", strconv.Quote(a))
		}
	}
	if c.Nodes.DNS != "" {
		if err := checkHostPort(c.Nodes.DNS); err != nil {
			bad("nodes.dns", "must be name:port ("+err.Error()+")", strconv.Quote(c.Nodes.DNS))
		}
		if c.Nodes.DNSInterval <= 0 {
			bad("nodes.dns_interval", "must be > 0", c.Nodes.DNSInterval)
		}
	}
	if _, ok := splitters[c.Split.Strategy]; !ok {
		bad("split.strategy", mustBeOneOf(SplitStrategies()), strconv.Quote(c.Split.Strategy))
	}
	if c.Split.MaxBatchItems <= 0 {
		bad("split.max_batch_items", "must be > 0", c.Split.MaxBatchItems)
	}
	if !(c.Split.TargetBatchSeconds >= 0) {
		bad("split.target_batch_seconds", "must be ≥ 0", c.Split.TargetBatchSeconds)
	}
	if _, ok := pickers[c.Route.Strategy]; !ok {
		bad("route.strategy", mustBeOneOf(RouteStrategies()), strconv.Quote(c.Route.Strategy))
	}
	if c.Route.FullScanMax <= 0 {
		bad("route.full_scan_max", "must be > 0", c.Route.FullScanMax)
	}
	if c.Breaker.ConsecutiveFailures == 0 {
		bad("breaker.consecutive_failures", "must be > 0", c.Breaker.ConsecutiveFailures)
	}
	if c.Breaker.OpenTimeout <= 0 {
		bad("breaker.open_timeout", "must be > 0", c.Breaker.OpenTimeout)
	}
	if c.Breaker.HalfOpenProbes == 0 {
		bad("breaker.half_open_probes", "must be > 0", c.Breaker.HalfOpenProbes)
	}
	if !(c.Retry.BudgetRatio >= 0 && c.Retry.BudgetRatio <= 1) {
		bad("retry.budget_ratio", "must be in [0, 1]", c.Retry.BudgetRatio)
	}
	if !(c.Retry.BudgetBurst == 0 || c.Retry.BudgetBurst >= 1) {
		// Each retry takes a whole token: a bucket under one would silently disable retries.
		bad("retry.budget_burst", "must be 0 (no retries) or ≥ 1", c.Retry.BudgetBurst)
	}
	if !(c.Retry.RescueFactor == 0 || c.Retry.RescueFactor >= 1) {
		bad("retry.rescue_factor", "must be 0 (off) or ≥ 1", c.Retry.RescueFactor)
	}
	if c.Retry.RescueMinLate < 0 {
		bad("retry.rescue_min_late", "must be ≥ 0", c.Retry.RescueMinLate)
	}
	if !(c.Hedge.Quantile > 0 && c.Hedge.Quantile < 1) {
		bad("hedge.quantile", "must be in (0, 1)", c.Hedge.Quantile)
	}
	if c.Hedge.MinDelay < 0 {
		bad("hedge.min_delay", "must be ≥ 0", c.Hedge.MinDelay)
	}
	if c.Hedge.MinSamples < 0 {
		bad("hedge.min_samples", "must be ≥ 0", c.Hedge.MinSamples)
	}
	if !(c.Admission.Headroom > 0) {
		bad("admission.headroom", "must be > 0", c.Admission.Headroom)
	}
	if !(c.Admission.MarginQuantile >= 0 && c.Admission.MarginQuantile < 1) {
		bad("admission.margin_quantile", "must be in [0, 1)", c.Admission.MarginQuantile)
	}
	if !(c.Admission.OnTimeTarget >= 0 && c.Admission.OnTimeTarget < 1) {
		bad("admission.on_time_target", "must be in [0, 1)", c.Admission.OnTimeTarget)
	} else if c.Admission.OnTimeTarget > 0 && c.Admission.MarginQuantile == 0 {
		// The target adapts the margin's quantile, and margin_quantile 0 turns the margin off:
		// accepted, the target moved the quantile gauge and nothing else.
		bad("admission.on_time_target", "needs admission.margin_quantile > 0 (it adapts that quantile; 0 turns the margin off)", c.Admission.OnTimeTarget)
	}
	if !(c.Admission.ReplanFit > 0 && c.Admission.ReplanFit <= 1) {
		bad("admission.replan_fit", "must be in (0, 1]", c.Admission.ReplanFit)
	}
	if c.Admission.MinSamples < 0 {
		bad("admission.min_samples", "must be ≥ 0", c.Admission.MinSamples)
	}
	if c.Outlier.ConsecutiveSlow <= 0 {
		bad("outlier.consecutive_slow", "must be > 0", c.Outlier.ConsecutiveSlow)
	}
	if !(c.Outlier.SlowFactor >= 1) {
		bad("outlier.slow_factor", "must be ≥ 1", c.Outlier.SlowFactor)
	}
	if c.Outlier.SlowMin < 0 {
		bad("outlier.slow_min", "must be ≥ 0", c.Outlier.SlowMin)
	}
	if c.Outlier.BaseEjection <= 0 {
		bad("outlier.base_ejection", "must be > 0", c.Outlier.BaseEjection)
	}
	if c.Outlier.MaxEjection < c.Outlier.BaseEjection {
		bad("outlier.max_ejection", "must be ≥ outlier.base_ejection", c.Outlier.MaxEjection)
	}
	if c.Outlier.MaxEjectionPercent < 0 || c.Outlier.MaxEjectionPercent > 100 {
		bad("outlier.max_ejection_percent", "must be in [0, 100]", c.Outlier.MaxEjectionPercent)
	}
	if c.Outlier.StallTimeout < 0 {
		bad("outlier.stall_timeout", "must be ≥ 0", c.Outlier.StallTimeout)
	}
	if c.Cost.TokenCounter != TokensEstimate && c.Cost.TokenCounter != TokensExact {
		bad("cost.token_counter", "must be "+TokensExact+" or "+TokensEstimate, strconv.Quote(c.Cost.TokenCounter))
	}
	if err := c.Cost.Prior.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("proxy.cost.prior: %w", err))
	} else if c.Cost.Prior.A == 0 && c.Cost.Prior.B == 0 && c.Cost.Prior.C == 0 {
		// A zero coefficient is fine (a non-negative fit returns them; the learner can still
		// learn it), but all zero predicts that every batch is free.
		bad("cost.prior", "coefficients must not all be 0", c.Cost.Prior)
	}
	if !(c.Cost.Forgetting > 0 && c.Cost.Forgetting <= 1) {
		bad("cost.forgetting", "must be in (0, 1]", c.Cost.Forgetting)
	}
	if c.Cost.WarmSamples < 0 {
		bad("cost.warm_samples", "must be ≥ 0", c.Cost.WarmSamples)
	}
	if c.Cache.BudgetBytes < 0 {
		bad("score_cache.budget_bytes", "must be ≥ 0", c.Cache.BudgetBytes)
	}
	if c.Cache.TTL < 0 {
		bad("score_cache.ttl", "must be ≥ 0", c.Cache.TTL)
	}
	if c.Limits.MaxItems <= 0 {
		bad("limits.max_items", "must be > 0", c.Limits.MaxItems)
	}
	if c.Limits.MaxItemBytes <= 0 {
		bad("limits.max_item_bytes", "must be > 0", c.Limits.MaxItemBytes)
	}
	if c.Limits.MaxQueryBytes <= 0 {
		bad("limits.max_query_bytes", "must be > 0", c.Limits.MaxQueryBytes)
	}
	if c.SLO <= 0 {
		bad("slo", "must be > 0", c.SLO)
	}
	if c.OnPartialFailure != PartialFail && c.OnPartialFailure != PartialPartial {
		bad("on_partial_failure", "must be "+PartialFail+" or "+PartialPartial, strconv.Quote(c.OnPartialFailure))
	}
	return errors.Join(errs...)
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("empty host")
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return errors.New("bad port")
	}
	return nil
}
