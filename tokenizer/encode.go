package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Encode tokenizes text the way Hugging Face does by default: added tokens (<|im_start|>,
// <think>, ...) written in the text map to their ids; the text between them is normalized,
// pre-tokenized and merged.
func (t *Tokenizer) Encode(text string) []int32 {
	if len(t.added) == 0 {
		return t.EncodePlain(text)
	}
	dst := make([]int32, 0, len(text)/3+4)
	start := 0
	for i := 0; i < len(text); i++ {
		cands := t.addedFirst[text[i]]
		if cands == nil {
			continue
		}
		for _, a := range cands {
			if strings.HasPrefix(text[i:], a.Content) {
				dst = t.appendPlain(dst, text[start:i])
				dst = append(dst, a.ID)
				i += len(a.Content) - 1
				start = i + 1
				break
			}
		}
	}
	return t.appendPlain(dst, text[start:])
}

// EncodePlain tokenizes text with no added-token matching: "<|im_start|>" in the text is
// ordinary characters. Use it for user-supplied strings inside a prompt template. Note that
// Hugging Face's split_special_tokens=True is narrower: it still matches added tokens marked
// special=false (Qwen3's <think>, <tool_call>, ...); EncodePlain matches none.
func (t *Tokenizer) EncodePlain(text string) []int32 {
	return t.appendPlain(make([]int32, 0, len(text)/3+4), text)
}

// zeroWidthSpace is what BreakAddedTokens writes into added-token text: invisible, neither a
// letter, a digit nor white space to the pre-tokenizer, unchanged by NFC, and in no added token.
const zeroWidthSpace = "\u200b"

// BreakAddedTokens returns text with U+200B (zero width space) after the first character of
// every added token written in it, so that a tokenizer that matches added tokens in text (Encode,
// Hugging Face's by default, llama.cpp's with parse_special) reads it as ordinary characters:
// Encode(BreakAddedTokens(s)) equals EncodePlain(BreakAddedTokens(s)). It is for user text sent
// to a server that tokenizes it itself, where EncodePlain cannot be asked for. Every position
// where an added token starts is broken, nested or overlapping ones included, and the inserted
// character is in no added token, so no match survives; an added token of one character cannot
// be broken (Qwen3 has none). Text without added tokens is returned as it is.
func (t *Tokenizer) BreakAddedTokens(text string) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(text); i++ {
		for _, a := range t.addedFirst[text[i]] {
			if strings.HasPrefix(text[i:], a.Content) {
				_, n := utf8.DecodeRuneInString(text[i:])
				if start == 0 {
					b.Grow(len(text) + 4*len(zeroWidthSpace))
				}
				b.WriteString(text[start : i+n])
				b.WriteString(zeroWidthSpace)
				start = i + n
				i += n - 1 // scan on from the next character: a token starting inside this one is broken too
				break
			}
		}
	}
	if start == 0 {
		return text
	}
	b.WriteString(text[start:])
	return b.String()
}

// AppendPlain is EncodePlain that appends to dst, for callers that build one sequence from
// several parts without intermediate slices.
func (t *Tokenizer) AppendPlain(dst []int32, text string) []int32 {
	return t.appendPlain(dst, text)
}

func (t *Tokenizer) appendPlain(dst []int32, text string) []int32 {
	if len(text) == 0 {
		return dst
	}
	text = t.normalize(text)
	for i := 0; i < len(text); {
		j := t.split(text, i)
		dst = t.appendWord(dst, text[i:j])
		i = j
	}
	return dst
}

// normalize is non-empty text as the pre-tokenizer reads it: NFC (when the tokenizer's normalizer
// is) and the prefix space (when it adds one).
func (t *Tokenizer) normalize(text string) string {
	if t.nfc && !isASCII(text) && !norm.NFC.IsNormalString(text) {
		text = nfc(text)
	}
	if t.addPrefixSpace && text[0] != ' ' {
		text = " " + text
	}
	return text
}

// CountPlainUpTo is len(EncodePlain(text)) when that is at most limit, and otherwise some count
// over limit, found with less work than the whole count: what a proxy needs to decide whether a
// 64 KB document fits an 8K prompt. Exact by construction, with no argument about where the text
// may be cut (a prefix cut before a space or a line break can count more tokens than the whole
// text: " a        \n " 3, " a        \n    \n" 2): the whole text is normalized and
// pre-tokenized as EncodePlain does it, the pre-tokenizer's look-ahead seeing the real text after
// each piece, and each pre-token merges on its own into at least one id. So any number of
// pre-tokens is a lower bound, and so are the ids of the first pieces: a text of more pre-tokens
// than limit (prose: some 1.2 ids a piece) is over it without any merging, and otherwise the
// merging stops at the first piece that takes the count past limit.
func (t *Tokenizer) CountPlainUpTo(text string, limit int) int {
	if len(text) == 0 {
		return 0
	}
	text = t.normalize(text)
	pieces := 0
	for i := 0; i < len(text) && pieces <= limit; pieces++ {
		i = t.split(text, i)
	}
	if pieces > limit {
		return pieces
	}
	var buf [64]int32
	n := 0
	for i := 0; i < len(text) && n <= limit; {
		j := t.split(text, i)
		n += len(t.appendWord(buf[:0], text[i:j]))
		i = j
	}
	return n
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appendWord appends the BPE ids of one pre-token, through the word cache for words of
// cacheable length (single bytes need no cache, long words rarely repeat).
func (t *Tokenizer) appendWord(dst []int32, word string) []int32 {
	if len(word) == 1 {
		return append(dst, t.byteID[word[0]])
	}
	if len(word) > maxCachedWord || t.cache == nil {
		return t.appendBPE(dst, word)
	}
	h := maphash.String(t.cache.seed, word)
	sh := &t.cache.shards[h%cacheShards]
	sh.mu.RLock()
	ids, ok := sh.m[word]
	sh.mu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.appendBPE(dst, word)
	sh.put(strings.Clone(word), append([]int32(nil), dst[n:]...))
	return dst
}

// wordCache memoizes BPE results per pre-token. It is bounded: a shard that fills up is emptied
// (cheap, and frequent words come back at once), so memory stays under roughly
// cacheShards × shardCap × (word + ids) bytes.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 32
	shardCap      = 2048
	maxCachedWord = 64
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
	_  [40]byte // keep shards on separate cache lines
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
	return c
}

func (s *cacheShard) put(word string, ids []int32) {
	s.mu.Lock()
	if len(s.m) >= shardCap {
		clear(s.m)
	}
	s.m[word] = ids
	s.mu.Unlock()
}
