package regionserver

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
)

// A server exports each of its off-heap budgets, not only the process-wide one: the memstore's
// refusals (writers waiting for a flush) are counted on the memstore budget, which refuses before
// the process-wide budget (the sum of memstore and block cache) can; the alert on refusals
// (CellstoreOffheapBudgetNearLimit) sees them there.
func TestOffheapBudgetsExported(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := New(Config{FS: fs, Masters: []string{"127.0.0.1:1"}, MemstoreBytes: 4 << 20, BlockCacheOffheap: 8 << 20,
		BlockCacheOnheap: 1 << 20, Logger: quiet, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.release)
	var chunks []*offheap.Chunk
	t.Cleanup(func() {
		for _, c := range chunks {
			c.Release()
		}
	})
	for {
		c, err := s.pool.Get()
		if err != nil {
			if !errors.Is(err, offheap.ErrBudgetExceeded) {
				t.Fatal(err)
			}
			break
		}
		chunks = append(chunks, c)
		if len(chunks) > 1<<16 {
			t.Fatal("the memstore pool never refused a chunk")
		}
	}
	got := series(t, reg)
	for name, want := range map[string]float64{
		"cellstore_offheap_budget_limit_bytes{budget=memstore}":   4 << 20,
		"cellstore_offheap_budget_used_bytes{budget=memstore}":    4 << 20,
		"cellstore_offheap_budget_refused_count{budget=memstore}": 1,
		"cellstore_offheap_budget_limit_bytes{budget=blockcache}": 8 << 20,
		"cellstore_offheap_budget_limit_bytes{budget=offheap}":    12 << 20,
		"cellstore_offheap_budget_refused_count{budget=offheap}":  0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
}
