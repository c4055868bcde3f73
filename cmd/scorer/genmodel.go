package main

import (
	"fmt"
	"strings"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/scorer/model"
	"github.com/relevance-scoring/relevance/scorer/model/qwen"
)

// runGenModel writes a deterministic random-initialised checkpoint (contract:
// gen-model --arch qwen3|qwen3_moe|qwen2_moe --preset tiny|small --seed N --out DIR; also
// --arch qwen3 --preset reranker-0.6b, the shape of Qwen3-Reranker-0.6B).
func runGenModel(args []string) error {
	fs := cli.NewFlagSet("scorer", "gen-model", "--arch qwen3|qwen3_moe|qwen2_moe --preset "+strings.Join(qwen.Presets, "|")+" --seed N --out DIR [--dtype bf16|f32] [--fused-experts]")
	arch := fs.String("arch", "qwen3", "architecture: qwen3, qwen3_moe or qwen2_moe")
	preset := fs.String("preset", "tiny", "size preset: tiny, small, or reranker-0.6b (qwen3 only: the shape of Qwen3-Reranker-0.6B, 1.2 GB in bf16; random weights)")
	seed := fs.Uint64("seed", 1, "random seed (the output is deterministic for a seed)")
	out := fs.String("out", "", "output folder (created if missing)")
	dtype := fs.String("dtype", "bf16", "weight dtype: bf16 or f32")
	fused := fs.Bool("fused-experts", false, "store MoE experts as fused gate_up_proj/down_proj tensors")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return fmt.Errorf("--out: required")
	}
	if err := model.Generate(*out, model.GenSpec{Arch: *arch, Preset: *preset, Seed: *seed, DType: *dtype, FusedExperts: *fused}); err != nil {
		return err
	}
	// Say where it went: a silent success left a new user unsure that anything was written.
	fmt.Printf("wrote %s: %s %s, seed %d, %s (random weights)\n", *out, *arch, *preset, *seed, *dtype)
	return nil
}
