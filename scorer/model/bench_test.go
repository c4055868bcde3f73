package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// BenchmarkForward measures the forward pass on the small Qwen3-MoE preset: 16 items of about
// 200 tokens after a prefix of about 60 tokens, with prefix reuse on (one group: the prefix once,
// items against its KV) and off (each whole prompt as its own sequence). Metrics: prompt tokens
// scored per second (the same prompts either way), and the share of time in attention, MoE
// experts and the router.
//
//	go test -run '^$' -bench BenchmarkForward -benchtime 3x -count 3 ./scorer/model/
func BenchmarkForward(b *testing.B) {
	for _, arch := range []string{"qwen3_moe", "qwen3"} {
		spec := GenSpec{Arch: arch, Preset: "small", Seed: 1}
		for _, reuse := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s-small/reuse=%v", arch, reuse), func(b *testing.B) {
				benchForward(b, spec, reuse)
			})
		}
	}
}

func benchForward(b *testing.B, spec GenSpec, reuse bool) {
	e, err := Load(benchModel(b, spec), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	g, err := e.Tokenize("", "how do I make a cheap espresso at home without a machine?", benchDocs(16, 175), scorer.TokenizeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var groups []*qwen.Group
	promptTokens := 0
	if reuse {
		groups = []*qwen.Group{{Prefix: g.Prefix, Items: g.Items}}
		promptTokens = 16*len(g.Prefix) + g.ItemTokens()
	} else {
		for _, it := range g.Items {
			whole := append(append([]int32(nil), g.Prefix...), it...)
			groups = append(groups, &qwen.Group{Items: [][]int32{whole}})
			promptTokens += len(whole)
		}
	}
	b.Logf("prefix %d tokens, items %d tokens on average, %d prompt tokens", len(g.Prefix), g.ItemTokens()/len(g.Items), promptTokens)
	var st qwen.Stats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.model.Forward(context.Background(), groups, &st); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	secs := st.Total.Seconds()
	b.ReportMetric(float64(promptTokens*b.N)/secs, "prompt-tok/s")
	b.ReportMetric(float64((st.PrefixTokens+st.ItemTokens))/secs, "computed-tok/s")
	b.ReportMetric(100*st.Attention.Seconds()/secs, "attn-%")
	b.ReportMetric(100*st.MoE.Seconds()/secs, "moe-%")
	b.ReportMetric(100*st.Router.Seconds()/secs, "router-%")
	// The engine's built-in cost estimate for the same work, to compare with ns/op.
	est := e.EstimateSeconds([]*scorer.Group{g})
	if !reuse {
		est = 0
		for _, q := range groups {
			est += e.EstimateSeconds([]*scorer.Group{{Items: q.Items}})
		}
	}
	b.ReportMetric(est, "est-s/op")
}
