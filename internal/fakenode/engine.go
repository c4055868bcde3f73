package fakenode

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// ScriptedEngine is a scorer.Engine whose passes take the time a test scripts: the step towards
// running the real scorer/node server (its scheduler, validation, deadline checks and protocol)
// under fakenode instead of fakenode's own gRPC handler. A pass over several groups (the node
// merges queued batches into one pass) takes the sum of its batches' scripted times, which is
// what the batches would have taken one after another on the old FIFO fake. Scores are
// Score(query, text) shifted as by SetModel; SetHang holds every pass until its context ends
// or the hang is lifted. A group tokenized but never run (its call cancelled while queued)
// keeps its texts in a map until the engine is dropped: fine for a test's lifetime.
//
// Not yet what Start runs: see the report of issue 12 item 3 for the hooks the switch needs
// (reported load, health flips, bit-exact scores).
//
// Safe for concurrent use (Tokenize and CostFeatures from many goroutines, Forward from one at
// a time or more: passes only sleep).
type ScriptedEngine struct {
	opts Options

	mu          sync.Mutex
	latency     func(Batch) time.Duration
	coeffs      costmodel.Coeffs
	shift       float32
	hang        bool
	hangRelease chan struct{}
	texts       map[*scorer.Group]scriptedGroup // what Tokenize saw, for Forward's scores
}

type scriptedGroup struct {
	batch Batch
	query string
	texts []string
}

var _ scorer.Engine = (*ScriptedEngine)(nil)

// NewScriptedEngine returns an engine scripted by opts (Latency, Coeffs, Tokens, PrefixTokens,
// TailTokens as for Start).
func NewScriptedEngine(opts Options) *ScriptedEngine {
	if opts.Tokens == nil {
		opts.Tokens = CountTokens
	}
	if opts.PrefixTokens <= 0 {
		opts.PrefixTokens = 40
	}
	if opts.TailTokens <= 0 {
		opts.TailTokens = 12
	}
	return &ScriptedEngine{opts: opts, latency: opts.Latency, coeffs: opts.Coeffs,
		hangRelease: make(chan struct{}), texts: map[*scorer.Group]scriptedGroup{}}
}

// SetLatency, SetCost, SetHang and SetShift steer the engine as the Node methods of the same
// names do.
func (e *ScriptedEngine) SetLatency(f func(Batch) time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latency = f
}

// SetCost replaces the cost coefficients and clears any latency function.
func (e *ScriptedEngine) SetCost(c costmodel.Coeffs) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.coeffs, e.latency = c, nil
}

// SetShift adds shift to every later score (clamped into (0, 1)).
func (e *ScriptedEngine) SetShift(shift float32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shift = shift
}

// SetHang holds passes until their context ends (on), or releases them (off).
func (e *ScriptedEngine) SetHang(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on == e.hang {
		return
	}
	e.hang = on
	if !on {
		close(e.hangRelease)
		e.hangRelease = make(chan struct{})
	}
}

// Tokenize implements scorer.Engine with the fake token counter: the prefix is
// PrefixTokens + Tokens(instruction) + Tokens(query) tokens, item i Tokens(text) + TailTokens.
func (e *ScriptedEngine) Tokenize(instruction, query string, docs []string, _ scorer.TokenizeOptions) (*scorer.Group, error) {
	b := Batch{Query: query, PrefixTokens: e.opts.PrefixTokens + e.opts.Tokens(instruction) + e.opts.Tokens(query), ItemTokens: make([]int, len(docs))}
	g := &scorer.Group{Prefix: make([]int32, b.PrefixTokens), Items: make([][]int32, len(docs)),
		Truncated: make([]int, len(docs)), TooLong: make([]bool, len(docs))}
	for i, d := range docs {
		b.ItemTokens[i] = e.opts.Tokens(d) + e.opts.TailTokens
		g.Items[i] = make([]int32, b.ItemTokens[i])
	}
	e.mu.Lock()
	e.texts[g] = scriptedGroup{batch: b, query: query, texts: docs}
	e.mu.Unlock()
	return g, nil
}

// CostFeatures implements scorer.Engine: every group pays its prefix (no cache).
func (e *ScriptedEngine) CostFeatures(groups []*scorer.Group) costmodel.Features {
	var f costmodel.Features
	for _, g := range groups {
		f = f.Add(costmodel.BatchFeatures(len(g.Prefix), lens(g), false))
	}
	return f
}

func lens(g *scorer.Group) []int {
	out := make([]int, len(g.Items))
	for i, it := range g.Items {
		out[i] = len(it)
	}
	return out
}

// CostPrior implements scorer.Engine: the scripted coefficients, as configured ones.
func (e *ScriptedEngine) CostPrior() scorer.CostPrior {
	e.mu.Lock()
	defer e.mu.Unlock()
	return scorer.CostPrior{Coeffs: e.coeffs, Source: scorer.CostSourceConfig}
}

// Info implements scorer.Engine.
func (e *ScriptedEngine) Info() scorer.Info {
	return scorer.Info{Model: "fakenode", Architecture: "scripted", DType: "none", Kernels: "none", MaxTokens: 1 << 20, Emulated: true}
}

// Forward implements scorer.Engine: it holds while hung, sleeps for the sum of the groups'
// scripted times, then fills each item's logit so that the node's sigmoid gives its score.
func (e *ScriptedEngine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	var st scorer.ForwardStats
	e.mu.Lock()
	hang, release, shift := e.hang, e.hangRelease, e.shift
	var d time.Duration
	sg := make([]scriptedGroup, len(groups))
	for i, g := range groups {
		sg[i] = e.texts[g]
		delete(e.texts, g)
		if e.latency != nil {
			d += max(0, e.latency(sg[i].batch))
		} else {
			d += secondsToDuration(e.coeffs.Seconds(costmodel.BatchFeatures(sg[i].batch.PrefixTokens, sg[i].batch.ItemTokens, false)))
		}
	}
	e.mu.Unlock()
	if hang {
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-release:
		}
	}
	if err := sleepCtx(ctx, d); err != nil {
		return st, err
	}
	for i, g := range groups {
		g.Logits = make([]float32, len(g.Items))
		for j := range g.Items {
			s := min(max(Score(sg[i].query, sg[i].texts[j])+shift, 1e-6), 1-1e-6)
			g.Logits[j] = float32(math.Log(float64(s) / (1 - float64(s))))
		}
		st.PrefixTokens += len(g.Prefix)
		st.ItemTokens += g.ItemTokens()
	}
	st.Duration = d
	st.Features = e.CostFeatures(groups)
	return st, nil
}
