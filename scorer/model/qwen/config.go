// Package qwen is the Qwen decoder family as Hugging Face transformers defines it, for prefill
// scoring: Qwen3ForCausalLM (dense, per-head q/k RMSNorm), Qwen3MoeForCausalLM (sparse MoE
// layers) and Qwen2MoeForCausalLM (q/k/v biases, shared expert with a sigmoid gate). The three
// differ only in a handful of switches, so they share one package, one Config and one forward
// pass; Config.Arch says which applies and the loader checks that exactly the tensors of that
// architecture are present.
//
// A Model is immutable after Load and its Forward may be called from several goroutines, but
// each call already uses every core through the kernels, so callers run one at a time.
package qwen

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Architectures, as spelled by config.json's architectures[0].
const (
	ArchQwen3    = "Qwen3ForCausalLM"
	ArchQwen3MoE = "Qwen3MoeForCausalLM"
	ArchQwen2MoE = "Qwen2MoeForCausalLM"
)

// Config mirrors the config.json keys the forward pass needs. Zero values are replaced by the
// transformers defaults in Defaults.
type Config struct {
	Architectures []string `json:"architectures"`
	ModelType     string   `json:"model_type,omitempty"`

	VocabSize         int `json:"vocab_size"`
	HiddenSize        int `json:"hidden_size"`
	IntermediateSize  int `json:"intermediate_size"`
	NumHiddenLayers   int `json:"num_hidden_layers"`
	NumAttentionHeads int `json:"num_attention_heads"`
	NumKeyValueHeads  int `json:"num_key_value_heads"`
	// HeadDim defaults as transformers does: 128 for Qwen3 (its config class default),
	// hidden_size / num_attention_heads for the MoE architectures.
	HeadDim               int     `json:"head_dim,omitempty"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	HiddenAct             string  `json:"hidden_act"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	// RopeTheta is the RoPE base; newer configs put it in rope_parameters.rope_theta instead.
	RopeTheta      float64         `json:"rope_theta,omitempty"`
	RopeParameters *RopeParameters `json:"rope_parameters,omitempty"`
	RopeScaling    *RopeParameters `json:"rope_scaling,omitempty"`
	// AttentionBias (Qwen3, Qwen3-MoE) adds biases to q, k, v and o projections.
	AttentionBias bool `json:"attention_bias"`
	// QKVBias (Qwen2-MoE; default true) adds biases to q, k and v (never o).
	QKVBias *bool `json:"qkv_bias,omitempty"`

	// MoE (Qwen3-MoE, Qwen2-MoE).
	NumExperts int `json:"num_experts,omitempty"`
	// NumLocalExperts is how transformers 5 writes num_experts for Qwen3-MoE (its config maps
	// the one name to the other); Defaults folds it into NumExperts.
	NumLocalExperts              int   `json:"num_local_experts,omitempty"`
	NumExpertsPerTok             int   `json:"num_experts_per_tok,omitempty"`
	MoEIntermediateSize          int   `json:"moe_intermediate_size,omitempty"`
	NormTopKProb                 bool  `json:"norm_topk_prob"`
	DecoderSparseStep            int   `json:"decoder_sparse_step,omitempty"` // 0: 1
	MLPOnlyLayers                []int `json:"mlp_only_layers,omitempty"`
	SharedExpertIntermediateSize int   `json:"shared_expert_intermediate_size,omitempty"`

	// UseSlidingWindow must be false: sliding-window attention is not implemented.
	UseSlidingWindow bool `json:"use_sliding_window,omitempty"`
	// LayerTypes (transformers 5) names each layer's attention; only "full_attention" is
	// implemented.
	LayerTypes []string `json:"layer_types,omitempty"`
	// PartialRotaryFactor, when set, must be 1: transformers' default RoPE rotates only
	// int(head_dim·factor) dims, which Qwen's forward pass does not do.
	PartialRotaryFactor *float64 `json:"partial_rotary_factor,omitempty"`

	TorchDType string `json:"torch_dtype,omitempty"`
}

// RopeParameters is the rope_parameters (or legacy rope_scaling) object.
type RopeParameters struct {
	RopeTheta           float64  `json:"rope_theta,omitempty"`
	RopeType            string   `json:"rope_type,omitempty"`
	Type                string   `json:"type,omitempty"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor,omitempty"`

	// nested lists the keys whose values are objects: transformers 5's per-layer-type form
	// ({"full_attention": {...}}), which Validate refuses.
	nested []string
}

// UnmarshalJSON reads the flat fields and notes object-valued keys (see nested).
func (rp *RopeParameters) UnmarshalJSON(b []byte) error {
	type plain RopeParameters
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k, v := range all {
		if v = bytes.TrimSpace(v); len(v) > 0 && v[0] == '{' {
			p.nested = append(p.nested, k)
		}
	}
	slices.Sort(p.nested)
	*rp = RopeParameters(p)
	return nil
}

// ropeDict is the rope dict transformers 5 computes with: rope_scaling when given (it replaces
// rope_parameters in convert_rope_params_to_dict), else rope_parameters; nil when neither.
func (c *Config) ropeDict() *RopeParameters {
	if c.RopeScaling != nil {
		return c.RopeScaling
	}
	return c.RopeParameters
}

// LoadConfig reads, defaults and validates dir/config.json.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return ParseConfig(b)
}

// ParseConfig parses, defaults and validates config.json bytes.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Arch is architectures[0] ("" when absent).
func (c *Config) Arch() string {
	if len(c.Architectures) == 0 {
		return ""
	}
	return c.Architectures[0]
}

// Defaults fills unset fields with the transformers defaults.
func (c *Config) Defaults() {
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.Arch() == ArchQwen3 {
		c.HeadDim = 128
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumExperts == 0 {
		c.NumExperts = c.NumLocalExperts
	}
	// MoE sizes default to the transformers config classes' values.
	switch c.Arch() {
	case ArchQwen3MoE:
		c.NumExperts = cmpOr(c.NumExperts, 128)
		c.NumExpertsPerTok = cmpOr(c.NumExpertsPerTok, 8)
		c.MoEIntermediateSize = cmpOr(c.MoEIntermediateSize, 768)
	case ArchQwen2MoE:
		c.NumExperts = cmpOr(c.NumExperts, 60)
		c.NumExpertsPerTok = cmpOr(c.NumExpertsPerTok, 4)
		c.MoEIntermediateSize = cmpOr(c.MoEIntermediateSize, 1408)
		c.SharedExpertIntermediateSize = cmpOr(c.SharedExpertIntermediateSize, 5632)
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	// A top-level rope_theta, else the rope dict's (Validate refuses the two disagreeing).
	if rp := c.ropeDict(); c.RopeTheta == 0 && rp != nil {
		c.RopeTheta = rp.RopeTheta
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.DecoderSparseStep == 0 {
		c.DecoderSparseStep = 1
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = 32768
	}
	if c.QKVBias == nil && c.Arch() == ArchQwen2MoE {
		t := true
		c.QKVBias = &t
	}
}

// Validate reports the first bad field, naming it and its value.
func (c *Config) Validate() error {
	switch c.Arch() {
	case ArchQwen3, ArchQwen3MoE, ArchQwen2MoE:
	case "":
		return fmt.Errorf("config.json: architectures: missing (want %s, %s or %s)", ArchQwen3, ArchQwen3MoE, ArchQwen2MoE)
	default:
		return fmt.Errorf("config.json: architectures[0]: unsupported architecture %q (want %s, %s or %s)", c.Arch(), ArchQwen3, ArchQwen3MoE, ArchQwen2MoE)
	}
	// transformers' AutoModelForCausalLM builds the model model_type names; a config whose
	// model_type and architectures[0] disagree is two models.
	if want := map[string]string{ArchQwen3: "qwen3", ArchQwen3MoE: "qwen3_moe", ArchQwen2MoE: "qwen2_moe"}[c.Arch()]; c.ModelType != "" && c.ModelType != want {
		return fmt.Errorf("config.json: model_type %q does not match architectures[0] %s (want %q)", c.ModelType, c.Arch(), want)
	}
	pos := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim}, {"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("config.json: %s: must be > 0, got %d", p.name, p.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("config.json: num_key_value_heads: must divide num_attention_heads (%d), got %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config.json: head_dim: must be even for RoPE, got %d", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) {
		return fmt.Errorf("config.json: rms_norm_eps: must be > 0, got %v", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) {
		return fmt.Errorf("config.json: rope_theta: must be > 0, got %v", c.RopeTheta)
	}
	// transformers 5 takes rope_scaling in place of rope_parameters and lets the dict's
	// rope_theta beat the top-level one; transformers 4 reads only the top-level rope_theta. A
	// config on which they disagree names two models: refuse it rather than pick one.
	if c.RopeScaling != nil && c.RopeParameters != nil && c.RopeScaling.RopeTheta != c.RopeParameters.RopeTheta {
		return fmt.Errorf("config.json: rope_scaling (rope_theta %v) and rope_parameters (rope_theta %v) disagree; transformers 5 uses rope_scaling, give one of them", c.RopeScaling.RopeTheta, c.RopeParameters.RopeTheta)
	}
	for _, f := range []struct {
		name string
		rp   *RopeParameters
	}{{"rope_parameters", c.RopeParameters}, {"rope_scaling", c.RopeScaling}} {
		rp := f.rp
		if rp == nil {
			continue
		}
		if len(rp.nested) > 0 {
			return fmt.Errorf("config.json: %s: per-layer-type RoPE parameters (%s) are not supported", f.name, strings.Join(rp.nested, ", "))
		}
		if rp.RopeTheta != 0 && rp.RopeTheta != c.RopeTheta {
			return fmt.Errorf("config.json: %s.rope_theta %v disagrees with rope_theta %v", f.name, rp.RopeTheta, c.RopeTheta)
		}
		if v := rp.PartialRotaryFactor; v != nil && *v != 1 {
			return fmt.Errorf("config.json: %s.partial_rotary_factor: partial RoPE is not supported (Qwen rotates the whole head), got %v", f.name, *v)
		}
		// transformers writes a legacy rope_scaling back with both spellings of its type.
		if rp.RopeType != "" && rp.Type != "" && rp.RopeType != rp.Type {
			return fmt.Errorf("config.json: rope scaling says rope_type %q and type %q", rp.RopeType, rp.Type)
		}
		if t := cmp.Or(rp.RopeType, rp.Type); t != "" && t != "default" {
			return fmt.Errorf("config.json: rope scaling type %q is not supported (only default RoPE)", t)
		}
	}
	if v := c.PartialRotaryFactor; v != nil && *v != 1 {
		return fmt.Errorf("config.json: partial_rotary_factor: partial RoPE is not supported (Qwen rotates the whole head), got %v", *v)
	}
	if c.UseSlidingWindow {
		return fmt.Errorf("config.json: use_sliding_window: sliding-window attention is not supported, got true")
	}
	// transformers 5 gives each layer the attention layer_types names, whatever
	// use_sliding_window says.
	if c.LayerTypes != nil {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return fmt.Errorf("config.json: layer_types: %d entries for num_hidden_layers %d", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, lt := range c.LayerTypes {
			if lt != "full_attention" {
				return fmt.Errorf("config.json: layer_types[%d]: %q is not supported (only \"full_attention\")", i, lt)
			}
		}
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("config.json: hidden_act: only \"silu\" is supported, got %q", c.HiddenAct)
	}
	if c.DecoderSparseStep < 1 {
		return fmt.Errorf("config.json: decoder_sparse_step: must be ≥ 1, got %d", c.DecoderSparseStep)
	}
	if c.NumLocalExperts > 0 && c.NumLocalExperts != c.NumExperts {
		return fmt.Errorf("config.json: num_experts %d and num_local_experts %d disagree", c.NumExperts, c.NumLocalExperts)
	}
	if c.Arch() == ArchQwen3 && c.NumExperts > 0 {
		return fmt.Errorf("config.json: num_experts: %s is dense, got %d", ArchQwen3, c.NumExperts)
	}
	if c.Arch() != ArchQwen3 && c.NumExperts <= 0 {
		return fmt.Errorf("config.json: num_experts: must be > 0 for %s, got %d", c.Arch(), c.NumExperts)
	}
	if c.NumExperts > 0 {
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("config.json: num_experts_per_tok: must be in [1, num_experts=%d], got %d", c.NumExperts, c.NumExpertsPerTok)
		}
		if c.MoEIntermediateSize <= 0 {
			return fmt.Errorf("config.json: moe_intermediate_size: must be > 0, got %d", c.MoEIntermediateSize)
		}
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 || l >= c.NumHiddenLayers {
			return fmt.Errorf("config.json: mlp_only_layers: layer %d outside [0, %d)", l, c.NumHiddenLayers)
		}
	}
	if c.SharedExpertIntermediateSize < 0 {
		return fmt.Errorf("config.json: shared_expert_intermediate_size: must be ≥ 0, got %d", c.SharedExpertIntermediateSize)
	}
	// Dense layers need intermediate_size.
	for i := 0; i < c.NumHiddenLayers; i++ {
		if !c.IsSparse(i) && c.IntermediateSize <= 0 {
			return fmt.Errorf("config.json: intermediate_size: must be > 0 (layer %d is dense), got %d", i, c.IntermediateSize)
		}
	}
	return nil
}

// IsSparse reports whether layer i is an MoE layer: num_experts > 0, i ∉ mlp_only_layers and
// (i+1) % decoder_sparse_step == 0, as in transformers.
func (c *Config) IsSparse(i int) bool {
	return c.NumExperts > 0 && !slices.Contains(c.MLPOnlyLayers, i) && (i+1)%c.DecoderSparseStep == 0
}

// HasQKNorm reports per-head RMSNorm on q and k (the Qwen3 family).
func (c *Config) HasQKNorm() bool { return c.Arch() != ArchQwen2MoE }

// HasQKVBias reports biases on the q, k and v projections.
func (c *Config) HasQKVBias() bool {
	if c.Arch() == ArchQwen2MoE {
		return c.QKVBias != nil && *c.QKVBias
	}
	return c.AttentionBias
}

// HasOBias reports a bias on the output projection (Qwen3 with attention_bias; never Qwen2-MoE).
func (c *Config) HasOBias() bool { return c.Arch() != ArchQwen2MoE && c.AttentionBias }

// HasSharedExpert reports the Qwen2-MoE shared expert and its gate on sparse layers.
func (c *Config) HasSharedExpert() bool {
	return c.Arch() == ArchQwen2MoE && c.SharedExpertIntermediateSize > 0
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
