package offheap

import "github.com/prometheus/client_golang/prometheus"

var (
	descHugepageMode = prometheus.NewDesc("cellstore_offheap_hugepage_mode",
		"1 for each page backing (none, thp, hugetlb-2Mi, hugetlb-1Gi) that live off-heap arenas actually obtained, else 0.",
		[]string{"mode"}, nil)
	descArenaBytes = prometheus.NewDesc("cellstore_offheap_arena_bytes",
		"Bytes of live off-heap arenas by the page backing actually obtained.", []string{"mode"}, nil)
	descArenas = prometheus.NewDesc("cellstore_offheap_arenas",
		"Live off-heap arenas by the page backing actually obtained.", []string{"mode"}, nil)
	descBudgetLimit = prometheus.NewDesc("cellstore_offheap_budget_limit_bytes",
		"Limit of an off-heap budget.", []string{"budget"}, nil)
	descBudgetUsed = prometheus.NewDesc("cellstore_offheap_budget_used_bytes",
		"Bytes reserved in an off-heap budget: arenas mapped, which stay reserved while mapped (the block cache's from the start, the memstore chunk pool's after a flush, for reuse), so mostly a high-water mark, not bytes in use.", []string{"budget"}, nil)
	descBudgetRefused = prometheus.NewDesc("cellstore_offheap_budget_refused_count",
		"Reservations an off-heap budget refused (for the memstore: writers waited for a flush).", []string{"budget"}, nil)
	descPoolChunks = prometheus.NewDesc("cellstore_memstore_chunk_pool_chunks",
		"Memstore chunks by state (in_use, free).", []string{"pool", "state"}, nil)
	descPoolData = prometheus.NewDesc("cellstore_memstore_chunk_data_bytes",
		"Bytes of cell data allocated in memstore chunks in use.", []string{"pool"}, nil)
	descPoolHeld = prometheus.NewDesc("cellstore_memstore_chunk_held_bytes",
		"Bytes of chunk memory held by memstores (chunks in use times chunk size).", []string{"pool"}, nil)
	descPoolMapped = prometheus.NewDesc("cellstore_memstore_chunk_pool_mapped_bytes",
		"Bytes of off-heap memory mapped by the chunk pool.", []string{"pool"}, nil)
	descPoolGets = prometheus.NewDesc("cellstore_memstore_chunk_pool_get_count",
		"Chunk requests.", []string{"pool"}, nil)
	descPoolReused = prometheus.NewDesc("cellstore_memstore_chunk_pool_reuse_count",
		"Chunk requests served by a pooled (previously released) chunk.", []string{"pool"}, nil)
)

// Collector exports off-heap metrics: the page backing actually obtained
// (cellstore_offheap_hugepage_mode{mode}), arena bytes by backing, budgets
// and chunk pools. It reads atomics at scrape time.
type Collector struct {
	budgets []*Budget
	pools   []*ChunkPool
}

// NewCollector returns a collector for the process's arenas and the given
// budgets and chunk pools.
func NewCollector(budgets []*Budget, pools ...*ChunkPool) *Collector {
	return &Collector{budgets: budgets, pools: pools}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHugepageMode, descArenaBytes, descArenas, descBudgetLimit,
		descBudgetUsed, descBudgetRefused, descPoolChunks, descPoolData, descPoolHeld, descPoolMapped,
		descPoolGets, descPoolReused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range Backings {
		n := liveArenas[b].Load()
		on := 0.0
		if n > 0 {
			on = 1
		}
		ch <- prometheus.MustNewConstMetric(descHugepageMode, prometheus.GaugeValue, on, b.String())
		ch <- prometheus.MustNewConstMetric(descArenaBytes, prometheus.GaugeValue, float64(liveBytes[b].Load()), b.String())
		ch <- prometheus.MustNewConstMetric(descArenas, prometheus.GaugeValue, float64(n), b.String())
	}
	for _, b := range c.budgets {
		ch <- prometheus.MustNewConstMetric(descBudgetLimit, prometheus.GaugeValue, float64(b.Limit()), b.Name())
		ch <- prometheus.MustNewConstMetric(descBudgetUsed, prometheus.GaugeValue, float64(b.Used()), b.Name())
		ch <- prometheus.MustNewConstMetric(descBudgetRefused, prometheus.CounterValue, float64(b.Refused()), b.Name())
	}
	for _, p := range c.pools {
		s := p.Stats()
		ch <- prometheus.MustNewConstMetric(descPoolChunks, prometheus.GaugeValue, float64(s.InUse), p.Name(), "in_use")
		ch <- prometheus.MustNewConstMetric(descPoolChunks, prometheus.GaugeValue, float64(s.Free), p.Name(), "free")
		ch <- prometheus.MustNewConstMetric(descPoolData, prometheus.GaugeValue, float64(s.DataBytes), p.Name())
		ch <- prometheus.MustNewConstMetric(descPoolHeld, prometheus.GaugeValue, float64(s.HeldBytes), p.Name())
		ch <- prometheus.MustNewConstMetric(descPoolMapped, prometheus.GaugeValue, float64(s.MappedBytes), p.Name())
		ch <- prometheus.MustNewConstMetric(descPoolGets, prometheus.CounterValue, float64(s.Gets), p.Name())
		ch <- prometheus.MustNewConstMetric(descPoolReused, prometheus.CounterValue, float64(s.Reused), p.Name())
	}
}

// ArenaStats returns the live arena count and bytes per backing actually
// obtained, indexed like Backings.
func ArenaStats() (arenas, bytes [4]int64) {
	for i, b := range Backings {
		arenas[i], bytes[i] = liveArenas[b].Load(), liveBytes[b].Load()
	}
	return
}
