package blockcache

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// lruEntryOverhead approximates the heap bytes an L1 entry costs besides
// its block (entry struct, map slot); it is counted against the capacity.
const lruEntryOverhead = 96

// LRUOptions configures NewLRU.
type LRUOptions struct {
	// Capacity is the on-heap bytes for blocks (plus per-entry overhead).
	Capacity int64
	// Shards splits the cache to reduce lock contention; each shard holds
	// Capacity/Shards. 0 picks 16 for capacities of 64 MiB and more, else 1.
	// Must be a power of two.
	Shards int
}

// LRU is the L1 block cache: on-heap, size-bounded, least-recently-used,
// for index and bloom blocks (HBase's LruBlockCache in the combined cache).
// It is sharded by key; each shard has its own lock and list. Counters are
// per-shard atomics.
type LRU struct {
	capacity int64
	mask     uint64
	shards   []lruShard
}

type lruShard struct {
	mu       sync.Mutex
	m        map[Key]*lruEntry
	head     lruEntry // sentinel: head.next is most recent
	size     int64
	capacity int64

	hits, misses, evictions atomic.Int64
	blocks, bytes           atomic.Int64
	_                       pad
}

type lruEntry struct {
	key        Key
	block      []byte
	prev, next *lruEntry
}

// NewLRU returns an empty L1 cache.
func NewLRU(opts LRUOptions) (*LRU, error) {
	if opts.Capacity <= 0 {
		return nil, fmt.Errorf("blockcache: L1 capacity must be positive, got %d", opts.Capacity)
	}
	n := opts.Shards
	if n == 0 {
		n = 1
		if opts.Capacity >= 64<<20 {
			n = 16
		}
	}
	if n < 1 || n&(n-1) != 0 || n > 1024 {
		return nil, fmt.Errorf("blockcache: L1 shards must be a power of two in [1, 1024], got %d", n)
	}
	c := &LRU{capacity: opts.Capacity, mask: uint64(n - 1), shards: make([]lruShard, n)}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[Key]*lruEntry)
		s.head.next, s.head.prev = &s.head, &s.head
		s.capacity = opts.Capacity / int64(n)
	}
	return c, nil
}

func (c *LRU) shard(k Key) *lruShard { return &c.shards[k.hash()&c.mask] }

// Capacity returns the cache's capacity in bytes.
func (c *LRU) Capacity() int64 { return c.capacity }

// Get returns a cached block. The bytes are shared with other readers and
// must not be modified.
func (c *LRU) Get(key Key) ([]byte, bool) {
	s := c.shard(key)
	s.mu.Lock()
	e := s.m[key]
	if e == nil {
		s.mu.Unlock()
		s.misses.Add(1)
		return nil, false
	}
	s.unlink(e)
	s.pushFront(e)
	b := e.block
	s.mu.Unlock()
	s.hits.Add(1)
	return b, true
}

// Put caches block under key, evicting least recently used blocks to make
// room. The cache keeps block (no copy): the caller must not modify it
// afterwards. A cached key is replaced. It returns ErrTooLarge for a block
// larger than a shard.
func (c *LRU) Put(key Key, block []byte) error {
	s := c.shard(key)
	cost := int64(len(block)) + lruEntryOverhead
	if cost > s.capacity {
		return fmt.Errorf("blockcache: L1: %d-byte block %v: %w (shard capacity %d)", len(block), key, ErrTooLarge, s.capacity)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[key]; old != nil {
		s.remove(old)
	}
	for s.size+cost > s.capacity {
		s.remove(s.head.prev)
		s.evictions.Add(1)
	}
	e := &lruEntry{key: key, block: block}
	s.m[key] = e
	s.pushFront(e)
	s.size += cost
	s.blocks.Add(1)
	s.bytes.Add(int64(len(block)))
	return nil
}

// Evict removes a block and reports whether it was cached (not counted as
// an eviction: Stats.Evictions counts those made for room).
func (c *LRU) Evict(key Key) bool {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil {
		return false
	}
	s.remove(e)
	return true
}

// EvictFile removes every block of a store file and returns how many.
func (c *LRU) EvictFile(file uint64) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if k.File == file {
				s.remove(e)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

func (s *lruShard) unlink(e *lruEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (s *lruShard) pushFront(e *lruEntry) {
	e.prev = &s.head
	e.next = s.head.next
	s.head.next.prev = e
	s.head.next = e
}

func (s *lruShard) remove(e *lruEntry) {
	s.unlink(e)
	delete(s.m, e.key)
	s.size -= int64(len(e.block)) + lruEntryOverhead
	s.blocks.Add(-1)
	s.bytes.Add(-int64(len(e.block)))
}

// Stats returns the cache's counters (read from atomics, no locks).
// UsedBytes includes the per-entry overhead; Classes is empty.
func (c *LRU) Stats() Stats {
	st := Stats{Capacity: c.capacity}
	for i := range c.shards {
		s := &c.shards[i]
		st.Hits += s.hits.Load()
		st.Misses += s.misses.Load()
		st.Evictions += s.evictions.Load()
		st.Blocks += s.blocks.Load()
		st.SizeBytes += s.bytes.Load()
	}
	st.UsedBytes = st.SizeBytes + st.Blocks*lruEntryOverhead
	st.FreeBytes = st.Capacity - st.UsedBytes
	return st
}
