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

// fakeGenerator is a scorer binary whose gen-model writes a minimal complete checkpoint to --out.
func fakeGenerator(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --out ]; then out=$2; fi; shift; done\n" +
		"mkdir -p \"$out\" && echo '{}' > \"$out/config.json\" && echo '{}' > \"$out/tokenizer.json\" && echo x > \"$out/model.safetensors\"\n"
	if err := os.WriteFile(filepath.Join(bin, "scorer"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestEnsureModelGeneratesFreshAndInterruptedCheckpoints: make run's default checkpoint is
// generated on a fresh machine, regenerated when an interrupted generation left it incomplete
// (and a stale temporary file beside it), and a model.dir written with a trailing slash works
// (its temporary folder was put inside it, deleted with it, and the rename failed).
func TestEnsureModelGeneratesFreshAndInterruptedCheckpoints(t *testing.T) {
	bin := fakeGenerator(t)
	root := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	cfg, err := LoadConfig(filepath.Join(wd, "../../configs/local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.BinDir = bin
	cfg.LogDir = t.TempDir()
	c, err := New(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureModel(context.Background()); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	// interrupted: the folder has only config.json
	dir := cfg.Model.Dir
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := os.WriteFile(dir+".tmp", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureModel(context.Background()); err != nil {
		t.Fatalf("incomplete generated: %v", err)
	}
	if !ModelComplete(dir) {
		t.Fatal("not regenerated")
	}
	// The same folder, written with a trailing slash, incomplete again.
	cfg2 := Config{BinDir: bin, LogDir: t.TempDir(), Model: Model{Dir: "models/small-qwen3_moe-seed1/"}}
	c2, err := New(cfg2, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := c2.EnsureModel(context.Background()); err != nil {
		t.Fatalf("trailing slash: %v", err)
	}
}
