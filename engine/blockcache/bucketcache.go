package blockcache

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/offheap"
)

const (
	// DefaultBucketSize is the size of a bucket: one 2 MiB hugepage.
	DefaultBucketSize = 2 << 20

	defaultSingleFactor     = 0.25
	defaultMultiFactor      = 0.50
	defaultMemoryFactor     = 0.25
	defaultAcceptableFactor = 0.95
	defaultMinFactor        = 0.85

	bucketShards = 64
)

// DefaultSizeClasses are the slot sizes of the L2 cache, as in HBase's
// BucketAllocator: a block of n bytes goes to the smallest class >= n. Each
// is a power-of-two-ish block size plus 1 KiB for the block header and
// checksums, so a 64 KiB block fits the 65 KiB class.
var DefaultSizeClasses = []int{
	5 << 10, 9 << 10, 17 << 10, 33 << 10, 41 << 10, 49 << 10, 57 << 10, 65 << 10,
	97 << 10, 129 << 10, 193 << 10, 257 << 10, 385 << 10, 513 << 10,
}

// BucketCacheOptions configures NewBucketCache.
type BucketCacheOptions struct {
	// Name for logs and the arena ("blockcache").
	Name string
	// Capacity is the off-heap memory for blocks; it is rounded down to
	// whole buckets (at least one).
	Capacity int64
	// BucketSize is the size of a bucket; 0 means DefaultBucketSize. Every
	// bucket is split into slots of one size class at a time; an empty
	// bucket can be reassigned to another class.
	BucketSize int64
	// SizeClasses are the slot sizes in bytes, ascending; nil means
	// DefaultSizeClasses.
	SizeClasses []int
	// Hugepages selects the page backing of the arena.
	Hugepages offheap.HugepageMode
	// Budget is charged the arena's size (recommended; nil means unbounded).
	Budget *offheap.Budget
	// CacheOnWrite asks store-file writers to cache data blocks as they
	// write them (see BucketCache.CacheOnWrite).
	CacheOnWrite bool
	// SingleFactor, MultiFactor and MemoryFactor are the shares of the
	// cache that single-access, multi-access and in-memory blocks keep when
	// the cache evicts (HBase defaults 0.25, 0.50, 0.25 when all are 0).
	SingleFactor, MultiFactor, MemoryFactor float64
	// AcceptableFactor: above this used share an allocation failure frees
	// space across all classes; MinFactor: it frees down to this share
	// (defaults 0.95 and 0.85).
	AcceptableFactor, MinFactor float64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// BucketCache is the L2 block cache: data blocks in off-heap memory from an
// offheap.Arena, in buckets of slots of fixed size classes (HBase's
// BucketCache with its ByteBufferIOEngine). Get returns a reference-counted
// view of the cached bytes without copying them onto the Go heap; while a
// reader holds a BlockRef the block's slot is neither freed nor overwritten,
// even if the block is evicted meanwhile (the slot is freed on the last
// Release).
//
// Lookups take a shard read lock and count with atomics; inserts and
// evictions serialise on one allocation lock.
type BucketCache struct {
	name         string
	log          *slog.Logger
	arena        *offheap.Arena
	mem          []byte
	bucketSize   int64
	capacity     int64
	cacheOnWrite bool
	factors      [numPriorities]float64
	acceptable   float64
	minFactor    float64

	shards [bucketShards]bucketShard

	// clock advances on every insert; Get stamps entries with its current
	// value, so eviction order is "least recently used, in insert epochs".
	clock atomic.Int64

	allocMu     sync.Mutex
	classes     []*sizeClass
	buckets     []bucket
	freeBuckets []int32
	pendingFree int64 // evicted entries still referenced (under allocMu)
	closed      atomic.Bool
	unmapped    bool

	evictions    atomic.Int64
	blocks       atomic.Int64
	blockBytes   atomic.Int64
	usedSlotMem  atomic.Int64
	pendingCount atomic.Int64
	failedPuts   atomic.Int64
}

type bucketShard struct {
	mu     sync.RWMutex
	m      map[Key]*entry
	hits   atomic.Int64
	misses atomic.Int64
	_      pad
}

type sizeClass struct {
	idx            int
	slotSize       int64
	slotsPerBucket int
	buckets        []int32 // buckets assigned to this class
	partial        []int32 // assigned buckets with a free slot

	slotsUsed  atomic.Int64
	slotsTotal atomic.Int64
	blockBytes atomic.Int64
	nbuckets   atomic.Int64
}

type bucket struct {
	class   int32    // -1 when free
	free    []int32  // free slot indexes
	entries []*entry // slot -> entry (nil when free)
}

// entry is one cached block. state holds the reference count shifted left
// by one and, in bit 0, the evicted flag: once evicted no new reference can
// be taken, and whoever brings it to (evicted, 0 refs) frees the slot.
type entry struct {
	key    Key
	data   []byte
	bucket int32
	slot   int32
	class  int32
	prio   atomic.Uint32
	access atomic.Int64
	state  atomic.Int64
	sum    uint32 // checksum of data, set under the invariants tag
	// inserted is set before the entry is published in the map; it says
	// the block counters include it.
	inserted bool
}

const (
	evictedBit = 1
	oneRef     = 2
)

// NewBucketCache maps the cache's arena (charged to opts.Budget) and
// returns an empty cache.
func NewBucketCache(opts BucketCacheOptions) (*BucketCache, error) {
	bs := opts.BucketSize
	if bs == 0 {
		bs = DefaultBucketSize
	}
	if bs <= 0 || bs > 1<<30 {
		return nil, fmt.Errorf("blockcache: bucket size %d outside (0, 1Gi]", bs)
	}
	classes := opts.SizeClasses
	if classes == nil {
		classes = DefaultSizeClasses
	}
	if len(classes) == 0 || len(classes) > 1<<15 {
		return nil, fmt.Errorf("blockcache: need 1 to 32768 size classes, got %d", len(classes))
	}
	for i, s := range classes {
		if s <= 0 || int64(s) > bs || i > 0 && s <= classes[i-1] {
			return nil, fmt.Errorf("blockcache: size classes must be ascending and within (0, bucket size %d]: %v", bs, classes)
		}
	}
	nb := opts.Capacity / bs
	if nb < 1 {
		return nil, fmt.Errorf("blockcache: capacity %s is less than one bucket of %s",
			offheap.FormatQuantity(opts.Capacity), offheap.FormatQuantity(bs))
	}
	if nb > 1<<31-1 {
		return nil, fmt.Errorf("blockcache: capacity %d too large", opts.Capacity)
	}
	f := [numPriorities]float64{opts.SingleFactor, opts.MultiFactor, opts.MemoryFactor}
	if f == [numPriorities]float64{} {
		f = [numPriorities]float64{defaultSingleFactor, defaultMultiFactor, defaultMemoryFactor}
	}
	if f[0] < 0 || f[1] < 0 || f[2] < 0 || f[0]+f[1]+f[2] < 0.999 || f[0]+f[1]+f[2] > 1.001 {
		return nil, fmt.Errorf("blockcache: single, multi and memory factors must be >= 0 and sum to 1, got %v", f)
	}
	acc, minf := opts.AcceptableFactor, opts.MinFactor
	if acc == 0 {
		acc = defaultAcceptableFactor
	}
	if minf == 0 {
		minf = defaultMinFactor
	}
	if !(minf > 0 && minf <= acc && acc <= 1) {
		return nil, fmt.Errorf("blockcache: need 0 < min factor (%v) <= acceptable factor (%v) <= 1", minf, acc)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	name := opts.Name
	if name == "" {
		name = "blockcache"
	}
	arena, err := offheap.NewArena(offheap.ArenaOptions{Name: name, Size: nb * bs, Hugepages: opts.Hugepages,
		Budget: opts.Budget, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("blockcache: %w", err)
	}
	mem, err := arena.Bytes()
	if err != nil {
		_ = arena.Close()
		return nil, err
	}
	nb = arena.Size() / bs // the arena may round up (1 GiB hugepages): use it all
	c := &BucketCache{
		name: name, log: log, arena: arena, mem: mem, bucketSize: bs, capacity: nb * bs,
		cacheOnWrite: opts.CacheOnWrite, factors: f, acceptable: acc, minFactor: minf,
		buckets: make([]bucket, nb),
	}
	for i := range c.shards {
		c.shards[i].m = make(map[Key]*entry)
	}
	for i, s := range classes {
		c.classes = append(c.classes, &sizeClass{idx: i, slotSize: int64(s), slotsPerBucket: int(bs / int64(s))})
	}
	for i := len(c.buckets) - 1; i >= 0; i-- {
		c.buckets[i].class = -1
		c.freeBuckets = append(c.freeBuckets, int32(i))
		poisonSlot(mem[int64(i)*bs : int64(i+1)*bs])
	}
	return c, nil
}

// CacheOnWrite reports whether store-file writers should cache data blocks
// as they write them.
func (c *BucketCache) CacheOnWrite() bool { return c.cacheOnWrite }

// Capacity returns the bytes of block memory (whole buckets).
func (c *BucketCache) Capacity() int64 { return c.capacity }

// Backing returns the page backing the arena obtained.
func (c *BucketCache) Backing() offheap.Backing { return c.arena.Backing() }

// MaxBlockSize returns the largest block the cache accepts.
func (c *BucketCache) MaxBlockSize() int { return int(c.classes[len(c.classes)-1].slotSize) }

func (c *BucketCache) shard(k Key) *bucketShard { return &c.shards[k.hash()%bucketShards] }

// BlockRef is a reference to a cached block. Bytes returns the block's
// bytes in off-heap memory (or on the heap, for L1 hits through Combined);
// they stay valid and unchanged until Release. Every BlockRef obtained from
// Get must be released exactly once; do not use Bytes after Release. A
// BlockRef is a small value: copying it does not add a reference.
type BlockRef struct {
	data  []byte
	e     *entry
	cache *BucketCache
	tok   refToken
}

// Bytes returns the block. It must not be modified.
func (r BlockRef) Bytes() []byte {
	r.tok.checkLive(r)
	return r.data
}

// Len returns the block's length.
func (r BlockRef) Len() int { return len(r.data) }

// OffHeap reports whether the bytes are in off-heap memory (an L2 hit).
func (r BlockRef) OffHeap() bool { return r.e != nil }

// Release drops the reference. Releasing the zero BlockRef is a no-op.
func (r BlockRef) Release() {
	r.tok.release(r)
	if r.e != nil {
		r.cache.release(r.e)
	}
}

// Get looks a block up. On a hit it returns a reference the caller must
// Release; the block cannot be freed or overwritten until then.
func (c *BucketCache) Get(key Key) (BlockRef, bool) {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	if e == nil || !e.acquire() {
		sh.misses.Add(1)
		return BlockRef{}, false
	}
	sh.hits.Add(1)
	e.access.Store(c.clock.Load())
	if e.prio.Load() == uint32(PrioritySingle) {
		e.prio.CompareAndSwap(uint32(PrioritySingle), uint32(PriorityMulti))
	}
	verifyBlock(e, "Get")
	return BlockRef{data: e.data, e: e, cache: c, tok: newRefToken(e)}, true
}

// Acquire is Get for a block the caller has just put (PutFrom) and now reads: its first read is
// no hit, and does not make it a block accessed more than once (which would leave the
// single-access group, and its scan resistance, always empty).
func (c *BucketCache) Acquire(key Key) (BlockRef, bool) {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	if e == nil || !e.acquire() {
		return BlockRef{}, false
	}
	verifyBlock(e, "Acquire")
	return BlockRef{data: e.data, e: e, cache: c, tok: newRefToken(e)}, true
}

// Contains reports whether key is cached (without counting a hit or miss).
func (c *BucketCache) Contains(key Key) bool {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	return e != nil && e.state.Load()&evictedBit == 0
}

func (e *entry) acquire() bool {
	for {
		s := e.state.Load()
		if s&evictedBit != 0 || s < 0 {
			return false
		}
		if e.state.CompareAndSwap(s, s+oneRef) {
			return true
		}
	}
}

func (c *BucketCache) release(e *entry) {
	verifyBlock(e, "Release")
	c.releaseRef(e)
}

func (c *BucketCache) releaseRef(e *entry) {
	s := e.state.Add(-oneRef)
	switch {
	case s == evictedBit:
		c.allocMu.Lock()
		c.pendingFree--
		c.pendingCount.Add(-1)
		c.freeSlotLocked(e)
		unmap := c.closed.Load() && c.pendingFree == 0 && !c.unmapped
		if unmap {
			c.unmapped = true
		}
		c.allocMu.Unlock()
		if unmap {
			c.unmapArena()
		}
	case s < 0:
		e.state.Add(oneRef)
		invariantViolation(fmt.Sprintf("block %v released more times than it was acquired", e.key))
	}
}

// classFor returns the smallest class that holds n bytes.
func (c *BucketCache) classFor(n int) (*sizeClass, bool) {
	i, _ := slices.BinarySearchFunc(c.classes, int64(n), func(sc *sizeClass, n int64) int { return cmp.Compare(sc.slotSize, n) })
	if i == len(c.classes) {
		return nil, false
	}
	return c.classes[i], true
}

// Put copies block into the cache under key. A key already cached is left
// as it is. Errors (the block is then simply not cached): ErrTooLarge,
// ErrCacheFull, offheap.ErrClosed.
func (c *BucketCache) Put(key Key, block []byte, prio Priority) error {
	return c.PutFrom(key, len(block), prio, func(dst []byte) error {
		copy(dst, block)
		return nil
	})
}

// PutFrom caches a block of n bytes that fill writes directly into
// off-heap memory (for example a file read straight into the slot), so the
// block never passes through the Go heap. If fill fails nothing is cached
// and its error is returned.
func (c *BucketCache) PutFrom(key Key, n int, prio Priority, fill func(dst []byte) error) error {
	if c.closed.Load() {
		return fmt.Errorf("blockcache %q: %w", c.name, offheap.ErrClosed)
	}
	if prio >= numPriorities {
		return fmt.Errorf("blockcache: invalid priority %d", prio)
	}
	if n < 0 {
		return fmt.Errorf("blockcache: negative block size %d", n)
	}
	cls, ok := c.classFor(n)
	if !ok {
		return fmt.Errorf("blockcache: %d-byte block %v: %w (largest slot %d)", n, key, ErrTooLarge, c.MaxBlockSize())
	}
	if c.Contains(key) {
		return nil
	}
	e := &entry{key: key, class: int32(cls.idx)}
	e.state.Store(oneRef) // the inserter's reference, dropped below
	e.prio.Store(uint32(prio))
	e.access.Store(c.clock.Add(1))

	c.allocMu.Lock()
	if c.closed.Load() {
		c.allocMu.Unlock()
		return fmt.Errorf("blockcache %q: %w", c.name, offheap.ErrClosed)
	}
	ok = c.allocLocked(cls, e)
	c.allocMu.Unlock()
	if !ok {
		c.failedPuts.Add(1)
		return fmt.Errorf("blockcache: %d-byte block %v: %w", n, key, ErrCacheFull)
	}
	slot := e.data
	checkSlotPoison(slot, e.bucket, e.slot) // outside the lock: the slot is ours
	e.data = slot[:n:n]
	if err := fill(e.data); err != nil {
		c.discard(e)
		return err
	}
	e.sum = blockChecksum(e.data)

	e.inserted = true
	c.blocks.Add(1)
	c.blockBytes.Add(int64(n))
	cls.blockBytes.Add(int64(n))
	sh := c.shard(key)
	sh.mu.Lock()
	// Publish unless the key was cached meanwhile (a concurrent Put won) or
	// e was evicted while being filled (eviction pressure, Close).
	if old := sh.m[key]; (old == nil || old.state.Load()&evictedBit != 0) && e.state.Load()&evictedBit == 0 {
		sh.m[key] = e
		sh.mu.Unlock()
		c.release(e) // frees the slot if an eviction got to it meanwhile
		return nil
	}
	sh.mu.Unlock()
	c.discard(e)
	return nil
}

// discard drops an entry that was never published (or lost a race): it is
// marked evicted, without counting an eviction, and the inserter's
// reference is dropped, which frees the slot.
func (c *BucketCache) discard(e *entry) {
	c.allocMu.Lock()
	c.markEvictedLocked(e)
	c.allocMu.Unlock()
	c.releaseRef(e)
}

// slotMem returns the memory of a slot.
func (c *BucketCache) slotMem(b, s int32, cls *sizeClass) []byte {
	off := int64(b)*c.bucketSize + int64(s)*cls.slotSize
	return c.mem[off : off+cls.slotSize : off+cls.slotSize]
}

// tryAllocLocked takes a free slot of cls, assigning a free bucket to cls
// if needed.
func (c *BucketCache) tryAllocLocked(cls *sizeClass, e *entry) bool {
	if len(cls.partial) == 0 {
		if len(c.freeBuckets) == 0 {
			return false
		}
		bi := c.freeBuckets[len(c.freeBuckets)-1]
		c.freeBuckets = c.freeBuckets[:len(c.freeBuckets)-1]
		b := &c.buckets[bi]
		b.class = int32(cls.idx)
		if cap(b.entries) >= cls.slotsPerBucket {
			b.entries = b.entries[:cls.slotsPerBucket]
		} else {
			b.entries = make([]*entry, cls.slotsPerBucket)
		}
		b.free = b.free[:0]
		for s := cls.slotsPerBucket - 1; s >= 0; s-- {
			b.free = append(b.free, int32(s))
		}
		cls.buckets = append(cls.buckets, bi)
		cls.partial = append(cls.partial, bi)
		cls.slotsTotal.Add(int64(cls.slotsPerBucket))
		cls.nbuckets.Add(1)
	}
	bi := cls.partial[len(cls.partial)-1]
	b := &c.buckets[bi]
	s := b.free[len(b.free)-1]
	b.free = b.free[:len(b.free)-1]
	if len(b.free) == 0 {
		cls.partial = cls.partial[:len(cls.partial)-1]
	}
	if b.entries[s] != nil {
		invariantViolation(fmt.Sprintf("slot %d of bucket %d handed out while it holds block %v", s, bi, b.entries[s].key))
	}
	b.entries[s] = e
	e.bucket, e.slot = bi, s
	e.data = c.slotMem(bi, s, cls)
	cls.slotsUsed.Add(1)
	c.usedSlotMem.Add(cls.slotSize)
	return true
}

// allocLocked finds a slot for e in cls, evicting if it must.
func (c *BucketCache) allocLocked(cls *sizeClass, e *entry) bool {
	if c.tryAllocLocked(cls, e) {
		return true
	}
	// 1. The cache as a whole is nearly full: free space across classes by
	// priority shares, down to MinFactor (buckets that empty are reassigned).
	if float64(c.usedSlotMem.Load()) >= c.acceptable*float64(c.capacity) {
		c.freeSpaceLocked(nil, c.usedSlotMem.Load()-int64(c.minFactor*float64(c.capacity)))
		if c.tryAllocLocked(cls, e) {
			return true
		}
	}
	// 2. This class is full: evict a batch of its own least valuable blocks.
	if len(cls.buckets) > 0 {
		used := cls.slotsUsed.Load() * cls.slotSize
		c.freeSpaceLocked(cls, max(cls.slotSize, used/20))
		if c.tryAllocLocked(cls, e) {
			return true
		}
	}
	// 3. Empty the coldest bucket of another class and take it over.
	if c.evictColdestBucketLocked(cls) && c.tryAllocLocked(cls, e) {
		return true
	}
	return false
}

// freeSpaceLocked evicts about toFree bytes of slots, from the whole cache
// (cls == nil) or from one class. Like HBase's BucketCache.freeSpace, it
// first takes from the priority groups that exceed their share (single,
// multi and in-memory factors of MinFactor of the scope), least recently
// used first, then from single, multi and in-memory in that order.
func (c *BucketCache) freeSpaceLocked(cls *sizeClass, toFree int64) {
	if toFree <= 0 {
		return
	}
	// Candidates with their access stamp copied, so the sort sees stable
	// keys while readers keep stamping entries.
	type cand struct {
		e      *entry
		access int64
	}
	var groups [numPriorities][]cand
	var sizes [numPriorities]int64
	var scope int64
	collect := func(k *sizeClass) {
		for _, bi := range k.buckets {
			for _, e := range c.buckets[bi].entries {
				// Skip blocks readers hold (as HBase does): evicting them
				// frees nothing until they are released.
				if e == nil || e.state.Load() != 0 {
					continue
				}
				p := e.prio.Load()
				groups[p] = append(groups[p], cand{e, e.access.Load()})
				sizes[p] += k.slotSize
			}
		}
		scope += int64(len(k.buckets)) * int64(k.slotsPerBucket) * k.slotSize
	}
	if cls != nil {
		collect(cls)
	} else {
		for _, k := range c.classes {
			collect(k)
		}
		scope = c.capacity
	}
	for p := range groups {
		slices.SortFunc(groups[p], func(a, b cand) int { return cmp.Compare(a.access, b.access) })
	}
	evictLRU := func(p int, bytes int64) (freed int64) {
		g := groups[p]
		for len(g) > 0 && freed < bytes {
			e := g[0].e
			g = g[1:]
			if c.evictLocked(e) {
				freed += c.classes[e.class].slotSize
			}
		}
		groups[p] = g
		return freed
	}
	type over struct {
		p        int
		overflow int64
	}
	var order []over
	for p := range groups {
		target := int64(float64(scope) * c.factors[p] * c.minFactor)
		order = append(order, over{p, sizes[p] - target})
	}
	slices.SortFunc(order, func(a, b over) int { return cmp.Compare(a.overflow, b.overflow) })
	remaining := toFree
	for i, o := range order {
		if o.overflow > 0 && remaining > 0 {
			left := int64(len(order) - i)
			remaining -= evictLRU(o.p, min(o.overflow, (remaining+left-1)/left))
		}
	}
	for p := range groups {
		if remaining <= 0 {
			break
		}
		remaining -= evictLRU(p, remaining)
	}
}

// evictColdestBucketLocked evicts every block of the bucket, outside cls,
// whose most recent access is oldest, so it can be reassigned. It reports
// whether a bucket became free.
func (c *BucketCache) evictColdestBucketLocked(cls *sizeClass) bool {
	best, bestAccess := int32(-1), int64(0)
	for _, k := range c.classes {
		if k == cls {
			continue
		}
		for _, bi := range k.buckets {
			newest, pinned := int64(-1), false
			for _, e := range c.buckets[bi].entries {
				if e == nil {
					continue
				}
				if e.state.Load() > evictedBit { // referenced
					pinned = true
					break
				}
				newest = max(newest, e.access.Load())
			}
			if !pinned && (best < 0 || newest < bestAccess) {
				best, bestAccess = bi, newest
			}
		}
	}
	if best < 0 {
		return false
	}
	for _, e := range slices.Clone(c.buckets[best].entries) {
		if e != nil {
			c.evictLocked(e)
		}
	}
	return c.buckets[best].class == -1
}

// evictLocked evicts e to make room: it marks e evicted, removes it from the
// map and frees its slot unless a reader holds it (then the last Release
// frees it), and counts an eviction. It reports whether this call evicted e.
func (c *BucketCache) evictLocked(e *entry) bool {
	if !c.markEvictedLocked(e) {
		return false
	}
	c.evictions.Add(1)
	return true
}

// markEvictedLocked is evictLocked without the eviction count: for blocks
// dropped because they are no longer wanted (Evict, EvictFile, Close), not
// for room.
func (c *BucketCache) markEvictedLocked(e *entry) bool {
	old := e.state.Or(evictedBit)
	if old&evictedBit != 0 {
		return false
	}
	c.unmapEntry(e)
	if old == 0 {
		c.freeSlotLocked(e)
	} else {
		c.pendingFree++
		c.pendingCount.Add(1)
	}
	return true
}

// unmapEntry removes e from its shard map if it is still there.
func (c *BucketCache) unmapEntry(e *entry) {
	sh := c.shard(e.key)
	sh.mu.Lock()
	if sh.m[e.key] == e {
		delete(sh.m, e.key)
	}
	sh.mu.Unlock()
}

// freeSlotLocked returns e's slot to its bucket. e must be evicted with no
// references.
func (c *BucketCache) freeSlotLocked(e *entry) {
	if s := e.state.Load(); s != evictedBit {
		invariantViolation(fmt.Sprintf("freeing the slot of block %v in state refs=%d evicted=%v", e.key, s>>1, s&evictedBit != 0))
		return
	}
	cls := c.classes[e.class]
	b := &c.buckets[e.bucket]
	if b.entries[e.slot] != e {
		invariantViolation(fmt.Sprintf("slot %d of bucket %d does not hold block %v", e.slot, e.bucket, e.key))
		return
	}
	poisonSlot(c.slotMem(e.bucket, e.slot, cls))
	b.entries[e.slot] = nil
	b.free = append(b.free, e.slot)
	cls.slotsUsed.Add(-1)
	c.usedSlotMem.Add(-cls.slotSize)
	if e.inserted {
		cls.blockBytes.Add(-int64(len(e.data)))
		c.blocks.Add(-1)
		c.blockBytes.Add(-int64(len(e.data)))
	}
	switch len(b.free) {
	case cls.slotsPerBucket: // empty: give the bucket back
		cls.buckets = deleteValue(cls.buckets, e.bucket)
		cls.partial = deleteValue(cls.partial, e.bucket)
		cls.slotsTotal.Add(-int64(cls.slotsPerBucket))
		cls.nbuckets.Add(-1)
		b.class = -1
		c.freeBuckets = append(c.freeBuckets, e.bucket)
	case 1: // was full
		cls.partial = append(cls.partial, e.bucket)
	}
}

func deleteValue(s []int32, v int32) []int32 {
	if i := slices.Index(s, v); i >= 0 {
		return slices.Delete(s, i, i+1)
	}
	return s
}

// Evict removes a block. It reports whether the block was cached. A
// reader holding the block keeps its bytes until it releases them. It is
// not counted in Stats.Evictions (nor is EvictFile).
func (c *BucketCache) Evict(key Key) bool {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	if e == nil {
		return false
	}
	c.allocMu.Lock()
	ok := c.markEvictedLocked(e)
	c.allocMu.Unlock()
	return ok
}

// EvictFile removes every block of a store file (after compaction or when
// the file is closed) and returns how many it evicted.
func (c *BucketCache) EvictFile(file uint64) int {
	var victims []*entry
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for k, e := range sh.m {
			if k.File == file {
				victims = append(victims, e)
			}
		}
		sh.mu.RUnlock()
	}
	n := 0
	c.allocMu.Lock()
	for _, e := range victims {
		if c.markEvictedLocked(e) {
			n++
		}
	}
	c.allocMu.Unlock()
	return n
}

// Close evicts every block and unmaps the arena, returning its memory to
// the budget. Blocks still referenced keep the arena mapped until their
// last Release, so no reader faults. Get misses and Put fails after Close.
func (c *BucketCache) Close() error {
	c.allocMu.Lock()
	if c.closed.Swap(true) {
		c.allocMu.Unlock()
		return fmt.Errorf("blockcache %q: %w", c.name, offheap.ErrClosed)
	}
	for _, k := range c.classes {
		for _, bi := range slices.Clone(k.buckets) {
			for _, e := range slices.Clone(c.buckets[bi].entries) {
				if e != nil {
					c.markEvictedLocked(e)
				}
			}
		}
	}
	unmap := c.pendingFree == 0
	c.unmapped = unmap
	pending := c.pendingFree
	c.allocMu.Unlock()
	if !unmap {
		c.log.Info("block cache closed; arena stays mapped until referenced blocks are released",
			"cache", c.name, "referenced_blocks", pending)
		return nil
	}
	return c.unmapArena()
}

func (c *BucketCache) unmapArena() error {
	err := c.arena.Close()
	if err != nil && !errors.Is(err, offheap.ErrClosed) {
		c.log.Error("block cache arena unmap failed", "cache", c.name, "error", err)
	}
	return err
}

// ClassStats describes one size class.
type ClassStats struct {
	SlotSize   int64 // bytes per slot
	Buckets    int64 // buckets assigned to the class
	SlotsUsed  int64
	SlotsFree  int64 // free slots in the class's buckets
	BlockBytes int64 // bytes of blocks in the class's slots
	// WastedBytes is internal fragmentation: slot bytes not holding block
	// bytes (SlotsUsed*SlotSize - BlockBytes).
	WastedBytes int64
	// TailBytes is bucket memory no slot can use (bucket size not a
	// multiple of the slot size), over the class's buckets.
	TailBytes int64
}

// Stats is a snapshot of cache counters, read from atomics without locks.
type Stats struct {
	Hits, Misses int64
	// Evictions counts blocks evicted to make room for others (memory
	// pressure); blocks removed by Evict or EvictFile (their file closed or
	// compacted away) are not counted, in either tier.
	Evictions int64
	// FailedPuts counts Puts refused because every candidate was in use.
	FailedPuts int64
	Blocks     int64 // cached blocks (including evicted ones still referenced)
	SizeBytes  int64 // bytes of those blocks
	UsedBytes  int64 // bytes of slots in use, including internal fragmentation
	FreeBytes  int64 // Capacity - UsedBytes
	Capacity   int64
	// PendingFree counts evicted blocks whose slots wait for readers to
	// release them.
	PendingFree int64
	FreeBuckets int64
	Classes     []ClassStats
}

// HitRatio returns Hits / (Hits + Misses), or 0.
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// Stats returns the cache's counters.
func (c *BucketCache) Stats() Stats {
	s := Stats{
		Evictions:   c.evictions.Load(),
		FailedPuts:  c.failedPuts.Load(),
		Blocks:      c.blocks.Load(),
		SizeBytes:   c.blockBytes.Load(),
		UsedBytes:   c.usedSlotMem.Load(),
		Capacity:    c.capacity,
		PendingFree: c.pendingCount.Load(),
	}
	for i := range c.shards {
		s.Hits += c.shards[i].hits.Load()
		s.Misses += c.shards[i].misses.Load()
	}
	s.FreeBytes = s.Capacity - s.UsedBytes
	var assigned int64
	for _, k := range c.classes {
		cs := ClassStats{SlotSize: k.slotSize, Buckets: k.nbuckets.Load(), SlotsUsed: k.slotsUsed.Load(),
			BlockBytes: k.blockBytes.Load()}
		cs.SlotsFree = k.slotsTotal.Load() - cs.SlotsUsed
		cs.WastedBytes = cs.SlotsUsed*k.slotSize - cs.BlockBytes
		cs.TailBytes = cs.Buckets * (c.bucketSize - int64(k.slotsPerBucket)*k.slotSize)
		assigned += cs.Buckets
		s.Classes = append(s.Classes, cs)
	}
	s.FreeBuckets = int64(len(c.buckets)) - assigned
	return s
}
