package blockcache

import "fmt"

// Combined routes blocks by kind, like HBase's CombinedBlockCache: index,
// bloom and meta blocks to the on-heap L1, data blocks to the off-heap L2.
// Either tier may be nil: without L2 data blocks go to L1; without L1
// everything goes to L2; with neither nothing is cached.
type Combined struct {
	L1 *LRU
	L2 *BucketCache
}

// NewCombined returns a combined cache over the given tiers.
func NewCombined(l1 *LRU, l2 *BucketCache) *Combined { return &Combined{L1: l1, L2: l2} }

func (c *Combined) useL2(kind BlockKind) bool {
	return c.L2 != nil && (kind == KindData || c.L1 == nil)
}

// Get looks a block up in the tier its kind belongs to. The returned
// reference must be released (a no-op for L1 hits).
func (c *Combined) Get(key Key, kind BlockKind) (BlockRef, bool) {
	if c.useL2(kind) {
		return c.L2.Get(key)
	}
	if c.L1 == nil {
		return BlockRef{}, false
	}
	b, ok := c.L1.Get(key)
	if !ok {
		return BlockRef{}, false
	}
	return BlockRef{data: b}, true
}

// Put caches a block in the tier its kind belongs to. L2 copies the bytes
// off-heap; L1 keeps block itself, so the caller must not modify it.
// prio is used by L2 (PriorityMemory for IN_MEMORY families).
func (c *Combined) Put(key Key, kind BlockKind, block []byte, prio Priority) error {
	if c.useL2(kind) {
		return c.L2.Put(key, block, prio)
	}
	if c.L1 == nil {
		return fmt.Errorf("blockcache: no cache tier configured for %s blocks", kind)
	}
	return c.L1.Put(key, block)
}

// CacheOnWrite reports whether writers should cache data blocks as they
// write them (the L2 setting; false without L2).
func (c *Combined) CacheOnWrite() bool { return c.L2 != nil && c.L2.CacheOnWrite() }

// EvictFile removes a store file's blocks from both tiers.
func (c *Combined) EvictFile(file uint64) int {
	n := 0
	if c.L1 != nil {
		n += c.L1.EvictFile(file)
	}
	if c.L2 != nil {
		n += c.L2.EvictFile(file)
	}
	return n
}
