// Package blockcache caches store-file blocks in two tiers, like HBase's
// CombinedBlockCache: an on-heap L1 LRU for index and bloom blocks and an
// off-heap L2 bucket cache for data blocks.
//
// # L1: LRU
//
// LRU is a sharded, size-bounded least-recently-used cache of []byte blocks
// keyed by (file id, offset). Each shard has a mutex, a map and a list; the
// capacity (--blockcache-onheap-size) counts block bytes plus a fixed
// per-entry overhead and lives inside the Go heap limit.
//
// # L2: bucket cache
//
// BucketCache keeps data blocks in an offheap.Arena (charged to an
// offheap.Budget, hugepages when configured). The arena is divided into
// buckets (DefaultBucketSize, 2 MiB, one hugepage); each bucket serves one
// size class at a time and is split into equal slots. DefaultSizeClasses run
// from 5 KiB to 513 KiB, each a block size plus 1 KiB for header and
// checksums (65 KiB holds a 64 KiB block). A block goes to the smallest class
// that fits. When a bucket empties it returns to the free list and can be
// assigned to any class, so the cache follows changes in block sizes.
//
// Get returns a BlockRef whose Bytes are a view of the slot: no copy onto
// the Go heap, no allocation. Each entry carries a reference count and an
// evicted flag in one atomic word. Eviction sets the flag and removes the
// entry from the index; the slot is freed by whoever brings the word to
// "evicted, no references" — the evictor if nobody holds the block, else the
// last Release. A slot is therefore never freed or overwritten while a reader
// holds it. Close evicts everything and unmaps the arena after the last
// reference is released.
//
// Eviction follows HBase: blocks enter single-access (or in-memory, for
// IN_MEMORY families), become multi-access on the next hit, and when space
// is needed the groups that exceed their share of the cache (25% single,
// 50% multi, 25% in-memory, of MinFactor) give up their least recently used
// blocks first. A full cache (above AcceptableFactor) frees down to
// MinFactor across classes; a full class evicts a batch of its own blocks;
// a class without buckets takes over the coldest bucket of another class.
// Blocks held by readers are skipped. Recency is an insert epoch (a counter
// advanced by each insert) stored on access, so lookups write no shared
// state besides the entry.
//
// Lookups take a shard read lock on the index; hits and misses are counted
// with per-shard atomics. Inserts and evictions serialise on one allocation
// lock. PutFrom lets a reader fill the slot directly (a file read into
// off-heap memory) so data blocks never pass through the heap.
//
// BucketCacheOptions.CacheOnWrite is the cache-on-write flag that store-file
// writers consult through CacheOnWrite.
//
// # Statistics and metrics
//
// Stats reads atomics without locks: hits, misses, evictions, blocks, block
// bytes, slot bytes used, free bytes, and per size class the buckets, used
// and free slots, bytes wasted inside slots and bucket tails. Collector
// exports them as cellstore_block_cache_hit_count, _miss_count,
// _eviction_count, _count, _size_bytes, _free_bytes, _capacity_bytes with a
// tier label (l1, l2), and the L2 size-class series
// cellstore_block_cache_bucket_slots{size_class,state},
// _bucket_wasted_bytes, _bucket_tail_bytes and _bucket_count.
//
// # Invariant checks
//
// With the invariants build tag every block's CRC32C is checked when a
// reference is taken and released (a block must not change while
// referenced), freed slots are poisoned and verified on reuse, and each
// BlockRef is tracked so a double Release or Bytes after Release panics.
package blockcache
