// Package scorer is the scorer node: it turns (query, items) batches into relevance scores with an
// LLM cross-encoder. This parent package holds the contract between the node's server and
// scheduler (package scorer/node) and the engines that run forward passes: the real model
// (package scorer/model) and the calibrated emulation (package scorer/emulated).
//
// Types here are plain data; an Engine implementation documents its own concurrency (the node
// calls Forward from one goroutine at a time, Tokenize and CostFeatures from many).
//
// Cost: an engine says what work a pass is (CostFeatures before it, ForwardStats.Features after)
// and where its speed comes from (CostPrior); the node turns work into seconds with the
// coefficients it learns from every pass (package costmodel), so the deadline check, the load a
// node reports and its merge decision all read one model, whichever the engine.
package scorer

import (
	"context"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
)

// Group is one query's shared prompt prefix and the items that continue it. The node builds one
// per incoming batch (Engine.Tokenize), may run several groups in one forward pass, and reads the
// outputs back.
type Group struct {
	// Prefix holds the tokens shared by every item's prompt: template, instruction and query, up
	// to the token boundary before the document.
	Prefix []int32
	// Items holds each item's own tokens: the (possibly cut) document and the prompt's tail.
	// Prefix+Items[i] is exactly the token sequence of item i's whole prompt.
	Items [][]int32
	// Truncated[i] is how many document tokens were cut from item i.
	Truncated []int
	// TooLong[i] is set when item i exceeded the limit and truncation was refused; such items
	// have no tokens and are not scored.
	TooLong []bool
	// TemplateLen is how many leading Prefix tokens every query of the same instruction shares
	// (the template head and the instruction, up to "<Query>:"): an engine may keep their KV
	// once per instruction and extend it with each query's tokens. 0 when unknown.
	TemplateLen int

	// Outputs, filled by Engine.Forward.

	// Logits[i] is logit("yes") − logit("no") at the last position of item i's prompt.
	Logits []float32
	// PrefixCached is true when the prefix KV came from the cross-request cache.
	PrefixCached bool
	// PrefixReused is how many Prefix tokens the pass did not compute for this group: all of
	// them when PrefixCached (or an earlier group of the pass had the same prefix), the
	// template's when only its KV was reused (the prefix cache's template level, or an earlier
	// group of the pass with the same template); 0 when the whole prefix was computed. Engines
	// without a prefix cache leave it 0.
	PrefixReused int
}

// ItemTokens is Σ len(Items[i]).
func (g *Group) ItemTokens() int {
	n := 0
	for _, it := range g.Items {
		n += len(it)
	}
	return n
}

// TokenizeOptions controls prompt building for one batch.
type TokenizeOptions struct {
	// MaxDocTokens caps each document's tokens; 0 means the engine's limit.
	MaxDocTokens int
	// NoTruncate refuses to cut: over-long items are marked TooLong instead.
	NoTruncate bool
}

// ForwardStats is what one forward pass measured.
type ForwardStats struct {
	Duration time.Duration
	// PrefixTokens computed (cache misses), PrefixReused not computed (cache hits), ItemTokens computed.
	PrefixTokens, PrefixReused, ItemTokens int
	// MoE kernel choices made during the pass (empty for dense models), by variant name.
	MoEVariants map[string]int
	// MoEPaddingRatio is the mean padding ratio over the pass's MoE layers (0 when dense).
	MoEPaddingRatio float64
	// Features is the work the pass did in the cost model's terms: the sum of its groups'
	// costmodel.BatchFeatures, each distinct prefix counted once and not at all when it came from
	// the prefix cache. The node learns its speed from (Features, Duration).
	Features costmodel.Features
}

// Where an engine's starting cost coefficients come from (CostPrior.Source).
const (
	// CostSourceProfile: a cost profile measured on the real engine (the emulated engine sleeps by it).
	CostSourceProfile = "profile"
	// CostSourceConfig: coefficients given in the node's configuration.
	CostSourceConfig = "config"
	// CostSourceShape: a guess from the model's shape; the node replaces it by timing passes of
	// its own at start-up unless calibration is disabled.
	CostSourceShape = "shape"
)

// CostPrior is an engine's cost model before the node has measured anything.
type CostPrior struct {
	Coeffs costmodel.Coeffs
	Source string // CostSourceProfile, CostSourceConfig or CostSourceShape
	// Samples is how many measured passes Coeffs rest on (a profile's samples; 0 for a guess
	// or a hand-set value): a node counts them as its model's samples, as it counts its
	// calibration passes, so that a proxy trusts its projections from the first reply.
	Samples int
}

// Info describes an engine for /v1/status and metrics.
type Info struct {
	Model        string // model name or folder
	Architecture string // e.g. Qwen3MoeForCausalLM, or "emulated"
	DType        string // weight dtype as loaded (f32, bf16)
	Kernels      string // kernel implementation in use (e.g. "avx512", "generic")
	MoEPolicy    string // MoE kernel policy ("" when dense)
	MaxTokens    int    // longest prompt accepted (prefix + item)
	Emulated     bool
	// Fingerprint identifies what the engine scores with (weights, config, tokenizer, prompt
	// template, result-changing settings), as hex; engines with equal fingerprints give equal
	// scores. Every ScoreBatch reply carries it (model_fingerprint); "" when unknown.
	Fingerprint string
}

// Engine runs the model.
type Engine interface {
	// Tokenize builds the group for one batch. Safe for concurrent use.
	Tokenize(instruction, query string, docs []string, opt TokenizeOptions) (*Group, error)
	// Forward scores every item of every group in one pass and fills the groups' outputs. It stops
	// early with ctx's error when ctx is done. The node calls it from one goroutine at a time.
	Forward(ctx context.Context, groups []*Group) (ForwardStats, error)
	// CostFeatures is the work Forward would do for the groups if it ran now: each group's
	// prefix (unless it is published in the prefix cache or repeats an earlier group's prefix),
	// its items, and one batch each. The node prices it with its learned coefficients for load
	// reporting, deadline checks and merging. Safe for concurrent use, also while Forward runs.
	CostFeatures(groups []*Group) costmodel.Features
	// CostPrior is where the node's cost model starts.
	CostPrior() CostPrior
	Info() Info
}

// TemplateSplit is g's template length when it splits the prefix (0 < TemplateLen < len(Prefix)),
// else 0: a template as long as the prefix is the whole prefix, looked up as such.
func (g *Group) TemplateSplit() int {
	if g.TemplateLen > 0 && g.TemplateLen < len(g.Prefix) {
		return g.TemplateLen
	}
	return 0
}

// ItemLens are the token counts of g's scorable items (too-long items are not computed).
func (g *Group) ItemLens() []int {
	lens := make([]int, 0, len(g.Items))
	for i, it := range g.Items {
		if i < len(g.TooLong) && g.TooLong[i] {
			continue
		}
		lens = append(lens, len(it))
	}
	return lens
}

// Features is g's work in one pass when its first reused prefix tokens are not computed (from
// the cache or another group of the pass): the rest of the prefix, which attends the reused
// tokens as an item attends its prefix, its scorable items, and one batch. Every engine charges
// a pass by it, so the node's cost model means the same on real and emulated nodes.
func (g *Group) Features(reused int) costmodel.Features {
	P := len(g.Prefix)
	f := costmodel.BatchFeatures(P, g.ItemLens(), true)
	switch {
	case reused <= 0:
		f = f.Add(costmodel.PrefixFeatures(P))
	case reused < P:
		f = f.Add(costmodel.ItemFeatures(reused, P-reused))
	}
	return f
}
