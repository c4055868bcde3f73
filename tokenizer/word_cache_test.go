package tokenizer

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWordCacheBounded: many distinct words never grow the cache past its bound, and a word
// evicted by a shard reset still encodes the same.
func TestWordCacheBounded(t *testing.T) {
	tok := defaultTB(t)
	if tok.cache == nil {
		t.Skip("no word cache")
	}
	want := tok.EncodePlain(" zqxwvutsrp")
	for i := range 3 * cacheShards * shardCap {
		tok.EncodePlain(fmt.Sprintf(" w%dq", i))
	}
	n := 0
	for i := range tok.cache.shards {
		sh := &tok.cache.shards[i]
		sh.mu.RLock()
		if len(sh.m) > shardCap {
			t.Errorf("shard %d holds %d words, cap %d", i, len(sh.m), shardCap)
		}
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	if n > cacheShards*shardCap {
		t.Errorf("cache holds %d words, bound %d", n, cacheShards*shardCap)
	}
	if got := tok.EncodePlain(" zqxwvutsrp"); !cmp.Equal(got, want) {
		t.Errorf("re-encode after churn = %v, want %v", got, want)
	}
}
