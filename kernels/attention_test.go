package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func randAttention(rng *rand.Rand, heads, kvHeads, hd, prefix int, lens []int) *PrefixAttention {
	starts := []int{0}
	for _, l := range lens {
		starts = append(starts, starts[len(starts)-1]+l)
	}
	T := starts[len(starts)-1]
	return &PrefixAttention{
		Heads: heads, KVHeads: kvHeads, HeadDim: hd,
		Scale:   1 / float32(hd),
		PrefixK: randVec(rng, prefix*kvHeads*hd), PrefixV: randVec(rng, prefix*kvHeads*hd), PrefixLen: prefix,
		Q: randVec(rng, T*heads*hd), K: randVec(rng, T*kvHeads*hd), V: randVec(rng, T*kvHeads*hd),
		SeqStarts: starts,
	}
}

func TestAttentionMatchesReference(t *testing.T) {
	tests := []struct {
		heads, kvHeads, hd, prefix int
		lens                       []int
	}{
		{heads: 2, kvHeads: 2, hd: 8, prefix: 0, lens: []int{1}},
		{heads: 4, kvHeads: 2, hd: 16, prefix: 0, lens: []int{3, 70, 1}},
		{heads: 8, kvHeads: 4, hd: 64, prefix: 71, lens: []int{200, 13, 66, 129}},
		{heads: 4, kvHeads: 1, hd: 32, prefix: 5, lens: []int{64, 65}},
		{heads: 6, kvHeads: 3, hd: 24, prefix: 130, lens: []int{0, 7, 0}},
		{heads: 3, kvHeads: 3, hd: 40, prefix: 1, lens: []int{33}},
		{heads: 4, kvHeads: 2, hd: 16, prefix: 9, lens: []int{}},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("h%d_kv%d_hd%d_p%d_%v", tc.heads, tc.kvHeads, tc.hd, tc.prefix, tc.lens)
		for _, thr := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/t%d", name, thr), func(t *testing.T) {
				defer SetThreads(Threads())
				SetThreads(thr)
				rng := rand.New(rand.NewPCG(uint64(tc.prefix), uint64(len(tc.lens))))
				a := randAttention(rng, tc.heads, tc.kvHeads, tc.hd, tc.prefix, tc.lens)
				T := a.SeqStarts[len(a.SeqStarts)-1]
				want := make([]float32, T*tc.heads*tc.hd)
				attentionReference(want, a)
				got := randVec(rng, len(want)) // garbage in out must not matter
				Attention(got, a)
				if i := closeTo(got, want, 2e-5); i >= 0 {
					t.Fatalf("out[%d] = %v, want %v", i, got[i], want[i])
				}
			})
		}
	}
}

// TestAttentionPastMatchesReference: sequences continuing a past (positions every sequence
// attends as its own first tokens) against the plain softmax over past and own keys.
func TestAttentionPastMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		past int
		lens []int
	}{{1, []int{1}}, {9, []int{5, 70, 1}}, {64, []int{64, 3}}, {300, []int{20}}} {
		for _, thr := range []int{1, 2} {
			t.Run(fmt.Sprintf("past%d_%v/t%d", tc.past, tc.lens, thr), func(t *testing.T) {
				defer SetThreads(Threads())
				SetThreads(thr)
				rng := rand.New(rand.NewPCG(uint64(tc.past), 3))
				a := randAttention(rng, 4, 2, 16, 0, tc.lens)
				a.PastK, a.PastV, a.PastLen = randVec(rng, tc.past*2*16), randVec(rng, tc.past*2*16), tc.past
				T := a.SeqStarts[len(a.SeqStarts)-1]
				want := make([]float32, T*4*16)
				attentionReference(want, a)
				got := randVec(rng, len(want))
				Attention(got, a)
				if i := closeTo(got, want, 2e-5); i >= 0 {
					t.Fatalf("out[%d] = %v, want %v", i, got[i], want[i])
				}
			})
		}
	}
}

func TestAttentionLargeScores(t *testing.T) {
	// Large logits: the merge must rescale by the larger maximum, not overflow.
	rng := rand.New(rand.NewPCG(8, 8))
	a := randAttention(rng, 2, 1, 16, 20, []int{30, 5})
	a.Scale = 8
	want := make([]float32, 35*2*16)
	attentionReference(want, a)
	got := make([]float32, len(want))
	Attention(got, a)
	if i := closeTo(got, want, 1e-4); i >= 0 {
		t.Fatalf("out[%d] = %v, want %v", i, got[i], want[i])
	}
}

func TestAttentionBadShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		mod  func(a *PrefixAttention)
		want string
	}{
		{"heads not multiple", func(a *PrefixAttention) { a.KVHeads = 3 }, "not a multiple"},
		{"short Q", func(a *PrefixAttention) { a.Q = a.Q[:10] }, "q has 10 values"},
		{"short prefix", func(a *PrefixAttention) { a.PrefixLen = 100 }, "prefix K/V"},
		{"descending starts", func(a *PrefixAttention) { a.SeqStarts = []int{0, 5, 3} }, "not ascending"},
		{"zero head dim", func(a *PrefixAttention) { a.HeadDim = 0 }, "must be > 0"},
		{"past and prefix", func(a *PrefixAttention) { a.PastK, a.PastV, a.PastLen = a.PrefixK, a.PrefixV, 1 }, "a past (1 positions) and a prefix"},
		{"short past", func(a *PrefixAttention) { a.PrefixLen, a.PastLen = 0, 2 }, "past K/V have 0/0 values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := randAttention(rng, 4, 2, 8, 3, []int{5})
			tc.mod(a)
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Fatalf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			Attention(make([]float32, 5*4*8), a)
		})
	}
}

// BenchmarkAttention is the scoring job's shape: 16 items of ~200 tokens after a 71-token
// prefix, 8 heads over 4 KV heads of 64.
func BenchmarkAttention(b *testing.B) {
	requireAsm(b)
	rng := rand.New(rand.NewPCG(1, 1))
	lens := make([]int, 16)
	for i := range lens {
		lens[i] = 193 + i
	}
	a := randAttention(rng, 8, 4, 64, 71, lens)
	T := a.SeqStarts[len(a.SeqStarts)-1]
	out := make([]float32, T*8*64)
	for _, impl := range []struct {
		name string
		f    func([]float32, *PrefixAttention)
	}{{"prefix-gemm", Attention}, {"reference", attentionReference}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			c0 := ProcessCPUTime()
			for b.Loop() {
				impl.f(out, a)
			}
			b.ReportMetric(float64(T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			// CPU time per call (all threads): on a shared machine wall time mostly measures
			// the other tenants.
			b.ReportMetric((ProcessCPUTime()-c0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestAttentionAllocs checks that repeated calls reuse the pooled state: on one thread a call
// allocates nothing once the state has grown (the packed K and Vᵀ used to be ~57 MB a pass).
func TestAttentionAllocs(t *testing.T) {
	if activeISA() == isaGeneric {
		t.Skip("the generic reference GEMM allocates a row buffer per call")
	}
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	defer SetThreads(Threads())
	SetThreads(1)
	rng := rand.New(rand.NewPCG(3, 4))
	a := randAttention(rng, 8, 4, 64, 60, []int{140, 37})
	T := a.SeqStarts[len(a.SeqStarts)-1]
	out := make([]float32, T*8*64)
	Attention(out, a)
	if n := testing.AllocsPerRun(20, func() { Attention(out, a) }); n > 0 {
		t.Errorf("Attention allocates %.1f objects per call, want 0", n)
	}
}

// TestFusedPrefixPartIsTheSameBits: computing a block's prefix part inside its causal item (the
// path for a large out, fusedOutBytes) gives every output the bits of the separate prefix phase,
// on sequences shorter and longer than a row block, on one and two threads.
func TestFusedPrefixPartIsTheSameBits(t *testing.T) {
	defer SetThreads(Threads())
	defer func(v int) { fusedOutBytes = v }(fusedOutBytes)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct {
		name   string
		prefix int
		lens   []int
	}{
		{"short items", 105, []int{16, 17, 18, 19}},
		{"long items", 71, []int{1, 63, 64, 65, 150}},
		{"empty and one-token items", 30, []int{0, 1, 70, 0}},
	} {
		a := randAttention(rng, 8, 4, 64, tc.prefix, tc.lens)
		T := a.SeqStarts[len(a.SeqStarts)-1]
		for _, threads := range []int{1, 2} {
			SetThreads(threads)
			fusedOutBytes = math.MaxInt // phase 1 apart
			apart := make([]float32, T*8*64)
			Attention(apart, a)
			fusedOutBytes = 0 // every call fused
			fused := make([]float32, T*8*64)
			Attention(fused, a)
			for i := range apart {
				if math.Float32bits(apart[i]) != math.Float32bits(fused[i]) {
					t.Fatalf("%s, %d threads: out[%d] = %v fused, %v apart", tc.name, threads, i, fused[i], apart[i])
				}
			}
		}
	}
}
