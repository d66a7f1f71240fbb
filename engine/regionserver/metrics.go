package regionserver

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/wal"
)

// metrics counts with atomics; gauges are computed at scrape time. Names are HBase's metrics2
// names in snake_case with the cellstore_regionserver_ prefix.
type metrics struct {
	s *Server

	gets, mutates, multis, scans                 atomic.Int64
	readRequests, writeRequests                  atomic.Int64
	throttled, scannersExpired                   atomic.Int64
	failedOpens, pressureFlushes, backlogFlushes atomic.Int64
	preparedOpens                                atomic.Int64
	walFailures                                  atomic.Int64
	walArchivedUnits, walArchiveErrors           atomic.Int64
	aggregates, bulkDeletes, bulkDeletedRows     atomic.Int64
	functionCalls                                atomic.Int64
	blockedWrites                                atomic.Int64 // writes that waited for a flush (region.Config.BlockedWrites)
	// read replicas
	staleReads, replicatedEdits             atomic.Int64
	replicationResyncs, replicationSessions atomic.Int64
	getLatency, mutateLatency               prometheus.Histogram
	multiLatency, scanLatency               prometheus.Histogram
	lastRateAt                              atomic.Int64
	lastRateCount                           atomic.Int64
}

func newMetrics(s *Server) *metrics {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cellstore", Subsystem: "regionserver", Name: name,
			Help: help, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)})
	}
	m := &metrics{s: s,
		getLatency:    h("get_seconds", "Latency of gets (HBase Get_*)."),
		mutateLatency: h("mutate_seconds", "Latency of mutations (HBase Mutate_*)."),
		multiLatency:  h("multi_seconds", "Latency of multi requests (HBase Multi_*)."),
		scanLatency:   h("scan_next_seconds", "Latency of scan calls (HBase ScanTime_*)."),
	}
	m.lastRateAt.Store(time.Now().UnixNano())
	return m
}

// rate is requests per second since the previous call (heartbeat load).
func (m *metrics) rate() int64 {
	now := time.Now().UnixNano()
	total := m.gets.Load() + m.mutates.Load() + m.multis.Load() + m.scans.Load()
	prevAt := m.lastRateAt.Swap(now)
	prev := m.lastRateCount.Swap(total)
	if d := now - prevAt; d > 0 {
		return (total - prev) * int64(time.Second) / d
	}
	return 0
}

func (m *metrics) register(reg prometheus.Registerer) error {
	s := m.s
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "cellstore", Subsystem: "regionserver", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "cellstore", Subsystem: "regionserver", Name: name, Help: help}, f)
	}
	sumRegions := func(f func(*region.Region) int64) func() float64 {
		return func() float64 {
			var n int64
			s.regions.Range(func(_, v any) bool {
				if r := v.(*onlineRegion).r.Load(); r != nil {
					n += f(r)
				}
				return true
			})
			return float64(n)
		}
	}
	walStat := func(f func(w walStats) float64) func() float64 {
		return func() float64 {
			w := s.currentWAL()
			if w == nil {
				return 0
			}
			switch w := w.(type) {
			case *wal.WAL:
				st := w.Stats()
				return f(walStats{syncs: st.Syncs, appends: st.Appends, bytes: st.BytesWritten, records: st.AppendedBytes, syncNanos: st.SyncNanos, zeroed: st.ZeroedBytes})
			case *wal.MultiWAL:
				st := w.Stats()
				return f(walStats{syncs: st.Syncs, appends: st.Appends, bytes: st.BytesWritten, records: st.AppendedBytes, syncNanos: st.SyncNanos, zeroed: st.ZeroedBytes})
			case *wal.ObjectLog:
				// A group commit is a PUT: it counts as the sync.
				st := w.Stats()
				return f(walStats{syncs: st.Puts, appends: st.Appends, bytes: st.PutBytes, records: st.PlainBytes, syncNanos: st.PutNanos})
			}
			return 0
		}
	}
	counterFn := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "cellstore", Subsystem: "regionserver", Name: name, Help: help}, f)
	}
	dataStat := func(f func(rpc.Stats) int64) func() float64 {
		return func() float64 {
			if d := s.dataSrv.Load(); d != nil {
				return float64(f(d.Stats()))
			}
			return 0
		}
	}
	cs := []prometheus.Collector{
		m.getLatency, m.mutateLatency, m.multiLatency, m.scanLatency,
		counter("get_request_count_total", "Get calls (HBase getRequestCount).", &m.gets),
		counter("mutate_request_count_total", "Mutate calls.", &m.mutates),
		counter("multi_request_count_total", "Multi calls.", &m.multis),
		counter("scan_request_count_total", "Scan calls (open and next).", &m.scans),
		counter("aggregate_request_count_total", "Aggregation endpoint calls (HBase's AggregateService).", &m.aggregates),
		counter("bulk_delete_request_count_total", "Bulk delete endpoint calls (HBase's BulkDeleteService).", &m.bulkDeletes),
		counter("bulk_deleted_row_count_total", "Rows bulk delete calls deleted in.", &m.bulkDeletedRows),
		counter("function_endpoint_request_count_total", "Calls of table functions' endpoints (docs/functions.md).", &m.functionCalls),
		counter("read_request_count_total", "Read requests: gets and scanner opens (HBase readRequestCount).", &m.readRequests),
		counter("write_request_count_total", "Write requests (HBase writeRequestCount).", &m.writeRequests),
		counter("throttled_request_count_total", "Requests refused by quotas.", &m.throttled),
		counter("scanner_lease_expired_total", "Scanners closed because their lease expired.", &m.scannersExpired),
		counter("failed_open_total", "Region opens that failed.", &m.failedOpens),
		counter("prepared_open_total", "Region opens that took the store files a move's source had this server open ahead, while it still served the region (PrepareRegion).", &m.preparedOpens),
		counter("wal_failure_total", "Times the WAL could not be written (disk full, I/O errors) and the server dropped its regions and registered again.", &m.walFailures),
		counter("wal_archived_units_total", "WAL units (objects or segments) copied to the backup location for point-in-time recovery.", &m.walArchivedUnits),
		counter("wal_archive_errors_total", "Rounds of WAL archiving that failed (the units are kept and archived at a later round).", &m.walArchiveErrors),
		counter("memstore_pressure_flush_total", "Flushes forced by global memstore pressure (HBase flushedMemstoreBytes under pressure).", &m.pressureFlushes),
		counter("wal_backlog_flush_total", "Flushes forced by a WAL that keeps too many objects or segments for unflushed edits (HBase's maxlogs): a dead server's recovery reads them all.", &m.backlogFlushes),
		gauge("region_count", "Online regions (HBase regionCount).", func() float64 { return float64(len(s.OnlineRegions())) }),
		gauge("memstore_limit_bytes", "The memstore budget: writes block when the regions' memstore chunks fill it (flushes start at 75%).", func() float64 { return float64(s.cfg.MemstoreBytes) }),
		gauge("memstore_write_pressure_percent", "The highest write pressure of the regions this server writes, as write answers report it (0-100: from a region's flush size, or the server's flush watermark, to where writes block); clients back off as it rises.", func() float64 {
			p := s.memPressure.Load()
			s.regions.Range(func(_, v any) bool {
				or := v.(*onlineRegion)
				if r := or.r.Load(); r != nil && or.live() && !r.IsReplica() {
					p = max(p, r.WritePressure())
				}
				return true
			})
			return float64(p)
		}),
		gauge("memstore_chunk_bytes", "Bytes of memstore chunks the regions hold (what counts against memstore_limit_bytes).", sumRegions(func(r *region.Region) int64 { return r.MemstoreStats().ChunkBytes })),
		gauge("mem_store_size", "Memstore data bytes (HBase memStoreSize).", sumRegions(func(r *region.Region) int64 { return r.MemstoreStats().DataBytes })),
		gauge("store_file_count", "Store files (HBase storeFileCount).", sumRegions(func(r *region.Region) int64 { return r.Metrics().StoreFiles.Load() })),
		gauge("store_file_size", "Store file bytes (HBase storeFileSize).", sumRegions(func(r *region.Region) int64 { return r.Metrics().StoreFileBytes.Load() })),
		gauge("flush_count", "Flushes (HBase flushCount).", sumRegions(func(r *region.Region) int64 { return r.Metrics().Flushes.Load() })),
		gauge("compaction_queue_length", "Regions with a store that holds enough files for a compaction, or reference files of a split (HBase compactionQueueLength).", sumRegions(func(r *region.Region) int64 {
			if r.CompactionWanted() {
				return 1
			}
			return 0
		})),
		gauge("compaction_count", "Compactions (HBase compactionCount).", sumRegions(func(r *region.Region) int64 { return r.Metrics().Compactions.Load() })),
		gauge("in_memory_flush_count", "In-memory flushes of compacting memstores (IN_MEMORY_COMPACTION BASIC or EAGER) of the regions here.", sumRegions(func(r *region.Region) int64 { return r.Metrics().InMemoryFlushes.Load() })),
		gauge("in_memory_merge_count", "Merges of compacting memstores' pipelines of the regions here.", sumRegions(func(r *region.Region) int64 { return r.Metrics().InMemoryMerges.Load() })),
		gauge("in_memory_dropped_cells", "Cells EAGER in-memory merges of the regions here left out (versions no read sees).", sumRegions(func(r *region.Region) int64 { return r.Metrics().InMemoryDroppedCells.Load() })),
		// Counted by the server, not summed over the regions open now: a region that closes
		// (a split, a move) must not take its count away, or a delta over it hides new blocks.
		gauge("blocked_request_count", "Writes that waited for a flush since the server started (HBase blockedRequestCount).", func() float64 { return float64(m.blockedWrites.Load()) }),
		gauge("wal_sync_count", "WAL syncs (HBase syncTime_num_ops).", walStat(func(w walStats) float64 { return float64(w.syncs) })),
		gauge("wal_sync_seconds", "Time spent in WAL syncs.", walStat(func(w walStats) float64 { return float64(w.syncNanos) / 1e9 })),
		gauge("wal_append_count", "WAL appends (HBase appendCount).", walStat(func(w walStats) float64 { return float64(w.appends) })),
		gauge("wal_written_bytes", "Bytes written to WAL segments.", walStat(func(w walStats) float64 { return float64(w.bytes) })),
		gauge("wal_record_bytes", "Bytes of the WAL before compression (wal_written_bytes: after; --wal-compression compresses WAL objects on object storage). On a directory tree the records appended.", walStat(func(w walStats) float64 { return float64(w.records) })),
		gauge("wal_zeroed_bytes", "Zeros written ahead of the WAL into its preallocated segments (--wal-zero-ahead), so that its syncs journal no block conversions; 0 on object storage.", walStat(func(w walStats) float64 { return float64(w.zeroed) })),
		gauge("wal_put_retry_count", "WAL object PUTs asked again because the object store was unavailable for now (throttled, a server error, no answer) after the S3 client's own attempts; the edits wait meanwhile (30 s at most per object) instead of breaking the WAL. 0 for a WAL on a directory.", func() float64 {
			if ol, ok := s.currentWAL().(*wal.ObjectLog); ok {
				return float64(ol.Stats().PutRetries)
			}
			return 0
		}),
		counter("stale_read_count_total", "Reads (gets and scanner opens) served by read replicas here: possibly stale (HBase staleReadCount).", &m.staleReads),
		counter("replicated_edit_count_total", "WAL edits applied to read replicas held here.", &m.replicatedEdits),
		counter("replication_resync_count_total", "Batches read replicas here refused for being out of order (each costs the primary a new session).", &m.replicationResyncs),
		counter("replication_session_count_total", "Replication sessions primaries here started (each flushes the primary).", &m.replicationSessions),
		gauge("rpc_connections", "Open data-path connections (HBase numOpenConnections).", dataStat(func(st rpc.Stats) int64 { return int64(st.Conns) })),
		gauge("rpc_queue_bytes", "Request bytes being served and answer bytes not yet sent (HBase queueSize); bounded by --request-queue-size.", dataStat(func(st rpc.Stats) int64 { return st.QueuedBytes })),
		counterFn("rpc_refused_connections_total", "Connections refused at the connection limit.", dataStat(func(st rpc.Stats) int64 { return st.RefusedConns })),
		counterFn("rpc_requests_too_large_total", "Requests refused for exceeding the request size limit.", dataStat(func(st rpc.Stats) int64 { return st.TooLarge })),
		counterFn("rpc_idle_closed_connections_total", "Connections closed for being idle.", dataStat(func(st rpc.Stats) int64 { return st.IdleClosed })),
		counterFn("rpc_timed_out_connections_total", "Connections closed by the read or write timeout.", dataStat(func(st rpc.Stats) int64 { return st.Timeouts })),
		counterFn("rpc_accept_errors_total", "Failed accepts of data-path connections (retried).", dataStat(func(st rpc.Stats) int64 { return st.AcceptErrors })),
		counterFn("rpc_throttled_reads_total", "Times a connection's requests stopped being read for a bound (backpressure).", dataStat(func(st rpc.Stats) int64 { return st.ThrottledReads })),
		counterFn("rpc_unauthenticated_connections_total", "Data-path connections refused because they proved no identity while security is on, presented an unknown token, or failed the TLS check of their certificate.", dataStat(func(st rpc.Stats) int64 { return st.Unauthenticated })),
		&lagCollector{s: s},
		&functionCollector{s: s},
		blockcache.NewCollector(s.l1, s.l2),
		offheap.NewCollector(s.budgets, s.pool),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type walStats struct {
	syncs, appends, bytes, records, syncNanos, zeroed uint64
}

// lagCollector reports, for every read replica a primary here ships to, how far it is behind.
type lagCollector struct{ s *Server }

var (
	lagEditsDesc = prometheus.NewDesc("cellstore_regionserver_replication_lag_edits",
		"Changes (edits, flush markers, file commits) of a primary here that its read replica has not acknowledged.", []string{"replica"}, nil)
	lagSecondsDesc = prometheus.NewDesc("cellstore_regionserver_replication_lag_seconds",
		"Age of the oldest change of a primary here that its read replica has not acknowledged (0 when it has them all).", []string{"replica"}, nil)
)

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lagEditsDesc; ch <- lagSecondsDesc }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.replicationLag(func(replica string, edits int, age time.Duration) {
		ch <- prometheus.MustNewConstMetric(lagEditsDesc, prometheus.GaugeValue, float64(edits), replica)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, age.Seconds(), replica)
	})
}
