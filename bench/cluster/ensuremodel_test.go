package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEnsureModelNeverDeletesAUsersFolder: README tells users to set model.dir to a downloaded
// checkpoint. A folder that ModelComplete does not accept (here: no tokenizer.json, which the
// scorer itself does not need; or a download cut short) must not be deleted and replaced by
// generated random weights: EnsureModel may refuse it, never RemoveAll it.
func TestEnsureModelNeverDeletesAUsersFolder(t *testing.T) {
	bin := t.TempDir()
	// A stand-in `scorer gen-model` that writes a complete checkpoint into --out.
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --out ]; then out=$2; fi; shift; done\n" +
		"mkdir -p \"$out\" && echo '{}' > \"$out/config.json\" && echo '{}' > \"$out/tokenizer.json\" && echo x > \"$out/model.safetensors\"\n"
	if err := os.WriteFile(filepath.Join(bin, "scorer"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "Qwen3-Reranker-0.6B")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "model.safetensors")
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("the user's "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Config{BinDir: bin, LogDir: t.TempDir(), Model: Model{Dir: dir}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.EnsureModel(ctx)
	b, rerr := os.ReadFile(weights)
	if rerr != nil || string(b) != "the user's model.safetensors" {
		t.Fatalf("EnsureModel (err %v) replaced the user's checkpoint %s: model.safetensors now %q, %v", err, dir, b, rerr)
	}
	if err == nil {
		t.Errorf("EnsureModel accepted an incomplete folder silently")
	}
}
