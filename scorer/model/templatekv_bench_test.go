package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer"
)

// compareRequests makes n requests of the `compare` workload's shape (configs/workloads/
// compare.yaml as the proxy cuts it): a distinct query of ~3 words (lognormal, median 3, σ 0.4,
// 1–8) and one batch of 4 listings of ~16 tokens (lognormal median 12 words ≈ 16 tokens, σ 0.7),
// the default instruction.
func compareRequests(n int) (queries []string, docs [][]string) {
	rng := rand.New(rand.NewPCG(5, 14))
	words := strings.Fields("coffee espresso machine grinder steel red blue large small used new " +
		"vintage leather sofa chair table lamp oak walnut phone case charger cable bike helmet " +
		"jacket wool cotton shoes boots running trail size 42 44 black white grey set of two pack " +
		"kitchen garden tool drill battery 18v cordless camera lens 50mm book novel paperback toy")
	lognormal := func(median, sigma float64, lo, hi int) int {
		v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
		return min(max(v, lo), hi)
	}
	text := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	seen := map[string]bool{}
	for len(queries) < n {
		q := text(lognormal(3, 0.4, 1, 8))
		if seen[q] {
			continue
		}
		seen[q] = true
		queries = append(queries, q)
		batch := make([]string, 4)
		for i := range batch {
			batch[i] = text(lognormal(12, 0.7, 4, 200))
		}
		docs = append(docs, batch)
	}
	return queries, docs
}

// BenchmarkTemplateKV measures what the prefix cache's template level (issue 14 item 1) saves on
// the `compare` workload's shape: every request a query not seen before (so its whole prefix
// misses), one batch of 4 short listings, scored alone (requests-per-pass=1, an idle node) or 8 to
// a pass (as a busy node merges the batches queued behind a pass). Two engines with the prefix
// cache score the same requests, alternately (so both see the same machine load): "whole" keys the
// cache by whole prefixes only, as before (the groups' TemplateLen cleared); "template" also keeps
// the template head and instruction, computed once and extended by each query. Metrics:
//
//	template-share   template tokens / all tokens the whole-prefix engine computes
//	tok/req-whole, tok/req-template      tokens computed per request
//	ms/req-whole, ms/req-template        median forward time per request (a pass's time / its
//	                                     requests)
//	fall-%           1 − ms/req-template / ms/req-whole (medians)
//	fall-mean-%      the same on mean times
//
//	go test -run '^$' -bench 'BenchmarkTemplateKV' -benchtime 60x -count 3 ./scorer/model/
//
// A pass's time is a fixed part, mostly streaming the weights through the cores, plus a part
// per row. The template saves rows only, so its fall is below its share of the tokens by the
// fixed part's share of the pass, which a busy node's merged passes shrink.
func BenchmarkTemplateKV(b *testing.B) {
	defer kernels.SetThreads(kernels.Threads())
	for _, arch := range []string{"qwen3_moe", "qwen3"} {
		spec := GenSpec{Arch: arch, Preset: "small", Seed: 1}
		for _, tc := range []struct{ threads, perPass int }{{1, 1}, {2, 1}, {1, 8}, {2, 8}} {
			threads, k := tc.threads, tc.perPass
			b.Run(fmt.Sprintf("%s-small/threads=%d/requests-per-pass=%d", arch, threads, k), func(b *testing.B) {
				kernels.SetThreads(threads)
				dir := benchModel(b, spec)
				engines := map[string]*Engine{}
				for _, name := range []string{"whole", "template"} {
					e, err := Load(dir, Options{PrefixCacheBytes: 256 << 20})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { e.Close() })
					engines[name] = e
				}
				queries, docs := compareRequests((b.N + 1) * k)
				ctx := context.Background()
				// run scores pass i: requests [i·k, (i+1)·k) in one Forward, as a node merges
				// the batches queued behind a pass.
				run := func(name string, i int) scorer.ForwardStats {
					e := engines[name]
					groups := make([]*scorer.Group, k)
					for j := range groups {
						g, err := e.Tokenize("", queries[i*k+j], docs[i*k+j], scorer.TokenizeOptions{})
						if err != nil {
							b.Fatal(err)
						}
						if name == "whole" {
							g.TemplateLen = 0
						}
						groups[j] = g
					}
					st, err := e.Forward(ctx, groups)
					if err != nil {
						b.Fatal(err)
					}
					return st
				}
				// Request 0 warms both (arenas; the template engine caches the template).
				run("whole", 0)
				run("template", 0)
				var ms = map[string][]float64{}
				var tokens = map[string]int{}
				templateTokens := 0
				b.ResetTimer()
				for i := 1; i <= b.N; i++ {
					order := []string{"whole", "template"}
					if i%2 == 0 {
						order[0], order[1] = order[1], order[0]
					}
					for _, name := range order {
						st := run(name, i)
						ms[name] = append(ms[name], 1e3*st.Duration.Seconds()/float64(k))
						tokens[name] += st.PrefixTokens + st.ItemTokens
						if name == "template" {
							templateTokens += st.PrefixReused
						}
					}
				}
				b.StopTimer()
				n := float64(b.N * k)
				mean := func(xs []float64) float64 {
					s := 0.0
					for _, x := range xs {
						s += x
					}
					return s / float64(len(xs))
				}
				b.ReportMetric(float64(templateTokens)/float64(tokens["whole"]), "template-share")
				b.ReportMetric(float64(tokens["whole"])/n, "tok/req-whole")
				b.ReportMetric(float64(tokens["template"])/n, "tok/req-template")
				w, tp := median(ms["whole"]), median(ms["template"])
				b.ReportMetric(w, "ms/req-whole")
				b.ReportMetric(tp, "ms/req-template")
				b.ReportMetric(100*(1-tp/w), "fall-%")
				b.ReportMetric(100*(1-mean(ms["template"])/mean(ms["whole"])), "fall-mean-%")
				if s, ok := engines["template"].PrefixCacheStats(); !ok || s.TemplateHits < int64(b.N)*int64(k) {
					b.Errorf("template engine: %+v, want a template hit per request", s)
				}
			})
		}
	}
}
