// Package scorecache is the proxy's score cache: the score of a (model, instruction, truncation,
// query, item) seen before is answered without a node.
//
// Key. A 128-bit hash (two independent hash/maphash seeds, fixed for the process) of the serving
// model's fingerprint — what the nodes report of their weights, config, tokenizer, template and
// numeric settings —, the instruction, the truncation settings, the query and the item's text,
// each length-prefixed so that no two tuples share a byte stream. A node whose fingerprint differs
// never reads or fills another's entries: after a model update the old scores are simply never
// asked for again, and age out. (Infinity's cache, keyed by the strings alone, served the old
// model's scores after a swap.)
//
// Budget. Entries are charged their key, value and bookkeeping (entryBytes); the least recently
// used go first when the budget is exceeded, and entries older than the TTL are misses. The cache
// is split in up to 16 shards by key, each with its own lock and an equal part of the budget, so
// that lookups of one request's hundreds of items do not serialise other requests (a budget too
// small for 16 shards of 64 entries gets fewer).
//
// A Cache is safe for concurrent use. The zero value is not usable: use New.
package scorecache

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Key identifies one (model, instruction, truncation, query, item).
type Key [2]uint64

// Entry is a cached item score.
type Entry struct {
	Score, Logit    float32
	Status          relevancev1.ItemStatus
	Tokens          uint32
	TruncatedTokens uint32
	// PrefixTokens is the shared prefix (template, instruction, query) the item was scored
	// after, in tokens: with Tokens, the prompt a hit stands for in the reply's usage.
	PrefixTokens uint32
	// Error is the node's message for an item it did not score (TOO_LONG: the limit it is
	// over), so that a hit reads as the node's reply did; "" for a scored item.
	Error string
}

// PromptTokens is the prompt tokens the item stands for: its prefix and its own tokens when it
// was scored, none when it was refused as too long (as a node counts them).
func (e Entry) PromptTokens() uint64 {
	if e.Status == relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG {
		return 0
	}
	return uint64(e.PrefixTokens) + uint64(e.Tokens)
}

// Cacheable reports whether an item's outcome may be cached: scored (possibly truncated) or
// refused as too long — deterministic outcomes of the model and the request. Failures are not.
func Cacheable(s *relevancev1.ItemScore) bool {
	switch s.GetStatus() {
	case relevancev1.ItemStatus_ITEM_STATUS_OK, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED,
		relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, relevancev1.ItemStatus_ITEM_STATUS_UNSPECIFIED:
		return true
	}
	return false
}

// EntryOf is the cacheable part of a node's item score, scored after prefixTokens of shared
// prefix.
func EntryOf(s *relevancev1.ItemScore, prefixTokens uint32) Entry {
	e := Entry{Score: s.GetScore(), Logit: s.GetLogit(), Status: s.GetStatus(), Tokens: s.GetTokens(),
		TruncatedTokens: s.GetTruncatedTokens(), PrefixTokens: prefixTokens}
	if e.Status == relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG {
		e.Error = s.GetError()
	}
	return e
}

// ItemScore rebuilds an item score for request item i.
func (e Entry) ItemScore(i int, id string) *relevancev1.ItemScore {
	return &relevancev1.ItemScore{Index: uint32(i), Id: id, Score: e.Score, Logit: e.Logit, Status: e.Status, Tokens: e.Tokens, TruncatedTokens: e.TruncatedTokens, Error: e.Error}
}

var seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// Keyer hashes one request's prefix once and each of its items from there.
type Keyer struct{ h [2]maphash.Hash }

// NewKeyer starts the keys of a request: model fingerprint, instruction, options, query.
func NewKeyer(fingerprint, instruction string, opts *relevancev1.ScoreOptions, query string) *Keyer {
	k := &Keyer{}
	var num [8]byte
	for j := range k.h {
		h := &k.h[j]
		h.SetSeed(seeds[j])
		for _, s := range []string{fingerprint, instruction, query} {
			binary.LittleEndian.PutUint64(num[:], uint64(len(s)))
			h.Write(num[:])
			h.WriteString(s)
		}
		binary.LittleEndian.PutUint64(num[:], uint64(opts.GetTruncation())<<32|uint64(opts.GetMaxTokensPerItem()))
		h.Write(num[:])
	}
	return k
}

// Key is item text's key under the keyer's prefix.
func (k *Keyer) Key(text string) Key {
	var out Key
	var num [8]byte
	binary.LittleEndian.PutUint64(num[:], uint64(len(text)))
	for j := range k.h {
		h := k.h[j] // a copy: the prefix state is reused for every item
		h.Write(num[:])
		h.WriteString(text)
		out[j] = h.Sum64()
	}
	return out
}

// entryBytes is what one entry costs: key, value, list element and map slot, roughly (its Error
// text, when it has one, is charged on top: cost).
const entryBytes = 16 + 40 + 48 + 48 + 32

func cost(e Entry) int64 { return entryBytes + int64(len(e.Error)) }

// maxShards is how many shards a large budget is split in; a small one gets fewer, each of at
// least minShardEntries entries: split 16 ways, a budget of 10 entries would leave every shard
// under one and cache nothing.
const (
	maxShards       = 16
	minShardEntries = 64
)

// Cache is a byte-budgeted LRU of entries with a TTL.
type Cache struct {
	ttl    time.Duration
	now    func() time.Time
	shards []shard
}

type shard struct {
	mu     sync.Mutex
	budget int64
	bytes  int64
	lru    list.List // of *item, most recent at the front
	index  map[Key]*list.Element
	stats  Stats
}

type item struct {
	key   Key
	entry Entry
	at    time.Time
}

// Stats are the cache's counters.
type Stats struct {
	Hits, Misses, Evictions, Expired uint64
	Entries, Bytes                   int64
}

// New returns a cache of budgetBytes whose entries live ttl (≤ 0: no expiry); now is the clock
// (nil: time.Now).
func New(budgetBytes int64, ttl time.Duration, now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	n := int(min(max(budgetBytes/(minShardEntries*entryBytes), 1), maxShards))
	c := &Cache{ttl: ttl, now: now, shards: make([]shard, n)}
	for i := range c.shards {
		c.shards[i].budget = budgetBytes / int64(n)
		c.shards[i].index = map[Key]*list.Element{}
	}
	return c
}

func (c *Cache) shard(k Key) *shard { return &c.shards[k[0]%uint64(len(c.shards))] }

// Get returns k's entry, if cached and not expired.
func (c *Cache) Get(k Key) (Entry, bool) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.index[k]
	if !ok {
		s.stats.Misses++
		return Entry{}, false
	}
	it := el.Value.(*item)
	if c.ttl > 0 && c.now().Sub(it.at) > c.ttl {
		s.remove(el)
		s.stats.Expired++
		s.stats.Misses++
		return Entry{}, false
	}
	s.lru.MoveToFront(el)
	s.stats.Hits++
	return it.entry, true
}

// Put stores k's entry, evicting the least recently used beyond the budget.
func (c *Cache) Put(k Key, e Entry) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.index[k]; ok {
		it := el.Value.(*item)
		s.bytes += cost(e) - cost(it.entry)
		it.entry, it.at = e, c.now()
		s.lru.MoveToFront(el)
	} else {
		if s.budget < cost(e) {
			return
		}
		s.index[k] = s.lru.PushFront(&item{key: k, entry: e, at: c.now()})
		s.bytes += cost(e)
	}
	for s.bytes > s.budget {
		s.remove(s.lru.Back())
		s.stats.Evictions++
	}
}

func (s *shard) remove(el *list.Element) {
	s.lru.Remove(el)
	it := el.Value.(*item)
	delete(s.index, it.key)
	s.bytes -= cost(it.entry)
}

// Stats sums the shards' counters.
func (c *Cache) Stats() Stats {
	var out Stats
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		out.Hits += s.stats.Hits
		out.Misses += s.stats.Misses
		out.Evictions += s.stats.Evictions
		out.Expired += s.stats.Expired
		out.Entries += int64(len(s.index))
		out.Bytes += s.bytes
		s.mu.Unlock()
	}
	return out
}
