package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The scorer promises one score per (model, prompt) whatever path computed it (issue 14): the
// kernels must give a row the same bits whatever other rows share its call, where it sits among
// them, how the call is tiled and how many threads split it. These tests pin that per kernel,
// with == and not a tolerance.

// firstBitDiff is the first index where a and b differ in their bits, or -1.
func firstBitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestGemmRowIsIndependentOfItsCall computes every row of x alone (one row, one thread) and then
// inside products of other heights — every micro-tile height and remainder, requested tile
// heights with padding (the MoE block variants), Linear on 1 to 3 threads — and wants the same
// bits for it in every one. K spans one and several cache blocks.
func TestGemmRowIsIndependentOfItsCall(t *testing.T) {
	const rowsMax = 40
	heights := []int{2, 3, 4, 5, 6, 7, 11, 12, 13, 16, 17, 24, 25, 33, rowsMax}
	for c, dt := range implDTypes() {
		t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
			useImpl(t, c)
			defer SetThreads(Threads())
			rng := rand.New(rand.NewPCG(14, uint64(c.isa)))
			for _, k := range []int{17, 64, 300, 600} {
				const n = 70 // two whole panels and a ragged one
				// x has room for the padding rows of a 128-row tile.
				p := newProblem(t, rng, 128, n, k, k, dt)
				alone := make([]float32, rowsMax*n)
				SetThreads(1)
				for i := range rowsMax {
					gemmRows(alone[i*n:(i+1)*n], n, p.x[i*k:], k, 1, p.w, 0, n, 0, false)
				}
				check := func(what string, got []float32, m int) {
					t.Helper()
					if i := firstBitDiff(got[:m*n], alone[:m*n]); i >= 0 {
						t.Fatalf("k=%d %s: row %d column %d = %v, alone %v", k, what, i/n, i%n, got[i], alone[i])
					}
				}
				dst := make([]float32, 128*n)
				for _, m := range heights {
					for _, tileM := range []int{0, 4, 16, 32, 64, 128} {
						gemmRows(dst, n, p.x, k, m, p.w, 0, n, tileM, tileM > 0)
						check(fmt.Sprintf("gemmRows m=%d tile=%d", m, tileM), dst, m)
					}
					// Column ranges that start inside a panel (the MoE's column-split items).
					gemmRows(dst, n, p.x, k, m, p.w, 0, 33, 0, false)
					gemmRows(dst, n, p.x, k, m, p.w, 33, n, 0, false)
					check(fmt.Sprintf("gemmRows m=%d in two column ranges", m), dst, m)
					for _, thr := range []int{1, 2, 3} {
						SetThreads(thr)
						Linear(dst, p.x, m, p.w)
						check(fmt.Sprintf("Linear m=%d threads=%d", m, thr), dst, m)
					}
					SetThreads(1)
				}
			}
		})
	}
}

// TestFirstKViewIsTheZeroPaddedProduct multiplies rows whose inputs past k are zero by a view
// of the weight's first k inputs (firstK) and by the whole weight, and wants the same bits:
// attention's value product relies on it to skip the keys past a causal block without changing
// any row. k runs inside the first cache block, on its edges and into the last one.
func TestFirstKViewIsTheZeroPaddedProduct(t *testing.T) {
	for _, c := range availableImpls() {
		if c.dot {
			continue // firstK is for f32 weights
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(15, uint64(c.isa)))
			const n, K, ldX = 70, 600, 601
			for _, k := range []int{1, 31, 255, 256, 257, 511, 512, 599, K} {
				for _, m := range []int{1, 3, 6, 13, 64} {
					p := newProblem(t, rng, m, n, K, ldX, F32)
					for i := range m {
						clear(p.x[i*ldX+k : i*ldX+K])
					}
					whole := make([]float32, m*n)
					gemmRows(whole, n, p.x, ldX, m, p.w, 0, n, 0, false)
					view := p.w.firstK(k)
					got := make([]float32, m*n)
					gemmRows(got, n, p.x, ldX, m, &view, 0, n, 0, false)
					if i := firstBitDiff(got, whole); i >= 0 {
						t.Fatalf("k=%d m=%d: row %d column %d = %v through the view, %v through the whole weight", k, m, i/n, i%n, got[i], whole[i])
					}
					if k < K {
						// The view must not read past k: poison the rest and compare again.
						for i := range m {
							for j := k; j < K; j++ {
								p.x[i*ldX+j] = float32(math.NaN())
							}
						}
						gemmRows(got, n, p.x, ldX, m, &view, 0, n, 0, false)
						if i := firstBitDiff(got, whole); i >= 0 {
							t.Fatalf("k=%d m=%d: the view read inputs past k (row %d column %d = %v)", k, m, i/n, i%n, got[i])
						}
					}
				}
			}
		})
	}
}

// TestMoETokenIsIndependentOfBatch runs the grouped expert GEMM on a batch with every variant and
// on 1 and 2 threads, and each token alone with the exact variant, and wants the same bits for
// every token: its output must not depend on which variant the batch's routing chose, on the
// other tokens of its experts, or on its place among them.
func TestMoETokenIsIndependentOfBatch(t *testing.T) {
	defer SetThreads(Threads())
	const hidden, inter, nE, topK, nTok = 48, 40, 6, 2, 37
	for c, dt := range implDTypes() {
		t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(14, 5))
			experts := randExperts(t, rng, nE, hidden, inter, dt)
			x := randVec(rng, nTok*hidden)
			// Each token to topK distinct experts, skewed so that expert counts vary (1 to ~20).
			rt := &Routing{Tokens: make([][]int32, nE), Weights: make([][]float32, nE)}
			for tok := range nTok {
				perm := rng.Perm(nE)
				if tok%3 == 0 {
					perm[0], perm[1] = 0, 1
				}
				for _, e := range perm[:topK] {
					rt.Tokens[e] = append(rt.Tokens[e], int32(tok))
					rt.Weights[e] = append(rt.Weights[e], rng.Float32())
				}
			}
			exact := NewMoERunner(MoEPolicy{Kind: PolicyFixed, Variant: VariantExact})
			SetThreads(1)
			alone := make([]float32, nTok*hidden)
			for tok := range nTok {
				one := &Routing{Tokens: make([][]int32, nE), Weights: make([][]float32, nE)}
				for e := range nE {
					for j, tt := range rt.Tokens[e] {
						if int(tt) == tok {
							one.Tokens[e] = append(one.Tokens[e], 0)
							one.Weights[e] = append(one.Weights[e], rt.Weights[e][j])
						}
					}
				}
				if _, err := exact.Run(alone[tok*hidden:(tok+1)*hidden], x[tok*hidden:(tok+1)*hidden], hidden, experts, one); err != nil {
					t.Fatal(err)
				}
			}
			for _, v := range MoEVariants() {
				for _, thr := range []int{1, 2} {
					SetThreads(thr)
					got := make([]float32, nTok*hidden)
					if _, err := exact.RunVariant(v, got, x, hidden, experts, rt); err != nil {
						t.Fatal(err)
					}
					if i := firstBitDiff(got, alone); i >= 0 {
						t.Fatalf("%s, %d threads: token %d value %d = %v, alone %v", v, thr, i/hidden, i%hidden, got[i], alone[i])
					}
				}
			}
		})
	}
}

// TestAttentionSequenceIsIndependentOfBatch computes sequences against a shared prefix alone and
// packed with other sequences (before and after them, on 1 and 2 threads), and wants the same
// bits for each sequence's outputs: the attention's row blocks span sequences, so a row's place
// in its block changes with the batch.
func TestAttentionSequenceIsIndependentOfBatch(t *testing.T) {
	defer SetThreads(Threads())
	const heads, kvHeads, hd, prefix = 4, 2, 32, 45
	lens := []int{7, 1, 70, 13, 3, 64, 29}
	for _, c := range availableImpls() {
		if c.dot {
			continue // attention has f32 operands only
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(14, 6))
			batch := randAttention(rng, heads, kvHeads, hd, prefix, lens)
			qs, kvs := heads*hd, kvHeads*hd
			// seq returns the attention of just sequences [s0, s1) of batch.
			seqs := func(s0, s1 int) *PrefixAttention {
				a := *batch
				r0, r1 := batch.SeqStarts[s0], batch.SeqStarts[s1]
				a.Q, a.K, a.V = batch.Q[r0*qs:r1*qs], batch.K[r0*kvs:r1*kvs], batch.V[r0*kvs:r1*kvs]
				a.SeqStarts = nil
				for s := s0; s <= s1; s++ {
					a.SeqStarts = append(a.SeqStarts, batch.SeqStarts[s]-r0)
				}
				return &a
			}
			T := batch.SeqStarts[len(lens)]
			alone := make([]float32, T*qs)
			SetThreads(1)
			for s := range lens {
				r0, r1 := batch.SeqStarts[s], batch.SeqStarts[s+1]
				Attention(alone[r0*qs:r1*qs], seqs(s, s+1))
			}
			for _, thr := range []int{1, 2} {
				SetThreads(thr)
				got := make([]float32, T*qs)
				Attention(got, batch)
				if i := firstBitDiff(got, alone); i >= 0 {
					t.Fatalf("%d threads, whole batch: row %d value %d = %v, alone %v", thr, i/qs, i%qs, got[i], alone[i])
				}
				// The batch in two calls, split in the middle.
				got = make([]float32, T*qs)
				mid := batch.SeqStarts[3]
				Attention(got[:mid*qs], seqs(0, 3))
				Attention(got[mid*qs:], seqs(3, len(lens)))
				if i := firstBitDiff(got, alone); i >= 0 {
					t.Fatalf("%d threads, two calls: row %d value %d = %v, alone %v", thr, i/qs, i%qs, got[i], alone[i])
				}
			}
		})
	}
}

// TestAttentionPastIsTheSequencesOwnStart computes whole sequences (no past) and the same
// sequences with their first t tokens given as the past, for cut points t inside and across
// the 64-row blocks and the 256-key cache blocks, on 1 and 2 threads: the rows after the cut
// must have the same bits either way. The scorer relies on it to extend a cached template's KV
// with a query's tokens and get the KV a cold pass computes (issue 14).
func TestAttentionPastIsTheSequencesOwnStart(t *testing.T) {
	defer SetThreads(Threads())
	const heads, kvHeads, hd = 4, 2, 32
	qs, kvs := heads*hd, kvHeads*hd
	for _, c := range availableImpls() {
		if c.dot {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			useImpl(t, c)
			rng := rand.New(rand.NewPCG(14, 7))
			const n = 330
			whole := randAttention(rng, heads, kvHeads, hd, 0, []int{n})
			SetThreads(1)
			want := make([]float32, n*qs)
			Attention(want, whole)
			for _, cut := range []int{1, 47, 63, 64, 65, 200, 255, 256, 257, 329} {
				for _, thr := range []int{1, 2} {
					SetThreads(thr)
					a := &PrefixAttention{
						Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: whole.Scale,
						PastK: whole.K[:cut*kvs], PastV: whole.V[:cut*kvs], PastLen: cut,
						Q: whole.Q[cut*qs:], K: whole.K[cut*kvs:], V: whole.V[cut*kvs:],
						// Two copies of the rest: sequences share the past, not each other.
						SeqStarts: []int{0, n - cut},
					}
					got := make([]float32, (n-cut)*qs)
					Attention(got, a)
					if i := firstBitDiff(got, want[cut*qs:]); i >= 0 {
						t.Fatalf("past %d, %d threads: row %d value %d = %v, whole sequence %v", cut, thr, cut+i/qs, i%qs, got[i], want[cut*qs+i])
					}
				}
			}
		})
	}
}

// TestSiLUMulValueIsIndependentOfSlice: rows of width 40 (a Qwen2-MoE shared expert; not a
// multiple of the 16 lanes) through SiLUMul one at a time and several at once, from every row
// offset: each value must have the same bits.
func TestSiLUMulValueIsIndependentOfSlice(t *testing.T) {
	forEachActWidth(t, testSiLUMulValueIsIndependentOfSlice)
}

func testSiLUMulValueIsIndependentOfSlice(t *testing.T) {
	const width, rows = 40, 7
	rng := rand.New(rand.NewPCG(14, 8))
	g, u := randVec(rng, width*rows), randVec(rng, width*rows)
	alone := make([]float32, width*rows)
	for r := range rows {
		SiLUMul(alone[r*width:(r+1)*width], g[r*width:(r+1)*width], u[r*width:(r+1)*width])
	}
	for r0 := range rows {
		for r1 := r0 + 1; r1 <= rows; r1++ {
			got := make([]float32, (r1-r0)*width)
			SiLUMul(got, g[r0*width:r1*width], u[r0*width:r1*width])
			if i := firstBitDiff(got, alone[r0*width:r1*width]); i >= 0 {
				t.Fatalf("rows [%d, %d): value %d = %v, row alone %v", r0, r1, r0*width+i, got[i], alone[r0*width+i])
			}
		}
	}
}
