package regionserver

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cellstore/engine/region"
)

// Per-table and per-region metrics (HBase's MetricsTable and MetricsRegion), with a cardinality
// guard: every table this server hosts gets its series up to Config.TableMetricsMax tables (the
// busiest; the rest are summed under table="_other"), and only the Config.RegionMetricsTop
// busiest regions get series of their own. Values are computed at scrape time from the regions'
// own counters, so the hot paths pay nothing for them, except the per-table latency histograms
// (one observation, on a histogram the region's entry points at, no lookup).
//
// A region that moves away takes its counters with it: the collector adds the last values it saw
// of a region that is gone to its table's total, so a table's counters never go down (what was
// counted between that scrape and the region's close is lost: a small undercount).

// otherTables is the table label of the tables beyond TableMetricsMax.
const otherTables = "_other"

// regionCounts are a region's counters as last seen.
type regionCounts struct {
	table                               string
	reads, writes, flushes, compactions int64
}

func (a *regionCounts) add(b regionCounts) {
	a.reads += b.reads
	a.writes += b.writes
	a.flushes += b.flushes
	a.compactions += b.compactions
}

// Operations a region's latency is counted for.
const (
	opGet = iota
	opMutate
	opScan
	numCallOps
)

var callOpNames = [numCallOps]string{"get", "mutate", "scan"}

// regionCalls is one operation's calls on a region here and their summed latency (HBase's
// per-region operation times, as a Prometheus summary without quantiles: two atomic adds a call).
// Allocated apart from the onlineRegion every call reads, so that the adds do not share its cache
// line.
type regionCalls struct{ count, nanos atomic.Int64 }

// newRegionCalls is a region's call counters, or nil when no region gets series of its own.
func (m *tableMetrics) newRegionCalls() *[numCallOps]regionCalls {
	if m == nil || m.topRegions <= 0 {
		return nil
	}
	return new([numCallOps]regionCalls)
}

// noteCall counts a call of op that took took.
func (or *onlineRegion) noteCall(op int, took time.Duration) {
	if or.calls == nil {
		return
	}
	or.calls[op].count.Add(1)
	or.calls[op].nanos.Add(int64(took))
}

// tableLatency are a table's latency histograms; a region's entry points at its table's.
type tableLatency struct {
	get, mutate, scan prometheus.Observer
}

type tableMetrics struct {
	s                     *Server
	maxTables, topRegions int

	latency   *prometheus.HistogramVec
	latencyMu sync.Mutex
	latencies map[string]*tableLatency

	mu sync.Mutex // one scrape at a time
	// last: each open region's counters at the previous scrape, by the region's instance (a
	// region reopened here starts again from zero); departed: by table, the last counters of
	// regions gone since; folded: tables summed under "_other" — once folded, always (else
	// "_other" would go down when one of them left it).
	last     map[*region.Region]regionCounts
	departed map[string]regionCounts
	folded   map[string]bool
	// gone: since when a departed table has had no region here; past departedRetention it is
	// forgotten (its series go, and a folded one's counts stay in otherGone, which "_other"
	// keeps), else every table ever served here (dropped ones, moved ones) kept its series and
	// its slot against --table-metrics-max for good.
	gone      map[string]time.Time
	otherGone regionCounts

	tReads, tWrites, tFlushes, tCompactions      *prometheus.Desc
	tRegions, tMemstore, tFiles, tFileBytes      *prometheus.Desc
	rReads, rWrites, rFlushes, rCompactions      *prometheus.Desc
	rLatency                                     *prometheus.Desc
	rMemstore, rFiles, rFileBytes                *prometheus.Desc
	tablesSeen, tablesFolded, regionsNotExported *prometheus.Desc
}

func newTableMetrics(s *Server, maxTables, topRegions int) *tableMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cellstore_regionserver_"+name, help, labels, nil)
	}
	t, tr := []string{"table"}, []string{"table", "region"}
	return &tableMetrics{s: s, maxTables: max(maxTables, 1), topRegions: topRegions,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cellstore", Subsystem: "regionserver",
			Name: "table_request_seconds", Help: "Latency of gets, mutations and scan calls per table (HBase MetricsTableLatencies).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 4, 9)}, []string{"table", "op"}),
		latencies: map[string]*tableLatency{},
		last:      map[*region.Region]regionCounts{}, departed: map[string]regionCounts{}, folded: map[string]bool{},
		gone:         map[string]time.Time{},
		tReads:       d("table_read_requests_total", "Gets and scanners opened on the table's regions here (HBase readRequestCount per table).", t...),
		tWrites:      d("table_write_requests_total", "Writes applied to the table's regions here (HBase writeRequestCount per table).", t...),
		tFlushes:     d("table_flushes_total", "Flushes of the table's regions here.", t...),
		tCompactions: d("table_compactions_total", "Compactions of the table's regions here.", t...),
		tRegions:     d("table_regions", "Regions (and replicas) of the table open here.", t...),
		tMemstore:    d("table_memstore_bytes", "Memstore data bytes of the table's regions here.", t...),
		tFiles:       d("table_store_files", "Store files of the table's regions here.", t...),
		tFileBytes:   d("table_store_file_bytes", "Store file bytes of the table's regions here.", t...),
		rReads:       d("region_read_requests_total", "Gets and scanners opened on the region, for the busiest regions (Config.RegionMetricsTop).", tr...),
		rWrites:      d("region_write_requests_total", "Writes applied to the region, for the busiest regions.", tr...),
		rFlushes:     d("region_flushes_total", "Flushes of the region, for the busiest regions.", tr...),
		rCompactions: d("region_compactions_total", "Compactions of the region, for the busiest regions.", tr...),
		rLatency: d("region_request_seconds", "Latency of gets, mutations and scan calls on the region (a count and a sum: the mean), for the busiest regions.",
			"table", "region", "op"),
		rMemstore:    d("region_memstore_bytes", "Memstore data bytes of the region, for the busiest regions.", tr...),
		rFiles:       d("region_store_files", "Store files of the region, for the busiest regions.", tr...),
		rFileBytes:   d("region_store_file_bytes", "Store file bytes of the region, for the busiest regions.", tr...),
		tablesSeen:   d("table_metrics_tables", "Tables with regions here."),
		tablesFolded: d("table_metrics_folded_tables", "Tables beyond --table-metrics-max, summed under table=\"_other\"."),
		regionsNotExported: d("region_metrics_omitted_regions",
			"Regions here without series of their own (beyond --region-metrics-top)."),
	}
}

// departedRetention is how long a table with no region here keeps its series.
var departedRetention = time.Hour

// forgetDeparted forgets the tables that have had no region here for departedRetention: their
// counters, their latency series, their place among the named tables.
func (m *tableMetrics) forgetDeparted(regions []regionSample) {
	here := map[string]bool{}
	for _, rs := range regions {
		here[rs.table] = true
	}
	now := time.Now()
	for t, d := range m.departed {
		if here[t] {
			delete(m.gone, t)
			continue
		}
		since, ok := m.gone[t]
		if !ok {
			m.gone[t] = now
			continue
		}
		if now.Sub(since) < departedRetention {
			continue
		}
		if m.folded[t] {
			m.otherGone.add(d) // "_other" does not go down
			delete(m.folded, t)
		}
		delete(m.departed, t)
		delete(m.gone, t)
		m.latencyMu.Lock()
		if l := m.latencies[t]; l != nil && l != m.latencies[otherTables] {
			for _, op := range []string{"get", "mutate", "scan"} {
				m.latency.DeleteLabelValues(t, op)
			}
		}
		delete(m.latencies, t)
		m.latencyMu.Unlock()
	}
}

// latencyOf is the latency histograms of a table (those of "_other" beyond maxTables tables).
func (m *tableMetrics) latencyOf(table string) *tableLatency {
	if m == nil {
		return nil
	}
	m.latencyMu.Lock()
	defer m.latencyMu.Unlock()
	if l := m.latencies[table]; l != nil {
		return l
	}
	label := table
	if len(m.latencies) >= m.maxTables {
		label = otherTables
		if l := m.latencies[otherTables]; l != nil {
			m.latencies[table] = l
			return l
		}
	}
	l := &tableLatency{get: m.latency.WithLabelValues(label, "get"), mutate: m.latency.WithLabelValues(label, "mutate"),
		scan: m.latency.WithLabelValues(label, "scan")}
	m.latencies[table] = l
	if label == otherTables {
		m.latencies[otherTables] = l
	}
	return l
}

func (m *tableMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.tReads, m.tWrites, m.tFlushes, m.tCompactions, m.tRegions, m.tMemstore, m.tFiles,
		m.tFileBytes, m.rReads, m.rWrites, m.rFlushes, m.rCompactions, m.rLatency, m.rMemstore, m.rFiles, m.rFileBytes, m.tablesSeen, m.tablesFolded,
		m.regionsNotExported} {
		ch <- d
	}
	m.latency.Describe(ch)
}

type regionSample struct {
	r    *region.Region
	name string
	regionCounts
	calls                      [numCallOps]struct{ count, nanos int64 }
	memstore, files, fileBytes int64
}

type tableSample struct {
	regionCounts
	regions, memstore, files, fileBytes int64
}

func (m *tableMetrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	m.mu.Lock()
	defer m.mu.Unlock()
	var regions []regionSample
	m.s.regions.Range(func(_, v any) bool {
		or := v.(*onlineRegion)
		r := or.r.Load()
		if r == nil {
			return true
		}
		regions = append(regions, sampleRegion(or, r))
		return true
	})
	live := make(map[*region.Region]regionCounts, len(regions))
	for _, rs := range regions {
		live[rs.r] = rs.regionCounts
	}
	for r, c := range m.last {
		if _, ok := live[r]; !ok {
			d := m.departed[c.table]
			d.table = c.table
			d.add(c)
			m.departed[c.table] = d
		}
	}
	m.last = live
	m.forgetDeparted(regions)

	tables := map[string]*tableSample{}
	get := func(t string) *tableSample {
		ts := tables[t]
		if ts == nil {
			ts = &tableSample{}
			tables[t] = ts
		}
		return ts
	}
	for t, d := range m.departed {
		get(t).add(d)
	}
	for _, rs := range regions {
		ts := get(rs.table)
		ts.add(rs.regionCounts)
		ts.regions++
		ts.memstore += rs.memstore
		ts.files += rs.files
		ts.fileBytes += rs.fileBytes
	}
	// The busiest tables keep their names; the rest are summed under "_other" (for good).
	var names []string
	for t := range tables {
		if !m.folded[t] {
			names = append(names, t)
		}
	}
	busy := func(ts *tableSample) int64 { return ts.reads + ts.writes }
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(busy(tables[b]), busy(tables[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(names) > m.maxTables || len(m.folded) > 0 {
		keep := m.maxTables - 1
		if len(names) > keep {
			for _, t := range names[keep:] {
				m.folded[t] = true
			}
			names = names[:keep]
		}
	}
	folded := 0
	if len(m.folded) > 0 {
		other := &tableSample{}
		other.add(m.otherGone)
		for t := range m.folded {
			ts := tables[t]
			if ts == nil {
				continue
			}
			other.add(ts.regionCounts)
			other.regions += ts.regions
			other.memstore += ts.memstore
			other.files += ts.files
			other.fileBytes += ts.fileBytes
			folded++
		}
		names = append(names, otherTables)
		tables[otherTables] = other
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, t := range names {
		ts := tables[t]
		counter(m.tReads, ts.reads, t)
		counter(m.tWrites, ts.writes, t)
		counter(m.tFlushes, ts.flushes, t)
		counter(m.tCompactions, ts.compactions, t)
		gauge(m.tRegions, ts.regions, t)
		gauge(m.tMemstore, ts.memstore, t)
		gauge(m.tFiles, ts.files, t)
		gauge(m.tFileBytes, ts.fileBytes, t)
	}
	gauge(m.tablesSeen, int64(len(tables)-min(len(m.folded), 1)))
	gauge(m.tablesFolded, int64(folded))

	// The busiest regions, by requests since they opened here.
	slices.SortFunc(regions, func(a, b regionSample) int {
		if c := cmp.Compare(b.reads+b.writes, a.reads+a.writes); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	top := regions[:min(m.topRegions, len(regions))]
	for _, rs := range top {
		counter(m.rReads, rs.reads, rs.table, rs.name)
		counter(m.rWrites, rs.writes, rs.table, rs.name)
		counter(m.rFlushes, rs.flushes, rs.table, rs.name)
		counter(m.rCompactions, rs.compactions, rs.table, rs.name)
		for op, c := range rs.calls {
			ch <- prometheus.MustNewConstSummary(m.rLatency, uint64(c.count), time.Duration(c.nanos).Seconds(), nil, rs.table, rs.name, callOpNames[op])
		}
		gauge(m.rMemstore, rs.memstore, rs.table, rs.name)
		gauge(m.rFiles, rs.files, rs.table, rs.name)
		gauge(m.rFileBytes, rs.fileBytes, rs.table, rs.name)
	}
	gauge(m.regionsNotExported, int64(len(regions)-len(top)))
}

func sampleRegion(or *onlineRegion, r *region.Region) regionSample {
	mt := r.Metrics()
	rs := regionSample{r: r, name: or.name,
		regionCounts: regionCounts{table: or.tkey, reads: mt.ReadRequests.Load(), writes: mt.WriteRequests.Load(),
			flushes: mt.Flushes.Load(), compactions: mt.Compactions.Load()},
		memstore: r.MemstoreStats().DataBytes, files: mt.StoreFiles.Load(), fileBytes: mt.StoreFileBytes.Load()}
	if or.calls != nil {
		for op := range rs.calls {
			rs.calls[op].count, rs.calls[op].nanos = or.calls[op].count.Load(), or.calls[op].nanos.Load()
		}
	}
	return rs
}
