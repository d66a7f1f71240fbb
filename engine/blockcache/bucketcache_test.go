package blockcache

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/cellstore/cellstore/engine/offheap"
)

func inArena(c *BucketCache, b []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(c.mem)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(c.mem))
}

func TestBucketCachePutGet(t *testing.T) {
	c, budget := newCache(t, 16<<20, 0, nil)
	if c.Capacity() != 16<<20 || budget.Used() != 16<<20 || c.Backing() != offheap.BackingPlain {
		t.Fatalf("capacity %d budget %d backing %v", c.Capacity(), budget.Used(), c.Backing())
	}
	k := Key{File: 7, Offset: 65536}
	mustPut(t, c, k, 64<<10, PrioritySingle)
	if _, ok := c.Get(Key{File: 7, Offset: 0}); ok {
		t.Fatal("hit for a key never cached")
	}
	r1, ok := c.Get(k)
	if !ok {
		t.Fatal("miss after Put")
	}
	if err := checkBlock(k, r1.Bytes(), 64<<10); err != nil {
		t.Fatal(err)
	}
	r2, _ := c.Get(k)
	// Zero copy: both readers see the same off-heap bytes.
	if !r1.OffHeap() || !inArena(c, r1.Bytes()) || &r1.Bytes()[0] != &r2.Bytes()[0] || r1.Len() != 64<<10 {
		t.Fatal("Get did not return a view of the off-heap slot")
	}
	r1.Release()
	r2.Release()
	if s := c.Stats(); s.Hits != 2 || s.Misses != 1 || s.Blocks != 1 || s.SizeBytes != 64<<10 || s.HitRatio() != 2.0/3 {
		t.Fatalf("stats %+v", s)
	}
	// A cached key is left alone.
	if err := c.Put(k, make([]byte, 100), PrioritySingle); err != nil {
		t.Fatal(err)
	}
	r, _ := c.Get(k)
	if err := checkBlock(k, r.Bytes(), 64<<10); err != nil {
		t.Fatalf("second Put replaced the block: %v", err)
	}
	r.Release()
	if err := c.Put(Key{File: 1}, make([]byte, 513<<10+1), PrioritySingle); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized block: %v", err)
	}
	if err := c.Put(Key{File: 1}, nil, Priority(9)); err == nil {
		t.Fatal("bad priority accepted")
	}
	if c.MaxBlockSize() != 513<<10 {
		t.Fatal(c.MaxBlockSize())
	}
	var zero BlockRef
	zero.Release() // no-op
}

func TestBucketCacheGetDoesNotAllocate(t *testing.T) {
	if offheap.InvariantsEnabled {
		t.Skip("the invariants build tracks each reference with an allocation")
	}
	c, _ := newCache(t, 4<<20, 0, nil)
	k := Key{File: 1, Offset: 1}
	mustPut(t, c, k, 64<<10, PrioritySingle)
	var sum byte
	allocs := testing.AllocsPerRun(1000, func() {
		r, ok := c.Get(k)
		if !ok {
			t.Fatal("miss")
		}
		sum += r.Bytes()[100]
		r.Release()
	})
	if allocs != 0 {
		t.Fatalf("Get+Release allocates %.1f objects per call", allocs)
	}
}

func TestBucketCacheStatsFragmentation(t *testing.T) {
	c, _ := newCache(t, 16<<20, 0, nil)
	mustPut(t, c, Key{File: 1}, 60<<10, PrioritySingle)
	s := c.Stats()
	var cls ClassStats
	for _, cs := range s.Classes {
		if cs.SlotSize == 65<<10 {
			cls = cs
		} else if cs.Buckets != 0 || cs.SlotsUsed != 0 {
			t.Fatalf("block landed in class %+v", cs)
		}
	}
	if cls.Buckets != 1 || cls.SlotsUsed != 1 || cls.SlotsFree != 30 || cls.BlockBytes != 60<<10 ||
		cls.WastedBytes != 5<<10 || cls.TailBytes != 2<<20-31*65<<10 {
		t.Fatalf("class stats %+v", cls)
	}
	if s.UsedBytes != 65<<10 || s.FreeBytes != 16<<20-65<<10 || s.FreeBuckets != 7 || s.SizeBytes != 60<<10 {
		t.Fatalf("stats %+v", s)
	}
}

// A reader's block survives eviction and eviction pressure: its slot is not
// reused until the reader releases it.
func TestBucketCacheEvictWhileReferenced(t *testing.T) {
	c, _ := newCache(t, 1<<20, 256<<10, []int{16 << 10, 64 << 10})
	k := Key{File: 1, Offset: 0}
	mustPut(t, c, k, 60<<10, PrioritySingle)
	ref, ok := c.Get(k)
	if !ok {
		t.Fatal("miss")
	}
	if !c.Evict(k) || c.Evict(k) {
		t.Fatal("Evict should succeed once")
	}
	if c.Contains(k) {
		t.Fatal("evicted block still cached")
	}
	if _, ok := c.Get(k); ok {
		t.Fatal("hit on an evicted block")
	}
	if s := c.Stats(); s.PendingFree != 1 || s.Evictions != 0 { // removed, not evicted for room
		t.Fatalf("stats %+v", s)
	}
	// Pressure: cycle far more blocks than fit through every slot.
	for i := 1; i < 200; i++ {
		size := []int{60 << 10, 12 << 10}[i%2]
		if err := c.Put(Key{File: 2, Offset: int64(i)}, block(Key{File: 2, Offset: int64(i)}, size), PrioritySingle); err != nil {
			t.Fatal(err)
		}
		if err := checkBlock(k, ref.Bytes(), 60<<10); err != nil {
			t.Fatalf("after %d puts: %v", i, err)
		}
	}
	ref.Release()
	if s := c.Stats(); s.PendingFree != 0 || s.UsedBytes > s.Capacity {
		t.Fatalf("stats %+v", s)
	}
}

func TestBucketCacheEvictionPressure(t *testing.T) {
	c, _ := newCache(t, 1<<20, 256<<10, []int{16 << 10, 64 << 10})
	var last Key
	for i := 0; i < 1000; i++ {
		last = Key{File: 3, Offset: int64(i)}
		mustPut(t, c, last, 16<<10, PrioritySingle)
		if s := c.Stats(); s.UsedBytes > s.Capacity || s.Blocks > 64 {
			t.Fatalf("over capacity: %+v", s)
		}
	}
	if !c.Contains(last) {
		t.Fatal("most recent block evicted")
	}
	s := c.Stats()
	if s.Evictions < 1000-64 || s.Blocks+s.Evictions != 1000 {
		t.Fatalf("stats %+v", s)
	}
}

// Blocks read again (multi-access) keep their share while single-access
// blocks churn; in-memory blocks are kept within their share.
func TestBucketCachePriorities(t *testing.T) {
	c, _ := newCache(t, 1<<20, 256<<10, []int{16 << 10}) // 64 slots
	for i := 0; i < 10; i++ {
		mustPut(t, c, Key{File: 9, Offset: int64(i)}, 16<<10, PriorityMemory)
	}
	for i := 0; i < 54; i++ {
		mustPut(t, c, Key{File: 1, Offset: int64(i)}, 16<<10, PrioritySingle)
	}
	for i := 0; i < 27; i++ { // read again: multi-access
		r, ok := c.Get(Key{File: 1, Offset: int64(i)})
		if !ok {
			t.Fatalf("block %d missing before churn", i)
		}
		r.Release()
	}
	for i := 0; i < 500; i++ { // a scan of single-access blocks
		mustPut(t, c, Key{File: 2, Offset: int64(i)}, 16<<10, PrioritySingle)
	}
	multi, single := 0, 0
	for i := 0; i < 54; i++ {
		if c.Contains(Key{File: 1, Offset: int64(i)}) {
			if i < 27 {
				multi++
			} else {
				single++
			}
		}
	}
	for i := 0; i < 10; i++ {
		if !c.Contains(Key{File: 9, Offset: int64(i)}) {
			t.Errorf("in-memory block %d evicted by a scan", i)
		}
	}
	if multi < 20 || single != 0 {
		t.Fatalf("after a scan: %d of 27 multi-access blocks and %d of 27 single-access blocks left", multi, single)
	}
}

// When a class has no room and no free bucket, the coldest bucket of another
// class is emptied and reassigned; empty buckets return to the free list.
func TestBucketCacheReassignsBuckets(t *testing.T) {
	c, _ := newCache(t, 1<<20, 256<<10, []int{16 << 10, 64 << 10})
	for i := 0; i < 64; i++ {
		mustPut(t, c, Key{File: 1, Offset: int64(i)}, 16<<10, PrioritySingle)
	}
	if s := c.Stats(); s.FreeBuckets != 0 || s.Classes[0].Buckets != 4 {
		t.Fatalf("stats %+v", s)
	}
	big := Key{File: 2}
	mustPut(t, c, big, 64<<10, PrioritySingle)
	if !c.Contains(big) {
		t.Fatal("large block not cached")
	}
	if s := c.Stats(); s.Classes[1].Buckets != 1 || s.Classes[0].Buckets != 3 {
		t.Fatalf("no bucket reassigned: %+v", s.Classes)
	}
	c.Evict(big)
	if s := c.Stats(); s.Classes[1].Buckets != 0 || s.FreeBuckets != 1 {
		t.Fatalf("empty bucket not freed: %+v", s)
	}
}

func TestBucketCacheFullOfReferencedBlocks(t *testing.T) {
	c, _ := newCache(t, 256<<10, 256<<10, []int{64 << 10})
	var refs []BlockRef
	for i := 0; i < 4; i++ {
		k := Key{File: 1, Offset: int64(i)}
		mustPut(t, c, k, 64<<10, PrioritySingle)
		r, _ := c.Get(k)
		refs = append(refs, r)
	}
	err := c.Put(Key{File: 2}, make([]byte, 64<<10), PrioritySingle)
	if !errors.Is(err, ErrCacheFull) {
		t.Fatalf("got %v, want ErrCacheFull", err)
	}
	if s := c.Stats(); s.FailedPuts != 1 || s.Blocks != 4 || s.Evictions != 0 {
		t.Fatalf("referenced blocks were evicted: %+v", s)
	}
	for _, r := range refs {
		r.Release()
	}
	mustPut(t, c, Key{File: 2}, 64<<10, PrioritySingle)
}

func TestBucketCacheClose(t *testing.T) {
	c, budget := newCache(t, 4<<20, 0, nil)
	k := Key{File: 1}
	mustPut(t, c, k, 64<<10, PrioritySingle)
	ref, _ := c.Get(k)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The arena stays mapped for the reader.
	if budget.Used() != 4<<20 {
		t.Fatalf("arena unmapped under a reader: budget %d", budget.Used())
	}
	if err := checkBlock(k, ref.Bytes(), 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(k); ok {
		t.Fatal("hit after Close")
	}
	if err := c.Put(Key{File: 2}, []byte{1}, PrioritySingle); !errors.Is(err, offheap.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	ref.Release()
	if budget.Used() != 0 {
		t.Fatalf("arena not unmapped after the last release: budget %d", budget.Used())
	}
	if err := c.Close(); !errors.Is(err, offheap.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}

	c2, budget2 := newCache(t, 4<<20, 0, nil)
	mustPut(t, c2, k, 100, PrioritySingle)
	if err := c2.Close(); err != nil || budget2.Used() != 0 {
		t.Fatalf("Close: %v, budget %d", err, budget2.Used())
	}
}

func TestBucketCacheOptions(t *testing.T) {
	budget, _ := offheap.NewBudget("small", 4<<20, nil)
	_, err := NewBucketCache(BucketCacheOptions{Capacity: 8 << 20, Hugepages: offheap.HugepagesOff, Budget: budget, Logger: quietLogger()})
	if !errors.Is(err, offheap.ErrBudgetExceeded) {
		t.Fatalf("over budget: %v", err)
	}
	for _, o := range []BucketCacheOptions{
		{Capacity: 1 << 20},                                 // less than one 2 MiB bucket
		{Capacity: 4 << 20, SizeClasses: []int{}},           // no classes
		{Capacity: 4 << 20, SizeClasses: []int{8192, 4096}}, // not ascending
		{Capacity: 4 << 20, SizeClasses: []int{4 << 20}},    // larger than a bucket
		{Capacity: 4 << 20, BucketSize: -1},                 // bad bucket
		{Capacity: 4 << 20, SingleFactor: 0.5},              // factors do not sum to 1
		{Capacity: 4 << 20, MinFactor: 0.99, AcceptableFactor: 0.9},
	} {
		o.Hugepages = offheap.HugepagesOff
		if c, err := NewBucketCache(o); err == nil {
			c.Close()
			t.Errorf("NewBucketCache(%+v) accepted", o)
		}
	}
	c, err := NewBucketCache(BucketCacheOptions{Capacity: 2 << 20, CacheOnWrite: true, Hugepages: offheap.HugepagesOff, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.CacheOnWrite() {
		t.Fatal("CacheOnWrite not reported")
	}
}

func TestBucketCacheEvictFileAndPutFrom(t *testing.T) {
	c, _ := newCache(t, 4<<20, 0, nil)
	for i := 0; i < 5; i++ {
		mustPut(t, c, Key{File: 1, Offset: int64(i)}, 1000, PrioritySingle)
		mustPut(t, c, Key{File: 2, Offset: int64(i)}, 1000, PrioritySingle)
	}
	if n := c.EvictFile(1); n != 5 {
		t.Fatalf("EvictFile evicted %d", n)
	}
	for i := 0; i < 5; i++ {
		if c.Contains(Key{File: 1, Offset: int64(i)}) || !c.Contains(Key{File: 2, Offset: int64(i)}) {
			t.Fatalf("block %d: wrong file evicted", i)
		}
	}
	boom := errors.New("read failed")
	used := c.Stats().UsedBytes
	if err := c.PutFrom(Key{File: 3}, 4000, PrioritySingle, func([]byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("PutFrom: %v", err)
	}
	if c.Contains(Key{File: 3}) || c.Stats().UsedBytes != used || c.Stats().Blocks != 5 {
		t.Fatalf("failed fill left state behind: %+v", c.Stats())
	}
	k := Key{File: 3, Offset: 1}
	err := c.PutFrom(k, 4000, PrioritySingle, func(dst []byte) error {
		if !inArena(c, dst) {
			t.Error("PutFrom target is not off-heap")
		}
		fillBlock(k, dst)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := c.Get(k)
	defer r.Release()
	if err := checkBlock(k, r.Bytes(), 4000); err != nil {
		t.Fatal(err)
	}
}

// Concurrent puts, gets and evictions with readers holding blocks across
// other operations: a held block never changes. Run with -race, and with
// -tags invariants to also verify checksums and slot poisoning inside the
// cache.
func TestBucketCacheConcurrent(t *testing.T) {
	c, budget := newCache(t, 2<<20, 256<<10, []int{4 << 10, 16 << 10, 64 << 10})
	const keys = 200
	sizeOf := func(k Key) int { return []int{3 << 10, 12 << 10, 60 << 10, 1 << 10}[k.Offset%4] }
	var wg, writers sync.WaitGroup
	var writing atomic.Bool
	writing.Store(true)
	errs := make(chan error, 64)
	for w := 0; w < 3; w++ { // writers
		wg.Add(1)
		writers.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			defer writers.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < 3000; i++ {
				k := Key{File: uint64(rng.IntN(3)), Offset: int64(rng.IntN(keys))}
				prio := Priority(rng.IntN(3))
				if err := c.Put(k, block(k, sizeOf(k)), prio); err != nil && !errors.Is(err, ErrCacheFull) {
					errs <- err
					return
				}
			}
		}(uint64(w))
	}
	for w := 0; w < 4; w++ { // readers holding up to 12 blocks each
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 2))
			type held struct {
				k Key
				r BlockRef
			}
			var hold []held
			// Read while the writers run (and at least 6000 times).
			for i := 0; i < 6000 || writing.Load(); i++ {
				k := Key{File: uint64(rng.IntN(3)), Offset: int64(rng.IntN(keys))}
				if r, ok := c.Get(k); ok {
					if err := checkBlock(k, r.Bytes(), sizeOf(k)); err != nil {
						errs <- err
						return
					}
					hold = append(hold, held{k, r})
				}
				if len(hold) > 12 || (len(hold) > 0 && rng.IntN(3) == 0) {
					j := rng.IntN(len(hold))
					h := hold[j]
					if err := checkBlock(h.k, h.r.Bytes(), sizeOf(h.k)); err != nil {
						errs <- err
						return
					}
					h.r.Release()
					hold = append(hold[:j], hold[j+1:]...)
				}
			}
			for _, h := range hold {
				if err := checkBlock(h.k, h.r.Bytes(), sizeOf(h.k)); err != nil {
					errs <- err
				}
				h.r.Release()
			}
		}(uint64(w))
	}
	wg.Add(1)
	go func() { // evictor
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 3))
		for i := 0; i < 2000 || writing.Load(); i++ {
			c.Evict(Key{File: uint64(rng.IntN(3)), Offset: int64(rng.IntN(keys))})
			if i%500 == 0 {
				c.EvictFile(uint64(rng.IntN(3)))
			}
		}
	}()
	writers.Wait()
	writing.Store(false)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := c.Stats()
	if s.PendingFree != 0 {
		t.Fatalf("slots still pending after every reader released: %+v", s)
	}
	var slotBytes, blockBytes, blocks int64
	for _, cs := range s.Classes {
		slotBytes += cs.SlotsUsed * cs.SlotSize
		blockBytes += cs.BlockBytes
		blocks += cs.SlotsUsed
	}
	if slotBytes != s.UsedBytes || blockBytes != s.SizeBytes || blocks != s.Blocks || s.UsedBytes > s.Capacity {
		t.Fatalf("accounting inconsistent: slots %d/%d bytes %d/%d blocks %d/%d", slotBytes, s.UsedBytes, blockBytes, s.SizeBytes, blocks, s.Blocks)
	}
	mapped := 0
	for i := range c.shards {
		mapped += len(c.shards[i].m)
	}
	if int64(mapped) != s.Blocks {
		t.Fatalf("%d blocks in the index, %d in slots", mapped, s.Blocks)
	}
	if s.Evictions == 0 || s.Hits == 0 {
		t.Fatalf("the test exercised nothing: %+v", s)
	}
	if err := c.Close(); err != nil || budget.Used() != 0 {
		t.Fatalf("Close: %v, budget %d", err, budget.Used())
	}
}

// Acquire reads a block just put without counting a hit or making it a multi-access block; a Get
// does both.
func TestAcquireIsNoAccess(t *testing.T) {
	c, _ := newCache(t, 4<<20, 0, nil)
	k := Key{File: 1}
	mustPut(t, c, k, 1000, PrioritySingle)
	prio := func() Priority {
		sh := c.shard(k)
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		return Priority(sh.m[k].prio.Load())
	}
	ref, ok := c.Acquire(k)
	if !ok {
		t.Fatal("Acquire missed a block just put")
	}
	ref.Release()
	if st := c.Stats(); st.Hits != 0 || st.Misses != 0 || prio() != PrioritySingle {
		t.Fatalf("after Acquire: %d hits, %d misses, priority %v; want none and single", st.Hits, st.Misses, prio())
	}
	ref, _ = c.Get(k)
	ref.Release()
	if st := c.Stats(); st.Hits != 1 || prio() != PriorityMulti {
		t.Fatalf("after Get: %d hits, priority %v; want 1 and multi", st.Hits, prio())
	}
}
