package qwen

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shape is what a preset fixes of a checkpoint's config.json.
type shape struct {
	Arch                                  string
	Vocab, Hidden, Layers, Heads, KVHeads int
	HeadDim, Intermediate, MaxPos         int
	Tied                                  bool
	RopeTheta, Eps                        float64
	Params                                int64
}

func shapeOf(c *Config) shape {
	H, hd := int64(c.HiddenSize), int64(c.HeadDim)
	attn := H*int64(c.NumAttentionHeads)*hd*2 + H*int64(c.NumKeyValueHeads)*hd*2 // q, o; k, v
	layer := attn + 3*H*int64(c.IntermediateSize) + 2*H + 2*hd                   // mlp, two norms, q/k norms
	return shape{
		Arch: c.Architectures[0], Vocab: c.VocabSize, Hidden: c.HiddenSize, Layers: c.NumHiddenLayers,
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim, Intermediate: c.IntermediateSize,
		MaxPos: c.MaxPositionEmbeddings, Tied: c.TieWordEmbeddings, RopeTheta: c.RopeTheta, Eps: c.RMSNormEps,
		Params: int64(c.VocabSize)*H + int64(c.NumHiddenLayers)*layer + H,
	}
}

// TestPresetReranker06B: the preset has the shape of Qwen3-Reranker-0.6B's config.json (the
// 595.8 M parameters that make its 1.19 GB bf16 checkpoint).
func TestPresetReranker06B(t *testing.T) {
	c, err := Preset("qwen3", "reranker-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	want := shape{
		Arch: ArchQwen3, Vocab: 151669, Hidden: 1024, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128,
		Intermediate: 3072, MaxPos: 40960, Tied: true, RopeTheta: 1e6, Eps: 1e-6, Params: 595_776_512,
	}
	if diff := cmp.Diff(want, shapeOf(c)); diff != "" {
		t.Errorf("reranker-0.6b (-want +got):\n%s", diff)
	}
	if c.NumExperts != 0 || c.HasQKVBias() || !c.HasQKNorm() {
		t.Errorf("experts %d qkv bias %v qk norm %v: want a dense Qwen3 with q/k norms", c.NumExperts, c.HasQKVBias(), c.HasQKNorm())
	}
}

func TestPresetErrors(t *testing.T) {
	tests := []struct {
		name, arch, preset, want string
	}{
		{"dense shape as MoE", "qwen3_moe", "reranker-0.6b", "want arch qwen3"},
		{"unknown preset", "qwen3", "huge", "tiny, small, reranker-0.6b"},
		{"unknown arch", "llama", "small", "unknown arch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Preset(tt.arch, tt.preset)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Preset(%q, %q) = %v, want an error containing %q", tt.arch, tt.preset, err, tt.want)
			}
		})
	}
	for _, p := range Presets {
		if _, err := Preset("qwen3", p); err != nil {
			t.Errorf("Preset(qwen3, %q): %v", p, err)
		}
	}
}
