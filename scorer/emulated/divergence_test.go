package emulated

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
)

// TestDefaultPromptLimitIsTheRealEnginesDefault: with no max_tokens configured (the bench
// cluster's default, and every profile `bench calibrate` writes has max_tokens 0), an emulated
// node accepts the prompts a real node accepts: the same limit in Info (the reply's
// max_prompt_tokens) and the same cut of a long document.
func TestDefaultPromptLimitIsTheRealEnginesDefault(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate(dir, model.GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	real, err := model.Load(dir, model.Options{}) // scorer serve's default: max_tokens 0
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	emu, _ := newEngine(t, nil) // profile max_tokens 0, Options.MaxTokens 0
	if got, want := emu.Info().MaxTokens, real.Info().MaxTokens; got != want {
		t.Errorf("default prompt limit: emulated %d, real %d", got, want)
	}
	long := strings.Repeat("espresso machine with a steam wand ", 600) // ≈ 3,600 tokens
	want, err := real.Tokenize("", "coffee", []string{long}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := emu.Tokenize("", "coffee", []string{long}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items[0]) != len(want.Items[0]) || got.Truncated[0] != want.Truncated[0] {
		t.Errorf("a long document: emulated keeps %d tokens (cut %d), real keeps %d (cut %d)",
			len(got.Items[0]), got.Truncated[0], len(want.Items[0]), want.Truncated[0])
	}
}
