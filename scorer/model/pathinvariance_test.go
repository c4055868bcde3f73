package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// pathDocs are the documents of the path-invariance test: varied lengths (one and two words,
// sentences, a paragraph longer than the attention's 64-row blocks) so that items land in every
// position of the kernels' row tiles as batches change.
func pathDocs() []string {
	docs := append([]string(nil), testDocs...)
	docs = append(docs, syntheticTexts(14, 1, 40, 5)...)
	docs = append(docs, syntheticTexts(1, 90, 110, 6)...)
	return docs
}

// pathScore is one way of scoring some of the documents: which engine, how many kernel threads,
// and the passes (each a list of groups; a group is a query and document indices).
type pathScore struct {
	name    string
	engine  int // index into the engines of the test
	threads int
	passes  [][]pathGroup
	// wholePrefix clears the groups' TemplateLen: each prefix computed in one piece, not as
	// the template and its extension.
	wholePrefix bool
}

type pathGroup struct {
	query string
	docs  []int
}

// TestScoresArePathIndependent pins item 4 of issue 14: one (model, instruction, query, item) has
// one score, bit for bit, whatever path computed it. The same documents are scored
//
//   - cold, one item per pass, on one kernel thread (the baseline);
//   - all in one batch, and in batches of 2, 3, 5 and 8, in shuffled orders;
//   - beside another query's batch in the same pass, and beside a batch with the same prefix;
//   - with the prefix read from the prefix cache (published by an earlier pass);
//   - with the template head and instruction read from the prefix cache's template level
//     (published by another query's pass) and only the query's tokens computed, or computed
//     once in the pass for two queries, or the prefix computed in one piece (no template split);
//   - on one and on two kernel threads;
//   - with every MoE kernel policy (auto, threshold, each fixed variant), so whatever variant a
//     batch's routing picks;
//
// for dense and MoE models (qwen3, qwen3_moe, qwen2_moe), f32 and bf16 weights, and the logits
// must be equal with ==, not within a tolerance.
func TestScoresArePathIndependent(t *testing.T) {
	defer kernels.SetThreads(kernels.Threads())
	const instruction = "Find passages that answer the query"
	queries := []string{"cheap espresso at home", "largest rainforest on earth"}
	docs := pathDocs()
	all := make([]int, len(docs))
	for i := range all {
		all[i] = i
	}
	rng := rand.New(rand.NewPCG(14, 4))
	shuffled := func() []int {
		s := append([]int(nil), all...)
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		return s
	}
	chunks := func(idx []int, n int) [][]pathGroup {
		var passes [][]pathGroup
		for i := 0; i < len(idx); i += n {
			passes = append(passes, []pathGroup{{queries[0], idx[i:min(i+n, len(idx))]}})
		}
		return passes
	}
	var ones [][]pathGroup
	for _, d := range all {
		ones = append(ones, []pathGroup{{queries[0], []int{d}}})
	}
	// Paths over engines 0 (no prefix cache) and 1 (with one); MoE models add one engine per
	// policy (2…), each scoring the whole batch and small batches.
	paths := []pathScore{
		{"whole batch, 2 threads", 0, 2, [][]pathGroup{{{queries[0], all}}}, false},
		{"shuffled whole batch, 1 thread", 0, 1, [][]pathGroup{{{queries[0], shuffled()}}}, false},
		{"batches of 2, 2 threads", 0, 2, chunks(shuffled(), 2), false},
		{"batches of 3, 1 thread", 0, 1, chunks(shuffled(), 3), false},
		{"batches of 5, 2 threads", 0, 2, chunks(shuffled(), 5), false},
		{"batches of 8, 1 thread", 0, 1, chunks(shuffled(), 8), false},
		{"beside another query, 2 threads", 0, 2, [][]pathGroup{{{queries[1], all[:7]}, {queries[0], shuffled()}, {queries[1], all[7:]}}}, false},
		{"split over two groups of one prefix, 1 thread", 0, 1, [][]pathGroup{{{queries[0], all[:9]}, {queries[1], all[3:6]}, {queries[0], all[9:]}}}, false},
		// Engine 1: the first pass computes and publishes the prefix, the later ones read it.
		{"cache: cold then cached, 2 threads", 1, 2, append([][]pathGroup{{{queries[0], all[:4]}}}, chunks(shuffled(), 6)...), false},
		{"cache: cached one at a time, 1 thread", 1, 1, ones, false},
		// Engine 2: another query's pass publishes the template; the first pass of this query
		// misses its prefix and extends the cached template.
		{"cache: template from another query's pass, 2 threads", 2, 2, [][]pathGroup{{{queries[1], all[:2]}}, {{queries[0], shuffled()}}}, false},
		{"cache: template cached, prefix cached, 1 thread", 2, 1, chunks(shuffled(), 4), false},
		{"prefix in one piece, 1 thread", 0, 1, [][]pathGroup{{{queries[0], all}}}, true},
		{"prefix in one piece beside another query, 2 threads", 0, 2, [][]pathGroup{{{queries[1], all[:3]}, {queries[0], shuffled()}}}, true},
	}
	specs := []GenSpec{
		{Arch: "qwen3", Preset: "tiny", Seed: 1, DType: "f32"},
		{Arch: "qwen3", Preset: "tiny", Seed: 1, DType: "bf16"},
		{Arch: "qwen3_moe", Preset: "tiny", Seed: 1, DType: "f32"},
		{Arch: "qwen3_moe", Preset: "tiny", Seed: 1, DType: "bf16"},
		{Arch: "qwen2_moe", Preset: "tiny", Seed: 1, DType: "f32"},
		{Arch: "qwen2_moe", Preset: "tiny", Seed: 1, DType: "bf16"},
	}
	for _, spec := range specs {
		t.Run(spec.Arch+"/"+spec.DType, func(t *testing.T) {
			dir := generated(t, spec)
			engines := []*Engine{load(t, dir, Options{}), load(t, dir, Options{PrefixCacheBytes: 64 << 20}), load(t, dir, Options{PrefixCacheBytes: 64 << 20})}
			paths := paths
			// A call over MaxPassTokens rows runs as several passes: prefixes in the first,
			// items against their kept KV after; with and without a prefix cache.
			engines = append(engines, load(t, dir, Options{MaxPassTokens: 90}), load(t, dir, Options{MaxPassTokens: 90, PrefixCacheBytes: 64 << 20}))
			paths = append(paths,
				pathScore{"passes of ≤ 90 rows, 2 threads", len(engines) - 2, 2, [][]pathGroup{{{queries[0], shuffled()}}}, false},
				pathScore{"passes of ≤ 90 rows beside another query and the same prefix, 1 thread", len(engines) - 2, 1,
					[][]pathGroup{{{queries[1], all[:5]}, {queries[0], all[:11]}, {queries[1], all[5:]}, {queries[0], all[11:]}}}, false},
				pathScore{"passes of ≤ 90 rows with a prefix cache, twice, 2 threads", len(engines) - 1, 2,
					[][]pathGroup{{{queries[0], shuffled()}}, {{queries[0], shuffled()}}}, false})
			if spec.Arch != "qwen3" {
				for _, p := range []string{"threshold", "fixed:exact", "fixed:16", "fixed:32", "fixed:64", "fixed:128"} {
					engines = append(engines, load(t, dir, Options{MoEPolicy: p}))
					paths = append(paths,
						pathScore{p + ": whole batch, 2 threads", len(engines) - 1, 2, [][]pathGroup{{{queries[0], shuffled()}}}, false},
						pathScore{p + ": batches of 3, 1 thread", len(engines) - 1, 1, chunks(shuffled(), 3), false})
				}
			}
			score := func(p pathScore) map[int]float32 {
				kernels.SetThreads(p.threads)
				e := engines[p.engine]
				got := map[int]float32{}
				for _, pass := range p.passes {
					var gs []*scorer.Group
					for _, pg := range pass {
						ds := make([]string, len(pg.docs))
						for i, d := range pg.docs {
							ds[i] = docs[d]
						}
						g, err := e.Tokenize(instruction, pg.query, ds, scorer.TokenizeOptions{})
						if err != nil {
							t.Fatal(err)
						}
						if p.wholePrefix {
							g.TemplateLen = 0
						}
						gs = append(gs, g)
					}
					if _, err := e.Forward(context.Background(), gs); err != nil {
						t.Fatal(err)
					}
					for gi, pg := range pass {
						if pg.query != queries[0] {
							continue
						}
						for i, d := range pg.docs {
							got[d] = gs[gi].Logits[i]
						}
					}
				}
				return got
			}
			want := score(pathScore{"cold, one at a time, 1 thread", 0, 1, ones, false})
			for _, p := range paths {
				got := score(p)
				bad := 0
				for d, w := range want {
					g, ok := got[d]
					if ok && math.Float32bits(g) == math.Float32bits(w) {
						continue
					}
					if bad++; bad <= 3 {
						t.Errorf("%s: doc %d: logit %v (%s), cold alone %v", p.name, d, g, relDiff(g, w), w)
					}
				}
				if bad > 3 {
					t.Errorf("%s: %d of %d logits differ from the cold ones", p.name, bad, len(want))
				}
			}
			if s, ok := engines[1].PrefixCacheStats(); !ok || s.Hits == 0 {
				t.Errorf("the cached paths never hit the prefix cache: %+v", s)
			}
			if s, ok := engines[2].PrefixCacheStats(); !ok || s.TemplateHits != 1 || s.Hits == 0 {
				t.Errorf("the template paths did not hit the template once, then the prefix: %+v", s)
			}
		})
	}
}

func relDiff(a, b float32) string {
	return fmt.Sprintf("rel. diff %.2g", math.Abs(float64(a-b))/math.Max(math.Abs(float64(b)), 1e-30))
}
