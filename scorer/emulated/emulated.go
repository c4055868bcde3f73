// Package emulated is a scorer.Engine that needs no model: Forward sleeps for a time taken from
// a calibrated cost profile and returns deterministic pseudo-scores. It lets one small machine
// stand in for clusters of 16–64 nodes. Everything it reports is labelled emulated
// (Info().Emulated, Architecture "emulated").
//
// Two modes, chosen by the profile (Engine.Emulation; /v1/status shows it in "kernels" as
// "emulation: samples (N shapes, M passes)" or "emulation: formula"):
//
//   - samples: the profile keeps the shapes measured on the real engine (costmodel.Profile.
//     Measured, written by `bench calibrate`). Each pass's time is replayed from the measured
//     shapes nearest its own, carried to its shape by the ratio of the formula's predictions,
//     with the spread of the measured repetitions (see replayer). The formula only interpolates
//     between measurements; where the engine departs from it, the emulation follows the engine,
//     so a policy tuned to the formula is not tested in a world where the formula is true.
//   - formula: a coefficients-only profile. The pass takes the formula's prediction (package
//     costmodel, the same formula the proxy learns) times a seeded log-normal noise exp(σ·Z).
//
// Token counts are exact: by default Tokenize is the real prompt builder (scorer/prompt over
// the shipped Qwen3 tokenizer), so the emulated node sees the same token counts, truncation and
// prefix boundaries as a real one.
//
// Prefix reuse follows the real engine (scorer/model), level by level: each distinct prefix is
// computed once per pass, and with PrefixCacheBytes > 0 finished prefixes go into a
// prefixcache.Cache with the real cache's rules (visible to other passes only after the pass that
// computed them succeeds), so the emulated time drops when a query repeats. The template (the
// template head and instruction, Group.TemplateLen, which the default Tokenize marks as the real
// engine does) is a second level: when a whole prefix is computed, its template is taken from
// the cache or from an earlier group of the pass when it can be, and only the query's tokens are
// charged, so a query seen for the first time after another of the same instruction costs what
// the real engine computes for it. ForwardStats, Group.PrefixReused/PrefixCached and
// CostFeatures count the same way as the real engine's.
//
// Its CostPrior is the profile, so a node over it starts from the right speed and its learned
// model has the profile's coefficients to find (tests of learning use this).
//
// An Engine is safe for concurrent use: Tokenize and CostFeatures from many goroutines,
// Forward from one at a time (more are allowed; they just sleep in parallel).
package emulated

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/sleep"
	contract "github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// Architecture is what Info reports for an emulated engine.
const Architecture = "emulated"

// TokenizeFunc builds one batch's group (the signature of scorer.Engine.Tokenize; the real one
// is prompt.New(tok, maxTokens).Build).
type TokenizeFunc func(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error)

// Options configure an emulated engine.
type Options struct {
	// Profile gives the cost coefficients and the noise σ; required.
	Profile *costmodel.Profile
	// Tokenize builds groups; nil means prompt.New(shipped tokenizer, MaxTokens).Build with
	// Group.TemplateLen marked as the real engine marks it. A given Tokenize sets TemplateLen
	// itself (0: no template level).
	Tokenize TokenizeFunc
	// Model is the name reported in Info; "" means "emulated".
	Model string
	// MaxTokens is the longest prompt (prefix + item) the default prompt builder accepts and
	// Info reports; 0 means Profile.MaxTokens, or, when that is 0 too, a real node's default
	// (prompt.DefaultMaxTokens: a real engine's limit when max_tokens is unset).
	MaxTokens int
	// Seed seeds the timing noise; runs with the same seed and the same passes sleep the same.
	Seed uint64
	// Sleep waits d or until ctx is done (returning ctx's error); nil uses a timer. Tests inject
	// a fake clock here.
	Sleep func(ctx context.Context, d time.Duration) error
	// PrefixCacheBytes is the cross-request prefix cache budget in bytes; 0 disables it.
	PrefixCacheBytes int64
	// KVBytesPerToken is what one cached prefix token is charged against the budget; 0 means
	// 16384 (8 layers × K and V × 256 values × 4 bytes: the small preset's order of size).
	KVBytesPerToken int64
	// Registerer receives the prefix cache's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Engine is the emulated scorer.Engine.
type Engine struct {
	prof      costmodel.Profile
	tokenize  TokenizeFunc
	templates *prompt.Templates // marks TemplateLen after the default tokenize; nil with Options.Tokenize
	info      scorer.Info
	sleep     func(ctx context.Context, d time.Duration) error
	cache     *prefixcache.Cache // nil when disabled
	kvPerTok  int64
	modelName string

	replay *replayer // nil in formula mode

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

var _ scorer.Engine = (*Engine)(nil)

// New checks the options and returns an engine.
func New(opt Options) (*Engine, error) {
	if opt.Profile == nil {
		return nil, errors.New("emulated engine: a cost profile is required")
	}
	if err := opt.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("emulated engine: %w", err)
	}
	if opt.MaxTokens < 0 {
		return nil, fmt.Errorf("emulated engine: max_tokens must be ≥ 0, got %d", opt.MaxTokens)
	}
	if opt.PrefixCacheBytes < 0 {
		return nil, fmt.Errorf("emulated engine: prefix_cache_bytes must be ≥ 0, got %d", opt.PrefixCacheBytes)
	}
	e := &Engine{
		prof:     *opt.Profile,
		tokenize: opt.Tokenize,
		sleep:    opt.Sleep,
		kvPerTok: opt.KVBytesPerToken,
		rng:      rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
	}
	maxTok := opt.MaxTokens
	if maxTok == 0 {
		maxTok = opt.Profile.MaxTokens
	}
	if maxTok == 0 {
		maxTok = contract.DefaultMaxTokens // what a real node without max_tokens accepts
	}
	if e.kvPerTok <= 0 {
		e.kvPerTok = 16384
	}
	if e.sleep == nil {
		e.sleep = sleep.Context
	}
	if e.tokenize == nil {
		tok, err := tokenizer.Default()
		if err != nil {
			return nil, fmt.Errorf("emulated engine: %w", err)
		}
		e.tokenize = prompt.New(tok, maxTok).Build
		e.templates = prompt.NewTemplates(tok)
	}
	e.modelName = opt.Model
	if e.modelName == "" {
		e.modelName = "emulated"
	}
	if opt.PrefixCacheBytes > 0 {
		c, err := prefixcache.New(prefixcache.Options{BudgetBytes: opt.PrefixCacheBytes, Registerer: opt.Registerer})
		if err != nil {
			return nil, fmt.Errorf("emulated engine: %w", err)
		}
		e.cache = c
	}
	kernels := "emulation: " + ModeFormula
	if len(opt.Profile.Measured) > 0 {
		e.replay = newReplayer(&e.prof)
		kernels = fmt.Sprintf("emulation: %s (%d shapes, %d passes)", ModeSamples, len(e.prof.Measured), e.prof.Repetitions())
	}
	e.info = scorer.Info{
		Model:        e.modelName,
		Architecture: Architecture,
		DType:        "none",
		Kernels:      kernels,
		MaxTokens:    maxTok,
		Emulated:     true,
		Fingerprint:  fingerprint(opt.Profile, maxTok),
	}
	return e, nil
}

// fingerprint is the emulated engine's model identity (scorer.Info.Fingerprint): a hash of
// "emulated", its cost profile as JSON, its token limit (which decides where documents are cut,
// and so their scores), the prompt template and the tokenizer's version: what shapes its replies.
func fingerprint(p *costmodel.Profile, maxTokens int) string {
	b, _ := json.Marshal(p) // a struct of numbers and strings: cannot fail
	h := sha256.New()
	for _, part := range [][]byte{[]byte("emulated"), b, binary.LittleEndian.AppendUint64(nil, uint64(maxTokens)), prompt.Identity(), []byte(tokenizer.Version)} {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(part))))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Emulation says how pass times are drawn: ModeSamples with the number of measured shapes it
// replays, or ModeFormula with 0.
func (e *Engine) Emulation() (mode string, shapes int) {
	if e.replay != nil {
		return ModeSamples, len(e.prof.Measured)
	}
	return ModeFormula, 0
}

// Info implements scorer.Engine.
func (e *Engine) Info() scorer.Info { return e.info }

// PrefixCacheStats reports the cross-request cache's counters; ok is false when it is disabled.
func (e *Engine) PrefixCacheStats() (s prefixcache.Stats, ok bool) {
	if e.cache == nil {
		return prefixcache.Stats{}, false
	}
	return e.cache.Stats(), true
}

// Tokenize implements scorer.Engine: the group of one batch, its template marked
// (Group.TemplateLen) as the real engine marks it when the engine tokenizes with the default
// prompt builder.
func (e *Engine) Tokenize(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	g, err := e.tokenize(instruction, query, docs, opt)
	if err != nil || e.templates == nil {
		return g, err
	}
	g.TemplateLen = e.templates.Len(instruction, g.Prefix)
	return g, nil
}

// CostFeatures implements scorer.Engine: the work Forward would charge for the groups now. A
// prefix is not computed when it is published in the cache or repeats an earlier group's; nor,
// when the prefix is computed, is its template when that is published or an earlier group
// computes it (the real engine's rule). It neither counts lookups nor touches the LRU order.
func (e *Engine) CostFeatures(groups []*scorer.Group) costmodel.Features {
	look := func(_ prefixcache.Level, k prefixcache.Key) (bool, *prefixcache.Reservation, error) {
		return e.cache != nil && e.cache.Contains(k), nil, nil
	}
	plan, _ := e.plan(groups, look) // look never fails
	var f costmodel.Features
	for i, g := range groups {
		f = f.Add(g.Features(plan[i].tokens))
	}
	return f
}

// CostPrior implements scorer.Engine: the profile the engine sleeps by.
func (e *Engine) CostPrior() scorer.CostPrior {
	// The profile is the emulated engine's own timing law, measured on the real engine: as
	// trustworthy as a real node's calibration, over as many passes.
	return scorer.CostPrior{Coeffs: e.prof.Coeffs, Source: scorer.CostSourceProfile, Samples: e.prof.Samples}
}

// EstimateSeconds is the profile's prediction without noise for CostFeatures(groups).
func (e *Engine) EstimateSeconds(groups []*scorer.Group) float64 {
	return e.prof.Seconds(e.CostFeatures(groups))
}

// noise draws the multiplicative log-normal factor exp(σ·Z); its median is 1.
func (e *Engine) noise() float64 {
	if e.prof.NoiseSigma == 0 {
		return 1
	}
	e.mu.Lock()
	z := e.rng.NormFloat64()
	e.mu.Unlock()
	return math.Exp(e.prof.NoiseSigma * z)
}

// replaySeconds draws the time of a pass over groups (plan: what it reuses of each prefix,
// features f) from the measured shapes.
//
// The shape's prefix is the prompt's prefix length, reused or not (what the items attend, as
// the measurements record it), and its cached share is the share of prefix tokens not computed,
// averaged over the groups: 1 for a whole-prefix hit, 0 for a prefix computed whole, and
// TemplateLen/len(Prefix) (about 0.9 on short queries) for a group that reused only its
// template. A template hit computes a few query tokens and then runs its items against the full
// prefix, so it is nearer a cached measurement than a cold one of the same prompt, and far from
// a cold measurement of a prompt as short as its query: matching it there would take the
// curvature of passes whose items attend a few tokens only. Either way the neighbours' times are
// carried to the pass's exact work (f, with the template's tokens not charged) by the formula's
// ratio, so the template's share comes off the emulated time.
func (e *Engine) replaySeconds(groups []*scorer.Group, plan []reuse, f costmodel.Features) float64 {
	s := shape{groups: float64(len(groups)), features: f}
	var prefix, items, itemTok int
	var cached float64
	for i, g := range groups {
		prefix += len(g.Prefix)
		if len(g.Prefix) > 0 {
			cached += float64(plan[i].tokens) / float64(len(g.Prefix))
		}
		for _, l := range g.ItemLens() {
			items++
			itemTok += l
		}
	}
	if len(groups) > 0 {
		s.prefix = float64(prefix) / float64(len(groups))
		s.cached = cached / float64(len(groups))
	}
	s.items = float64(items)
	if items > 0 {
		s.meanItem = float64(itemTok) / float64(items)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.replay.seconds(s, e.rng)
}

// Forward implements scorer.Engine: it sleeps for the pass's emulated time and fills
// deterministic pseudo-logits. What it reuses of each prefix (whole prefix or template, from the
// cache or from an earlier group of the pass) follows the real engine (see plan); the prefixes
// and templates it computes are published when it succeeds. On ctx's end it returns ctx's error
// and publishes nothing.
func (e *Engine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	var st scorer.ForwardStats
	if err := ctx.Err(); err != nil {
		return st, err
	}
	for _, g := range groups {
		g.PrefixCached, g.PrefixReused = false, 0
	}
	look := func(prefixcache.Level, prefixcache.Key) (bool, *prefixcache.Reservation, error) {
		return false, nil, nil
	}
	var ep *prefixcache.Epoch
	if e.cache != nil {
		// The pass is one cache epoch: what it computes is reserved now and published only if
		// the whole pass succeeds.
		ep = e.cache.Begin()
		look = func(level prefixcache.Level, k prefixcache.Key) (bool, *prefixcache.Reservation, error) {
			l, err := ep.AcquireAt(level, k)
			return l.Hit, l.Res, err
		}
	}
	plan, err := e.plan(groups, look)
	if err != nil {
		if ep != nil {
			ep.Abort()
		}
		return st, fmt.Errorf("emulated forward: %w", err)
	}
	var f costmodel.Features
	for i, g := range groups {
		P, reused := len(g.Prefix), plan[i].tokens
		st.PrefixReused += reused
		st.PrefixTokens += P - reused
		for _, l := range g.ItemLens() {
			st.ItemTokens += l
		}
		f = f.Add(g.Features(reused))
	}
	var secs float64
	if e.replay != nil {
		secs = e.replaySeconds(groups, plan, f)
	} else {
		secs = e.prof.Seconds(f) * e.noise()
	}
	d := time.Duration(secs * float64(time.Second))
	if err := e.sleep(ctx, d); err != nil {
		if ep != nil {
			ep.Abort()
		}
		return scorer.ForwardStats{}, err
	}
	if ep != nil {
		for i, g := range groups {
			if r := plan[i].res; r != nil {
				r.Fill(struct{}{}, int64(len(g.Prefix))*e.kvPerTok)
			}
			if r := plan[i].tres; r != nil {
				r.Fill(struct{}{}, int64(g.TemplateSplit())*e.kvPerTok)
			}
		}
		ep.Commit()
	}
	for i, g := range groups {
		g.PrefixCached, g.PrefixReused = plan[i].cached, plan[i].tokens
		g.Logits = make([]float32, len(g.Items))
		for j, it := range g.Items {
			if j < len(g.TooLong) && g.TooLong[j] {
				continue
			}
			g.Logits[j] = PseudoLogit(g.Prefix, it)
		}
	}
	st.Duration = d
	st.Features = f
	return st, nil
}

// PseudoLogit is the emulated logit of one prompt: a hash of its tokens mapped to a bell-shaped
// value in (−12, 12) with standard deviation ≈ 3.5, like a reranker's spread of yes−no logits.
// The same (query, document) always gets the same logit.
func PseudoLogit(prefix, item []int32) float32 {
	h := fnv.New64a()
	var b [4]byte
	for _, seq := range [][]int32{prefix, {-1}, item} {
		for _, t := range seq {
			binary.LittleEndian.PutUint32(b[:], uint32(t))
			h.Write(b[:])
		}
	}
	x := h.Sum64()
	// Sum of four 16-bit uniforms: mean 2, σ ≈ 0.577, support [0, 4).
	s := 0.0
	for i := 0; i < 4; i++ {
		s += float64(uint16(x>>(16*i))) / 65536
	}
	return float32((s - 2) * 6)
}
