package blockcache

import (
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestCombinedRouting(t *testing.T) {
	l1, _ := NewLRU(LRUOptions{Capacity: 1 << 20})
	budget, _ := offheap.NewBudget("bc", 4<<20, nil)
	l2, err := NewBucketCache(BucketCacheOptions{Capacity: 4 << 20, Hugepages: offheap.HugepagesOff, Budget: budget,
		CacheOnWrite: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	c := NewCombined(l1, l2)
	idx, data := Key{File: 1, Offset: 0}, Key{File: 1, Offset: 4096}
	if err := c.Put(idx, KindIndex, block(idx, 500), PrioritySingle); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(data, KindData, block(data, 5000), PriorityMemory); err != nil {
		t.Fatal(err)
	}
	if l1.Stats().Blocks != 1 || l2.Stats().Blocks != 1 {
		t.Fatalf("routing: l1 %+v l2 %+v", l1.Stats(), l2.Stats())
	}
	r, ok := c.Get(idx, KindIndex)
	if !ok || r.OffHeap() || checkBlock(idx, r.Bytes(), 500) != nil {
		t.Fatal("index block not served from L1")
	}
	r.Release()
	r, ok = c.Get(data, KindData)
	if !ok || !r.OffHeap() || checkBlock(data, r.Bytes(), 5000) != nil {
		t.Fatal("data block not served from L2")
	}
	r.Release()
	if _, ok := c.Get(data, KindBloom); ok {
		t.Fatal("a data block found in L1")
	}
	if !c.CacheOnWrite() {
		t.Fatal("CacheOnWrite")
	}
	if n := c.EvictFile(1); n != 2 {
		t.Fatalf("EvictFile %d", n)
	}
	// Only L1: everything there. Neither: nothing cached, clear error.
	only := NewCombined(l1, nil)
	if err := only.Put(data, KindData, []byte("d"), PrioritySingle); err != nil || only.CacheOnWrite() {
		t.Fatal(err)
	}
	if _, ok := only.Get(data, KindData); !ok {
		t.Fatal("L1-only data block")
	}
	if err := NewCombined(nil, nil).Put(data, KindMeta, nil, PrioritySingle); err == nil || !strings.Contains(err.Error(), "no cache tier") {
		t.Fatal(err)
	}
	if _, ok := NewCombined(nil, nil).Get(data, KindMeta); ok {
		t.Fatal("hit without caches")
	}
}

func TestCollector(t *testing.T) {
	l1, _ := NewLRU(LRUOptions{Capacity: 1 << 20})
	budget, _ := offheap.NewBudget("bc", 4<<20, nil)
	l2, _ := NewBucketCache(BucketCacheOptions{Capacity: 4 << 20, Hugepages: offheap.HugepagesOff, Budget: budget, Logger: quietLogger()})
	defer l2.Close()
	l1.Put(Key{File: 1}, make([]byte, 100))
	l1.Get(Key{File: 1})
	l1.Get(Key{File: 2})
	mustPut(t, l2, Key{File: 3}, 60<<10, PrioritySingle)
	for i := 0; i < 3; i++ {
		if r, ok := l2.Get(Key{File: 3}); ok {
			r.Release()
		}
	}
	l2.Get(Key{File: 4})

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(l1, l2))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue next
					}
				}
				return value(m)
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	l1l, l2l := map[string]string{"tier": "l1"}, map[string]string{"tier": "l2"}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cellstore_block_cache_hit_count", l1l, 1},
		{"cellstore_block_cache_miss_count", l1l, 1},
		{"cellstore_block_cache_hit_count", l2l, 3},
		{"cellstore_block_cache_miss_count", l2l, 1},
		{"cellstore_block_cache_eviction_count", l2l, 0},
		{"cellstore_block_cache_size_bytes", l2l, 60 << 10},
		{"cellstore_block_cache_size_bytes", l1l, 100},
		{"cellstore_block_cache_free_bytes", l2l, 4<<20 - 65<<10},
		{"cellstore_block_cache_count", l2l, 1},
		{"cellstore_block_cache_capacity_bytes", l2l, 4 << 20},
		{"cellstore_block_cache_bucket_slots", map[string]string{"tier": "l2", "size_class": "66560", "state": "used"}, 1},
		{"cellstore_block_cache_bucket_slots", map[string]string{"tier": "l2", "size_class": "66560", "state": "free"}, 30},
		{"cellstore_block_cache_bucket_wasted_bytes", map[string]string{"tier": "l2", "size_class": "66560"}, 5 << 10},
		{"cellstore_block_cache_bucket_count", map[string]string{"tier": "l2", "size_class": "66560"}, 1},
		{"cellstore_block_cache_free_buckets", l2l, 1},
	}
	for _, c := range checks {
		if got := get(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// Both tiers count as evictions only the blocks evicted to make room: dropping a closed or
// compacted file's blocks (EvictFile, Evict) is not memory pressure.
func TestEvictionsCountOnlyRoomMade(t *testing.T) {
	blk := 1000
	l1, err := NewLRU(LRUOptions{Capacity: 4 * (int64(blk) + lruEntryOverhead), Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := newCache(t, 1<<20, 256<<10, []int{16 << 10, 64 << 10}) // 4 buckets of 16 slots
	c := NewCombined(l1, l2)
	put := func(file uint64, i int) {
		t.Helper()
		idx, data := Key{File: file, Offset: int64(2 * i)}, Key{File: file, Offset: int64(2*i + 1)}
		if err := c.Put(idx, KindIndex, block(idx, blk), PrioritySingle); err != nil {
			t.Fatal(err)
		}
		if err := c.Put(data, KindData, block(data, 10<<10), PrioritySingle); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		put(1, i)
	}
	if !l1.Evict(Key{File: 1, Offset: 0}) || !l2.Evict(Key{File: 1, Offset: 1}) {
		t.Fatal("Evict found nothing")
	}
	if n := c.EvictFile(1); n != 6 {
		t.Fatalf("EvictFile removed %d blocks, want 6", n)
	}
	s1, s2 := l1.Stats(), l2.Stats()
	if s1.Blocks != 0 || s2.Blocks != 0 || s1.Evictions != 0 || s2.Evictions != 0 {
		t.Fatalf("after removing a file: l1 %d blocks, %d evictions; l2 %d blocks, %d evictions; want none",
			s1.Blocks, s1.Evictions, s2.Blocks, s2.Evictions)
	}
	// Pressure: more blocks than either tier holds.
	for i := range 100 {
		put(2, i)
	}
	s1, s2 = l1.Stats(), l2.Stats()
	if s1.Evictions != 100-4 || s2.Evictions == 0 || s2.Evictions+s2.Blocks != 100 {
		t.Fatalf("under pressure: l1 %d evictions (want 96), l2 %d evictions with %d blocks cached (want 100 in all)",
			s1.Evictions, s2.Evictions, s2.Blocks)
	}
}
