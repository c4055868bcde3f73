package model

import (
	"sync"
	"testing"

	"github.com/relevance-scoring/relevance/kernels"
)

// countingTables is a kernels.MoECostTableStore in memory that counts loads and saves.
type countingTables struct {
	mu           sync.Mutex
	tables       map[kernels.MoEShape]kernels.MoECostTable
	loads, saves int
}

func (c *countingTables) Load(s kernels.MoEShape) (kernels.MoECostTable, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads++
	t, ok := c.tables[s]
	return t, ok
}

func (c *countingTables) Save(s kernels.MoEShape, t kernels.MoECostTable) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves++
	c.tables[s] = t
}

// Under the auto MoE policy, Load keeps the cost table it measures in Options.MoECostTables and
// the next Load takes it from there instead of measuring; a dense model or a fixed policy never
// asks.
func TestLoadKeepsTheMoECostTable(t *testing.T) {
	moe := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	store := &countingTables{tables: map[kernels.MoEShape]kernels.MoECostTable{}}
	load(t, moe, Options{MoECostTables: store})
	if store.loads != 1 || store.saves != 1 || len(store.tables) != 1 {
		t.Fatalf("first load: %d loads, %d saves, %d tables; want one measured and kept", store.loads, store.saves, len(store.tables))
	}
	load(t, moe, Options{MoECostTables: store})
	if store.loads != 2 || store.saves != 1 {
		t.Errorf("second load: %d loads, %d saves; want the kept table taken, nothing measured", store.loads, store.saves)
	}
	load(t, moe, Options{MoECostTables: store, MoEPolicy: "threshold"})
	load(t, generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}), Options{MoECostTables: store})
	if store.loads != 2 || store.saves != 1 {
		t.Errorf("a threshold policy and a dense model: %d loads, %d saves; want the store untouched", store.loads, store.saves)
	}
}
