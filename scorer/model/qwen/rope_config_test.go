package qwen

import "testing"

// TestRopeScalingBothSpellingsOfDefault: transformers writes a legacy rope_scaling back with
// both spellings of its type ({"type": "default", "rope_type": "default"}); that is default
// RoPE and must load.
func TestRopeScalingBothSpellingsOfDefault(t *testing.T) {
	good := `"vocab_size":300,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4`
	_, err := ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],` + good + `,"rope_scaling":{"type":"default","rope_type":"default"}}`))
	if err != nil {
		t.Fatalf("default RoPE refused: %v", err)
	}
	// And a real scaling type spelled both ways is refused naming it once.
	_, err = ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],` + good + `,"rope_scaling":{"type":"yarn","rope_type":"yarn","factor":4}}`))
	if err == nil || err.Error() != `config.json: rope scaling type "yarn" is not supported (only default RoPE)` {
		t.Fatalf("err = %v", err)
	}
}
