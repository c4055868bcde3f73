package model

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

// copyDir copies a checkpoint folder's files into a new temporary folder.
func copyDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

func fingerprintOf(tb testing.TB, dir string, s FingerprintSettings) string {
	tb.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer ck.Close()
	fp, err := Fingerprint(dir, ck, s)
	if err != nil {
		tb.Fatal(err)
	}
	return fp
}

// flipInTensorSample changes one byte of a tensor's first 64 KiB that lies outside every sample
// of safetensors.Checkpoint.Fingerprint (4 KiB every MiB), so only the per-tensor sample sees it.
func flipInTensorSample(tb testing.TB, dir string) string {
	tb.Helper()
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	h := f.Header()
	f.Close()
	for _, t := range h.Tensors {
		off := t.Begin + min(t.End-t.Begin, fingerprintTensorSample) - 1 // in the data section
		if off%(1<<20) < 4<<10 || h.DataStart+t.End-off <= 4<<10 {
			continue // inside a stride sample or the file's last 4 KiB
		}
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		b[h.DataStart+off] ^= 0x01
		if err := os.WriteFile(path, b, 0o644); err != nil {
			tb.Fatal(err)
		}
		return t.Name
	}
	tb.Fatal("no tensor with a byte outside the checkpoint's stride samples")
	return ""
}

func TestFingerprint(t *testing.T) {
	base := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	set := FingerprintSettings{MaxTokens: 2048, DType: "bf16", BF16Matmul: kernels.BF16MatmulAuto}
	want := fingerprintOf(t, base, set)
	if b, err := hex.DecodeString(want); err != nil || len(b) != 16 {
		t.Fatalf("fingerprint %q: want 32 hex digits", want)
	}
	if got := fingerprintOf(t, copyDir(t, base), set); got != want {
		t.Errorf("a copy of the checkpoint: fingerprint %s, want %s", got, want)
	}

	weight := copyDir(t, base)
	name := flipInTensorSample(t, weight)
	config := copyDir(t, base)
	cb, err := os.ReadFile(filepath.Join(config, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cb2 := strings.Replace(string(cb), `"rms_norm_eps": 0.000001`, `"rms_norm_eps": 0.00001`, 1)
	if cb2 == string(cb) {
		t.Fatalf("config.json has no rms_norm_eps to change:\n%s", cb)
	}
	if err := os.WriteFile(filepath.Join(config, "config.json"), []byte(cb2), 0o644); err != nil {
		t.Fatal(err)
	}
	seed2 := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 2})
	widen := set
	widen.BF16Matmul = kernels.BF16MatmulWiden
	bf16 := set
	bf16.BF16Matmul = kernels.BF16MatmulBF16
	maxTok := set
	maxTok.MaxTokens = 1024
	arith := set
	arith.Arithmetic = kernels.ArithmeticVersion + "+1"
	for _, tc := range []struct {
		name string
		dir  string
		set  FingerprintSettings
	}{
		{name: "one weight byte of " + name, dir: weight, set: set},
		{name: "config key", dir: config, set: set},
		{name: "other seed", dir: seed2, set: set},
		{name: "bf16_matmul widen", dir: base, set: widen},
		{name: "bf16_matmul bf16", dir: base, set: bf16},
		{name: "max tokens", dir: base, set: maxTok},
		// A build whose kernels give other bits scores as another model.
		{name: "kernels' arithmetic version", dir: base, set: arith},
	} {
		if got := fingerprintOf(t, tc.dir, tc.set); got == want {
			t.Errorf("%s: fingerprint unchanged (%s)", tc.name, got)
		}
	}

	// f32 weights never take a bf16 path: the mode is not part of their fingerprint.
	f32 := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1, DType: "f32"})
	a := fingerprintOf(t, f32, FingerprintSettings{MaxTokens: 2048, DType: "f32", BF16Matmul: kernels.BF16MatmulAuto})
	if b := fingerprintOf(t, f32, FingerprintSettings{MaxTokens: 2048, DType: "f32", BF16Matmul: kernels.BF16MatmulWiden}); a != b {
		t.Errorf("f32 weights: bf16_matmul changed the fingerprint %s → %s", a, b)
	}
}

func TestLoadReportsFingerprint(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	e := load(t, dir, Options{MoEPolicy: "fixed:16", MaxTokens: 512})
	want := fingerprintOf(t, dir, FingerprintSettings{MaxTokens: 512, DType: e.model.DType, BF16Matmul: kernels.BF16MatmulMode()})
	if got := e.Info().Fingerprint; got != want {
		t.Errorf("Info().Fingerprint = %q, want %q", got, want)
	}
}
