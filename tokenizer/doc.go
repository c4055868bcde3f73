// Package tokenizer is a Hugging Face tokenizer.json tokenizer for the byte-level BPE family
// (Qwen2/Qwen3, GPT-2 style), exact against the reference implementation, plus a fast token
// count estimator (EstimateTokens) for the proxy's cost model.
//
// The pipeline, one file each: load.go parses tokenizer.json into lookup tables built once;
// encode.go matches added tokens (Encode only), normalizes to NFC and drives scan.go, the Qwen
// (and GPT-2) pre-tokenizer written as a hand scanner (its regex needs look-ahead, which Go's
// regexp lacks); bpe.go merges each pre-token's bytes by merge rank; decode.go maps ids back to
// bytes and text. vocab.go and pairs.go are the lookup tables, jsonscan.go the loader's parser.
//
// The package ships the Qwen3 tokenizer (Default, DefaultJSON), so it works without any files.
// A *Tokenizer is immutable after loading and safe for concurrent use; it has no useful zero
// value (use Load, LoadFile or Default).
package tokenizer
