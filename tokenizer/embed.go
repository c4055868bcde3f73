package tokenizer

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// qwen3JSON is the Qwen3 tokenizer.json (11.4 MB) compressed with `zstd -19`; see
// assets/SOURCE.md for its provenance and licence. zstd rather than gzip: the file is smaller
// (1.6 MB against 2.1 MB) and decompresses several times faster, which start-up pays.
//
//go:embed assets/qwen3-tokenizer.json.zst
var qwen3JSON []byte

// DefaultJSON returns the bytes of the shipped Qwen3 tokenizer.json (a fresh copy per call).
func DefaultJSON() ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false))
	if err != nil {
		return nil, fmt.Errorf("shipped tokenizer: %w", err)
	}
	defer d.Close()
	out, err := d.DecodeAll(qwen3JSON, make([]byte, 0, 11_500_000))
	if err != nil {
		return nil, fmt.Errorf("shipped tokenizer: decompress: %w", err)
	}
	return out, nil
}

var defaultTok = sync.OnceValues(func() (*Tokenizer, error) {
	data, err := DefaultJSON()
	if err != nil {
		return nil, err
	}
	t, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("shipped tokenizer: %w", err)
	}
	return t, nil
})

// Default returns the shipped Qwen3 tokenizer, loaded on first use and shared afterwards.
func Default() (*Tokenizer, error) { return defaultTok() }
