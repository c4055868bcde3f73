package scorecache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestKeysSeparateEveryPart: changing any part of the tuple — fingerprint, instruction,
// truncation, query, item — gives another key, and moving bytes between parts does too.
func TestKeysSeparateEveryPart(t *testing.T) {
	opt := &relevancev1.ScoreOptions{}
	base := NewKeyer("fp", "inst", opt, "query").Key("item")
	for name, k := range map[string]Key{
		"fingerprint": NewKeyer("fp2", "inst", opt, "query").Key("item"),
		"instruction": NewKeyer("fp", "inst2", opt, "query").Key("item"),
		"truncation":  NewKeyer("fp", "inst", &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}, "query").Key("item"),
		"max tokens":  NewKeyer("fp", "inst", &relevancev1.ScoreOptions{MaxTokensPerItem: 7}, "query").Key("item"),
		"query":       NewKeyer("fp", "inst", opt, "query2").Key("item"),
		"item":        NewKeyer("fp", "inst", opt, "query").Key("item2"),
		"shifted":     NewKeyer("fp", "inst", opt, "queryi").Key("tem"),
	} {
		if k == base {
			t.Errorf("%s: same key", name)
		}
	}
	if again := NewKeyer("fp", "inst", nil, "query").Key("item"); again != base {
		t.Error("the same tuple (nil options = defaults) gave another key")
	}
}

// TestBudgetEvictsLeastRecentlyUsed: beyond the budget the least recently used go first.
func TestBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	c := New(64*entryBytes, 0, nil) // 64 entries
	k := NewKeyer("fp", "", nil, "q")
	var keys []Key
	for i := range 400 {
		key := k.Key(fmt.Sprint(i))
		keys = append(keys, key)
		c.Put(key, Entry{Score: float32(i)})
		if i == 0 {
			continue
		}
		c.Get(keys[0]) // keep the first one hot
	}
	st := c.Stats()
	if st.Entries > 64 || st.Bytes > 64*entryBytes {
		t.Errorf("%d entries, %d bytes over a budget of %d", st.Entries, st.Bytes, 64*entryBytes)
	}
	if e, ok := c.Get(keys[0]); !ok || e.Score != 0 {
		t.Error("the most recently used entry was evicted")
	}
	if _, ok := c.Get(keys[1]); ok {
		t.Error("an old, unused entry survived 400 puts in a 64-entry cache")
	}
	if st.Evictions == 0 {
		t.Error("no evictions counted")
	}
}

func TestTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(1<<20, time.Minute, func() time.Time { return now })
	key := NewKeyer("fp", "", nil, "q").Key("a")
	c.Put(key, Entry{Score: 0.5})
	now = now.Add(59 * time.Second)
	if _, ok := c.Get(key); !ok {
		t.Fatal("expired early")
	}
	now = now.Add(2 * time.Second)
	if _, ok := c.Get(key); ok {
		t.Fatal("served past its TTL")
	}
	if st := c.Stats(); st.Expired != 1 || st.Entries != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCacheableOutcomes(t *testing.T) {
	for st, want := range map[relevancev1.ItemStatus]bool{
		relevancev1.ItemStatus_ITEM_STATUS_OK: true, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED: true,
		relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG: true, relevancev1.ItemStatus_ITEM_STATUS_FAILED: false,
	} {
		if got := Cacheable(&relevancev1.ItemScore{Status: st}); got != want {
			t.Errorf("%v: cacheable %v, want %v", st, got, want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New(1<<16, time.Minute, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			k := NewKeyer("fp", "", nil, fmt.Sprint(w))
			for i := range 2000 {
				key := k.Key(fmt.Sprint(i % 300))
				if _, ok := c.Get(key); !ok {
					c.Put(key, Entry{Score: float32(i)})
				}
			}
		})
	}
	wg.Wait()
	// Four workers of 300 keys each overflow the budget (384 entries) when they run side by
	// side and fit when the scheduler runs them one after another, so how many hits they get
	// depends on scheduling (CI once saw none). What must hold either way: every lookup counted
	// once, the budget kept, and the cache still serving what it just stored.
	st := c.Stats()
	if st.Hits+st.Misses != 4*2000 || st.Bytes > 1<<16 || st.Entries <= 0 {
		t.Errorf("stats %+v: want 8000 lookups and at most %d bytes", st, 1<<16)
	}
	key := NewKeyer("fp", "", nil, "after").Key("x")
	c.Put(key, Entry{Score: 7})
	if e, ok := c.Get(key); !ok || e.Score != 7 {
		t.Errorf("after concurrent use: Get = %+v, %v; want the entry just stored", e, ok)
	}
}

// TestCachedTooLongKeepsItsError: the proto promises ItemScore.error is set for TOO_LONG, and the
// HTTP front's 422 quotes it; an item answered from the cache must read as the node's reply did.
func TestCachedTooLongKeepsItsError(t *testing.T) {
	fresh := &relevancev1.ItemScore{Index: 3, Id: "x", Status: relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG,
		Error: "prompt longer than the model's limit of 8192 tokens and truncation is NONE"}
	if !Cacheable(fresh) {
		t.Fatal("TOO_LONG is cacheable by design")
	}
	got := EntryOf(fresh, 40).ItemScore(3, "x")
	if got.GetError() != fresh.GetError() {
		t.Errorf("cached TOO_LONG item: error %q, the node said %q", got.GetError(), fresh.GetError())
	}
}

// TestSmallBudgetStillCaches: a budget that holds several entries (here 10) must cache some;
// split in 16 shards of budget/16 each, every shard is below one entry and nothing is ever kept,
// while the proxy reports the cache enabled.
func TestSmallBudgetStillCaches(t *testing.T) {
	c := New(10*entryBytes, 0, nil)
	k := NewKeyer("fp", "", nil, "q")
	c.Put(k.Key("item"), Entry{Score: 0.5})
	if _, ok := c.Get(k.Key("item")); !ok {
		t.Errorf("a budget of %d bytes (10 entries) kept nothing: %+v", 10*entryBytes, c.Stats())
	}
}

// TestErrorTextIsChargedToTheBudget: an entry's error text counts against the budget, so
// TOO_LONG entries with long messages cannot hold more memory than the budget says.
func TestErrorTextIsChargedToTheBudget(t *testing.T) {
	c := New(64*entryBytes, 0, nil)
	k := NewKeyer("fp", "", nil, "q")
	msg := strings.Repeat("x", entryBytes) // each entry costs two plain ones
	for i := range 64 {
		c.Put(k.Key(fmt.Sprint(i)), Entry{Status: relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, Error: msg})
	}
	if st := c.Stats(); st.Entries > 32 || st.Bytes > 64*entryBytes {
		t.Errorf("%d entries of %d bytes each, %d bytes in all, in a budget of %d", st.Entries, 2*entryBytes, st.Bytes, 64*entryBytes)
	}
	// Replacing an entry re-charges it.
	key := k.Key("63")
	c.Put(key, Entry{Score: 1})
	c.Put(key, Entry{Status: relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, Error: msg})
	if st := c.Stats(); st.Bytes != st.Entries*2*entryBytes {
		t.Errorf("%d bytes for %d entries of %d each after a replacement", st.Bytes, st.Entries, 2*entryBytes)
	}
}
