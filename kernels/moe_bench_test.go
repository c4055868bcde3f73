package kernels

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Full-size layers are heavy (hundreds of GFLOP per pass on the 16-sequence distribution); the
// default benchmark shrinks hidden and expert width by 8 and keeps the routing, so padding ratios
// are the real ones. go test -bench MoE -moe.full runs the real shapes.
var moeFull = flag.Bool("moe.full", false, "benchmark MoE on full-size layers (hidden 2048)")

func BenchmarkMoE(b *testing.B) {
	requireAsm(b)
	layers := []struct {
		name           string
		nE, k, h, in   int
		quickH, quickI int
	}{
		{"qwen3-30b-a3b", 128, 8, 2048, 768, 256, 96},
		{"qwen1.5-moe", 60, 4, 2048, 1408, 256, 176},
	}
	dists := []struct {
		name string
		seqs int
		s    float64
	}{
		{"balanced-4x576", 4, 0}, {"zipf0.5-4x576", 4, 0.5}, {"zipf1.0-4x576", 4, 1},
		{"balanced-1x576", 1, 0}, {"balanced-16x576", 16, 0},
	}
	for _, l := range layers {
		h, in := l.quickH, l.quickI
		if *moeFull {
			h, in = l.h, l.in
		}
		rng := rand.New(rand.NewPCG(1, 1))
		base := randExperts(b, rng, min(8, l.nE), h, in, BF16)
		experts := make([]Expert, l.nE)
		for e := range experts {
			experts[e] = base[e%len(base)]
		}
		r := NewMoERunner(MoEPolicy{})
		for _, d := range dists {
			nTok := d.seqs * 576
			rt, rows, x, out := routedPass(b, rng, nTok, l.nE, l.k, d.s, h)
			for _, v := range MoEVariants() {
				b.Run(fmt.Sprintf("%s/%s/%s", l.name, d.name, v), func(b *testing.B) {
					b.ReportAllocs()
					c0 := ProcessCPUTime()
					for b.Loop() {
						if _, err := r.RunVariant(v, out, x, h, experts, rt); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(6*float64(rows)*float64(h)*float64(in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "useful-GFLOP/s")
					b.ReportMetric((ProcessCPUTime()-c0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
				})
			}
		}
	}
}

// BenchmarkMoEColdWeights runs the exact variant over the expert layers of the small qwen3_moe
// preset (8 layers × 32 experts, hidden 512, expert width 384, bf16: 302 MB of packed weights,
// ten times the dev machine's L3) on one thread, as a node's forward pass does: every layer's
// experts are read from DRAM once per pass, so for a pass of few tokens the time is the weight
// stream, not the arithmetic. tokens is the pass's token rows, routed top-4 evenly (16 tokens
// touch 31 of 32 experts a layer). Metrics: ms/op (one pass's MoE, all 8 layers) and GB/s of
// weights streamed per second.
//
//	go test -run '^$' -bench 'MoEColdWeights' -benchtime 20x ./kernels/
func BenchmarkMoEColdWeights(b *testing.B) {
	const nLayers, nE, h, in = 8, 32, smallMoEHidden, smallMoEInter
	rng, layers, r := smallMoELayers(b, nLayers, nE)
	for _, nTok := range []int{1, 16, 76, 256} {
		rt, err := SyntheticRouting(nTok, nE, 4, 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		var bytes int64
		for e, toks := range rt.Tokens {
			if len(toks) > 0 {
				ex := layers[0][e]
				bytes += int64(nLayers) * (ex.Gate.PackedBytes() + ex.Up.PackedBytes() + ex.Down.PackedBytes())
			}
		}
		x := randVec(rng, nTok*h)
		out := make([]float32, len(x))
		b.Run(fmt.Sprintf("tokens=%d", nTok), func(b *testing.B) {
			for b.Loop() {
				for _, ex := range layers {
					if _, err := r.Run(out, x, h, ex, rt); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "weight-GB/s")
		})
	}
}

// BenchmarkMoEWeightsFromDRAMOrL3 asks whether an MoE pass of the small qwen3_moe's expert shape
// still waits on its weights now that the kernels prefetch the next block (it did: a 6-row tile
// on cold weights once took 2.5× its in-cache time). Same experts' shape as
// BenchmarkMoEColdWeights but 16 a layer (18.9 MB of packed bf16, inside the dev machine's 32 MB
// L3), top-4, one thread, exact variant: "dram" runs 8 distinct layers (151 MB, streamed from
// DRAM every pass), "l3" one layer 8 times (its experts stay in L3 after the first). Equal times
// mean the weight stream is hidden behind the arithmetic and a small pass's cost per token is
// the kernels' own (rows per expert, micro-tile remainders), not memory. Metrics: ms/op (one
// pass, 8 layers) and useful GFLOP/s (the routed rows' products only).
//
//	go test -run '^$' -bench 'MoEWeightsFromDRAMOrL3' -benchtime 30x ./kernels/
func BenchmarkMoEWeightsFromDRAMOrL3(b *testing.B) {
	const nLayers, nE, h, in = 8, 16, smallMoEHidden, smallMoEInter
	rng, layers, r := smallMoELayers(b, nLayers, nE)
	for _, nTok := range []int{16, 38, 76, 128} {
		rt, rows, x, out := routedPass(b, rng, nTok, nE, 4, 0, h)
		for _, from := range []string{"dram", "l3"} {
			b.Run(fmt.Sprintf("tokens=%d/weights=%s", nTok, from), func(b *testing.B) {
				for b.Loop() {
					for l := range layers {
						ex := layers[l]
						if from == "l3" {
							ex = layers[0]
						}
						if _, err := r.Run(out, x, h, ex, rt); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(6*float64(rows)*h*in*nLayers*float64(b.N)/b.Elapsed().Seconds()/1e9, "useful-GFLOP/s")
			})
		}
	}
}

// The small qwen3_moe preset's expert shape: hidden 512, expert width 384.
const smallMoEHidden, smallMoEInter = 512, 384

// smallMoELayers sets one kernel thread for the benchmark and returns its random source, nLayers
// layers of nE bf16 experts of the small preset's shape, and an exact-variant runner.
func smallMoELayers(b *testing.B, nLayers, nE int) (*rand.Rand, [][]Expert, *MoERunner) {
	b.Helper()
	requireAsm(b)
	prev := Threads()
	b.Cleanup(func() { SetThreads(prev) })
	SetThreads(1)
	rng := rand.New(rand.NewPCG(1, 1))
	layers := make([][]Expert, nLayers)
	for l := range layers {
		layers[l] = randExperts(b, rng, nE, smallMoEHidden, smallMoEInter, BF16)
	}
	return rng, layers, NewMoERunner(MoEPolicy{Kind: PolicyFixed, Variant: VariantExact})
}

// routedPass is a pass of nTok tokens routed top-k over nE experts (Zipf exponent zipfS, seed 1):
// the routing, its expert rows, random activations of width h and an output buffer.
func routedPass(b *testing.B, rng *rand.Rand, nTok, nE, k int, zipfS float64, h int) (*Routing, int, []float32, []float32) {
	b.Helper()
	rt, err := SyntheticRouting(nTok, nE, k, zipfS, 1)
	if err != nil {
		b.Fatal(err)
	}
	rows := 0
	for _, t := range rt.Tokens {
		rows += len(t)
	}
	x := randVec(rng, nTok*h)
	return rt, rows, x, make([]float32, len(x))
}
