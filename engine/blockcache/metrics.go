package blockcache

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descHits = prometheus.NewDesc("cellstore_block_cache_hit_count",
		"Block cache hits (HBase blockCacheHitCount).", []string{"tier"}, nil)
	descMisses = prometheus.NewDesc("cellstore_block_cache_miss_count",
		"Block cache misses (HBase blockCacheMissCount).", []string{"tier"}, nil)
	descEvictions = prometheus.NewDesc("cellstore_block_cache_eviction_count",
		"Blocks evicted to make room (HBase blockCacheEvictionCount); blocks of closed or compacted files are not counted.", []string{"tier"}, nil)
	descBlocks = prometheus.NewDesc("cellstore_block_cache_count",
		"Blocks cached (HBase blockCacheCount).", []string{"tier"}, nil)
	descSize = prometheus.NewDesc("cellstore_block_cache_size_bytes",
		"Bytes of cached blocks (HBase blockCacheSize).", []string{"tier"}, nil)
	descFree = prometheus.NewDesc("cellstore_block_cache_free_bytes",
		"Free cache memory: capacity minus memory in use, including slot fragmentation (HBase blockCacheFreeSize).",
		[]string{"tier"}, nil)
	descCapacity = prometheus.NewDesc("cellstore_block_cache_capacity_bytes",
		"Cache capacity.", []string{"tier"}, nil)
	descFailedPuts = prometheus.NewDesc("cellstore_block_cache_failed_insert_count",
		"Blocks not cached because every eviction candidate was referenced.", []string{"tier"}, nil)
	descPending = prometheus.NewDesc("cellstore_block_cache_evicted_referenced_count",
		"Evicted blocks whose slots wait for readers to release them.", []string{"tier"}, nil)
	descFreeBuckets = prometheus.NewDesc("cellstore_block_cache_free_buckets",
		"L2 buckets not assigned to any size class.", []string{"tier"}, nil)
	descClassBuckets = prometheus.NewDesc("cellstore_block_cache_bucket_count",
		"L2 buckets assigned to a size class.", []string{"tier", "size_class"}, nil)
	descClassSlots = prometheus.NewDesc("cellstore_block_cache_bucket_slots",
		"L2 slots of a size class by state (used, free).", []string{"tier", "size_class", "state"}, nil)
	descClassWasted = prometheus.NewDesc("cellstore_block_cache_bucket_wasted_bytes",
		"L2 slot bytes not holding block bytes (internal fragmentation) by size class.", []string{"tier", "size_class"}, nil)
	descClassTail = prometheus.NewDesc("cellstore_block_cache_bucket_tail_bytes",
		"L2 bucket bytes no slot of the class can use, by size class.", []string{"tier", "size_class"}, nil)
)

// Collector exports block cache statistics with a tier label (l1, l2),
// reading the caches' atomic counters at scrape time.
type Collector struct {
	l1 *LRU
	l2 *BucketCache
}

// NewCollector returns a collector for the given tiers (either may be nil).
func NewCollector(l1 *LRU, l2 *BucketCache) *Collector { return &Collector{l1: l1, l2: l2} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descMisses, descEvictions, descBlocks, descSize, descFree,
		descCapacity, descFailedPuts, descPending, descFreeBuckets, descClassBuckets, descClassSlots,
		descClassWasted, descClassTail} {
		ch <- d
	}
}

func collectTier(ch chan<- prometheus.Metric, tier string, s Stats) {
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), tier)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), tier)
	}
	counter(descHits, s.Hits)
	counter(descMisses, s.Misses)
	counter(descEvictions, s.Evictions)
	gauge(descBlocks, s.Blocks)
	gauge(descSize, s.SizeBytes)
	gauge(descFree, s.FreeBytes)
	gauge(descCapacity, s.Capacity)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.l1 != nil {
		collectTier(ch, "l1", c.l1.Stats())
	}
	if c.l2 != nil {
		s := c.l2.Stats()
		collectTier(ch, "l2", s)
		ch <- prometheus.MustNewConstMetric(descFailedPuts, prometheus.CounterValue, float64(s.FailedPuts), "l2")
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.PendingFree), "l2")
		ch <- prometheus.MustNewConstMetric(descFreeBuckets, prometheus.GaugeValue, float64(s.FreeBuckets), "l2")
		for _, cs := range s.Classes {
			class := strconv.FormatInt(cs.SlotSize, 10)
			ch <- prometheus.MustNewConstMetric(descClassBuckets, prometheus.GaugeValue, float64(cs.Buckets), "l2", class)
			ch <- prometheus.MustNewConstMetric(descClassSlots, prometheus.GaugeValue, float64(cs.SlotsUsed), "l2", class, "used")
			ch <- prometheus.MustNewConstMetric(descClassSlots, prometheus.GaugeValue, float64(cs.SlotsFree), "l2", class, "free")
			ch <- prometheus.MustNewConstMetric(descClassWasted, prometheus.GaugeValue, float64(cs.WastedBytes), "l2", class)
			ch <- prometheus.MustNewConstMetric(descClassTail, prometheus.GaugeValue, float64(cs.TailBytes), "l2", class)
		}
	}
}
