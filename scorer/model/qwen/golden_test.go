package qwen

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// golden is testdata/golden/golden.json, written by testdata/golden/gen.py with Hugging Face
// transformers: tiny random Qwen3, Qwen3-MoE and Qwen2-MoE checkpoints (f32 and bf16, per-expert
// and fused expert layouts) and the last-position logits transformers computes for real
// reranker prompts in float64 from exactly the saved weights. It checks this package against
// the implementation it mirrors rather than against our own reading of it (ref_test.go).
type golden struct {
	Head, Tail, Instruction, Query string
	Documents                      []string
	IDs                            [][]int32 `json:"ids"`
	VocabMap                       []int32   `json:"vocab_map"`
	YesID                          int32     `json:"yes_id"`
	NoID                           int32     `json:"no_id"`
	Models                         []struct {
		Dir, Arch, DType, Layout string
		LogitsF64                [][]float64 `json:"logits_f64"`
		HFF32MaxAbsDiff          float64     `json:"hf_f32_max_abs_diff"`
	}
}

func loadGolden(t *testing.T) (*golden, string) {
	t.Helper()
	dir := filepath.Join("testdata", "golden")
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	if len(g.Models) != 10 || len(g.IDs) != len(g.Documents) {
		t.Fatalf("golden.json: %d models, %d prompts for %d documents", len(g.Models), len(g.IDs), len(g.Documents))
	}
	return &g, dir
}

// TestGoldenPromptIDsMatchTransformers: the shipped tokenizer and the prompt builder produce, for
// each document, exactly the ids the official Qwen3-Reranker construction gives with Hugging
// Face tokenizers (head, body and tail encoded separately), both as one whole prompt and as the
// batch's shared prefix followed by the document's own tokens.
func TestGoldenPromptIDsMatchTransformers(t *testing.T) {
	g, _ := loadGolden(t)
	if g.Head != prompt.HeadText || g.Tail != prompt.TailText || g.Instruction != prompt.DefaultInstruction {
		t.Fatal("golden.json's template differs from package prompt's: regenerate the fixtures")
	}
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	b := prompt.New(tok, 0)
	grp, err := b.Build(g.Instruction, g.Query, g.Documents, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range g.Documents {
		if got := b.Whole(g.Instruction, g.Query, d); !slices.Equal(got, g.IDs[i]) {
			t.Errorf("document %d: whole prompt ids differ from transformers'\n got %v\nwant %v", i, got, g.IDs[i])
		}
		if got := append(slices.Clone(grp.Prefix), grp.Items[i]...); !slices.Equal(got, g.IDs[i]) {
			t.Errorf("document %d: prefix+item ids differ from transformers'\n got %v\nwant %v", i, got, g.IDs[i])
		}
	}
	if y, ok := tok.TokenID("yes"); !ok || y != g.YesID {
		t.Errorf(`"yes" is id %d (%v), transformers says %d`, y, ok, g.YesID)
	}
	if n, ok := tok.TokenID("no"); !ok || n != g.NoID {
		t.Errorf(`"no" is id %d (%v), transformers says %d`, n, ok, g.NoID)
	}
}

// TestGoldenForwardMatchesTransformers loads each golden checkpoint from disk as the node does
// and checks every vocabulary row's logit at the last position against transformers' float64
// logits: each prompt alone, and all four as one group sharing their common prefix (the path a
// batch takes), then again with that prefix's KV cached.
func TestGoldenForwardMatchesTransformers(t *testing.T) {
	g, dir := loadGolden(t)
	compact := make(map[int32]int32, len(g.VocabMap))
	for i, r := range g.VocabMap {
		compact[r] = int32(i)
	}
	prompts := make([][]int32, len(g.IDs))
	for i, ids := range g.IDs {
		for _, r := range ids {
			c, ok := compact[r]
			if !ok {
				t.Fatalf("prompt %d: id %d not in the vocabulary map", i, r)
			}
			prompts[i] = append(prompts[i], c)
		}
	}
	lcp := len(prompts[0])
	for _, p := range prompts[1:] {
		lcp = min(lcp, commonLen(prompts[0], p))
	}
	if lcp < 40 {
		t.Fatalf("prompts share only %d tokens; the template alone is longer", lcp)
	}
	rows := make([]int, len(g.VocabMap))
	for i := range rows {
		rows[i] = i
	}
	seen := map[string]bool{}
	for _, gm := range g.Models {
		t.Run(gm.Dir, func(t *testing.T) {
			seen[gm.Arch+"/"+gm.DType+"/"+gm.Layout] = true
			md := filepath.Join(dir, gm.Dir)
			cfg, err := LoadConfig(filepath.Join(md, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.OpenDir(md)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m, err := Load(cfg, ck, LoadOptions{HeadRows: rows, MaxPositions: 256})
			if err != nil {
				t.Fatal(err)
			}
			if m.DType != gm.DType || m.FusedExperts != (gm.Layout == "fused") {
				t.Fatalf("loaded as dtype %s fused=%v; checkpoint is %s %s", m.DType, m.FusedExperts, gm.DType, gm.Layout)
			}
			check := func(how string, p int, got []float32) {
				t.Helper()
				want := gm.LogitsF64[p]
				worst, at := 0.0, 0
				for r, w := range want {
					// Our forward runs in float32 with float32 accumulation; transformers' own
					// float32 pass is within HFF32MaxAbsDiff (~1e-6) of float64 on these models.
					if d := math.Abs(float64(got[r])-w) / math.Max(1, math.Abs(w)); d > worst {
						worst, at = d, r
					}
				}
				if worst > 1e-4 {
					t.Errorf("%s, prompt %d: vocabulary row %d logit %v, transformers %v (rel. error %.2g)", how, p, at, got[at], want[at], worst)
				}
				yes, no := compact[g.YesID], compact[g.NoID]
				if d := math.Abs(float64(got[yes]-got[no]) - (want[yes] - want[no])); d > 1e-4 {
					t.Errorf("%s, prompt %d: yes−no logit %v, transformers %v", how, p, got[yes]-got[no], want[yes]-want[no])
				}
			}
			for p, ids := range prompts {
				out, err := m.Forward(context.Background(), []*Group{{Items: [][]int32{ids}}}, &Stats{})
				if err != nil {
					t.Fatal(err)
				}
				check("alone", p, out[0][0])
			}
			grp := &Group{Prefix: prompts[0][:lcp], KeepKV: true}
			for _, p := range prompts {
				grp.Items = append(grp.Items, p[lcp:])
			}
			out, err := m.Forward(context.Background(), []*Group{grp}, &Stats{})
			if err != nil {
				t.Fatal(err)
			}
			for p := range prompts {
				check("shared prefix", p, out[0][p])
			}
			if grp.KV == nil {
				t.Fatal("KeepKV returned no prefix KV")
			}
			cached := &Group{Prefix: grp.Prefix, Items: grp.Items, Cached: grp.KV}
			out, err = m.Forward(context.Background(), []*Group{cached}, &Stats{})
			if err != nil {
				t.Fatal(err)
			}
			for p := range prompts {
				check("cached prefix", p, out[0][p])
			}
		})
	}
	for _, want := range []string{
		ArchQwen3 + "/f32/dense", ArchQwen3 + "/bf16/dense",
		ArchQwen3MoE + "/f32/per_expert", ArchQwen3MoE + "/bf16/fused", ArchQwen3MoE + "/f32/fused", ArchQwen3MoE + "/bf16/per_expert",
		ArchQwen2MoE + "/f32/per_expert", ArchQwen2MoE + "/bf16/fused", ArchQwen2MoE + "/f32/fused", ArchQwen2MoE + "/bf16/per_expert",
	} {
		if !seen[want] {
			t.Errorf("golden.json has no %s checkpoint", want)
		}
	}
}

func commonLen(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
