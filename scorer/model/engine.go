// Package model is the real scorer engine: it loads a Hugging Face checkpoint folder
// (config.json, safetensors weights, tokenizer.json) of a Qwen3, Qwen3-MoE or Qwen2-MoE model
// and scores Qwen3-Reranker prompts with it: score = sigmoid(logit("yes") − logit("no")) at the
// last position of each prompt.
//
// The architecture code is in scorer/model/qwen, the checkpoint reader in
// scorer/model/safetensors, the prompt in scorer/prompt. An Engine implements scorer.Engine:
// Tokenize is safe for concurrent use; Forward must be called from one goroutine at a time (it
// uses every core through the kernels); CostFeatures, EstimateSeconds and PrefixCacheStats are safe for
// concurrent use, also while Forward runs.
//
// Scores do not depend on the path that computed them: an item's logit has the same bits whether
// its prefix was computed in the pass or read from the prefix cache, whatever other items and
// groups shared its pass and in which order, whichever MoE variant the policy picked and on any
// kernel thread count (the kernels give each row one reduction order; see package kernels).
// TestScoresArePathIndependent pins it.
package model

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/kernels"
	template "github.com/relevance-scoring/relevance/prompt"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model/qwen"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// Options controls how Load builds an Engine.
type Options struct {
	// MaxTokens is the longest prompt (prefix + item) accepted, in tokens; 0 means the config's
	// max_position_embeddings capped at DefaultMaxTokens.
	MaxTokens int
	// Threads is the number of goroutines the kernels split one call across; 0 keeps the
	// kernels' default (GOMAXPROCS). The kernels' thread count is process-wide.
	Threads int
	// MoEPolicy names the MoE kernel policy ("threshold", "auto", "fixed:<blockM>"; see
	// kernels.ParseMoEPolicy); "" is "auto", which measured fastest on every routing distribution
	// here (threshold, the GPU reference behaviour, pays for padding rows that a CPU computes at
	// full price: ~120 ms per small batch on the small model). The engine holds its own kernels.MoERunner;
	// under "auto" Load measures the cost table (about a second). Ignored by dense models.
	MoEPolicy string
	// BF16Matmul is how bf16 weights are multiplied (kernels.SetBF16Matmul): "auto" — AMX tiles
	// with activations split into three bf16 terms, f32 accuracy, where the CPU has AMX;
	// "widen" — f32 activations on AVX-512; "bf16" — bf16 dot products (activations rounded to
	// bf16: fastest, at bf16 accuracy); "" keeps the kernels' setting (auto unless the
	// KERNELS_BF16_AMX / KERNELS_BF16_DOT environment chose otherwise). Process-wide, like Threads.
	BF16Matmul string
	// Name is the model name reported in Info; "" uses the folder's base name.
	Name string
	// PrefixCacheBytes is the memory budget of the cross-request prefix KV cache, in bytes;
	// 0 disables the cache.
	PrefixCacheBytes int64
	// Registerer receives the prefix cache's metrics (relevance_scorer_prefix_cache_*); nil
	// registers none.
	Registerer prometheus.Registerer
	// MoECostTables, when set, keeps the auto policy's cost tables between starts: a table kept
	// for this machine is used instead of measured (the measurement is a sizeable share of a
	// restart's load), and one measured is kept. Nil measures at every Load.
	MoECostTables kernels.MoECostTableStore
	// MaxPassTokens bounds the rows of one forward pass: a call over more (prefixes computed
	// plus item tokens) runs as several passes, the prefixes computed once in the first (see
	// forwardBounded), with the same scores. The activation arena grows to a pass's rows and is
	// kept, so this bounds the working memory (a node passes its max_batch_tokens). 0: no bound.
	MaxPassTokens int
	// Cost is the engine's cost prior (CostPrior), measured elsewhere (`bench calibrate`); zero
	// means a guess from the model's shape (see shapeCost), which a node replaces at start-up by
	// timing passes of its own.
	Cost costmodel.Coeffs
}

// DefaultMaxTokens caps the prompt length when Options.MaxTokens is 0 (the prompt contract's,
// which the proxy assumes of a node that has not said).
const DefaultMaxTokens = template.DefaultMaxTokens

// Engine is a loaded model that scores prompt groups.
type Engine struct {
	model   *qwen.Model
	ckpt    *safetensors.Checkpoint
	builder *prompt.Builder
	info    scorer.Info
	prior   scorer.CostPrior
	// cache holds finished prefix KV (*qwen.PrefixKV) across passes; nil when disabled.
	cache *prefixcache.Cache
	// identity names the weights in cache keys: the model name and its Fingerprint, so KV never
	// outlives the weights that made it, even when a folder is overwritten with new weights of the
	// same shape.
	identity string
	// templates marks each group's template (prompt.Templates).
	templates *prompt.Templates
	// maxPassRows is Options.MaxPassTokens.
	maxPassRows int
}

var _ scorer.Engine = (*Engine)(nil)

// Load reads a Hugging Face checkpoint folder: config.json, model.safetensors (or the shards of
// model.safetensors.index.json) and tokenizer.json (the shipped Qwen3 tokenizer when the folder
// has none). The weights are memory-mapped; Close releases them.
func Load(dir string, opt Options) (*Engine, error) {
	cfg, err := qwen.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	maxTokens := opt.MaxTokens
	switch {
	case maxTokens < 0:
		return nil, fmt.Errorf("load model: max tokens must be ≥ 0, got %d", maxTokens)
	case maxTokens == 0:
		maxTokens = min(cfg.MaxPositionEmbeddings, DefaultMaxTokens)
	case maxTokens > cfg.MaxPositionEmbeddings:
		return nil, fmt.Errorf("load model: max tokens %d exceeds the model's max_position_embeddings %d", maxTokens, cfg.MaxPositionEmbeddings)
	}
	if opt.PrefixCacheBytes < 0 {
		return nil, fmt.Errorf("load model: prefix cache bytes must be ≥ 0, got %d", opt.PrefixCacheBytes)
	}
	if opt.MaxPassTokens < 0 {
		return nil, fmt.Errorf("load model: max pass tokens must be ≥ 0, got %d", opt.MaxPassTokens)
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	yes, okY := tok.TokenID("yes")
	no, okN := tok.TokenID("no")
	if !okY || !okN {
		return nil, fmt.Errorf("load model %s: the tokenizer has no \"yes\"/\"no\" tokens", dir)
	}
	if tok.VocabSize() > cfg.VocabSize {
		return nil, fmt.Errorf("load model %s: tokenizer has %d tokens, more than vocab_size %d", dir, tok.VocabSize(), cfg.VocabSize)
	}
	policy := kernels.MoEPolicy{Kind: kernels.PolicyAuto}
	if opt.MoEPolicy != "" {
		if policy, err = kernels.ParseMoEPolicy(opt.MoEPolicy); err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
	}
	runner := kernels.NewMoERunner(policy)
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	m, err := qwen.Load(cfg, ck, qwen.LoadOptions{HeadRows: []int{int(yes), int(no)}, MaxPositions: maxTokens, MoE: runner})
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if opt.Threads > 0 {
		kernels.SetThreads(opt.Threads)
	}
	if opt.BF16Matmul != "" {
		if err := kernels.SetBF16Matmul(opt.BF16Matmul); err != nil {
			ck.Close()
			return nil, fmt.Errorf("load model: %w", err)
		}
	}
	// The auto policy needs a cost table per expert shape; measure it now (or take the one kept
	// for this machine) rather than on the first request (every sparse layer of these models has
	// the same shape).
	if policy.Kind == kernels.PolicyAuto {
		for _, l := range m.Layers {
			if l.Sparse {
				if _, _, err := runner.CalibrateKept(l.Experts, time.Second, opt.MoECostTables); err != nil {
					ck.Close()
					return nil, fmt.Errorf("load model: %w", err)
				}
				break
			}
		}
	}
	name := opt.Name
	if name == "" {
		abs, _ := filepath.Abs(dir)
		name = filepath.Base(abs)
	}
	e := &Engine{
		model:     m,
		ckpt:      ck,
		builder:   prompt.New(tok, maxTokens),
		templates: prompt.NewTemplates(tok),
		info: scorer.Info{
			Model: name, Architecture: cfg.Arch(), DType: m.DType, Kernels: kernels.Implementation(),
			MaxTokens: maxTokens,
		},
		prior:       scorer.CostPrior{Coeffs: opt.Cost, Source: scorer.CostSourceConfig},
		maxPassRows: opt.MaxPassTokens,
	}
	if cfg.NumExperts > 0 {
		e.info.MoEPolicy = policy.String()
	}
	if opt.Cost == (costmodel.Coeffs{}) {
		e.prior = scorer.CostPrior{Coeffs: shapeCost(cfg, kernels.Threads()), Source: scorer.CostSourceShape}
	} else if err := opt.Cost.Validate(); err != nil {
		ck.Close()
		return nil, fmt.Errorf("load model: %w", err)
	}
	fp, err := Fingerprint(dir, ck, FingerprintSettings{MaxTokens: maxTokens, DType: m.DType, BF16Matmul: kernels.BF16MatmulMode()})
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("load model: %w", err)
	}
	e.info.Fingerprint = fp
	if kernels.PacksWeights() {
		// Loading read every page of the checkpoint into the packed copies the kernels use; the
		// mapped pages need not stay resident beside them (the weights held twice). Embedding rows
		// are faulted back in as tokens need them.
		if err := ck.Evict(); err != nil {
			ck.Close()
			return nil, fmt.Errorf("load model: %w", err)
		}
	}
	if opt.PrefixCacheBytes > 0 {
		c, err := prefixcache.New(prefixcache.Options{BudgetBytes: opt.PrefixCacheBytes, Registerer: opt.Registerer})
		if err != nil {
			ck.Close()
			return nil, fmt.Errorf("load model: %w", err)
		}
		e.cache, e.identity = c, name+"@"+fp
	}
	return e, nil
}

// Close releases the memory-mapped weights; the engine must not be used afterwards.
func (e *Engine) Close() error { return e.ckpt.Close() }

// Builder is the prompt builder the engine tokenizes with.
func (e *Engine) Builder() *prompt.Builder { return e.builder }

// Tokenize builds the group of one batch (see prompt.Builder.Build) and marks its template
// (Group.TemplateLen). Safe for concurrent use.
func (e *Engine) Tokenize(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	g, err := e.builder.Build(instruction, query, docs, opt)
	if err != nil {
		return nil, err
	}
	g.TemplateLen = e.templates.Len(instruction, g.Prefix)
	return g, nil
}

// Forward scores every item of every group in one packed pass: each distinct prefix is computed
// once (or taken from the prefix cache), every item runs against its prefix's KV. Logits[i] is
// logit("yes") − logit("no"); items marked TooLong (or with no tokens) get 0 and are not scored.
//
// The prefix cache has two levels. A group's whole prefix (template, instruction, query) is
// looked up first; when it misses, its template (Group.TemplateLen tokens: the template head and
// instruction that every query of the instruction shares) is, and on a hit only the query's
// tokens are computed, extending the template's KV. A pass publishes both the prefixes and the
// templates it computed. The scores are the same bits either way (qwen.Group.TemplateLen).
func (e *Engine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	var stats scorer.ForwardStats
	start := time.Now()
	qg := make([]*qwen.Group, len(groups))
	for i, g := range groups {
		if len(g.TooLong) != 0 && len(g.TooLong) != len(g.Items) {
			return stats, fmt.Errorf("forward: group %d: %d TooLong flags for %d items", i, len(g.TooLong), len(g.Items))
		}
		items := make([][]int32, len(g.Items))
		for j, it := range g.Items {
			if len(g.TooLong) == 0 || !g.TooLong[j] {
				items[j] = it
			}
		}
		qg[i] = &qwen.Group{Prefix: g.Prefix, Items: items, TemplateLen: g.TemplateSplit()}
		g.PrefixCached, g.PrefixReused = false, 0
	}
	// The pass is one cache epoch: a prefix or template it computes is reserved now, filled and
	// published only if the whole pass succeeds, and dropped on any error, cancellation or panic.
	var res, tres []*prefixcache.Reservation
	succeeded := false
	if e.cache != nil {
		ep := e.cache.Begin()
		defer func() {
			if !succeeded {
				ep.Abort()
				return
			}
			for i := range groups {
				if r := res[i]; r != nil && qg[i].KV != nil {
					r.Fill(qg[i].KV, qg[i].KV.Bytes())
				}
				if r := tres[i]; r != nil && qg[i].TemplateKV != nil {
					r.Fill(qg[i].TemplateKV, qg[i].TemplateKV.Bytes())
				}
			}
			ep.Commit()
		}()
		res = make([]*prefixcache.Reservation, len(groups))
		tres = make([]*prefixcache.Reservation, len(groups))
		reserved := map[*prefixcache.Reservation]bool{}
		for i, g := range groups {
			if len(g.Prefix) == 0 {
				continue
			}
			l, err := ep.AcquireAt(prefixcache.LevelPrefix, prefixcache.KeyOf(e.identity, g.Prefix))
			if err != nil {
				return stats, fmt.Errorf("forward: %w", err)
			}
			switch {
			case l.Hit:
				kv, ok := l.Value.(*qwen.PrefixKV)
				if !ok || kv.Len != len(g.Prefix) {
					return stats, fmt.Errorf("forward: group %d: prefix cache holds %T, not this prefix's KV", i, l.Value)
				}
				qg[i].Cached = kv
				g.PrefixCached = true
				continue
			case l.Res != nil && !reserved[l.Res]:
				// The first group with this prefix computes and keeps its KV; later groups of
				// the same pass share it inside qwen.Forward.
				reserved[l.Res] = true
				res[i] = l.Res
				qg[i].KeepKV = true
			default:
				continue
			}
			t := qg[i].TemplateLen
			if t == 0 {
				continue
			}
			l, err = ep.AcquireAt(prefixcache.LevelTemplate, prefixcache.KeyOf(e.identity, g.Prefix[:t]))
			if err != nil {
				return stats, fmt.Errorf("forward: %w", err)
			}
			switch {
			case l.Hit:
				kv, ok := l.Value.(*qwen.PrefixKV)
				if !ok || kv.Len != t {
					return stats, fmt.Errorf("forward: group %d: prefix cache holds %T, not this template's KV", i, l.Value)
				}
				qg[i].Template = kv
			case l.Res != nil && !reserved[l.Res]:
				// The first group with this template keeps its KV; later ones share it in
				// qwen.Forward.
				reserved[l.Res] = true
				tres[i] = l.Res
				qg[i].KeepTemplateKV = true
			}
		}
	}
	var st qwen.Stats
	out, err := forwardBounded(ctx, e.model, qg, e.maxPassRows, &st)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return stats, ctxErr
		}
		return stats, fmt.Errorf("forward: %w", err)
	}
	for i, g := range groups {
		g.Logits = make([]float32, len(g.Items))
		for j := range g.Items {
			if l := out[i]; l != nil && l[j] != nil {
				g.Logits[j] = l[j][0] - l[j][1]
			}
		}
		g.PrefixReused = qg[i].Reused
	}
	succeeded = true
	stats.Duration = time.Since(start)
	stats.PrefixTokens = st.PrefixTokens
	// Reused: prefix tokens not computed, from the cache (whole prefixes or templates) or
	// shared with another group of the same pass (identical prefixes or templates are computed
	// once).
	for _, g := range groups {
		stats.PrefixReused += len(g.Prefix)
	}
	stats.PrefixReused -= st.PrefixTokens
	stats.ItemTokens = st.ItemTokens
	// The pass's work: what qwen.Forward computed of each group's prefix, and its items.
	for _, g := range groups {
		stats.Features = stats.Features.Add(g.Features(g.PrefixReused))
	}
	if st.MoECalls > 0 {
		stats.MoEVariants = st.MoEVariants
		stats.MoEPaddingRatio = st.MoEPaddingSum / float64(st.MoECalls)
	}
	return stats, nil
}

// CostFeatures is the work Forward would do for the groups now (scorer.Engine): a prefix is not
// computed when it is published in the prefix cache or repeats an earlier group of the same pass;
// nor, when the prefix is computed, is its template when that is published or repeats an earlier
// group's. Safe for concurrent use, also while Forward runs.
func (e *Engine) CostFeatures(groups []*scorer.Group) costmodel.Features {
	var f costmodel.Features
	seen := make(map[prefixcache.Key]bool, len(groups))
	for _, g := range groups {
		reused := 0
		if len(g.Prefix) > 0 {
			k := prefixcache.KeyOf(e.identity, g.Prefix)
			if seen[k] || (e.cache != nil && e.cache.Contains(k)) {
				reused = len(g.Prefix)
			} else if t := g.TemplateSplit(); t > 0 {
				tk := prefixcache.KeyOf(e.identity, g.Prefix[:t])
				if seen[tk] || (e.cache != nil && e.cache.Contains(tk)) {
					reused = t
				}
				seen[tk] = true
			}
			seen[k] = true
		}
		f = f.Add(g.Features(reused))
	}
	return f
}

// CostPrior is the engine's starting cost model (scorer.Engine): Options.Cost when given, else
// the guess from the model's shape (see shapeCost), which a node replaces by timing passes.
func (e *Engine) CostPrior() scorer.CostPrior { return e.prior }

// EstimateSeconds is CostPrior's prediction for CostFeatures(groups): the engine's own estimate,
// before any measurement (a serving node prices work with the coefficients it learns instead).
func (e *Engine) EstimateSeconds(groups []*scorer.Group) float64 {
	return e.prior.Coeffs.Seconds(e.CostFeatures(groups))
}

// shapeCost derives cost coefficients from the model's shape:
//
//	a = 2·(dense weights per token)/denseRate + 2·(routed expert weights per token)/expertRate
//	b = 4·layers·heads·head_dim / attnRate  (q·k and the weighted sum of v, per attended pair)
//	c = 2 ms per batch
//
// with the rates per kernel thread. The rates are crude fits of BenchmarkForward on the small
// presets (qwen3 and qwen3_moe, 2 threads, AVX-512 kernels, a shared machine at load ≈ 3): the
// estimate lands within ~10% of the median there; the grouped expert GEMM sustains far less than
// the dense one on routed rows. It is only a cold-start guess: a node times passes of its own at
// start-up and learns from every pass (scorer/node), unless Options.Cost gives measured values.
func shapeCost(c *qwen.Config, threads int) costmodel.Coeffs {
	const (
		denseRate  = 75e9 // flop/s per thread
		expertRate = 28e9
		attnRate   = 28e9
	)
	H, hd := float64(c.HiddenSize), float64(c.HeadDim)
	qd, kvd := float64(c.NumAttentionHeads)*hd, float64(c.NumKeyValueHeads)*hd
	var dense, expert float64
	for i := 0; i < c.NumHiddenLayers; i++ {
		dense += H*qd*2 + H*kvd*2
		if c.IsSparse(i) {
			dense += H * float64(c.NumExperts)
			expert += 3 * H * float64(c.MoEIntermediateSize*c.NumExpertsPerTok)
			if c.HasSharedExpert() {
				dense += 3*H*float64(c.SharedExpertIntermediateSize) + H
			}
		} else {
			dense += 3 * H * float64(c.IntermediateSize)
		}
	}
	t := float64(max(threads, 1))
	return costmodel.Coeffs{
		A: 2*dense/(denseRate*t) + 2*expert/(expertRate*t),
		B: 4 * float64(c.NumHiddenLayers) * qd / (attnRate * t),
		C: 2e-3,
	}
}

// Info describes the engine.
func (e *Engine) Info() scorer.Info { return e.info }

// Score is a convenience for offline use: it tokenizes one query's documents, runs them, and
// returns the scores sigmoid(logit) with the group (logits, truncation) filled in.
func (e *Engine) Score(ctx context.Context, instruction, query string, docs []string, opt scorer.TokenizeOptions) ([]float64, *scorer.Group, error) {
	g, err := e.Tokenize(instruction, query, docs, opt)
	if err != nil {
		return nil, nil, err
	}
	if _, err := e.Forward(ctx, []*scorer.Group{g}); err != nil {
		return nil, nil, err
	}
	s := make([]float64, len(g.Logits))
	for i, l := range g.Logits {
		s[i] = Sigmoid(float64(l))
	}
	return s, g, nil
}

// Sigmoid is the score of a logit difference.
func Sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// defaultTokenizerSum is the SHA-256 of the shipped tokenizer.json.
var defaultTokenizerSum = sync.OnceValues(func() ([32]byte, error) {
	b, err := tokenizer.DefaultJSON()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
})

// loadTokenizer loads dir/tokenizer.json, or uses the shipped Qwen3 tokenizer when the folder has
// none. A file identical to the shipped one (every generated checkpoint) shares the already
// loaded default instead of parsing 11 MB of JSON again.
func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return tokenizer.Default()
	}
	if err != nil {
		return nil, err
	}
	if sum, err := defaultTokenizerSum(); err == nil && sum == sha256.Sum256(b) {
		return tokenizer.Default()
	}
	return tokenizer.Load(b)
}

// PrefixCacheStats reports the cross-request prefix cache's counters (the node's /v1/status);
// ok is false when the cache is disabled. Safe for concurrent use.
func (e *Engine) PrefixCacheStats() (prefixcache.Stats, bool) {
	if e.cache == nil {
		return prefixcache.Stats{}, false
	}
	return e.cache.Stats(), true
}
