package model

import (
	"container/list"
	"sync"

	"github.com/relevance-scoring/relevance/scorer/model/qwen"
)

// kvCache keeps finished prefix KV across requests, keyed by the prefix's exact token bytes
// (so two prefixes never collide), under a memory budget with least-recently-used eviction.
// Forward inserts a prefix only after its pass succeeded, so a failed or cancelled batch never
// leaves KV that another request can read. Safe for concurrent use.
type kvCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	lru    *list.List // front: most recent; values are *kvEntry
	byKey  map[string]*list.Element
}

type kvEntry struct {
	key string
	kv  *qwen.PrefixKV
}

func newKVCache(budget int64) *kvCache {
	return &kvCache{budget: budget, lru: list.New(), byKey: map[string]*list.Element{}}
}

func (c *kvCache) get(key string) *qwen.PrefixKV {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*kvEntry).kv
}

func (c *kvCache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byKey[key]
	return ok
}

// put inserts kv unless it alone exceeds the budget, evicting the least recently used entries.
func (c *kvCache) put(key string, kv *qwen.PrefixKV) {
	size := kv.Bytes() + int64(len(key))
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.budget {
		return
	}
	if el, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(el)
		return
	}
	for c.used+size > c.budget {
		el := c.lru.Back()
		e := el.Value.(*kvEntry)
		c.used -= e.kv.Bytes() + int64(len(e.key))
		delete(c.byKey, e.key)
		c.lru.Remove(el)
	}
	c.byKey[key] = c.lru.PushFront(&kvEntry{key: key, kv: kv})
	c.used += size
}

// stats reports the entries and bytes held.
func (c *kvCache) stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.used
}
