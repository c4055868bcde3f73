// Package prefixcache is the scorer's cross-request prefix cache: finished prefix KV (or any
// payload with a byte size) kept under a memory budget with LRU eviction, keyed by a 128-bit hash
// of (model identity, prefix tokens). It knows nothing about the engine's KV layout.
//
// Visibility follows the batch that computes a prefix. A forward pass opens an Epoch; the first
// Acquire of a key that is not published registers a reservation at once, visible only inside
// that epoch (a later Acquire of the same key in the same epoch gets the value stored with Fill, so
// one pass computes each prefix once). Commit publishes the epoch's filled reservations when the
// pass succeeds; Abort (or Commit of a reservation never filled) drops them, so a failed or
// cancelled pass never leaves KV another request can read.
//
// Concurrent reservations of one key by two epochs never block: each epoch computes its own
// private copy; the first to commit publishes it, a later commit keeps the published entry and
// drops its own copy (the payloads are equal: same model, same tokens).
//
// Entries come in two levels, counted apart (Stats, metrics) but stored, keyed and evicted alike:
// a request's whole prefix (LevelPrefix: template head, instruction and query) and the template
// head and instruction alone (LevelTemplate), which every query of an instruction shares and
// the engine extends with the query's tokens when the whole prefix is not cached.
//
// Only published entries count against the budget; an entry larger than the whole budget is not
// kept. A Cache is safe for concurrent use; an Epoch is meant for one goroutine (the forward pass)
// but is also safe to share. The zero Cache is not usable: call New.
package prefixcache

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Key identifies a prefix: 128 bits of SHA-256 over the model identity and the tokens.
type Key [16]byte

// KeyOf hashes the model identity (name, weights fingerprint: anything that changes the KV)
// and the prefix tokens. SHA-256 keeps accidental collisions out of reach: a collision would
// serve another prompt's KV silently.
func KeyOf(model string, tokens []int32) Key {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(model)))
	h.Write(n[:])
	h.Write([]byte(model))
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
	}
	h.Write(buf)
	var k Key
	copy(k[:], h.Sum(nil))
	return k
}

// Options configure a Cache.
type Options struct {
	// BudgetBytes bounds the bytes of published entries; must be > 0.
	BudgetBytes int64
	// Registerer receives the cache's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Level says what a lookup is for; the hit and miss counters are kept per level.
type Level uint8

const (
	// LevelPrefix: a request's whole prefix (template head, instruction, query).
	LevelPrefix Level = iota
	// LevelTemplate: the template head and instruction alone, looked up when the whole prefix
	// missed.
	LevelTemplate
)

// Stats is a snapshot of the cache's counters. Hits and Misses count whole-prefix lookups
// (LevelPrefix), TemplateHits and TemplateMisses template lookups (LevelTemplate).
type Stats struct {
	Entries        int   `json:"entries"`
	Bytes          int64 `json:"bytes"`
	BudgetBytes    int64 `json:"budget_bytes"`
	Pending        int   `json:"pending"`
	Hits           int64 `json:"hits"`
	Misses         int64 `json:"misses"`
	TemplateHits   int64 `json:"template_hits"`
	TemplateMisses int64 `json:"template_misses"`
	Evictions      int64 `json:"evictions"`
}

// Cache holds published prefix payloads and the epochs' pending reservations.
type Cache struct {
	budget int64

	mu        sync.Mutex
	entries   map[Key]*list.Element // of *entry; published only
	lru       *list.List            // front = most recently used
	bytes     int64
	pending   int // reservations not yet committed or aborted, all epochs
	nextEpoch uint64
	hits      [2]int64 // per Level
	misses    [2]int64
	evictions int64

	m *metrics
}

type entry struct {
	key   Key
	value any
	size  int64
}

type metrics struct {
	hits, misses [2]prometheus.Counter // per Level
	evictions    prometheus.Counter
}

// New returns an empty cache with the given budget.
func New(opt Options) (*Cache, error) {
	if opt.BudgetBytes <= 0 {
		return nil, fmt.Errorf("prefix cache: budget_bytes must be > 0, got %d", opt.BudgetBytes)
	}
	c := &Cache{
		budget:  opt.BudgetBytes,
		entries: make(map[Key]*list.Element),
		lru:     list.New(),
	}
	m, err := newMetrics(opt.Registerer, c)
	if err != nil {
		return nil, err
	}
	c.m = m
	return c, nil
}

func newMetrics(reg prometheus.Registerer, c *Cache) (*metrics, error) {
	m := &metrics{
		hits: [2]prometheus.Counter{
			prometheus.NewCounter(prometheus.CounterOpts{
				Name: "relevance_scorer_prefix_cache_hits_total",
				Help: "Prefix lookups served from a published cache entry.",
			}),
			prometheus.NewCounter(prometheus.CounterOpts{
				Name: "relevance_scorer_prefix_cache_template_hits_total",
				Help: "Template (template head + instruction) lookups served from a published cache entry, after the whole prefix missed.",
			}),
		},
		misses: [2]prometheus.Counter{
			prometheus.NewCounter(prometheus.CounterOpts{
				Name: "relevance_scorer_prefix_cache_misses_total",
				Help: "Prefix lookups that had to compute the prefix.",
			}),
			prometheus.NewCounter(prometheus.CounterOpts{
				Name: "relevance_scorer_prefix_cache_template_misses_total",
				Help: "Template (template head + instruction) lookups that had to compute the template.",
			}),
		},
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relevance_scorer_prefix_cache_evictions_total",
			Help: "Published prefix entries evicted to stay within the memory budget.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	bytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relevance_scorer_prefix_cache_bytes",
		Help: "Bytes of published prefix entries.",
	}, func() float64 { return float64(c.Stats().Bytes) })
	entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relevance_scorer_prefix_cache_entries",
		Help: "Published prefix entries.",
	}, func() float64 { return float64(c.Stats().Entries) })
	for _, col := range []prometheus.Collector{m.hits[0], m.misses[0], m.hits[1], m.misses[1], m.evictions, bytes, entries} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("prefix cache metrics: %w", err)
		}
	}
	return m, nil
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Entries: len(c.entries), Bytes: c.bytes, BudgetBytes: c.budget, Pending: c.pending,
		Hits: c.hits[LevelPrefix], Misses: c.misses[LevelPrefix],
		TemplateHits: c.hits[LevelTemplate], TemplateMisses: c.misses[LevelTemplate],
		Evictions: c.evictions,
	}
}

// Contains reports whether key is published, without touching LRU order or counters (for
// cost estimates).
func (c *Cache) Contains(key Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[key]
	return ok
}

// Begin opens an epoch for one batch (forward pass). End it with Commit or Abort.
func (c *Cache) Begin() *Epoch {
	c.mu.Lock()
	c.nextEpoch++
	id := c.nextEpoch
	c.mu.Unlock()
	return &Epoch{c: c, id: id, res: make(map[Key]*Reservation)}
}

// Epoch is one batch's view of the cache: published entries plus its own reservations.
type Epoch struct {
	c  *Cache
	id uint64

	mu    sync.Mutex
	res   map[Key]*Reservation
	order []*Reservation // commit order = reservation order
	done  bool
}

// Reservation is a prefix this epoch computes. Fill stores the computed payload, which the
// epoch's later lookups see; it becomes visible to other epochs only at Commit.
type Reservation struct {
	e   *Epoch
	key Key

	// Guarded by e.mu: an epoch's goroutines may Fill while others Acquire the same key.
	value  any
	size   int64
	filled bool
}

// Key is the reserved key.
func (r *Reservation) Key() Key { return r.key }

// Fill stores the computed payload and its size in bytes. Call it once the prefix is computed;
// a reservation never filled is dropped at Commit. Fill after the epoch's Commit or Abort does
// nothing: the payload is never published.
func (r *Reservation) Fill(value any, sizeBytes int64) {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	if r.e.done {
		return
	}
	r.value, r.size, r.filled = value, sizeBytes, true
}

// Lookup is the result of Epoch.Acquire.
type Lookup struct {
	// Value is the payload when Hit or Local is set.
	Value any
	// Hit: Value is a published entry (computed by an earlier, successful batch).
	Hit bool
	// Local: Value was computed earlier in this same epoch (not yet published).
	Local bool
	// Res is set on a miss: this caller computes the prefix, then calls Res.Fill. It is also set
	// when the epoch reserved the key earlier but has not filled it yet (Value nil, Local false).
	Res *Reservation
}

// ErrEpochDone is returned by Acquire after Commit or Abort.
var ErrEpochDone = errors.New("prefix cache: epoch already committed or aborted")

// Acquire looks key up for this epoch: a published entry (Hit), a payload this epoch already
// computed (Local), or a miss, which registers a reservation at once and returns it. It is
// AcquireAt(LevelPrefix, key).
func (e *Epoch) Acquire(key Key) (Lookup, error) { return e.AcquireAt(LevelPrefix, key) }

// AcquireAt is Acquire counted under level (Stats, metrics); hits and misses are counted only for
// lookups that reach the published entries (not for keys this epoch reserved before).
func (e *Epoch) AcquireAt(level Level, key Key) (Lookup, error) {
	if level > LevelTemplate {
		return Lookup{}, fmt.Errorf("prefix cache: unknown level %d", level)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return Lookup{}, ErrEpochDone
	}
	if r, ok := e.res[key]; ok {
		if r.filled {
			return Lookup{Value: r.value, Local: true}, nil
		}
		return Lookup{Res: r}, nil
	}
	c := e.c
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.hits[level]++
		v := el.Value.(*entry).value
		c.mu.Unlock()
		c.m.hits[level].Inc()
		return Lookup{Value: v, Hit: true}, nil
	}
	c.misses[level]++
	c.pending++
	c.mu.Unlock()
	c.m.misses[level].Inc()
	r := &Reservation{e: e, key: key}
	e.res[key] = r
	e.order = append(e.order, r)
	return Lookup{Res: r}, nil
}

// Commit ends the epoch after a successful pass: every filled reservation is published (unless
// another epoch published the key first, in which case that entry stays) and unfilled ones are
// dropped; then entries are evicted, least recently used first, until the budget holds. It
// returns how many entries it published. Commit after Commit or Abort does nothing.
func (e *Epoch) Commit() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return 0
	}
	e.done = true
	c := e.c
	published := 0
	evicted := 0
	c.mu.Lock()
	for _, r := range e.order {
		c.pending--
		if !r.filled || r.size > c.budget || r.size < 0 {
			continue
		}
		if el, ok := c.entries[r.key]; ok {
			// Another epoch committed the same prefix first; keep its entry (equal payload).
			c.lru.MoveToFront(el)
			continue
		}
		c.entries[r.key] = c.lru.PushFront(&entry{key: r.key, value: r.value, size: r.size})
		c.bytes += r.size
		published++
	}
	evicted = c.evictLocked()
	c.mu.Unlock()
	c.m.evictions.Add(float64(evicted))
	e.res, e.order = nil, nil
	return published
}

// Abort ends the epoch after a failed or cancelled pass: every reservation is dropped and
// nothing it computed is ever visible to another epoch. Abort after Commit does nothing.
func (e *Epoch) Abort() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	e.done = true
	e.c.mu.Lock()
	e.c.pending -= len(e.order)
	e.c.mu.Unlock()
	e.res, e.order = nil, nil
}

// evictLocked drops least recently used entries until bytes ≤ budget; c.mu must be held.
func (c *Cache) evictLocked() int {
	n := 0
	for c.bytes > c.budget {
		el := c.lru.Back()
		if el == nil {
			break
		}
		en := el.Value.(*entry)
		c.lru.Remove(el)
		delete(c.entries, en.key)
		c.bytes -= en.size
		c.evictions++
		n++
	}
	return n
}
