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
