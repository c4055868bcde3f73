package qwen

import (
	"strings"
	"testing"
)

// These pin config.json fields that change the arithmetic in Hugging Face transformers but that
// the forward pass here does not implement: each must be computed as transformers does or refused
// at load naming the field, never ignored (an ignored field loads and scores silently wrong).

const fieldsBase = `"vocab_size":300,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4`

func parseQwen3(t *testing.T, extra string) (*Config, error) {
	t.Helper()
	return ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],` + fieldsBase + extra + `}`))
}

// TestRopeThetaStatedTwiceMustAgree: transformers 5 takes the RoPE base from the rope dict
// (rope_scaling when given, else rope_parameters: convert_rope_params_to_dict does
// setdefault("rope_theta", top-level)), so the dict's value beats a top-level rope_theta;
// transformers 4 reads only the top-level rope_theta. When the two disagree the config means
// different models to the two versions, and picking either silently scores one of them wrong:
// refuse it, naming both fields. A theta given only inside rope_scaling is used (transformers 5),
// not replaced by the default 10000.
func TestRopeThetaStatedTwiceMustAgree(t *testing.T) {
	for _, tc := range []struct{ name, extra, want string }{
		{"top level vs rope_parameters", `,"rope_theta":1000000,"rope_parameters":{"rope_type":"default","rope_theta":10000}`, "rope_parameters.rope_theta"},
		{"top level vs rope_scaling", `,"rope_theta":1000000,"rope_scaling":{"rope_type":"default","rope_theta":10000}`, "rope_scaling.rope_theta"},
		// transformers 5 uses rope_scaling in place of rope_parameters: its theta (here the
		// default, as it states none) is not rope_parameters' 500000.
		{"rope_scaling vs rope_parameters", `,"rope_scaling":{"rope_type":"default"},"rope_parameters":{"rope_type":"default","rope_theta":500000}`, "rope_scaling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseQwen3(t, tc.extra)
			if err == nil {
				t.Fatalf("loaded with rope_theta %v; want an error naming %s", c.RopeTheta, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %s", err, tc.want)
			}
		})
	}
	// Agreeing statements load.
	c, err := parseQwen3(t, `,"rope_theta":1000000,"rope_parameters":{"rope_type":"default","rope_theta":1000000}`)
	if err != nil || c.RopeTheta != 1e6 {
		t.Fatalf("agreeing thetas: %v, %v", c, err)
	}
	// A theta only in the (legacy) rope_scaling dict is the base transformers 5 uses.
	c, err = parseQwen3(t, `,"rope_scaling":{"rope_type":"default","rope_theta":1000000}`)
	if err != nil || c.RopeTheta != 1e6 {
		t.Fatalf("rope_scaling.rope_theta only: theta %v, err %v; want 1e6", c.RopeTheta, err)
	}
}

// TestPartialRotaryFactorIsRefused: transformers' default RoPE rotates only
// int(head_dim·partial_rotary_factor) dims (compute_default_rope_parameters reads it from the
// config or, in transformers 5, from rope_parameters). Qwen3's apply_rotary_pos_emb rotates
// the whole head, so a factor below 1 is not a model this package computes: refuse it. 1 is
// the default and loads.
func TestPartialRotaryFactorIsRefused(t *testing.T) {
	for _, extra := range []string{
		`,"partial_rotary_factor":0.5`,
		`,"rope_parameters":{"rope_type":"default","rope_theta":10000,"partial_rotary_factor":0.5}`,
	} {
		c, err := parseQwen3(t, extra)
		if err == nil || !strings.Contains(err.Error(), "partial_rotary_factor") {
			t.Errorf("%s: err = %v (config %v), want it to name partial_rotary_factor", extra, err, c != nil)
		}
	}
	if _, err := parseQwen3(t, `,"partial_rotary_factor":1.0`); err != nil {
		t.Errorf("partial_rotary_factor 1: %v", err)
	}
}

// TestPerLayerTypeRopeParametersAreRefused: transformers 5 accepts rope_parameters keyed by
// layer type ({"full_attention": {"rope_type": "yarn", …}}). Read as one flat dict it has no
// rope_type and no rope_theta, so it would pass as default RoPE with the default base: refuse it.
func TestPerLayerTypeRopeParametersAreRefused(t *testing.T) {
	c, err := parseQwen3(t, `,"rope_parameters":{"full_attention":{"rope_type":"yarn","factor":4,"rope_theta":1000000}}`)
	if err == nil || !strings.Contains(err.Error(), "full_attention") {
		t.Fatalf("err = %v (loaded: %v), want a refusal naming full_attention", err, c != nil)
	}
}

// TestSlidingLayerTypesAreRefused: transformers 5 decides each layer's attention from
// layer_types when the config gives it (Qwen3Attention: sliding_window applies where
// layer_types[i] == "sliding_attention"), not only from use_sliding_window. Only full attention
// is implemented, so any other entry is refused, naming the layer; all-full loads.
func TestSlidingLayerTypesAreRefused(t *testing.T) {
	_, err := parseQwen3(t, `,"sliding_window":64,"layer_types":["full_attention","sliding_attention"]`)
	if err == nil || !strings.Contains(err.Error(), "layer_types[1]") {
		t.Fatalf("err = %v, want a refusal naming layer_types[1]", err)
	}
	if _, err := parseQwen3(t, `,"layer_types":["full_attention"]`); err == nil || !strings.Contains(err.Error(), "layer_types") {
		t.Fatalf("one entry for two layers: err = %v", err)
	}
	if _, err := parseQwen3(t, `,"layer_types":["full_attention","full_attention"]`); err != nil {
		t.Fatalf("all full attention: %v", err)
	}
}

// TestModelTypeMustMatchArchitecture: transformers' AutoModelForCausalLM builds the model from
// model_type (qwen3, qwen3_moe, qwen2_moe), while this package (as vLLM) goes by
// architectures[0]. A config whose two say different architectures would be two different
// models to the two readers: refuse it, naming both. An absent model_type is fine.
func TestModelTypeMustMatchArchitecture(t *testing.T) {
	_, err := ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen2_moe",` + fieldsBase + `}`))
	if err == nil || !strings.Contains(err.Error(), "model_type") {
		t.Fatalf("err = %v, want a refusal naming model_type", err)
	}
	for _, ok := range []string{
		`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3",` + fieldsBase + `}`,
		`{"architectures":["Qwen3ForCausalLM"],` + fieldsBase + `}`,
		`{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,` + fieldsBase + `}`,
		`{"architectures":["Qwen2MoeForCausalLM"],"model_type":"qwen2_moe","num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,` + fieldsBase + `}`,
	} {
		if _, err := ParseConfig([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
