package blockcache

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

func TestLRU(t *testing.T) {
	blk := int64(1000)
	cost := blk + lruEntryOverhead
	c, err := NewLRU(LRUOptions{Capacity: 4 * cost, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	k := func(i int) Key { return Key{File: 1, Offset: int64(i)} }
	for i := 0; i < 4; i++ {
		if err := c.Put(k(i), block(k(i), int(blk))); err != nil {
			t.Fatal(err)
		}
	}
	if b, ok := c.Get(k(0)); !ok || checkBlock(k(0), b, int(blk)) != nil {
		t.Fatal("block 0 missing")
	}
	c.Put(k(4), block(k(4), int(blk))) // evicts 1, the least recently used
	if _, ok := c.Get(k(1)); ok {
		t.Fatal("LRU block 1 not evicted")
	}
	for _, i := range []int{0, 2, 3, 4} {
		if _, ok := c.Get(k(i)); !ok {
			t.Fatalf("block %d evicted", i)
		}
	}
	s := c.Stats()
	if s.Evictions != 1 || s.Blocks != 4 || s.SizeBytes != 4*blk || s.UsedBytes != 4*cost || s.FreeBytes != 0 ||
		s.Hits != 5 || s.Misses != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Replacing a key does not double count.
	c.Put(k(4), make([]byte, 10))
	if s := c.Stats(); s.Blocks != 4 || s.SizeBytes != 3*blk+10 {
		t.Fatalf("after replace %+v", s)
	}
	if err := c.Put(k(9), make([]byte, 5*blk)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	c.Put(Key{File: 2}, []byte("x"))
	if n := c.EvictFile(1); n != 4 || c.Stats().Blocks != 1 {
		t.Fatalf("EvictFile %d, %+v", n, c.Stats())
	}
	if !c.Evict(Key{File: 2}) || c.Evict(Key{File: 2}) || c.Stats().Blocks != 0 || c.Stats().UsedBytes != 0 {
		t.Fatalf("Evict: %+v", c.Stats())
	}
	for _, o := range []LRUOptions{{Capacity: 0}, {Capacity: 1 << 20, Shards: 3}, {Capacity: 1 << 20, Shards: -1}} {
		if _, err := NewLRU(o); err == nil {
			t.Errorf("NewLRU(%+v) accepted", o)
		}
	}
	if big, _ := NewLRU(LRUOptions{Capacity: 128 << 20}); len(big.shards) != 16 || big.Capacity() != 128<<20 {
		t.Fatal("default sharding")
	}
}

func TestLRUConcurrent(t *testing.T) {
	c, _ := NewLRU(LRUOptions{Capacity: 64 << 10, Shards: 4})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 5))
			for i := 0; i < 5000; i++ {
				k := Key{File: 1, Offset: int64(rng.IntN(200))}
				n := 100 + int(k.Offset)*10
				if b, ok := c.Get(k); ok {
					if err := checkBlock(k, b, n); err != nil {
						t.Error(err)
						return
					}
				} else {
					c.Put(k, block(k, n))
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	s := c.Stats()
	if s.UsedBytes > s.Capacity || s.Hits == 0 || s.Evictions == 0 {
		t.Fatalf("stats %+v", s)
	}
}
