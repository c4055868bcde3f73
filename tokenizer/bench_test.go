package tokenizer

import (
	"fmt"
	"testing"
	"time"
)

var benchSizes = []int{10, 100, 1 << 10, 10 << 10, 100 << 10, 1 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkEncode: mixed Chinese/English product text. The word cache is warm after the first
// iteration, as in a server that tokenizes similar items all day; BenchmarkEncodeNoCache shows
// the BPE cost alone.
func BenchmarkEncode(b *testing.B) {
	tok := defaultTB(b)
	for _, n := range benchSizes {
		text := productText(42, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode(text)
			}
		})
	}
}

func BenchmarkEncodeNoCache(b *testing.B) {
	data, err := DefaultJSON()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := Load(data)
	if err != nil {
		b.Fatal(err)
	}
	tok.cache = nil
	for _, n := range benchSizes {
		text := productText(42, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode(text)
			}
		})
	}
}

func BenchmarkEstimateTokens(b *testing.B) {
	for _, n := range []int{1 << 10, 100 << 10} {
		text := productText(42, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				EstimateTokens(text)
			}
		})
	}
}

// BenchmarkLoadDefault is what process start-up pays for Default: decompress + parse + tables.
func BenchmarkLoadDefault(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		data, err := DefaultJSON()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Load(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecompressDefault(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DefaultJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDefaultLoadTime logs the cold load time (reported in the note) and fails only on a gross
// regression: start-up must stay well under a second even on a loaded CI machine.
func TestDefaultLoadTime(t *testing.T) {
	start := time.Now()
	data, err := DefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
	unzip := time.Since(start)
	if _, err := Load(data); err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	t.Logf("Default load: decompress %v, total %v", unzip, total)
	if !raceEnabled && total > 10*time.Second {
		t.Errorf("loading the shipped tokenizer took %v", total)
	}
}
