//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestPool(t *testing.T, chunk int, budgetBytes int64) (*ChunkPool, *Budget) {
	t.Helper()
	budget, _ := NewBudget("memstore", budgetBytes, nil)
	p, err := NewChunkPool(ChunkPoolOptions{Name: "memstore", ChunkSize: chunk, SlabSize: 1 << 20,
		Hugepages: HugepagesOff, Budget: budget, Logger: testLogger(new(bytes.Buffer))})
	if err != nil {
		t.Fatal(err)
	}
	return p, budget
}

func TestChunkAllocAndAccounting(t *testing.T) {
	p, budget := newTestPool(t, 64<<10, 4<<20)
	c, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	if c.ID() == 0 || p.Chunk(c.ID()) != c || p.Chunk(0) != nil || p.Chunk(1<<30) != nil {
		t.Fatalf("chunk ids: %d", c.ID())
	}
	a, ok := c.Alloc(1000)
	b, ok2 := c.Alloc(24)
	if !ok || !ok2 || len(a) != 1000 || cap(a) != 1000 || len(b) != 24 {
		t.Fatalf("Alloc: %v %v %d %d", ok, ok2, len(a), cap(a))
	}
	copy(a, bytes.Repeat([]byte{'a'}, 1000))
	copy(b, "cell-b")
	if &c.Bytes()[1000] != &b[0] || string(c.Bytes()[1000:1006]) != "cell-b" {
		t.Fatal("allocations are not consecutive views of the chunk")
	}
	if _, ok := c.Alloc(64<<10 - 1024 + 1); ok {
		t.Fatal("allocation past the chunk's end succeeded")
	}
	if c.Used() != 1024 {
		t.Fatalf("a failed Alloc changed Used: %d", c.Used())
	}
	if _, ok := c.Alloc(-1); ok {
		t.Fatal("negative Alloc succeeded")
	}
	if z, ok := c.Alloc(0); !ok || len(z) != 0 {
		t.Fatal("zero Alloc failed")
	}
	s := p.Stats()
	if s.InUse != 1 || s.DataBytes != 1024 || s.HeldBytes != 64<<10 || s.OverheadBytes != 64<<10-1024 ||
		s.Chunks != 16 || s.Free != 15 || s.MappedBytes != 1<<20 || budget.Used() != 1<<20 {
		t.Fatalf("stats %+v budget %d", s, budget.Used())
	}
	c.Release()
	s = p.Stats()
	if s.InUse != 0 || s.DataBytes != 0 || s.Free != 16 {
		t.Fatalf("after release: %+v", s)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if budget.Used() != 0 {
		t.Fatalf("Close left %d bytes in the budget", budget.Used())
	}
	if _, err := p.Get(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestChunkReuseAfterRelease(t *testing.T) {
	p, _ := newTestPool(t, 64<<10, 4<<20)
	defer p.Close()
	c1, _ := p.Get()
	id := c1.ID()
	c1.Alloc(100)
	c1.Retain() // a scanner
	c1.Release()
	if p.Stats().InUse != 1 {
		t.Fatal("chunk returned to the pool while a scanner holds it")
	}
	c1.Release()
	c2, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	if c2.ID() != id {
		t.Fatalf("released chunk %d not reused (got %d)", id, c2.ID())
	}
	if c2.Used() != 0 {
		t.Fatalf("reused chunk not reset: used %d", c2.Used())
	}
	if s := p.Stats(); s.Reused != 1 || s.Gets != 2 {
		t.Fatalf("stats %+v", s)
	}
	c2.Release()
}

func TestChunkPoolBudgetExhausted(t *testing.T) {
	// 2.5 MiB budget, 1 MiB slabs: two slabs and a smaller last one that
	// uses the budget's remainder, then a refusal.
	p, budget := newTestPool(t, 512<<10, 5<<19)
	defer p.Close()
	var held []*Chunk
	for {
		c, err := p.Get()
		if err != nil {
			if !errors.Is(err, ErrBudgetExceeded) {
				t.Fatalf("got %v, want ErrBudgetExceeded", err)
			}
			break
		}
		held = append(held, c)
		if len(held) > 100 {
			t.Fatal("budget never refused")
		}
	}
	if len(held) != 5 || budget.Used() != budget.Limit() {
		t.Fatalf("got %d chunks, budget %v", len(held), budget)
	}
	if err := p.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with chunks out: %v", err)
	}
	// Releasing makes room again without mapping more.
	held[0].Release()
	c, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	held[0] = c
	for _, c := range held {
		c.Release()
	}
}

func TestChunkConcurrentAlloc(t *testing.T) {
	p, _ := newTestPool(t, 256<<10, 4<<20)
	defer p.Close()
	c, _ := p.Get()
	defer c.Release()
	var wg sync.WaitGroup
	const workers, size = 8, 100
	got := make([][][]byte, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				b, ok := c.Alloc(size)
				if !ok {
					return
				}
				for i := range b {
					b[i] = byte(w)
				}
				got[w] = append(got[w], b)
			}
		}(w)
	}
	wg.Wait()
	total := 0
	for w, bs := range got {
		for _, b := range bs {
			for _, v := range b {
				if v != byte(w) {
					t.Fatalf("allocation of worker %d overwritten by worker %d: views overlap", w, v)
				}
			}
		}
		total += len(bs)
	}
	if total != (256<<10)/size || c.Used() != total*size {
		t.Fatalf("allocated %d views, used %d", total, c.Used())
	}
	if s := p.Stats(); s.DataBytes != int64(total*size) {
		t.Fatalf("DataBytes %d", s.DataBytes)
	}
}

func TestChunkPoolConcurrentGetRelease(t *testing.T) {
	p, budget := newTestPool(t, 64<<10, 2<<20)
	defer p.Close()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				c, err := p.Get()
				if err != nil {
					if !errors.Is(err, ErrBudgetExceeded) {
						t.Error(err)
						return
					}
					continue
				}
				b, _ := c.Alloc(64)
				for j := range b {
					b[j] = byte(w)
				}
				for j := range b {
					if b[j] != byte(w) {
						t.Errorf("chunk %d shared by two owners", c.ID())
						break
					}
				}
				c.Release()
			}
		}(w)
	}
	wg.Wait()
	if s := p.Stats(); s.InUse != 0 || budget.Used() > budget.Limit() {
		t.Fatalf("stats %+v budget %v", s, budget)
	}
}

func TestChunkPoolOptions(t *testing.T) {
	budget, _ := NewBudget("b", 1<<30, nil)
	for _, o := range []ChunkPoolOptions{
		{Budget: nil},
		{Budget: budget, ChunkSize: -1},
		{Budget: budget, ChunkSize: MaxChunkSize + 1},
		{Budget: budget, SlabSize: -1},
	} {
		if _, err := NewChunkPool(o); err == nil {
			t.Errorf("NewChunkPool(%+v) accepted", o)
		}
	}
	p, err := NewChunkPool(ChunkPoolOptions{Name: "pre", Budget: budget, Preallocate: 3 << 20, SlabSize: 2 << 20,
		Hugepages: HugepagesOff, Logger: testLogger(new(bytes.Buffer))})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Chunks != 2 || s.ChunkSize != DefaultChunkSize || s.MappedBytes != 4<<20 {
		t.Fatalf("preallocated stats %+v", s)
	}
	if err := p.Close(); err != nil || budget.Used() != 0 {
		t.Fatalf("close: %v, budget %d", err, budget.Used())
	}
}

func TestCollectorBudgetsAndPools(t *testing.T) {
	p, budget := newTestPool(t, 64<<10, 4<<20)
	defer p.Close()
	c, _ := p.Get()
	c.Alloc(1000)
	defer c.Release()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector([]*Budget{budget}, p))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			if m.GetGauge() != nil {
				got[key] = m.GetGauge().GetValue()
			} else {
				got[key] = m.GetCounter().GetValue()
			}
		}
	}
	for k, want := range map[string]float64{
		"cellstore_offheap_budget_limit_bytes,budget=memstore":            4 << 20,
		"cellstore_offheap_budget_used_bytes,budget=memstore":             1 << 20,
		"cellstore_memstore_chunk_data_bytes,pool=memstore":               1000,
		"cellstore_memstore_chunk_held_bytes,pool=memstore":               64 << 10,
		"cellstore_memstore_chunk_pool_chunks,pool=memstore,state=in_use": 1,
		"cellstore_memstore_chunk_pool_chunks,pool=memstore,state=free":   15,
		"cellstore_memstore_chunk_pool_mapped_bytes,pool=memstore":        1 << 20,
		"cellstore_offheap_hugepage_mode,mode=none":                       1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}
