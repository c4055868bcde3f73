package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// fingerprintTensorSample is how many bytes Fingerprint hashes at each end of every tensor.
const fingerprintTensorSample = 64 << 10

// FingerprintSettings are the load settings that change the arithmetic, and so the scores, of a
// loaded checkpoint.
type FingerprintSettings struct {
	// MaxTokens is the engine's prompt limit: it decides where over-long documents are cut.
	MaxTokens int
	// DType is the weights' dtype as loaded (qwen.Model.DType: "f32", "bf16" or "mixed").
	DType string
	// BF16Matmul is the bf16 matmul mode in effect (kernels.BF16MatmulMode); it is hashed only
	// when DType is not "f32", since f32 weights never take the bf16 paths.
	BF16Matmul string
	// Arithmetic names the bits the kernels give ("": this build's kernels.ArithmeticVersion,
	// what a loaded engine always uses).
	Arithmetic string
}

// Fingerprint identifies what a checkpoint folder scores with these settings: two engines with
// the same fingerprint give the same scores, and a change to anything that changes scores changes
// it. It is the hex of the first 16 bytes of a SHA-256 over, each length-prefixed:
//
//   - config.json's bytes;
//   - tokenizer.json's bytes (the shipped tokenizer's when the folder has none);
//   - the prompt template (prompt.Identity): head, tail, default instruction and the body's framing;
//   - safetensors.Checkpoint.Fingerprint: each file's size and whole header (tensor names, dtypes,
//     shapes, offsets, metadata) and 4 KiB of every MiB of its data;
//   - for every tensor of every file (files in shard order, tensors by name): its first and last
//     64 KiB, so a change near either end of any tensor shows, however small the tensor;
//   - Settings.MaxTokens, and Settings.BF16Matmul for bf16 weights;
//   - Settings.Arithmetic (kernels.ArithmeticVersion), so that a build whose kernels give other bits is another model
//     to the proxy's score cache and its one-model-per-request rule;
//   - tokenizer.Version, for the same reason when the tokenizer's code gives other ids.
//
// The weights are sampled, not hashed whole (hashing GBs would add seconds to every start): a
// change that falls only in the unsampled middle of a large tensor and in no 4 KiB sample is not
// seen. Retraining and fine-tuning change every tensor, so they always show. The cost is reading
// and hashing ≤ 128 KiB per tensor plus 0.4 % of the data, from the page cache the mapping has
// just filled when the files are hot.
//
// Settings that do not change scores are left out, so that nodes of one model agree: the kernel
// thread count (the kernels split rows and columns between threads, never a sum), the MoE kernel
// policy (every variant computes each real row with the same dot products and combines experts in
// expert order; padding rows are discarded) and the CPU's instruction set (kernels of one
// accuracy class differ in f32 rounding only; bit-identical logits were checked across threads
// 1/2 and policies fixed:128/16/exact/threshold on the small preset).
func Fingerprint(dir string, ck *safetensors.Checkpoint, s FingerprintSettings) (string, error) {
	h := sha256.New()
	field := func(name string, b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(name)))
		h.Write(n[:])
		h.Write([]byte(name))
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field("version", []byte("relevance-scorer-fingerprint/1"))
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	field("config.json", cfg)
	tok, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if errors.Is(err, fs.ErrNotExist) {
		tok, err = tokenizer.DefaultJSON()
	}
	if err != nil {
		return "", fmt.Errorf("fingerprint: tokenizer: %w", err)
	}
	field("tokenizer.json", tok)
	field("prompt", prompt.Identity())
	ckfp := ck.Fingerprint()
	field("safetensors", ckfp[:])
	files, err := shardFiles(dir)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	for _, f := range files {
		if err := hashTensorSamples(h, filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
	}
	field("max_tokens", binary.LittleEndian.AppendUint64(nil, uint64(s.MaxTokens)))
	if s.DType != "f32" {
		field("bf16_matmul", []byte(s.BF16Matmul))
	}
	arith := s.Arithmetic
	if arith == "" {
		arith = kernels.ArithmeticVersion
	}
	field("arithmetic", []byte(arith))
	field("tokenizer_code", []byte(tokenizer.Version))
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// shardFiles lists the folder's safetensors files in the order safetensors.OpenDir opens them:
// the index's shards sorted by name, or model.safetensors.
func shardFiles(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return []string{"model.safetensors"}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("model.safetensors.index.json: %w", err)
	}
	var names []string
	for _, s := range idx.WeightMap {
		names = append(names, filepath.Base(s))
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// hashTensorSamples writes the first and last fingerprintTensorSample bytes of every tensor of one
// safetensors file (by name) into h, read with pread rather than through the engine's mapping so
// that the fingerprint depends on nothing but the file.
func hashTensorSamples(h hash.Hash, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl > uint64(st.Size())-8 {
		return fmt.Errorf("%s: header length %d exceeds the file", path, hl)
	}
	head := make([]byte, 8+hl)
	if _, err := f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	hdr, err := safetensors.ParseHeader(head, st.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	buf := make([]byte, 2*fingerprintTensorSample)
	for _, t := range hdr.Tensors {
		size := t.End - t.Begin
		first := min(size, fingerprintTensorSample)
		last := min(size-first, fingerprintTensorSample)
		b := buf[:first+last]
		if _, err := f.ReadAt(b[:first], hdr.DataStart+t.Begin); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
		}
		if _, err := f.ReadAt(b[first:], hdr.DataStart+t.End-last); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
		}
		h.Write([]byte(t.Name))
		h.Write(b)
	}
	return nil
}
