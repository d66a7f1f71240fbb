package filecache

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	hits, misses, fetched, evictions, errors prometheus.Counter
	used                                     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "cellstore_filecache_" + name, Help: help})
	}
	m := &metrics{
		hits:      counter("hits_total", "Reads of object ranges answered by the local file cache."),
		misses:    counter("misses_total", "Reads of object ranges the local file cache did not hold: read from the bucket."),
		fetched:   counter("fetched_bytes_total", "Bytes read from the bucket on file cache misses (prefetches of whole objects included)."),
		evictions: counter("evictions_total", "Entries evicted from the local file cache to stay within its capacity."),
		errors:    counter("errors_total", "Local file cache entries that could not be written or read back (full or failing disk, failed checksums): those reads went to the bucket."),
		used: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cellstore_filecache_used_bytes",
			Help: "Bytes of the local file cache's files."}),
	}
	if reg != nil {
		reg.MustRegister(m.all()...)
	}
	return m
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.hits, m.misses, m.fetched, m.evictions, m.errors, m.used}
}
