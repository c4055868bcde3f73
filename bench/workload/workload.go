// Package workload describes the requests a load test sends and generates them from a seed.
//
// A Spec (YAML, see configs/workloads/) gives the distributions of items per request and of
// query and item lengths, the share of repeated queries and the instruction. A Trace turns it
// into concrete requests with realistic product-like text (titles, attributes, descriptions,
// some Chinese). Request i of a trace depends only on (seed, i), so two runs with the same seed
// send the same requests in the same order, whatever the concurrency: that is what lets
// `bench compare` replay one trace against several proxy configurations.
//
// Specs are plain data. A Trace is immutable after New and safe for concurrent use.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/relevance-scoring/relevance/internal/yamlconf"
)

// Dist is a one-dimensional distribution of positive values, clamped to [Min, Max].
type Dist struct {
	// Kind is const, uniform, normal, lognormal or pareto.
	Kind string `yaml:"kind"`
	// Value is the constant (const).
	Value float64 `yaml:"value,omitempty"`
	// Median and Sigma parameterise lognormal (Sigma is the σ of the log); Mean and Sigma normal.
	Median float64 `yaml:"median,omitempty"`
	Mean   float64 `yaml:"mean,omitempty"`
	Sigma  float64 `yaml:"sigma,omitempty"`
	// Scale (the minimum x_m) and Alpha (tail index) parameterise pareto.
	Scale float64 `yaml:"scale,omitempty"`
	Alpha float64 `yaml:"alpha,omitempty"`
	// Min and Max clamp every draw (uniform draws in [Min, Max]); 0 Max means no upper clamp.
	Min float64 `yaml:"min,omitempty"`
	Max float64 `yaml:"max,omitempty"`
}

// Validate checks the parameters of kind d.Kind; field names the distribution in errors.
func (d Dist) Validate(field string) error {
	bad := func(f string, v float64, want string) error {
		return fmt.Errorf("%s.%s: %s, got %v", field, f, want, v)
	}
	if d.Min < 0 {
		return bad("min", d.Min, "must be ≥ 0")
	}
	if d.Max != 0 && d.Max < d.Min {
		return bad("max", d.Max, fmt.Sprintf("must be ≥ min (%v)", d.Min))
	}
	switch d.Kind {
	case "const":
		if d.Value <= 0 {
			return bad("value", d.Value, "must be > 0")
		}
	case "uniform":
		if d.Max <= 0 {
			return bad("max", d.Max, "must be > 0 for uniform")
		}
	case "normal":
		if d.Mean <= 0 {
			return bad("mean", d.Mean, "must be > 0")
		}
		if d.Sigma < 0 {
			return bad("sigma", d.Sigma, "must be ≥ 0")
		}
	case "lognormal":
		if d.Median <= 0 {
			return bad("median", d.Median, "must be > 0")
		}
		if d.Sigma < 0 || d.Sigma > 5 {
			return bad("sigma", d.Sigma, "must be in [0, 5]")
		}
	case "pareto":
		if d.Scale <= 0 {
			return bad("scale", d.Scale, "must be > 0")
		}
		if d.Alpha <= 0 {
			return bad("alpha", d.Alpha, "must be > 0")
		}
	default:
		return fmt.Errorf("%s.kind: must be const, uniform, normal, lognormal or pareto, got %q", field, d.Kind)
	}
	return nil
}

// Draw returns one value.
func (d Dist) Draw(r *rand.Rand) float64 {
	var x float64
	switch d.Kind {
	case "const":
		x = d.Value
	case "uniform":
		x = d.Min + r.Float64()*(d.Max-d.Min)
	case "normal":
		x = d.Mean + d.Sigma*r.NormFloat64()
	case "lognormal":
		x = d.Median * math.Exp(d.Sigma*r.NormFloat64())
	case "pareto":
		x = d.Scale / math.Pow(1-r.Float64(), 1/d.Alpha)
	}
	if x < d.Min {
		x = d.Min
	}
	if d.Max > 0 && x > d.Max {
		x = d.Max
	}
	return x
}

// DrawInt returns one value rounded to an integer ≥ 1.
func (d Dist) DrawInt(r *rand.Rand) int {
	n := int(math.Round(d.Draw(r)))
	if n < 1 {
		n = 1
	}
	return n
}

// Spec is one workload.
type Spec struct {
	// Name is informational (reports).
	Name string `yaml:"name"`
	// Seed fixes the trace; the --seed flag overrides it when set.
	Seed uint64 `yaml:"seed"`
	// Items is the number of items per request.
	Items Dist `yaml:"items"`
	// QueryWords is the query length in words (search queries are short: 2–6 words).
	QueryWords Dist `yaml:"query_words"`
	// ItemTokens is each item's approximate length in model tokens (the generator estimates
	// tokens as the reference tokenizer would, within ~20%).
	ItemTokens Dist `yaml:"item_tokens"`
	// RepeatQueryShare is the probability that a request reuses a query from a small pool of
	// popular queries (exercises the node's prefix cache); 0 means every query is fresh.
	RepeatQueryShare float64 `yaml:"repeat_query_share"`
	// PopularQueries is the size of that pool; 0 means 20.
	PopularQueries int `yaml:"popular_queries"`
	// RepeatItemsShare is, for a request with a popular query, the share of its items drawn from
	// that query's own catalogue of CatalogItems items (the same listings come back on refresh
	// and paging, so (query, item) pairs repeat: the proxy's score cache); 0 means every item is
	// fresh.
	RepeatItemsShare float64 `yaml:"repeat_items_share"`
	// CatalogItems is the size of each popular query's catalogue; 0 means 64.
	CatalogItems int `yaml:"catalog_items"`
	// ChineseShare is the share of items written in Chinese; 0 means none.
	ChineseShare float64 `yaml:"chinese_share"`
	// Instruction is sent with every request; empty means the model's default.
	Instruction string `yaml:"instruction"`
	// TopN is sent as top_n when > 0.
	TopN int `yaml:"top_n"`
	// TraceSize is how many distinct requests are generated and then cycled; 0 means 512.
	// Generation happens before the clock starts, so a bounded trace keeps the load generator's
	// CPU and memory out of the measurement.
	TraceSize int `yaml:"trace_size"`
}

// Default returns the built-in search-like workload (the same as configs/workloads/search.yaml).
func Default() Spec {
	return Spec{
		Name:             "search",
		Seed:             1,
		Items:            Dist{Kind: "uniform", Min: 20, Max: 100},
		QueryWords:       Dist{Kind: "lognormal", Median: 3, Sigma: 0.4, Min: 1, Max: 12},
		ItemTokens:       Dist{Kind: "lognormal", Median: 220, Sigma: 0.5, Min: 40, Max: 1500},
		RepeatQueryShare: 0.3,
		PopularQueries:   20,
		ChineseShare:     0.1,
		TraceSize:        512,
	}
}

// Small returns the built-in workload of `bench load` when no --workload is given (the same as
// configs/workloads/small.yaml): 4–12 short listings per request, sized so that the default
// `make run` cluster (2 scorer nodes of the small model, one CPU thread each) serves
// `bench load`'s default rate with room to spare (bench/results/README.md).
func Small() Spec {
	return Spec{
		Name:             "small",
		Seed:             3,
		Items:            Dist{Kind: "uniform", Min: 4, Max: 12},
		QueryWords:       Dist{Kind: "lognormal", Median: 3, Sigma: 0.3, Min: 1, Max: 6},
		ItemTokens:       Dist{Kind: "lognormal", Median: 60, Sigma: 0.4, Min: 20, Max: 200},
		RepeatQueryShare: 0.5,
		PopularQueries:   5,
		ChineseShare:     0.1,
		TraceSize:        64,
	}
}

// Load reads a YAML spec: defaults first (Default), then the file, then validation.
func Load(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("load workload: %w", err)
	}
	return Parse(b)
}

// Parse reads a YAML spec over the defaults and validates it.
func Parse(b []byte) (Spec, error) {
	s := Default()
	// A distribution the file gives replaces the default one whole: decoded over it, a
	// {kind: const, value: 10} kept the default's min 20 and max, which clamp every draw. (Errors
	// in the file are the strict decode's to report.)
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil {
		for key, d := range map[string]*Dist{"items": &s.Items, "query_words": &s.QueryWords, "item_tokens": &s.ItemTokens} {
			if top[key] != nil {
				*d = Dist{}
			}
		}
	}
	if err := yamlconf.Decode(b, &s); err != nil { // empty file: all defaults
		return Spec{}, fmt.Errorf("parse workload: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Validate checks every field.
func (s Spec) Validate() error {
	if err := s.Items.Validate("workload.items"); err != nil {
		return err
	}
	if err := s.QueryWords.Validate("workload.query_words"); err != nil {
		return err
	}
	if err := s.ItemTokens.Validate("workload.item_tokens"); err != nil {
		return err
	}
	if s.RepeatQueryShare < 0 || s.RepeatQueryShare > 1 {
		return fmt.Errorf("workload.repeat_query_share: must be in [0, 1], got %v", s.RepeatQueryShare)
	}
	if s.ChineseShare < 0 || s.ChineseShare > 1 {
		return fmt.Errorf("workload.chinese_share: must be in [0, 1], got %v", s.ChineseShare)
	}
	if s.RepeatItemsShare < 0 || s.RepeatItemsShare > 1 {
		return fmt.Errorf("workload.repeat_items_share: must be in [0, 1], got %v", s.RepeatItemsShare)
	}
	if s.CatalogItems < 0 {
		return fmt.Errorf("workload.catalog_items: must be ≥ 0, got %d", s.CatalogItems)
	}
	if s.PopularQueries < 0 {
		return fmt.Errorf("workload.popular_queries: must be ≥ 0, got %d", s.PopularQueries)
	}
	if s.TraceSize < 0 || s.TraceSize > 1_000_000 {
		return fmt.Errorf("workload.trace_size: must be in [0, 1000000], got %d", s.TraceSize)
	}
	if s.TopN < 0 {
		return fmt.Errorf("workload.top_n: must be ≥ 0, got %d", s.TopN)
	}
	return nil
}

// Request is one generated scoring request.
type Request struct {
	Query       string
	Instruction string
	Items       []string
	TopN        int
	// ApproxTokens is the generator's estimate of each item's tokens (for cost estimates).
	ApproxTokens []int
}

// Trace is the deterministic sequence of requests of a spec.
type Trace struct {
	spec Spec
	reqs []Request
}

// New generates the trace of spec s with the given seed.
func New(s Spec, seed uint64) (*Trace, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	n := s.TraceSize
	if n == 0 {
		n = 512
	}
	t := &Trace{spec: s, reqs: make([]Request, n)}
	for i := range t.reqs {
		t.reqs[i] = generate(s, seed, uint64(i))
	}
	return t, nil
}

// WithQueryPrefix returns a copy of t whose every query starts with p: the same requests, sizes,
// repeats and order, yet new to every cache keyed by the query (a proxy's score cache, a node's
// prefix cache). A prefix rather than a suffix, so that a cache sharing token prefixes finds
// nothing of the original queries either. Replays of one trace with prefixes of one token length
// (e.g. "r01 ", "r02 ") put the same work on the nodes.
func (t *Trace) WithQueryPrefix(p string) *Trace {
	out := &Trace{spec: t.spec, reqs: slices.Clone(t.reqs)}
	for i := range out.reqs {
		out.reqs[i].Query = p + out.reqs[i].Query
	}
	return out
}

// Len is the number of distinct requests.
func (t *Trace) Len() int { return len(t.reqs) }

// At returns request i, cycling over the trace.
func (t *Trace) At(i int) *Request { return &t.reqs[i%len(t.reqs)] }

// Spec returns the spec the trace was generated from.
func (t *Trace) Spec() Spec { return t.spec }

// MeanItems is the mean number of items per request over the trace.
func (t *Trace) MeanItems() float64 {
	n := 0
	for i := range t.reqs {
		n += len(t.reqs[i].Items)
	}
	return float64(n) / float64(len(t.reqs))
}

// generate builds request i of the trace. Each request has its own random stream keyed by
// (seed, i), so request i is the same whatever was generated before it.
func generate(s Spec, seed, i uint64) Request {
	r := rand.New(rand.NewPCG(seed, i))
	pool := s.PopularQueries
	if pool == 0 {
		pool = 20
	}
	var query string
	popular := -1
	if s.RepeatQueryShare > 0 && r.Float64() < s.RepeatQueryShare {
		// Popular queries: a power-law pick so a few queries dominate, as in search logs.
		// k = ⌊pool·u²⌋ gives rank k the probability √((k+1)/pool) − √(k/pool) ≈ 1/(2√(k·pool)):
		// Zipf with exponent ½, flatter than the exponent ~1 of whole search logs (with pool 40,
		// the top query is 16 % of the repeats, the top 10 half of them). Kept as it is so that
		// traces of a seed stay those the committed results were measured on.
		k := int(float64(pool) * math.Pow(r.Float64(), 2))
		qr := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(k)))
		query = genQuery(qr, s.QueryWords.DrawInt(qr))
		popular = k
	} else {
		query = genQuery(r, s.QueryWords.DrawInt(r))
	}
	n := s.Items.DrawInt(r)
	req := Request{Query: query, Instruction: s.Instruction, TopN: s.TopN,
		Items: make([]string, n), ApproxTokens: make([]int, n)}
	catalog := s.CatalogItems
	if catalog == 0 {
		catalog = 64
	}
	for j := range n {
		if popular >= 0 && s.RepeatItemsShare > 0 && r.Float64() < s.RepeatItemsShare {
			// Item c of popular query k: its own stream, so it is the same text every time.
			c := r.IntN(catalog)
			key := uint64(popular)<<32 | uint64(c)
			cr := rand.New(rand.NewPCG(seed^0x7f4a7c159e3779b9, key))
			// Catalogue items are Chinese at the spec's share too (they were always English,
			// which cut the trace's Chinese share by the share of catalogue items). The choice
			// has a stream of its own, so an item that stays English keeps its text.
			zr := rand.New(rand.NewPCG(seed^0x3c6ef372fe94f82b, key))
			if target := s.ItemTokens.DrawInt(cr); s.ChineseShare > 0 && zr.Float64() < s.ChineseShare {
				req.Items[j] = genChineseItem(cr, target)
			} else {
				req.Items[j] = genItem(cr, target)
			}
			req.ApproxTokens[j] = EstimateTokens(req.Items[j])
			continue
		}
		target := s.ItemTokens.DrawInt(r)
		if s.ChineseShare > 0 && r.Float64() < s.ChineseShare {
			req.Items[j] = genChineseItem(r, target)
		} else {
			req.Items[j] = genItem(r, target)
		}
		req.ApproxTokens[j] = EstimateTokens(req.Items[j])
	}
	return req
}
