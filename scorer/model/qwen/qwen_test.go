package qwen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

// testConfig is a small model of the given architecture: a vocabulary of 300 keeps the full
// reference head cheap. head_dim differs from hidden/heads for the Qwen3 family so that the
// explicit head_dim is exercised.
func testConfig(tb testing.TB, arch string, edit func(*Config)) *Config {
	tb.Helper()
	c := &Config{
		VocabSize: 300, HiddenSize: 32, NumHiddenLayers: 3, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 12, IntermediateSize: 48, MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, RopeTheta: 10000,
	}
	switch arch {
	case "qwen3":
		c.Architectures = []string{ArchQwen3}
	case "qwen3_moe":
		c.Architectures = []string{ArchQwen3MoE}
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.NormTopKProb = 6, 2, 24, true
	case "qwen2_moe":
		c.Architectures = []string{ArchQwen2MoE}
		c.HeadDim = 0
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertIntermediateSize = 6, 2, 24, 40
	}
	if edit != nil {
		edit(c)
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		tb.Fatal(err)
	}
	return c
}

func randSeq(rng *rand.Rand, n, vocab int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(rng.IntN(vocab))
	}
	return s
}

var headRows = []int{7, 123}

// loadVia writes the tensors to a safetensors file and loads them back through the mmap path.
func loadVia(tb testing.TB, cfg *Config, ts []safetensors.WriteTensor, dtype safetensors.DType) *Model {
	tb.Helper()
	dir := tb.TempDir()
	if err := WriteCheckpoint(dir, cfg, ts, dtype); err != nil {
		tb.Fatal(err)
	}
	cfg2, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ck.Close() })
	m, err := Load(cfg2, ck, LoadOptions{HeadRows: headRows, MaxPositions: 256})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestForwardMatchesReference(t *testing.T) {
	tests := []struct {
		name  string
		arch  string
		dtype safetensors.DType
		fused bool
		edit  func(*Config)
	}{
		{"qwen3/f32", "qwen3", safetensors.F32, false, nil},
		{"qwen3/bf16", "qwen3", safetensors.BF16, false, nil},
		{"qwen3/tied+bias", "qwen3", safetensors.F32, false, func(c *Config) { c.TieWordEmbeddings, c.AttentionBias = true, true }},
		{"qwen3_moe/f32", "qwen3_moe", safetensors.F32, false, nil},
		{"qwen3_moe/bf16/fused", "qwen3_moe", safetensors.BF16, true, nil},
		{"qwen3_moe/f32/fused/no-renorm", "qwen3_moe", safetensors.F32, true, func(c *Config) { c.NormTopKProb = false }},
		{"qwen3_moe/sparse-step+mlp-only", "qwen3_moe", safetensors.F32, false, func(c *Config) {
			c.NumHiddenLayers, c.DecoderSparseStep, c.MLPOnlyLayers = 4, 2, []int{3} // only layer 1 is sparse
		}},
		{"qwen2_moe/f32", "qwen2_moe", safetensors.F32, false, nil},
		{"qwen2_moe/bf16/renorm", "qwen2_moe", safetensors.BF16, false, func(c *Config) { c.NormTopKProb = true }},
		{"qwen2_moe/fused/tied", "qwen2_moe", safetensors.F32, true, func(c *Config) { c.TieWordEmbeddings = true }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.arch, tt.edit)
			ts, err := Generate(cfg, GenOptions{Seed: uint64(i + 1), DType: tt.dtype, Fused: tt.fused})
			if err != nil {
				t.Fatal(err)
			}
			m := loadVia(t, cfg, ts, tt.dtype)
			ref := newRef(t, cfg, ts)
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			// Two groups with different prefixes, one group without a prefix, items of varied
			// lengths (1 token included).
			groups := []*Group{
				{Prefix: randSeq(rng, 9, cfg.VocabSize), Items: [][]int32{randSeq(rng, 5, cfg.VocabSize), randSeq(rng, 1, cfg.VocabSize), randSeq(rng, 12, cfg.VocabSize)}},
				{Prefix: randSeq(rng, 4, cfg.VocabSize), Items: [][]int32{randSeq(rng, 7, cfg.VocabSize), {}}},
				{Items: [][]int32{randSeq(rng, 6, cfg.VocabSize)}},
			}
			var st Stats
			out, err := m.Forward(context.Background(), groups, &st)
			if err != nil {
				t.Fatal(err)
			}
			for g, gr := range groups {
				for it, item := range gr.Items {
					if len(item) == 0 {
						if out[g][it] != nil {
							t.Errorf("group %d item %d: empty item was scored", g, it)
						}
						continue
					}
					full := append(append([]int32(nil), gr.Prefix...), item...)
					want := ref.logits(t, full)
					for j, row := range headRows {
						got, w := float64(out[g][it][j]), want[row]
						if math.Abs(got-w) > 1e-3*math.Max(1, math.Abs(w)) {
							t.Errorf("group %d item %d row %d: logit %v, reference %v", g, it, row, got, w)
						}
					}
				}
			}
			if cfg.NumExperts > 0 && st.MoECalls == 0 {
				t.Error("no MoE call recorded for an MoE model")
			}
		})
	}
}

// TestPrefixSharingIsExact scores items against a shared prefix and each whole prompt on its own
// (empty prefix), in one call and separately; all must agree.
func TestPrefixSharingIsExact(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3_moe", "qwen2_moe"} {
		t.Run(arch, func(t *testing.T) {
			cfg := testConfig(t, arch, nil)
			ts, err := Generate(cfg, GenOptions{Seed: 42, DType: safetensors.BF16})
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(cfg, NewMemSource(ts), LoadOptions{HeadRows: headRows, MaxPositions: 128})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			prefix := randSeq(rng, 20, cfg.VocabSize)
			items := [][]int32{randSeq(rng, 8, cfg.VocabSize), randSeq(rng, 3, cfg.VocabSize), randSeq(rng, 15, cfg.VocabSize)}
			var whole [][]int32
			for _, it := range items {
				whole = append(whole, append(append([]int32(nil), prefix...), it...))
			}
			var st Stats
			// Shared, plus a second group with the same prefix (deduplicated) in the same call.
			shared := &Group{Prefix: prefix, Items: items, KeepKV: true}
			dup := &Group{Prefix: prefix, Items: items[:1]}
			alone := &Group{Items: whole}
			out, err := m.Forward(context.Background(), []*Group{shared, alone, dup}, &st)
			if err != nil {
				t.Fatal(err)
			}
			if st.PrefixTokens != len(prefix) {
				t.Errorf("prefix tokens computed = %d, want %d (the duplicate prefix computed once)", st.PrefixTokens, len(prefix))
			}
			// Again, from the cached prefix KV.
			cached := &Group{Prefix: prefix, Items: items, Cached: shared.KV}
			out2, err := m.Forward(context.Background(), []*Group{cached}, &st)
			if err != nil {
				t.Fatal(err)
			}
			for i := range items {
				for j := range headRows {
					a, b, c, d := out[0][i][j], out[1][i][j], out2[0][i][j], out[2][0][j]
					tol := 1e-4 * math.Max(1, math.Abs(float64(b)))
					if math.Abs(float64(a-b)) > tol || math.Abs(float64(c-b)) > tol || (i == 0 && math.Abs(float64(d-b)) > tol) {
						t.Errorf("item %d row %d: shared %v, alone %v, cached %v, dup %v", i, j, a, b, c, d)
					}
				}
			}
		})
	}
}

func TestForwardErrors(t *testing.T) {
	cfg := testConfig(t, "qwen3", nil)
	ts, _ := Generate(cfg, GenOptions{Seed: 1, DType: safetensors.F32})
	m, err := Load(cfg, NewMemSource(ts), LoadOptions{HeadRows: headRows, MaxPositions: 16})
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	if _, err := m.Forward(context.Background(), []*Group{{Items: [][]int32{{1, 300}}}}, &st); err == nil || !strings.Contains(err.Error(), "token id 300") {
		t.Errorf("bad id: err = %v", err)
	}
	if _, err := m.Forward(context.Background(), []*Group{{Prefix: make([]int32, 10), Items: [][]int32{make([]int32, 7)}}}, &st); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("too long: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, []*Group{{Items: [][]int32{{1, 2}}}}, &st); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	type mut func(cfg *Config, src MemSource)
	tests := []struct {
		name string
		arch string
		mut  mut
		want string
	}{
		{"missing q_norm", "qwen3", func(c *Config, s MemSource) { delete(s, "model.layers.1.self_attn.q_norm.weight") }, "layer 1: missing self_attn.q_norm.weight"},
		{"missing embedding", "qwen3", func(c *Config, s MemSource) { delete(s, "model.embed_tokens.weight") }, "missing model.embed_tokens.weight"},
		{"missing lm_head", "qwen3", func(c *Config, s MemSource) { delete(s, "lm_head.weight") }, "missing lm_head.weight"},
		{"extra tensor", "qwen3", func(c *Config, s MemSource) {
			s["model.layers.0.mlp.surprise.weight"] = &safetensors.WriteTensor{Name: "x", DType: safetensors.F32, Shape: []int{1}, F32: []float32{1}}
		}, "unexpected tensors for Qwen3ForCausalLM: model.layers.0.mlp.surprise.weight"},
		{"wrong shape", "qwen3", func(c *Config, s MemSource) {
			s["model.layers.2.self_attn.k_proj.weight"].Shape = []int{32, 24}
		}, "layer 2: self_attn.k_proj.weight: shape [32 24], want [24 32]"},
		{"missing expert", "qwen3_moe", func(c *Config, s MemSource) { delete(s, "model.layers.0.mlp.experts.3.up_proj.weight") }, "layer 0: missing mlp.experts.3.up_proj.weight"},
		{"missing router", "qwen3_moe", func(c *Config, s MemSource) { delete(s, "model.layers.2.mlp.gate.weight") }, "layer 2: missing mlp.gate.weight"},
		{"missing shared gate", "qwen2_moe", func(c *Config, s MemSource) { delete(s, "model.layers.1.mlp.shared_expert_gate.weight") }, "layer 1: missing mlp.shared_expert_gate.weight"},
		{"missing qkv bias", "qwen2_moe", func(c *Config, s MemSource) { delete(s, "model.layers.0.self_attn.v_proj.bias") }, "layer 0: missing self_attn.v_proj.bias"},
		{"qwen3 layout under qwen2 config", "qwen2_moe", func(c *Config, s MemSource) {
			s["model.layers.0.self_attn.q_norm.weight"] = &safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{8}, F32: make([]float32, 8)}
		}, "unexpected tensors for Qwen2MoeForCausalLM: model.layers.0.self_attn.q_norm.weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.arch, nil)
			ts, _ := Generate(cfg, GenOptions{Seed: 1, DType: safetensors.F32})
			src := NewMemSource(ts)
			tt.mut(cfg, src)
			_, err := Load(cfg, src, LoadOptions{HeadRows: headRows, MaxPositions: 8})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	good := `"vocab_size":300,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4`
	tests := []struct {
		name, json, want string
	}{
		{"unknown arch", `{"architectures":["LlamaForCausalLM"],` + good + `}`, `unsupported architecture "LlamaForCausalLM"`},
		{"no arch", `{` + good + `}`, "architectures: missing"},
		{"bad json", `{"architectures":`, "config.json"},
		{"zero hidden", `{"architectures":["Qwen3ForCausalLM"],"vocab_size":3,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4}`, "hidden_size: must be > 0, got 0"},
		{"kv heads", `{"architectures":["Qwen3ForCausalLM"],` + good + `,"num_key_value_heads":3}`, "num_key_value_heads: must divide"},
		{"moe with negative experts", `{"architectures":["Qwen3MoeForCausalLM"],` + good + `,"num_experts":-1}`, "num_experts: must be > 0"},
		{"sliding window", `{"architectures":["Qwen3ForCausalLM"],` + good + `,"use_sliding_window":true}`, "use_sliding_window"},
		{"top-k", `{"architectures":["Qwen3MoeForCausalLM"],` + good + `,"num_experts":4,"num_experts_per_tok":5,"moe_intermediate_size":8}`, "num_experts_per_tok"},
		{"mlp_only range", `{"architectures":["Qwen3MoeForCausalLM"],` + good + `,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,"mlp_only_layers":[5]}`, "mlp_only_layers: layer 5"},
		{"act", `{"architectures":["Qwen3ForCausalLM"],` + good + `,"hidden_act":"gelu"}`, `hidden_act: only "silu"`},
		{"rope scaling", `{"architectures":["Qwen3ForCausalLM"],` + good + `,"rope_scaling":{"rope_type":"yarn"}}`, `rope scaling type "yarn"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// Both spellings of rope theta, and the Qwen2-MoE defaults.
	c, err := ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],` + good + `,"rope_parameters":{"rope_theta":1000000,"rope_type":"default"}}`))
	if err != nil || c.RopeTheta != 1e6 || c.HeadDim != 128 {
		t.Fatalf("rope_parameters: %+v, %v", c, err)
	}
	c, err = ParseConfig([]byte(`{"architectures":["Qwen2MoeForCausalLM"],` + good + `,"rope_theta":500,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8}`))
	if err != nil || c.RopeTheta != 500 || !c.HasQKVBias() || c.HasOBias() || c.HasQKNorm() || c.HeadDim != 8 || c.SharedExpertIntermediateSize != 5632 {
		t.Fatalf("qwen2_moe: %+v, %v", c, err)
	}
	// transformers 5 writes Qwen3-MoE's expert count as num_local_experts.
	c, err = ParseConfig([]byte(`{"architectures":["Qwen3MoeForCausalLM"],` + good + `,"num_local_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8}`))
	if err != nil || c.NumExperts != 4 {
		t.Fatalf("num_local_experts: %+v, %v", c, err)
	}
	if _, err = ParseConfig([]byte(`{"architectures":["Qwen3MoeForCausalLM"],` + good + `,"num_experts":8,"num_local_experts":4}`)); err == nil {
		t.Fatal("num_experts 8 with num_local_experts 4 was accepted")
	}
}

func TestSparseLayers(t *testing.T) {
	c := testConfig(t, "qwen3_moe", func(c *Config) { c.NumHiddenLayers, c.DecoderSparseStep, c.MLPOnlyLayers = 6, 2, []int{3} })
	var got []int
	for i := 0; i < c.NumHiddenLayers; i++ {
		if c.IsSparse(i) {
			got = append(got, i)
		}
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 5 {
		t.Fatalf("sparse layers = %v, want [1 5]", got)
	}
}

func TestCalibrateSpreadsScores(t *testing.T) {
	cfg := testConfig(t, "qwen3_moe", nil)
	ts, err := Generate(cfg, GenOptions{Seed: 5, DType: safetensors.BF16})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	prefix, tail := randSeq(rng, 20, cfg.VocabSize), randSeq(rng, 6, cfg.VocabSize)
	var seqs [][]int32
	for range 24 {
		s := append(append(append([]int32(nil), prefix...), randSeq(rng, 5+rng.IntN(20), cfg.VocabSize)...), tail...)
		seqs = append(seqs, s)
	}
	if err := Calibrate(cfg, ts, [2]int{headRows[0], headRows[1]}, []*Group{{Items: seqs[:8]}, {Prefix: seqs[8][:5], Items: [][]int32{seqs[8][5:]}}, {Items: seqs[9:16]}}, 2); err != nil {
		t.Fatal(err)
	}
	m, err := Load(cfg, NewMemSource(ts), LoadOptions{HeadRows: headRows, MaxPositions: 128})
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	out, err := m.Forward(context.Background(), []*Group{{Items: seqs[16:]}}, &st)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := 1.0, 0.0
	for _, o := range out[0] {
		s := 1 / (1 + math.Exp(-float64(o[0]-o[1])))
		lo, hi = math.Min(lo, s), math.Max(hi, s)
	}
	// Held-out sequences: the scores must not collapse to one value nor saturate.
	if hi-lo < 0.2 || hi > 0.9999 || lo < 0.0001 {
		t.Fatalf("held-out scores span [%v, %v]", lo, hi)
	}
}

// TestPresetsMatchReference runs the generated tiny presets themselves (full Qwen vocabulary,
// bf16 as gen-model writes them) against the reference.
func TestPresetsMatchReference(t *testing.T) {
	for i, arch := range []string{"qwen3", "qwen3_moe", "qwen2_moe"} {
		t.Run(arch, func(t *testing.T) {
			cfg, err := Preset(arch, "tiny")
			if err != nil {
				t.Fatal(err)
			}
			ts, err := Generate(cfg, GenOptions{Seed: uint64(i), DType: safetensors.BF16, Fused: arch == "qwen3_moe"})
			if err != nil {
				t.Fatal(err)
			}
			rows := []int{9693, 2152}
			m, err := Load(cfg, NewMemSource(ts), LoadOptions{HeadRows: rows, MaxPositions: 64})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			g := &Group{Prefix: randSeq(rng, 12, cfg.VocabSize), Items: [][]int32{randSeq(rng, 9, cfg.VocabSize), randSeq(rng, 4, cfg.VocabSize)}}
			var st Stats
			out, err := m.Forward(context.Background(), []*Group{g}, &st)
			if err != nil {
				t.Fatal(err)
			}
			ref := newRef(t, cfg, ts)
			for it, item := range g.Items {
				want := ref.logits(t, append(append([]int32(nil), g.Prefix...), item...))
				for j, row := range rows {
					if got, w := float64(out[0][it][j]), want[row]; math.Abs(got-w) > 1e-3*math.Max(1, math.Abs(w)) {
						t.Errorf("item %d row %d: logit %v, reference %v", it, row, got, w)
					}
				}
			}
		})
	}
}

// TestTemplateSplitIsExact: a prefix computed as a template and an extension of it — the
// template computed in the same pass (once for two queries), or read from an earlier pass's KV —
// gives the bits of the prefix computed in one piece: its KV, the template's KV and every
// item's logits, on 1 and 2 kernel threads. The scorer's shared template KV (issue 14) relies
// on it for scores equal to a cold node's.
func TestTemplateSplitIsExact(t *testing.T) {
	defer kernels.SetThreads(kernels.Threads())
	for _, arch := range []string{"qwen3", "qwen3_moe", "qwen2_moe"} {
		for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			t.Run(fmt.Sprintf("%s/%s", arch, dt), func(t *testing.T) {
				cfg := testConfig(t, arch, nil)
				ts, err := Generate(cfg, GenOptions{Seed: 14, DType: dt})
				if err != nil {
					t.Fatal(err)
				}
				m, err := Load(cfg, NewMemSource(ts), LoadOptions{HeadRows: headRows, MaxPositions: 256})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(14, 1))
				const tmpl = 70 // more than one 64-row attention block
				template := randSeq(rng, tmpl, cfg.VocabSize)
				p1 := append(append([]int32(nil), template...), randSeq(rng, 9, cfg.VocabSize)...)
				p2 := append(append([]int32(nil), template...), randSeq(rng, 4, cfg.VocabSize)...)
				items := [][]int32{randSeq(rng, 8, cfg.VocabSize), randSeq(rng, 1, cfg.VocabSize), randSeq(rng, 15, cfg.VocabSize)}
				ctx := context.Background()
				forward := func(gs ...*Group) ([][][]float32, Stats) {
					t.Helper()
					var st Stats
					out, err := m.Forward(ctx, gs, &st)
					if err != nil {
						t.Fatal(err)
					}
					return out, st
				}
				sameKV := func(what string, got, want *PrefixKV, n int) {
					t.Helper()
					if got == nil || got.Len != n {
						t.Fatalf("%s: no KV of %d positions (%v)", what, n, got != nil)
					}
					kvd := cfg.NumKeyValueHeads * cfg.HeadDim
					for l := range want.K {
						if !slices.Equal(bits(got.K[l]), bits(want.K[l][:n*kvd])) || !slices.Equal(bits(got.V[l]), bits(want.V[l][:n*kvd])) {
							t.Fatalf("%s: layer %d KV differs from the prefix computed whole", what, l)
						}
					}
				}
				sameLogits := func(what string, got, want [][]float32) {
					t.Helper()
					for i := range want {
						if !slices.Equal(bits(got[i]), bits(want[i])) {
							t.Errorf("%s: item %d logits %v, prefix computed whole %v", what, i, got[i], want[i])
						}
					}
				}
				for _, thr := range []int{1, 2} {
					kernels.SetThreads(thr)
					// Baselines: each prefix computed in one piece.
					w1 := &Group{Prefix: p1, Items: items, KeepKV: true}
					w2 := &Group{Prefix: p2, Items: items[:2], KeepKV: true}
					o1, _ := forward(w1)
					o2, _ := forward(w2)

					// Both queries in one pass, their template computed once.
					s1 := &Group{Prefix: p1, Items: items, TemplateLen: tmpl, KeepKV: true, KeepTemplateKV: true}
					s2 := &Group{Prefix: p2, Items: items[:2], TemplateLen: tmpl, KeepKV: true, KeepTemplateKV: true}
					out, st := forward(s2, s1)
					if want := len(p1) + len(p2) - tmpl; st.PrefixTokens != want {
						t.Errorf("threads %d: %d prefix tokens computed, want %d (the template once)", thr, st.PrefixTokens, want)
					}
					if s2.Reused != 0 || s1.Reused != tmpl {
						t.Errorf("threads %d: reused %d and %d tokens, want 0 and %d", thr, s2.Reused, s1.Reused, tmpl)
					}
					sameLogits("in-pass template, first query", out[1], o1[0])
					sameLogits("in-pass template, second query", out[0], o2[0])
					sameKV("in-pass template: prefix", s2.KV, w2.KV, len(p2))
					sameKV("in-pass template: template", s2.TemplateKV, w2.KV, tmpl)
					sameKV("in-pass template: template of the second group", s1.TemplateKV, w2.KV, tmpl)

					// The template from the earlier pass, the query's tokens computed.
					c1 := &Group{Prefix: p1, Items: items, TemplateLen: tmpl, Template: s2.TemplateKV, KeepKV: true}
					out, st = forward(c1)
					if st.PrefixTokens != len(p1)-tmpl || c1.Reused != tmpl {
						t.Errorf("threads %d: cached template: %d prefix tokens computed, %d reused", thr, st.PrefixTokens, c1.Reused)
					}
					sameLogits("cached template", out[0], o1[0])
					sameKV("cached template: prefix", c1.KV, w1.KV, len(p1))

					// And the whole prefix from the cache.
					out, _ = forward(&Group{Prefix: p1, Items: items, Cached: c1.KV})
					sameLogits("cached prefix", out[0], o1[0])
				}
			})
		}
	}
}

// bits is the bit patterns of x (for comparing floats with == and NaN-safe).
func bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = math.Float32bits(v)
	}
	return b
}
