package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

var (
	genMu   sync.Mutex
	genDirs = map[GenSpec]string{}
	genRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if genRoot != "" {
		os.RemoveAll(genRoot)
	}
	os.Exit(code)
}

// generated returns the folder of a generated checkpoint, writing it once per test binary.
func generated(tb testing.TB, spec GenSpec) string {
	tb.Helper()
	genMu.Lock()
	defer genMu.Unlock()
	if d, ok := genDirs[spec]; ok {
		return d
	}
	if genRoot == "" {
		var err error
		if genRoot, err = os.MkdirTemp("", "scorer-model-test-"); err != nil {
			tb.Fatal(err)
		}
	}
	d := filepath.Join(genRoot, fmt.Sprintf("%s-%s-%d-%s-%v", spec.Arch, spec.Preset, spec.Seed, spec.DType, spec.FusedExperts))
	if err := Generate(d, spec); err != nil {
		tb.Fatal(err)
	}
	genDirs[spec] = d
	return d
}

func load(tb testing.TB, dir string, opt Options) *Engine {
	tb.Helper()
	e, err := Load(dir, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// testDocs differ from the calibration documents.
var testDocs = []string{
	"Grind the beans fine and tamp firmly for a better shot.",
	"The Amazon is the largest rainforest on Earth.",
	"A French press is inexpensive and easy to clean.",
	"東京タワーは赤と白の塔です。",
	"Error 404: page not found",
	"  leading spaces and a tab\tinside",
	"Tea contains less caffeine than coffee.",
	"",
	"Prices of espresso machines range from 50 to 5000 dollars.",
	"The Pythagorean theorem relates the sides of a right triangle.",
}

var tinyArchs = []string{"qwen3", "qwen3_moe", "qwen2_moe"}

func TestScoresSpread(t *testing.T) {
	for _, arch := range tinyArchs {
		t.Run(arch, func(t *testing.T) {
			e := load(t, generated(t, GenSpec{Arch: arch, Preset: "tiny", Seed: 1}), Options{})
			scores, _, err := e.Score(context.Background(), "", "cheap espresso at home", testDocs, scorer.TokenizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := 1.0, 0.0
			distinct := map[float64]bool{}
			inner := 0
			for _, s := range scores {
				lo, hi = math.Min(lo, s), math.Max(hi, s)
				distinct[s] = true
				if s > 0.01 && s < 0.99 {
					inner++
				}
			}
			// Spread over (0, 1): a wide range, most scores away from saturation, all distinct.
			if hi-lo < 0.3 || 10*inner < 7*len(scores) || len(distinct) < len(scores) {
				t.Fatalf("scores %v: want spread over (0,1), mostly unsaturated, distinct", scores)
			}
		})
	}
}

// TestSharedPrefixEqualsOnePairAtATime compares the engine's prefix-shared pass, with several
// queries in one Forward, against each whole prompt scored alone (empty prefix).
func TestSharedPrefixEqualsOnePairAtATime(t *testing.T) {
	specs := []GenSpec{
		{Arch: "qwen3", Preset: "tiny", Seed: 1},
		{Arch: "qwen3_moe", Preset: "tiny", Seed: 1},
		{Arch: "qwen2_moe", Preset: "tiny", Seed: 1},
	}
	for _, spec := range specs {
		t.Run(fmt.Sprintf("%s/%s/fused=%v", spec.Arch, spec.DType, spec.FusedExperts), func(t *testing.T) {
			e := load(t, generated(t, spec), Options{})
			queries := []string{"cheap espresso at home", "largest rainforest", "右三角形"}
			var groups []*scorer.Group
			for i, q := range queries {
				g, err := e.Tokenize("", q, testDocs[i:], scorer.TokenizeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				groups = append(groups, g)
			}
			st, err := e.Forward(context.Background(), groups)
			if err != nil {
				t.Fatal(err)
			}
			// One instruction: the three queries' template is computed once.
			tmpl := groups[0].TemplateLen
			if tmpl == 0 || groups[1].TemplateLen != tmpl || groups[2].TemplateLen != tmpl {
				t.Errorf("template lengths %d %d %d: want one, > 0", tmpl, groups[1].TemplateLen, groups[2].TemplateLen)
			}
			if st.PrefixTokens != len(groups[0].Prefix)+len(groups[1].Prefix)+len(groups[2].Prefix)-2*tmpl {
				t.Errorf("prefix tokens %d", st.PrefixTokens)
			}
			for gi, g := range groups {
				for i, doc := range testDocs[gi:] {
					alone := &scorer.Group{Items: [][]int32{e.Builder().Whole("", queries[gi], doc)}}
					if _, err := e.Forward(context.Background(), []*scorer.Group{alone}); err != nil {
						t.Fatal(err)
					}
					got, want := g.Logits[i], alone.Logits[0]
					if math.Abs(float64(got-want)) > 1e-4*math.Max(1, math.Abs(float64(want))) {
						t.Errorf("query %d doc %d: shared-prefix logit %v, alone %v", gi, i, got, want)
					}
				}
			}
		})
	}
}

func TestTruncationAndTooLong(t *testing.T) {
	dir := generated(t, GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1})
	e := load(t, dir, Options{MaxTokens: 90})
	long := strings.Repeat("espresso crema pressure grind ", 30)
	g, err := e.Tokenize("", "espresso", []string{"short", long}, scorer.TokenizeOptions{NoTruncate: true})
	if err != nil {
		t.Fatal(err)
	}
	if !g.TooLong[1] || g.TooLong[0] {
		t.Fatalf("TooLong = %v", g.TooLong)
	}
	if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
		t.Fatal(err)
	}
	if g.Logits[1] != 0 || g.Logits[0] == 0 {
		t.Errorf("logits %v: want the too-long item unscored", g.Logits)
	}
	g, err = e.Tokenize("", "espresso", []string{long}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Truncated[0] == 0 || len(g.Prefix)+len(g.Items[0]) != 90 {
		t.Fatalf("truncated %d, %d tokens", g.Truncated[0], len(g.Prefix)+len(g.Items[0]))
	}
	if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
		t.Fatal(err)
	}
	if info := e.Info(); info.MaxTokens != 90 || info.Architecture != "Qwen3ForCausalLM" || info.DType != "bf16" || info.MoEPolicy != "" {
		t.Errorf("info %+v", info)
	}
	if s := e.EstimateSeconds([]*scorer.Group{g}); !(s > 0) {
		t.Errorf("estimate %v", s)
	}
	if st, err := e.Forward(context.Background(), nil); err != nil || st.ItemTokens != 0 {
		t.Errorf("empty forward: %+v, %v", st, err)
	}
	bad := &scorer.Group{Items: [][]int32{{1, 2}}, TooLong: []bool{false, true}}
	if _, err := e.Forward(context.Background(), []*scorer.Group{bad}); err == nil {
		t.Error("mismatched TooLong: no error")
	}
}

func TestShardedCheckpoint(t *testing.T) {
	src := generated(t, GenSpec{Arch: "qwen2_moe", Preset: "tiny", Seed: 1})
	dir := t.TempDir()
	// Re-write the single file as two shards plus an index.
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var a, b []safetensors.WriteTensor
	weightMap := map[string]string{}
	for i, n := range ck.Names() {
		tn, err := ck.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		w := safetensors.WriteTensor{Name: n, Shape: tn.Shape, DType: tn.DType(), F32: tn.F32, BF16: tn.BF16}
		if i%2 == 0 {
			a = append(a, w)
			weightMap[n] = "model-00001-of-00002.safetensors"
		} else {
			b = append(b, w)
			weightMap[n] = "model-00002-of-00002.safetensors"
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(safetensors.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), a, nil))
	must(safetensors.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), b, nil))
	idx := `{"metadata":{},"weight_map":{`
	first := true
	for n, f := range weightMap {
		if !first {
			idx += ","
		}
		first = false
		idx += fmt.Sprintf("%q:%q", n, f)
	}
	must(os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx+"}}"), 0o644))
	// No tokenizer.json: the shipped tokenizer is used.
	for _, f := range []string{"config.json"} {
		bs, err := os.ReadFile(filepath.Join(src, f))
		must(err)
		must(os.WriteFile(filepath.Join(dir, f), bs, 0o644))
	}
	one := load(t, src, Options{})
	two := load(t, dir, Options{})
	s1, _, err := one.Score(context.Background(), "", "rainforest", testDocs[:3], scorer.TokenizeOptions{})
	must(err)
	s2, _, err := two.Score(context.Background(), "", "rainforest", testDocs[:3], scorer.TokenizeOptions{})
	must(err)
	for i := range s1 {
		if s1[i] != s2[i] {
			t.Errorf("doc %d: single file %v, sharded %v", i, s1[i], s2[i])
		}
	}
}

func TestLoadErrors(t *testing.T) {
	src := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	copyDir := func(t *testing.T, edit func(dir string)) string {
		t.Helper()
		dir := t.TempDir()
		for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		edit(dir)
		return dir
	}
	editConfig := func(from, to string) func(string) {
		return func(dir string) {
			p := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644)
		}
	}
	tests := []struct {
		name string
		edit func(dir string)
		opt  Options
		want string
	}{
		{"no config", func(dir string) { os.Remove(filepath.Join(dir, "config.json")) }, Options{}, "config.json"},
		{"unknown arch", editConfig("Qwen3MoeForCausalLM", "MixtralForCausalLM"), Options{}, `unsupported architecture "MixtralForCausalLM"`},
		{"bad config", editConfig(`"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`), Options{}, "num_experts_per_tok"},
		{"wrong layer count", editConfig(`"num_hidden_layers": 4`, `"num_hidden_layers": 5`), Options{}, "layer 4: missing"},
		{"no weights", func(dir string) { os.Remove(filepath.Join(dir, "model.safetensors")) }, Options{}, "model.safetensors"},
		{"truncated weights", func(dir string) { os.Truncate(filepath.Join(dir, "model.safetensors"), 1000) }, Options{}, "safetensors"},
		{"max tokens", func(string) {}, Options{MaxTokens: 1 << 20}, "exceeds the model's max_position_embeddings"},
		{"moe policy", func(string) {}, Options{MoEPolicy: "fastest"}, `unknown moe policy "fastest"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(copyDir(t, tt.edit), tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestGenerateDeterministic(t *testing.T) {
	a := generated(t, GenSpec{Arch: "qwen2_moe", Preset: "tiny", Seed: 1})
	b := t.TempDir()
	if err := Generate(b, GenSpec{Arch: "qwen2_moe", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		x, err1 := os.ReadFile(filepath.Join(a, f))
		y, err2 := os.ReadFile(filepath.Join(b, f))
		if err1 != nil || err2 != nil || string(x) != string(y) {
			t.Errorf("%s differs between two runs with the same seed (%v, %v)", f, err1, err2)
		}
	}
	if err := Generate(t.TempDir(), GenSpec{Arch: "llama", Preset: "tiny"}); err == nil || !strings.Contains(err.Error(), `unknown arch "llama"`) {
		t.Errorf("bad arch: err = %v", err)
	}
	if err := Generate(t.TempDir(), GenSpec{Arch: "qwen3", Preset: "huge"}); err == nil || !strings.Contains(err.Error(), `unknown preset "huge"`) {
		t.Errorf("bad preset: err = %v", err)
	}
}

// TestF16Checkpoint converts a generated bf16 checkpoint to F16 (exact for bf16 values in the
// half range) and checks it loads (widened to f32) and scores the same.
func TestF16Checkpoint(t *testing.T) {
	src := generated(t, GenSpec{Arch: "qwen3_moe", Preset: "tiny", Seed: 1})
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.WriteTensor
	for _, n := range ck.Names() {
		tn, err := ck.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		h := make([]uint16, len(tn.BF16))
		for i, b := range tn.BF16 {
			h[i] = safetensors.F32ToF16(math.Float32frombits(uint32(b) << 16))
		}
		ts = append(ts, safetensors.WriteTensor{Name: n, DType: safetensors.F16, Shape: tn.Shape, BF16: h})
	}
	dir := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(src, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	e16 := load(t, dir, Options{})
	if e16.Info().DType != "f32" {
		t.Errorf("F16 weights should be held as f32, got %s", e16.Info().DType)
	}
	ebf := load(t, src, Options{})
	s16, _, err := e16.Score(context.Background(), "", "espresso", testDocs[:4], scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sbf, _, err := ebf.Score(context.Background(), "", "espresso", testDocs[:4], scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range s16 {
		if math.Abs(s16[i]-sbf[i]) > 1e-3 {
			t.Errorf("doc %d: f16 %v, bf16 %v", i, s16[i], sbf[i])
		}
	}
}
