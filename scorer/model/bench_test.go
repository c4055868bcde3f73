package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model/qwen"
)

// benchModel returns a generated checkpoint kept across benchmark runs (generating the small
// preset takes tens of seconds): $RELEVANCE_BENCH_MODELS or the user cache folder.
func benchModel(b *testing.B, spec GenSpec) string {
	b.Helper()
	root := os.Getenv("RELEVANCE_BENCH_MODELS")
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		root = filepath.Join(c, "relevance-bench-models")
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-%s-seed%d-%s-fused%v", spec.Arch, spec.Preset, spec.Seed, spec.DType, spec.FusedExperts))
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		return dir
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := Generate(tmp, spec); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		b.Fatal(err)
	}
	return dir
}

// benchDocs makes n documents of about words words each, deterministic.
func benchDocs(n, words int) []string {
	vocab := strings.Fields("coffee espresso machine pressure grind bean roast water temperature crema milk " +
		"price cheap home kitchen steam pump boiler portafilter basket tamp shot brew time taste bitter sweet " +
		"acid body aroma the a of and to in is for with on that by this from at as are be it an or was")
	rng := rand.New(rand.NewPCG(11, 13))
	docs := make([]string, n)
	for i := range docs {
		w := make([]string, words)
		for j := range w {
			w[j] = vocab[rng.IntN(len(vocab))]
		}
		docs[i] = strings.Join(w, " ") + "."
	}
	return docs
}

// benchEngines holds one loaded engine per spec: loading packs the weights (seconds on a shared
// machine), so sub-benchmarks share it.
var benchEngines sync.Map // GenSpec → *Engine

func benchEngine(b *testing.B, spec GenSpec) *Engine {
	b.Helper()
	if e, ok := benchEngines.Load(spec); ok {
		return e.(*Engine)
	}
	e, err := Load(benchModel(b, spec), Options{})
	if err != nil {
		b.Fatal(err)
	}
	benchEngines.Store(spec, e)
	return e
}

// benchBatch is one scoring job: 16 documents of about 200 tokens (item = document + the
// prompt's tail) for one query, the same prompts with prefix reuse (one group) and without
// (each whole prompt its own sequence, empty prefix).
type benchBatch struct {
	prefix, itemTokens, promptTokens int
	on, off                          []*qwen.Group
	group                            *scorer.Group
}

func newBenchBatch(b *testing.B, e *Engine, instruction, query string) *benchBatch {
	b.Helper()
	g, err := e.Tokenize(instruction, query, benchDocs(16, 180), scorer.TokenizeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bb := &benchBatch{prefix: len(g.Prefix), itemTokens: g.ItemTokens(), group: g}
	bb.on = []*qwen.Group{{Prefix: g.Prefix, Items: g.Items}}
	for _, it := range g.Items {
		whole := append(append([]int32(nil), g.Prefix...), it...)
		bb.off = append(bb.off, &qwen.Group{Items: [][]int32{whole}})
		bb.promptTokens += len(whole)
	}
	return bb
}

// The benchmark prompts. prefix60 (a short instruction) is the reuse measurement: 16
// items of ~200 tokens after a ~60-token prefix; job70 (the default instruction, a short query) is
// the dense job of issue 6: 16 prompts of ~270 tokens with a ~70-token shared prefix.
var benchPrompts = []struct{ name, instruction, query string }{
	{"prefix60", "Find passages that answer the query", "cheap espresso at home?"},
	{"job70", "", "how to make cheap espresso at home?"},
}

// BenchmarkForward measures the forward pass on the small presets (qwen3_moe and dense qwen3)
// on 1 and 2 kernel threads, for each prompt set of benchPrompts. Each iteration runs the batch
// with prefix reuse (one group: the prefix once, the items against its KV) and then without
// (every whole prompt alone), so both see the same machine load. Metrics:
//
//	prompt-tok/s, prompt-tok/s-noreuse   prompt tokens scored per wall second (same prompts)
//	s/job, s/job-noreuse                 wall seconds per batch
//	cpu-s/job                            process CPU seconds per batch with reuse (all threads)
//	speedup                              noreuse time / reuse time (medians over iterations)
//	bound                                the speed-up if reuse removed exactly the skipped work:
//	                                     the no-reuse pass's time less the share of its
//	                                     non-attention time of the 15 redundant prefix copies and
//	                                     the share of its attention time of the skipped pairs
//	attn-%, moe-%, router-%              shares of the reuse pass
//	pad, pad-noreuse                     mean MoE padding ratio
//
// ns/op covers both passes. Purego (plain-Go kernels, the issue-3 baseline):
//
//	go test -run '^$' -bench 'BenchmarkForward/^qwen3_moe-small$/^threads=2$/^prefix60$' -benchtime 3x -count 3 ./scorer/model/
//	go test -tags purego -run '^$' -bench 'BenchmarkForward/^qwen3-small$/threads/^job70-reuse-only$' -benchtime 1x ./scorer/model/
func BenchmarkForward(b *testing.B) {
	defer kernels.SetThreads(kernels.Threads())
	for _, arch := range []string{"qwen3_moe", "qwen3"} {
		spec := GenSpec{Arch: arch, Preset: "small", Seed: 1}
		for _, threads := range []int{1, 2} {
			for _, p := range benchPrompts {
				b.Run(fmt.Sprintf("%s-small/threads=%d/%s", arch, threads, p.name), func(b *testing.B) {
					kernels.SetThreads(threads)
					benchForward(b, benchEngine(b, spec), newBenchBatch(b, benchEngine(b, spec), p.instruction, p.query), false)
				})
				b.Run(fmt.Sprintf("%s-small/threads=%d/%s-reuse-only", arch, threads, p.name), func(b *testing.B) {
					kernels.SetThreads(threads)
					benchForward(b, benchEngine(b, spec), newBenchBatch(b, benchEngine(b, spec), p.instruction, p.query), true)
				})
			}
		}
	}
}

func benchForward(b *testing.B, e *Engine, bb *benchBatch, reuseOnly bool) {
	ctx := context.Background()
	b.Logf("prefix %d tokens, items %d tokens on average, %d prompt tokens, %d threads",
		bb.prefix, bb.itemTokens/len(bb.on[0].Items), bb.promptTokens, kernels.Threads())
	// One untimed pass sizes the arena (its first growth costs tens of ms). Reuse-only runs
	// skip it: they are the plain-Go baseline's, where a pass takes a minute.
	if !reuseOnly {
		var warm qwen.Stats
		if _, err := e.model.Forward(ctx, bb.off, &warm); err != nil {
			b.Fatal(err)
		}
	}
	var on, off qwen.Stats
	var tOn, tOff []float64
	b.ReportAllocs()
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, t0 := kernels.ProcessCPUTime(), on.Total
		if _, err := e.model.Forward(ctx, bb.on, &on); err != nil {
			b.Fatal(err)
		}
		cpu += kernels.ProcessCPUTime() - c0
		tOn = append(tOn, (on.Total - t0).Seconds())
		if reuseOnly {
			continue
		}
		t0 = off.Total
		if _, err := e.model.Forward(ctx, bb.off, &off); err != nil {
			b.Fatal(err)
		}
		tOff = append(tOff, (off.Total - t0).Seconds())
	}
	b.StopTimer()
	mOn := median(tOn)
	b.ReportMetric(float64(bb.promptTokens)/mOn, "prompt-tok/s")
	b.ReportMetric(mOn, "s/job")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/job")
	secs := on.Total.Seconds()
	b.ReportMetric(100*on.Attention.Seconds()/secs, "attn-%")
	if on.MoECalls > 0 {
		b.ReportMetric(100*on.MoE.Seconds()/secs, "moe-%")
		b.ReportMetric(100*on.Router.Seconds()/secs, "router-%")
		b.ReportMetric(on.MoEPaddingSum/float64(on.MoECalls), "pad")
	}
	if reuseOnly {
		return
	}
	mOff := median(tOff)
	b.ReportMetric(float64(bb.promptTokens)/mOff, "prompt-tok/s-noreuse")
	b.ReportMetric(mOff, "s/job-noreuse")
	b.ReportMetric(mOff/mOn, "speedup")
	b.ReportMetric(reuseBound(bb, &off), "bound")
	// Where the two passes differ: seconds per job in attention and in the MoE block (experts
	// and router), with and without reuse.
	n := float64(b.N)
	b.ReportMetric(on.Attention.Seconds()/n, "attn-s")
	b.ReportMetric(off.Attention.Seconds()/n, "attn-s-noreuse")
	if off.MoECalls > 0 {
		b.ReportMetric(off.MoEPaddingSum/float64(off.MoECalls), "pad-noreuse")
		b.ReportMetric((on.MoE+on.Router).Seconds()/n, "moe-s")
		b.ReportMetric((off.MoE+off.Router).Seconds()/n, "moe-s-noreuse")
	}
}

// reuseBound is the speed-up prefix reuse would give if it removed exactly the work it skips
// from the no-reuse pass (stats off): the redundant prefix copies' share of the non-attention time
// (which scales with tokens) and the skipped query–key pairs' share of the attention time.
func reuseBound(bb *benchBatch, off *qwen.Stats) float64 {
	P := float64(bb.prefix)
	n := float64(len(bb.off))
	var pairsOff, pairsOn float64
	pairsOn = P * (P + 1) / 2
	for _, g := range bb.on[0].Items {
		L, I := float64(len(g))+P, float64(len(g))
		pairsOff += L * (L + 1) / 2
		pairsOn += I*P + I*(I+1)/2
	}
	total := off.Total.Seconds()
	att := off.Attention.Seconds()
	skipped := (total-att)*(n-1)*P/float64(bb.promptTokens) + att*(pairsOff-pairsOn)/pairsOff
	return total / (total - skipped)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkSmallBatch measures the fixed cost of a small batch, the search use case: 1 or 4
// items of ~140 tokens after the ~60-token prefix60 instruction, the prefix computed in the
// pass (not cached), on the small qwen3_moe preset, for the MoE policies a node runs (threshold
// is the default; auto is configs/scorer.yaml's). Metrics: ms/batch (median wall time of one
// Forward), moe-ms, attn-ms (per batch), pad (mean padding ratio).
//
//	go test -run '^$' -bench 'BenchmarkSmallBatch' -benchtime 20x -count 3 ./scorer/model/
func BenchmarkSmallBatch(b *testing.B) {
	defer kernels.SetThreads(kernels.Threads())
	spec := GenSpec{Arch: "qwen3_moe", Preset: "small", Seed: 1}
	for _, threads := range []int{1, 2} {
		for _, items := range []int{1, 4} {
			for _, policy := range []string{"threshold", "auto"} {
				b.Run(fmt.Sprintf("threads=%d/items=%d/%s", threads, items, policy), func(b *testing.B) {
					kernels.SetThreads(threads)
					benchSmallBatch(b, benchEngine(b, spec), items, policy)
				})
			}
		}
	}
}

func benchSmallBatch(b *testing.B, e *Engine, items int, policy string) {
	p, err := kernels.ParseMoEPolicy(policy)
	if err != nil {
		b.Fatal(err)
	}
	runner := kernels.NewMoERunner(p)
	if p.Kind == kernels.PolicyAuto {
		for _, l := range e.model.Layers {
			if len(l.Experts) > 0 {
				if _, err := runner.Calibrate(l.Experts, time.Second); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	saved := e.model.MoE
	e.model.MoE = runner
	defer func() { e.model.MoE = saved }()

	pr := benchPrompts[0] // prefix60
	g, err := e.Tokenize(pr.instruction, pr.query, benchDocs(items, 125), scorer.TokenizeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	groups := []*qwen.Group{{Prefix: g.Prefix, Items: g.Items}}
	b.Logf("prefix %d tokens, %d items of %d tokens on average, %d threads, policy %s",
		len(g.Prefix), items, g.ItemTokens()/items, kernels.Threads(), policy)
	ctx := context.Background()
	var warm qwen.Stats
	if _, err := e.model.Forward(ctx, groups, &warm); err != nil {
		b.Fatal(err)
	}
	var st qwen.Stats
	var ts, cs []float64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0, c0 := st.Total, kernels.ProcessCPUTime()
		if _, err := e.model.Forward(ctx, groups, &st); err != nil {
			b.Fatal(err)
		}
		ts = append(ts, (st.Total - t0).Seconds())
		cs = append(cs, (kernels.ProcessCPUTime() - c0).Seconds())
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(1e3*median(ts), "ms/batch")
	b.ReportMetric(1e3*median(cs), "cpu-ms/batch")
	b.ReportMetric(1e3*(st.MoE+st.Router).Seconds()/n, "moe-ms")
	b.ReportMetric(1e3*st.Attention.Seconds()/n, "attn-ms")
	if st.MoECalls > 0 {
		b.ReportMetric(st.MoEPaddingSum/float64(st.MoECalls), "pad")
	}
}
