package model

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model/qwen"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// GenSpec describes a generated checkpoint (`scorer gen-model`).
type GenSpec struct {
	Arch   string // qwen3, qwen3_moe or qwen2_moe
	Preset string // tiny or small (see qwen.Preset)
	Seed   uint64
	DType  string // bf16 (default) or f32
	// FusedExperts writes experts as fused mlp.experts.gate_up_proj / down_proj tensors.
	FusedExperts bool
}

// calibrationQueries and calibrationDocs are the prompts the generated model's score head is
// calibrated on: varied lengths, scripts and topics, so that scores of ordinary documents spread.
var calibrationQueries = []string{
	"how do I make a cheap espresso at home?",
	"history of the river city",
	"机器学习 model error",
	"best player score this year",
}

var calibrationDocs = []string{
	"A moka pot makes strong coffee on a stove for a few dollars.",
	"The 2018 World Cup final was played in Moscow.",
	"Espresso needs about nine bars of pressure; cheap machines use steam instead.",
	"北京是中华人民共和国的首都。",
	"Buy a hand grinder and an AeroPress for an espresso-like shot.",
	"Photosynthesis converts light into chemical energy.",
	"",
	"1234567890",
	"Cold brew steeps grounds in cold water for twelve hours.",
	"Les croissants sont faits avec du beurre.",
	"def main():\n    print('hello')",
	"Milk frothers heat and aerate milk for lattes.",
	"The stock market fell three percent on Tuesday.",
	"Café cubano is sweetened espresso from Cuba.",
	"Quantum computers use qubits.",
	"Instant coffee dissolves in hot water.",
}

// syntheticDocs makes n deterministic documents of 2 to 25 words: with hidden sizes of hundreds,
// the direction of largest variance of the last state is only found from many samples.
func syntheticDocs(n int) []string { return syntheticTexts(n, 2, 25, 7) }

// syntheticTexts makes n deterministic texts of lo to hi words from a mixed word list.
func syntheticTexts(n, lo, hi int, seed uint64) []string {
	words := strings.Fields("coffee espresso the a of and to in is for with on that by this from at as " +
		"river mountain price market city music history science water light energy code error " +
		"machine learning model search query result page book film game team player score year " +
		"北京 東京 café über naïve 2024 3.14 100% $5 (note) — \"quoted\" x+y=z")
	rng := rand.New(rand.NewPCG(2024, seed))
	docs := make([]string, n)
	for i := range docs {
		w := make([]string, lo+rng.IntN(hi-lo+1))
		for j := range w {
			w[j] = words[rng.IntN(len(words))]
		}
		docs[i] = strings.Join(w, " ")
	}
	return docs
}

// Generate writes a deterministic random-initialised checkpoint into dir: config.json (Hugging
// Face keys), model.safetensors, tokenizer.json (the shipped Qwen3 tokenizer) and
// tokenizer_config.json. The final norm is calibrated (qwen.Calibrate) on reranker prompts so
// that scores spread over (0, 1).
func Generate(dir string, spec GenSpec) error {
	cfg, err := qwen.Preset(spec.Arch, spec.Preset)
	if err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	var dtype safetensors.DType
	switch spec.DType {
	case "", "bf16":
		dtype = safetensors.BF16
	case "f32":
		dtype = safetensors.F32
	default:
		return fmt.Errorf("generate model: dtype must be bf16 or f32, got %q", spec.DType)
	}
	tok, err := tokenizer.Default()
	if err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	if tok.VocabSize() > cfg.VocabSize {
		return fmt.Errorf("generate model: tokenizer has %d tokens, more than the preset's vocab_size %d", tok.VocabSize(), cfg.VocabSize)
	}
	yes, _ := tok.TokenID("yes")
	no, _ := tok.TokenID("no")
	ts, err := qwen.Generate(cfg, qwen.GenOptions{Seed: spec.Seed, DType: dtype, Fused: spec.FusedExperts})
	if err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	// Calibrate on several queries' prompts, as the engine runs them (prefix groups).
	b := prompt.New(tok, 0)
	// Many queries with a few documents each: the query's own offset on the logit is learned
	// (and projected out) from the spread of the queries' means.
	docs := append(append([]string(nil), calibrationDocs...), syntheticDocs(96)...)
	queries := append(append([]string(nil), calibrationQueries...), syntheticTexts(24, 1, 8, 99)...)
	var samples []*qwen.Group
	for i, q := range queries {
		g, err := b.Build("", q, docs[i*len(docs)/len(queries):(i+1)*len(docs)/len(queries)], scorer.TokenizeOptions{})
		if err != nil {
			return fmt.Errorf("generate model: %w", err)
		}
		samples = append(samples, &qwen.Group{Prefix: g.Prefix, Items: g.Items})
	}
	if err := qwen.Calibrate(cfg, ts, [2]int{int(yes), int(no)}, samples, 2); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	if err := qwen.WriteCheckpoint(dir, cfg, ts, dtype); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	tj, err := tokenizer.DefaultJSON()
	if err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	tc, _ := json.MarshalIndent(map[string]any{
		"tokenizer_class":              "Qwen2Tokenizer",
		"model_max_length":             cfg.MaxPositionEmbeddings,
		"eos_token":                    "<|im_end|>",
		"pad_token":                    "<|endoftext|>",
		"padding_side":                 "left",
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"errors":                       "replace",
		"clean_up_tokenization_spaces": false,
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), append(tc, '\n'), 0o644); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	return nil
}
