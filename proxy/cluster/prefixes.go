package cluster

import "sync"

// prefixMemory is what the proxy believes a node holds in its prefix cache: the keys of the
// query prefixes whose batches the node answered, newest last, at most capacity of them (the
// oldest forgotten first, as the node's LRU would evict them). Safe for concurrent use.
type prefixMemory struct {
	mu   sync.Mutex
	set  map[uint64]struct{}
	ring []uint64
	next int
}

// prefixCapacity bounds the keys remembered per node: about what a 256 MiB cache holds of
// ~100-token prefixes on the small model, and 64 KiB of proxy memory per node.
const prefixCapacity = 4096

func (m *prefixMemory) remember(key uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.set == nil {
		m.set = make(map[uint64]struct{}, prefixCapacity)
		m.ring = make([]uint64, 0, prefixCapacity)
	}
	if _, ok := m.set[key]; ok {
		return
	}
	if len(m.ring) < prefixCapacity {
		m.ring = append(m.ring, key)
	} else {
		delete(m.set, m.ring[m.next])
		m.ring[m.next] = key
		m.next = (m.next + 1) % prefixCapacity
	}
	m.set[key] = struct{}{}
}

func (m *prefixMemory) holds(key uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.set[key]
	return ok
}

func (m *prefixMemory) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set, m.ring, m.next = nil, nil, 0
}

// Remember records that the node answered a batch of the prefix key (0: none), and whether it
// reused the prefix from its cache: a node that has reused a prefix once has a cache, and from
// then on it is believed to hold every prefix it answered, until it forgets them (capacity) or
// restarts (health lost).
func (n *Node) Remember(key uint64, reused bool) {
	if reused {
		n.cacheSeen.Store(true)
	}
	if key != 0 {
		n.prefixes.remember(key)
	}
}

// Holds reports whether the node is believed to hold the prefix key in its cache.
func (n *Node) Holds(key uint64) bool {
	return key != 0 && n.cacheSeen.Load() && n.prefixes.holds(key)
}

// KeepsTemplates reports whether the node keeps each instruction's template KV (the prompt up to
// the query, shared by every query) and computes only the rest of a new query's prefix: as its
// latest reply that computed a prefix showed.
func (n *Node) KeepsTemplates() bool { return n.keepsTemplates.Load() }

// observePrefixWork records what the node computed of a prefix of p tokens: all of it (no
// template kept) or part of it (a template kept). A prefix wholly reused says nothing.
func (n *Node) observePrefixWork(p, computed int) {
	switch {
	case p <= 0 || computed <= 0:
	case computed >= p:
		n.keepsTemplates.Store(false)
	default:
		n.keepsTemplates.Store(true)
	}
}
