//go:build amd64 && !purego

package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestExactItemRowsAMX: where the AMX GEMM passes over the weights in chunks of fewer rows than
// exactChunkRows, the exact variant's items are one chunk tall, the cost table says so, and the
// results still match the reference across item boundaries. The chunk is shrunk to 32 rows so
// that a small layer has several items per expert.
func TestExactItemRowsAMX(t *testing.T) {
	if activeISA() < isaAMX {
		t.Skip("no AMX")
	}
	const hidden, inter = 40, 72
	useImpl(t, implCase{"avx512-amx", isaAMX, false})
	rng := rand.New(rand.NewPCG(3, 9))
	experts := randExperts(t, rng, 6, hidden, inter, BF16)
	if got := exactItemRows(experts[0].Gate); got != exactChunkRows {
		t.Errorf("exactItemRows at hidden %d = %d, want %d (the chunk holds more rows)", hidden, got, exactChunkRows)
	}
	prev := amxChunkBytes
	defer func() { amxChunkBytes = prev }()
	// A row of 40 values is 2 k-steps of 32, 3 terms of 64 bytes each: 384 bytes.
	amxChunkBytes = 32 * 384
	if got := exactItemRows(experts[0].Gate); got != 32 {
		t.Fatalf("exactItemRows with a 32-row AMX chunk = %d, want 32", got)
	}
	if got := exactItemRows(NewWeightF32(make([]float32, inter*hidden), inter, hidden)); got != exactChunkRows {
		t.Errorf("exactItemRows for f32 weights = %d, want %d", got, exactChunkRows)
	}

	r := NewMoERunner(MoEPolicy{Kind: PolicyFixed, Variant: VariantExact})
	counts := []int{193, 70, 2, 0, 31, 65}
	rt := routingFromCounts(rng, 200, counts)
	x := randVec(rng, 200*hidden)
	want := make([]float32, len(x))
	moeReference(want, x, hidden, experts, rt)
	defer SetThreads(Threads())
	for _, thr := range []int{1, 2} {
		SetThreads(thr)
		got := make([]float32, len(x))
		if _, err := r.Run(got, x, hidden, experts, rt); err != nil {
			t.Fatal(err)
		}
		if i := closeTo(got, want, 1e-5); i >= 0 {
			t.Fatalf("threads %d: out[%d] = %v, want %v", thr, i, got[i], want[i])
		}
	}

	c := measureMoECosts(experts, moeShape{hidden, inter, BF16}, 0)
	if c.ItemRows != 32 || c.RowGranule != 16 {
		t.Errorf("cost table items %d rows, granule %d; want 32 and 16", c.ItemRows, c.RowGranule)
	}
	// 70 rows: items of 32, 32 and 6 → rows costed 32 + 32 + 16.
	c = MoECostTable{ItemSeconds: 100, RowSeconds: 1, RowGranule: 16, ItemRows: 32}
	if got := c.Predict(VariantExact, []int{70, 0}); got != 3*100+80 {
		t.Errorf("Predict(exact, 70 rows) = %v, want %v", got, 3*100+80)
	}
}
