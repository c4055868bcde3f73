package fakenode

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/sleep"
	"github.com/relevance-scoring/relevance/scorer"
)

// ScriptedEngine is the scorer.Engine a fake node runs under the real scorer/node server: its
// passes take the time a test scripts and give the scores Score gives. A pass over several
// groups (the node merges queued batches into one pass) takes the sum of its batches' scripted
// times, what they would take one after another on one device; with Options.Parallel it takes
// the longest of them (the batches run side by side). SetHang holds every pass until its context
// ends or the hang is lifted.
//
// Its model (fingerprint, and a shift added to Score) is fixed; WithModel (WithNamedModel, which
// also renames it) gives the same engine with another model, whose groups run in the same passes: the node swaps it in for later calls
// (node.Node.SetEngine), so that a call's reply never mixes models.
//
// Safe for concurrent use (Tokenize and CostFeatures from many goroutines, Forward from one at
// a time or more: passes only sleep).
type ScriptedEngine struct {
	s           *script // shared by every model of the engine
	name        string  // the model name in Info ("": fakenode)
	fingerprint string
	shift       float32
}

// script is what a test scripts of an engine, whatever its model.
type script struct {
	opts Options

	batches atomic.Int64 // groups scored by passes that completed
	passes  atomic.Int64 // passes that completed
	items   atomic.Int64

	mu          sync.Mutex
	latency     func(Batch) time.Duration
	coeffs      costmodel.Coeffs
	hang        bool
	hangRelease chan struct{}
	// groups is what Tokenize saw of each group, for Forward's times and scores. An entry goes
	// when its pass runs, or when the group is garbage (a call cancelled while queued).
	groups map[weak.Pointer[scorer.Group]]scriptedGroup
}

type scriptedGroup struct {
	batch Batch
	texts []string
	shift float32 // of the model that tokenized it
}

var _ scorer.Engine = (*ScriptedEngine)(nil)

// NewScriptedEngine returns an engine scripted by opts (Latency, Coeffs, Tokens, PrefixTokens,
// TailTokens, Parallel and Fingerprint as for Start).
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
	return &ScriptedEngine{fingerprint: opts.Fingerprint, s: &script{opts: opts, latency: opts.Latency, coeffs: opts.Coeffs,
		hangRelease: make(chan struct{}), groups: map[weak.Pointer[scorer.Group]]scriptedGroup{}}}
}

// WithModel is the engine with another model: it reports fingerprint fp and adds shift to every
// score it gives (clamped into (0, 1)). Everything else is shared with e.
func (e *ScriptedEngine) WithModel(fp string, shift float32) *ScriptedEngine {
	return e.WithNamedModel(e.name, fp, shift)
}

// WithNamedModel is WithModel with the model also renamed: Info reports name ("": fakenode), as
// a node does after a rolling update to a model of another name.
func (e *ScriptedEngine) WithNamedModel(name, fp string, shift float32) *ScriptedEngine {
	return &ScriptedEngine{s: e.s, name: name, fingerprint: fp, shift: shift}
}

// SetLatency, SetCost and SetHang steer the engine (every model of it) as the Node methods of
// the same names do.
func (e *ScriptedEngine) SetLatency(f func(Batch) time.Duration) {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	e.s.latency = f
}

// SetCost replaces the cost coefficients and clears any latency function.
func (e *ScriptedEngine) SetCost(c costmodel.Coeffs) {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	e.s.coeffs, e.s.latency = c, nil
}

// SetHang holds passes until their context ends (on), or releases them (off).
func (e *ScriptedEngine) SetHang(on bool) {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	if on == e.s.hang {
		return
	}
	e.s.hang = on
	if !on {
		close(e.s.hangRelease)
		e.s.hangRelease = make(chan struct{})
	}
}

// Batches is the number of groups scored by passes that completed.
func (e *ScriptedEngine) Batches() int64 { return e.s.batches.Load() }

// Passes is the number of passes that completed: fewer than Batches where the node merged.
func (e *ScriptedEngine) Passes() int64 { return e.s.passes.Load() }

// Items is the number of items scored by passes that completed.
func (e *ScriptedEngine) Items() int64 { return e.s.items.Load() }

// Tokenize implements scorer.Engine with the fake token counter: the prefix is
// PrefixTokens + Tokens(instruction) + Tokens(query) tokens, item i Tokens(text) + TailTokens.
func (e *ScriptedEngine) Tokenize(instruction, query string, docs []string, _ scorer.TokenizeOptions) (*scorer.Group, error) {
	o := &e.s.opts
	b := Batch{Query: query, PrefixTokens: o.PrefixTokens + o.Tokens(instruction) + o.Tokens(query), ItemTokens: make([]int, len(docs))}
	g := &scorer.Group{Prefix: make([]int32, b.PrefixTokens), Items: make([][]int32, len(docs)),
		Truncated: make([]int, len(docs)), TooLong: make([]bool, len(docs))}
	for i, d := range docs {
		b.ItemTokens[i] = o.Tokens(d) + o.TailTokens
		g.Items[i] = make([]int32, b.ItemTokens[i])
	}
	k := weak.Make(g)
	e.s.mu.Lock()
	e.s.groups[k] = scriptedGroup{batch: b, texts: docs, shift: e.shift}
	e.s.mu.Unlock()
	runtime.AddCleanup(g, e.s.forget, k)
	return g, nil
}

// forget drops a group's entry once the group is garbage.
func (s *script) forget(k weak.Pointer[scorer.Group]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, k)
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

// CostPrior implements scorer.Engine: the node starts from the engine's scripted cost, as
// configured coefficients: Coeffs, or with a latency function the coefficients fitted to it on a
// few batch shapes (exact for a constant latency or one of the formula's own shape). A later
// SetCost or SetLatency is for the node to learn, as a real node learns a slower device.
func (e *ScriptedEngine) CostPrior() scorer.CostPrior {
	e.s.mu.Lock()
	c, lat := e.s.coeffs, e.s.latency
	e.s.mu.Unlock()
	if lat != nil {
		c = fitLatency(lat)
	}
	return scorer.CostPrior{Coeffs: c, Source: scorer.CostSourceConfig}
}

// fitLatency fits the cost formula to a latency function's times of eight batch shapes (2
// prefix lengths × 2 item counts × 2 item lengths, empty query); zero when the fit fails (a zero
// or erratic latency): the node then learns from its passes alone.
func fitLatency(lat func(Batch) time.Duration) costmodel.Coeffs {
	var samples []costmodel.Sample
	for _, p := range []int{16, 128} {
		for _, n := range []int{1, 16} {
			for _, l := range []int{16, 256} {
				items := make([]int, n)
				for i := range items {
					items[i] = l
				}
				samples = append(samples, costmodel.Sample{
					Features: costmodel.BatchFeatures(p, items, false),
					Seconds:  lat(Batch{PrefixTokens: p, ItemTokens: items}).Seconds(),
				})
			}
		}
	}
	fit, err := costmodel.Fit(samples)
	if err != nil {
		return costmodel.Coeffs{}
	}
	return fit.Coeffs
}

// Info implements scorer.Engine.
func (e *ScriptedEngine) Info() scorer.Info {
	name := e.name
	if name == "" {
		name = "fakenode"
	}
	return scorer.Info{Model: name, Architecture: "scripted", DType: "none", Kernels: "none", MaxTokens: 1 << 20,
		Emulated: true, Fingerprint: e.fingerprint}
}

// Forward implements scorer.Engine: it holds while hung, sleeps for the groups' scripted times
// (their sum, or with Parallel the longest), then fills each item's logit so that the node's
// logistic function gives its score.
func (e *ScriptedEngine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	var st scorer.ForwardStats
	s := e.s
	s.mu.Lock()
	hang, release := s.hang, s.hangRelease
	var d time.Duration
	sg := make([]scriptedGroup, len(groups))
	for i, g := range groups {
		k := weak.Make(g)
		sg[i] = s.groups[k]
		delete(s.groups, k)
		var t time.Duration
		if s.latency != nil {
			t = max(0, s.latency(sg[i].batch))
		} else {
			t = secondsToDuration(s.coeffs.Seconds(costmodel.BatchFeatures(sg[i].batch.PrefixTokens, sg[i].batch.ItemTokens, false)))
		}
		if s.opts.Parallel {
			d = max(d, t)
		} else {
			d += t
		}
	}
	s.mu.Unlock()
	if hang {
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-release:
		}
	}
	if err := sleep.Context(ctx, d); err != nil {
		return st, err
	}
	for i, g := range groups {
		g.Logits = make([]float32, len(g.Items))
		for j := range g.Items {
			g.Logits[j] = shifted(logit(sg[i].batch.Query, sg[i].texts[j]), sg[i].shift)
		}
		st.PrefixTokens += len(g.Prefix)
		st.ItemTokens += g.ItemTokens()
		s.items.Add(int64(len(g.Items)))
	}
	s.batches.Add(int64(len(groups)))
	s.passes.Add(1)
	st.Duration = d
	st.Features = e.CostFeatures(groups)
	return st, nil
}

// shifted is the logit of sigmoid(l) + shift, the sum clamped into (0, 1); l itself when shift
// is 0, so that an unshifted score is exactly Score's.
func shifted(l, shift float32) float32 {
	if shift == 0 {
		return l
	}
	s := float64(min(max(sigmoid(l)+shift, 1e-6), 1-1e-6))
	return float32(math.Log(s / (1 - s)))
}

func secondsToDuration(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
