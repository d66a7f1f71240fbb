package master

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the master's Prometheus metrics: HBase's master metrics2 names in snake_case with
// the cellstore_master_ prefix. Gauges are set where the state changes (or once per tick from
// counts kept as changes happen): scraping takes no lock and counts nothing.
type metrics struct {
	isActive          prometheus.Gauge
	ritCount          prometheus.Gauge
	failedOpenRegions prometheus.Gauge
	ritOldestAge      prometheus.Gauge
	liveServers       prometheus.Gauge
	deadServers       prometheus.Gauge
	drainingServer    prometheus.Gauge
	regionCount       prometheus.Gauge
	tableCount        prometheus.Gauge
	balancerMoves     prometheus.Counter
	balancerRuns      prometheus.Counter
	assignTime        prometheus.Histogram
	failedOpens       prometheus.Counter
	serverCrashes     prometheus.Counter
	recoveryTime      prometheus.Histogram
	splitEdits        prometheus.Counter
	splits            prometheus.Counter
	splitRollbacks    prometheus.Counter
	merges            prometheus.Counter
	mergeRollbacks    prometheus.Counter
	reportsPerWrite   prometheus.Histogram
	reportsWaiting    prometheus.Gauge
	catalogRefused    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cellstore", Subsystem: "master", Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cellstore", Subsystem: "master", Name: name, Help: help})
	}
	m := &metrics{
		isActive:          g("is_active_master", "1 when this master is the active one (isActiveMaster)."),
		ritCount:          g("rit_count", "Regions in transition: with a procedure in flight or between states (ritCount)."),
		ritOldestAge:      g("rit_oldest_age_seconds", "Age of the oldest region transition (ritOldestAge)."),
		failedOpenRegions: g("failed_open_regions", "Regions in FAILED_OPEN: they gave up opening and serve nothing until assigned again (`assign` in the shell)."),
		liveServers:       g("num_region_servers", "Live region servers (numRegionServers)."),
		deadServers:       g("num_dead_region_servers", "Dead region servers whose recovery is not finished (numDeadRegionServers)."),
		drainingServer:    g("num_draining_region_servers", "Region servers marked draining (numDrainingRegionServers)."),
		regionCount:       g("region_count", "Regions in the catalog, replicas included (regionCount)."),
		tableCount:        g("table_count", "Tables in the catalog."),
		balancerMoves:     c("balancer_moves_total", "Region moves started by the balancer and by drains."),
		balancerRuns:      c("balancer_runs_total", "Balancer runs (BalancerCluster_num_ops)."),
		assignTime: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cellstore", Subsystem: "master", Name: "assign_seconds",
			Help:    "Time from sending OpenRegion to the OPENED report (AssignmentManager assign time).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		failedOpens:   c("failed_opens_total", "Open attempts reported failed or timed out."),
		serverCrashes: c("server_crash_procedures_total", "Dead region servers whose recovery started (ServerCrashProcedure)."),
		recoveryTime: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cellstore", Subsystem: "master", Name: "server_crash_recovery_seconds",
			Help:    "Time from declaring a server dead to every region it held being settled.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120, 300}}),
		splitEdits:     c("wal_split_edits_total", "WAL edits written to recovered edits by log splitting."),
		splits:         c("region_splits_total", "Regions split into two daughters (SplitTableRegionProcedure successes)."),
		splitRollbacks: c("region_split_rollbacks_total", "Splits given up (no split row, references, unreplayed edits): the region reopened."),
		merges:         c("region_merges_total", "Pairs of regions merged into one (MergeTableRegionsProcedure successes)."),
		mergeRollbacks: c("region_merge_rollbacks_total", "Merges given up (references, unreplayed edits): the regions reopened."),
		reportsPerWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cellstore", Subsystem: "master", Name: "reports_per_catalog_write",
			Help:    "Region servers' transition reports (OPENED, CLOSED, FAILED_OPEN) made durable by one catalog write: reports that arrive while one is written go together in the next.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}),
		reportsWaiting: g("reports_waiting", "Region servers' transition reports waiting for the catalog write under way to end, to go together in the next."),
		catalogRefused: c("catalog_writes_too_large_total", "Catalog writes refused as larger than the catalog's log takes in one record (the request that made them was refused)."),
	}
	if reg != nil {
		reg.MustRegister(m.isActive, m.ritCount, m.ritOldestAge, m.failedOpenRegions, m.liveServers, m.deadServers, m.drainingServer,
			m.regionCount, m.tableCount, m.balancerMoves, m.balancerRuns, m.assignTime, m.failedOpens,
			m.serverCrashes, m.recoveryTime, m.splitEdits, m.splits, m.splitRollbacks, m.merges, m.mergeRollbacks, m.reportsPerWrite, m.reportsWaiting, m.catalogRefused)
	}
	return m
}
