package qwen

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

// QwenVocabSize is the padded vocabulary of the Qwen3 checkpoints (151 669 tokens used).
const QwenVocabSize = 151936

// Qwen3RerankerVocabSize is the vocabulary of Qwen3-Reranker-0.6B's config.json: exactly the
// tokenizer's 151 669 tokens, unpadded.
const Qwen3RerankerVocabSize = 151669

// Presets lists the preset names Preset accepts.
var Presets = []string{"tiny", "small", "reranker-0.6b"}

// Preset returns the config of a generated model.
//
//   - tiny: hidden 64, 4 layers, 4 heads / 2 KV heads of 64/4=16 dims; dense intermediate 128;
//     MoE 8 experts, top 2, expert intermediate 64; Qwen2-MoE shared expert 128. Everything
//     but the embedding (and untied head) is a few hundred KB, so it writes in about a second.
//   - small: hidden 512, 8 layers, 8 heads / 4 KV heads of 64 dims; dense intermediate 1536
//     (the benchmark shape); MoE 32 experts, top 4, expert intermediate 384, so that expert GEMMs
//     and attention dominate; Qwen2-MoE shared expert 1024.
//   - reranker-0.6b (qwen3 only): the shape of Qwen3-Reranker-0.6B — hidden 1024, 28 layers,
//     16 heads / 8 KV heads of 128 dims, intermediate 3072, vocab 151 669, tied embeddings:
//     596 M parameters, 1.2 GB in bf16. Random weights: for measuring what a real reranker of
//     that size costs, not for its scores.
//
// arch is qwen3, qwen3_moe or qwen2_moe.
func Preset(arch, preset string) (*Config, error) {
	c := &Config{VocabSize: QwenVocabSize, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, HiddenAct: "silu", RopeTheta: 1000000}
	switch preset {
	case "tiny":
		c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 64, 4, 4, 2, 16
		c.IntermediateSize, c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize = 128, 8, 2, 64
		c.SharedExpertIntermediateSize = 128
	case "small":
		c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 512, 8, 8, 4, 64
		c.IntermediateSize, c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize = 1536, 32, 4, 384
		c.SharedExpertIntermediateSize = 1024
	case "reranker-0.6b":
		if arch != "qwen3" {
			return nil, fmt.Errorf("preset: %q is a dense Qwen3 shape; want arch qwen3, got %q", preset, arch)
		}
		c.VocabSize = Qwen3RerankerVocabSize
		c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 1024, 28, 16, 8, 128
		c.IntermediateSize = 3072
	default:
		return nil, fmt.Errorf("preset: unknown preset %q (want %s)", preset, strings.Join(Presets, ", "))
	}
	// Every preset ties the head to the embedding (as Qwen3-Reranker-0.6B does): an untied head
	// would double the file for nothing the benchmarks measure.
	c.TieWordEmbeddings = true
	switch arch {
	case "qwen3":
		c.Architectures, c.ModelType = []string{ArchQwen3}, "qwen3"
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertIntermediateSize = 0, 0, 0, 0
	case "qwen3_moe":
		c.Architectures, c.ModelType = []string{ArchQwen3MoE}, "qwen3_moe"
		c.NormTopKProb = true
		c.SharedExpertIntermediateSize = 0
	case "qwen2_moe":
		c.Architectures, c.ModelType = []string{ArchQwen2MoE}, "qwen2_moe"
		c.HeadDim = 0 // Qwen2-MoE derives it: hidden / heads
		t := true
		c.QKVBias = &t
	default:
		return nil, fmt.Errorf("preset: unknown arch %q (want qwen3, qwen3_moe or qwen2_moe)", arch)
	}
	c.DecoderSparseStep = 1
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// GenOptions controls Generate.
type GenOptions struct {
	Seed  uint64
	DType safetensors.DType // F32 or BF16
	// Fused writes experts as fused mlp.experts.gate_up_proj / down_proj tensors.
	Fused bool
}

// Generate returns deterministic random weights for cfg, in the tensor names of the Hugging Face
// checkpoint. Scales keep activations O(1): embeddings N(0,1), every matrix N(0, 1/fan_in), norm
// weights near 1, biases small.
func Generate(cfg *Config, opt GenOptions) ([]safetensors.WriteTensor, error) {
	if opt.DType != safetensors.F32 && opt.DType != safetensors.BF16 {
		return nil, fmt.Errorf("generate: dtype must be F32 or BF16, got %q", opt.DType)
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x9e3779b97f4a7c15))
	var out []safetensors.WriteTensor
	add := func(name string, shape []int, vals []float32) {
		t := safetensors.WriteTensor{Name: name, DType: opt.DType, Shape: shape}
		if opt.DType == safetensors.BF16 {
			t.BF16 = make([]uint16, len(vals))
			kernels.F32ToBF16(t.BF16, vals)
		} else {
			t.F32 = vals
		}
		out = append(out, t)
	}
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	near1 := func(n int) []float32 {
		v := normal(n, 0.1)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	mat := func(name string, n, k int) { add(name, []int{n, k}, normal(n*k, 1/math.Sqrt(float64(k)))) }

	H, hd := cfg.HiddenSize, cfg.HeadDim
	qd, kvd := cfg.NumAttentionHeads*hd, cfg.NumKeyValueHeads*hd
	add("model.embed_tokens.weight", []int{cfg.VocabSize, H}, normal(cfg.VocabSize*H, 1))
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", []int{H}, near1(H))
		add(p+"post_attention_layernorm.weight", []int{H}, near1(H))
		mat(p+"self_attn.q_proj.weight", qd, H)
		mat(p+"self_attn.k_proj.weight", kvd, H)
		mat(p+"self_attn.v_proj.weight", kvd, H)
		mat(p+"self_attn.o_proj.weight", H, qd)
		if cfg.HasQKVBias() {
			add(p+"self_attn.q_proj.bias", []int{qd}, normal(qd, 0.1))
			add(p+"self_attn.k_proj.bias", []int{kvd}, normal(kvd, 0.1))
			add(p+"self_attn.v_proj.bias", []int{kvd}, normal(kvd, 0.1))
		}
		if cfg.HasOBias() {
			add(p+"self_attn.o_proj.bias", []int{H}, normal(H, 0.1))
		}
		if cfg.HasQKNorm() {
			// Weights around 2 sharpen attention a little, so that the last position's state
			// depends on the document and scores spread.
			qn, kn := near1(hd), near1(hd)
			for j := range qn {
				qn[j] *= 2
				kn[j] *= 2
			}
			add(p+"self_attn.q_norm.weight", []int{hd}, qn)
			add(p+"self_attn.k_norm.weight", []int{hd}, kn)
		}
		if !cfg.IsSparse(i) {
			I := cfg.IntermediateSize
			mat(p+"mlp.gate_proj.weight", I, H)
			mat(p+"mlp.up_proj.weight", I, H)
			mat(p+"mlp.down_proj.weight", H, I)
			continue
		}
		E, I := cfg.NumExperts, cfg.MoEIntermediateSize
		mat(p+"mlp.gate.weight", E, H)
		if opt.Fused {
			add(p+"mlp.experts.gate_up_proj", []int{E, 2 * I, H}, normal(E*2*I*H, 1/math.Sqrt(float64(H))))
			add(p+"mlp.experts.down_proj", []int{E, H, I}, normal(E*H*I, 1/math.Sqrt(float64(I))))
		} else {
			for e := 0; e < E; e++ {
				ep := fmt.Sprintf("%smlp.experts.%d.", p, e)
				mat(ep+"gate_proj.weight", I, H)
				mat(ep+"up_proj.weight", I, H)
				mat(ep+"down_proj.weight", H, I)
			}
		}
		if cfg.HasSharedExpert() {
			S := cfg.SharedExpertIntermediateSize
			mat(p+"mlp.shared_expert.gate_proj.weight", S, H)
			mat(p+"mlp.shared_expert.up_proj.weight", S, H)
			mat(p+"mlp.shared_expert.down_proj.weight", H, S)
			mat(p+"mlp.shared_expert_gate.weight", 1, H)
		}
	}
	add("model.norm.weight", []int{H}, near1(H))
	if !cfg.TieWordEmbeddings {
		mat("lm_head.weight", cfg.VocabSize, H)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// MemSource serves tensors held in memory (a generated model) to Load.
type MemSource map[string]*safetensors.WriteTensor

// NewMemSource indexes tensors by name; the values are shared, not copied.
func NewMemSource(ts []safetensors.WriteTensor) MemSource {
	m := MemSource{}
	for i := range ts {
		m[ts[i].Name] = &ts[i]
	}
	return m
}

// Names lists the tensors, sorted.
func (m MemSource) Names() []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Tensor returns a tensor's values.
func (m MemSource) Tensor(name string) (safetensors.Tensor, error) {
	t, ok := m[name]
	if !ok {
		return safetensors.Tensor{}, fmt.Errorf("%s: %w", name, safetensors.ErrNotFound)
	}
	return safetensors.Tensor{Name: name, Shape: t.Shape, F32: t.F32, BF16: t.BF16}, nil
}

// Calibrate sets the final norm weight (model.norm.weight) of a generated model so that
// logit(rows[0]) − logit(rows[1]) over the sample sequences has mean ≈ 0 and standard deviation
// ≈ sigma (samples are prefix groups, as the engine runs them): scores then spread over (0, 1) instead of all sitting near 0 or 1. The difference is
// linear in the final norm weight n: logit = n · (ĥ ⊙ (w₀ − w₁)) where ĥ is the normalised last
// state, so n is taken along the direction of largest within-group variance of ĥ ⊙ (w₀ − w₁),
// made orthogonal to every group's mean (each sample query then averages 0), fitted on half the
// samples and scaled on the other half. The head rows and every
// other weight are unchanged.
func Calibrate(cfg *Config, ts []safetensors.WriteTensor, rows [2]int, samples []*Group, sigma float64) error {
	src := NewMemSource(ts)
	norm, ok := src["model.norm.weight"]
	if !ok {
		return fmt.Errorf("calibrate: missing model.norm.weight")
	}
	H := cfg.HiddenSize
	// Run with a unit final norm and an identity head: the outputs are ĥ.
	saved := slices.Clone(norm.F32)
	savedB := slices.Clone(norm.BF16)
	setVec(norm, slices.Repeat([]float32{1}, H))
	maxLen := 0
	for _, g := range samples {
		for _, it := range g.Items {
			maxLen = max(maxLen, len(g.Prefix)+len(it))
		}
	}
	m, err := Load(cfg, src, LoadOptions{MaxPositions: maxLen + 1})
	if err != nil {
		norm.F32, norm.BF16 = saved, savedB
		return fmt.Errorf("calibrate: %w", err)
	}
	id := make([]float32, H*H)
	for i := 0; i < H; i++ {
		id[i*H+i] = 1
	}
	m.Head = kernels.NewWeightF32(id, H, H)
	var st Stats
	outs, err := m.Forward(context.Background(), samples, &st)
	if err != nil {
		norm.F32, norm.BF16 = saved, savedB
		return fmt.Errorf("calibrate: %w", err)
	}
	full, err := Load(cfg, src, LoadOptions{MaxPositions: 1, HeadRows: rows[:]})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	r0, r1 := make([]float32, H), make([]float32, H)
	full.Head.Row(r0, 0)
	full.Head.Row(r1, 1)
	// u_i = ĥ_i ⊙ δ, centred on its group's mean: the score should vary with the document,
	// not carry each query's offset.
	type sample struct{ c []float64 } // centred u
	var samplesU []sample
	var means [][]float64 // one per group, plus the overall mean
	all := make([]float64, H)
	count := 0
	for _, gout := range outs {
		var us [][]float64
		for _, h := range gout {
			if h == nil {
				continue
			}
			u := make([]float64, H)
			for j := range u {
				u[j] = float64(h[j]) * float64(r0[j]-r1[j])
				all[j] += u[j]
			}
			us = append(us, u)
			count++
		}
		if len(us) == 0 {
			continue
		}
		gm := make([]float64, H)
		for _, u := range us {
			for j, v := range u {
				gm[j] += v / float64(len(us))
			}
		}
		means = append(means, gm)
		for _, u := range us {
			c := make([]float64, H)
			for j := range c {
				c[j] = u[j] - gm[j]
			}
			samplesU = append(samplesU, sample{c})
		}
	}
	if count < 4 {
		return fmt.Errorf("calibrate: need at least 4 non-empty sample items, got %d", count)
	}
	for j := range all {
		all[j] /= float64(count)
	}
	means = append(means, all)
	// An orthonormal basis of the means: n is kept orthogonal to all of them, so that every
	// sample query's mean logit is 0.
	var basis [][]float64
	for _, m := range means {
		b := slices.Clone(m)
		for _, q := range basis {
			c := dot64(b, q)
			for j := range b {
				b[j] -= c * q[j]
			}
		}
		if nb := math.Sqrt(dot64(b, b)); nb > 1e-9*math.Sqrt(dot64(m, m)) && nb > 0 {
			for j := range b {
				b[j] /= nb
			}
			basis = append(basis, b)
		}
	}
	proj := func(v []float64) {
		for _, q := range basis {
			c := dot64(v, q)
			for j := range v {
				v[j] -= c * q[j]
			}
		}
		n := math.Sqrt(dot64(v, v))
		for j := range v {
			v[j] /= n
		}
	}
	// The direction is fitted on every other sample and scaled on the rest: with few samples
	// in many dimensions the fitted direction's in-sample spread overstates what unseen
	// documents give.
	var fit, held [][]float64
	for i, u := range samplesU {
		if i%2 == 0 {
			fit = append(fit, u.c)
		} else {
			held = append(held, u.c)
		}
	}
	// Power iteration on the within-group covariance, restricted to the complement of the means.
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float64, H)
	for j := range v {
		v[j] = rng.NormFloat64()
	}
	proj(v)
	for range 50 {
		next := make([]float64, H)
		for _, c := range fit {
			d := dot64(c, v)
			for j := range c {
				next[j] += d * c[j]
			}
		}
		v = next
		proj(v)
	}
	var sd float64
	for _, c := range held {
		d := dot64(c, v)
		sd += d * d
	}
	sd = math.Sqrt(sd / float64(len(held)))
	if !(sd > 0) {
		return fmt.Errorf("calibrate: the sample sequences give identical last states")
	}
	n := make([]float32, H)
	for j := range n {
		n[j] = float32(v[j] * sigma / sd)
	}
	setVec(norm, n)
	return nil
}

func setVec(t *safetensors.WriteTensor, v []float32) {
	if t.DType == safetensors.BF16 {
		t.BF16 = make([]uint16, len(v))
		kernels.F32ToBF16(t.BF16, v)
		t.F32 = nil
		return
	}
	t.F32 = slices.Clone(v)
	t.BF16 = nil
}

func dot64(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// WriteCheckpoint writes cfg as config.json and the tensors as model.safetensors into dir.
func WriteCheckpoint(dir string, cfg *Config, ts []safetensors.WriteTensor, dtype safetensors.DType) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	c := *cfg
	if dtype == safetensors.BF16 {
		c.TorchDType = "bfloat16"
	} else {
		c.TorchDType = "float32"
	}
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"})
}
