package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAttentionShortItems is the `compare` workload's shape: 4 listings of 16–19 tokens
// after a 105-token prefix (template, instruction and query), 8 query heads over 4 KV heads of
// 64, where the items' attention over the prefix is most of the call.
func BenchmarkAttentionShortItems(b *testing.B) {
	requireAsm(b)
	rng := rand.New(rand.NewPCG(2, 2))
	a := randAttention(rng, 8, 4, 64, 105, []int{16, 17, 18, 19})
	T := a.SeqStarts[len(a.SeqStarts)-1]
	out := make([]float32, T*8*64)
	b.ReportAllocs()
	c0 := ProcessCPUTime()
	for b.Loop() {
		Attention(out, a)
	}
	b.ReportMetric((ProcessCPUTime()-c0).Seconds()*1e6/float64(b.N), "cpu-us/op")
}
