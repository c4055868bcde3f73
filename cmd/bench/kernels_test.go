package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestKernelsJSONContract(t *testing.T) {
	var stdout bytes.Buffer
	err := kernelsMain([]string{"--json", "--quick", "--layers", "qwen1.5-moe", "--dists", "balanced-1x576,zipf1.0-4x576",
		"--reps", "1", "--calibrate", "20ms", "--gemm-time", "5ms"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	for _, k := range []string{"peak_f32_gflops", "gemm_f32_gflops", "gemm_bf16_gflops", "gemm_f32_gflops_2t",
		"gemm_f32_efficiency", "gemm_f32_2t_speedup", "gemm_bf16_widen_gflops", "gemm_bf16_auto_gflops", "gemm_bf16_over_f32"} {
		if _, ok := got[k].(float64); !ok {
			t.Errorf("%s missing or not a number: %v", k, got[k])
		}
	}
	dists, _ := got["distributions"].([]any)
	if len(dists) != 2 {
		t.Fatalf("distributions: got %d entries, want 2", len(dists))
	}
	for _, d := range dists {
		m := d.(map[string]any)
		name, _ := m["name"].(string)
		if !strings.HasPrefix(name, "qwen1.5-moe/") {
			t.Errorf("name %q", name)
		}
		for _, k := range []string{"auto_regret", "threshold_regret"} {
			if v, ok := m[k].(float64); !ok || v < 0 {
				t.Errorf("%s: %s = %v, want a number ≥ 0", name, k, m[k])
			}
		}
		if vs, _ := m["variants"].([]any); len(vs) != 5 {
			t.Errorf("%s: %d variants, want 5", name, len(vs))
		}
	}
}

func TestKernelsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--layers", "gpt"},
		{"--dtype", "f16"},
		{"--threads", "0"},
		{"--dists", "nope"},
		{"--clock", "sundial"},
	} {
		if err := kernelsMain(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
