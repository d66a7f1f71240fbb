package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/regionserver"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/settings"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/filecache"
	"github.com/cellstore/cellstore/engine/telemetry"
	"github.com/cellstore/cellstore/engine/wal"
)

// regionServerFlags are the `cellstore regionserver` settings.
type regionServerFlags struct {
	storageDir, masters, dataAddr, adminAddr, httpAddr string
	advertiseHost, zone, logLevel, configFile          string
	configWatch                                        watchInterval
	flushSize, replicationQueue                        int64
	mem                                                offheap.MemoryConfig
	bucket                                             bucketFlags
	// data-path admission control (the request queue is in mem: it is part of the memory plan)
	maxConns, maxScanners     int
	maxRequest, maxScanResult offheap.Quantity
	idleTimeout               time.Duration
	// WAL group commit (docs/architecture.md, "Group commit")
	walCommit    commitModeFlag
	walSyncSlots int
	walZeroAhead bool
	walCompress  bool
	walDelay     commitDelayFlag
	walGroups    int
	slowCall     time.Duration
	compaction   compactionFlags
	// local file cache of store-file ranges read from a bucket
	fileCacheDir  string
	fileCacheSize offheap.Quantity
	security      serverSecurityFlags
	// cellACLEarlyOut is HBase's hbase.security.access.early_out (docs/security.md, "Cell ACLs").
	cellACLEarlyOut bool
	hbaseProtocol   bool
	clusterID       string
	// per-table and per-region metrics
	tableMetricsMax, regionMetricsTop int
	// WAL archiving for point-in-time recovery, at the backup location
	backup     bucketFlags
	walArchive walArchiveFlags
}

// addFileCacheFlags registers the local file cache of a region server on a bucket.
func addFileCacheFlags(fl *pflag.FlagSet, f *regionServerFlags) {
	fl.StringVar(&f.fileCacheDir, "file-cache-dir", "", "with a bucket: keep ranges of store files read from it in this local directory (a pod-local volume), up to --file-cache-size")
	fl.Var(&f.fileCacheSize, "file-cache-size", "bytes the local file cache may hold (e.g. 10Gi); 0: no file cache")
}

// addFileCache opens the local file cache the flags ask for, if any, into cfg (with its metrics).
func addFileCache(cfg *regionserver.Config, f *regionServerFlags, bucket storage.Bucket) error {
	if f.fileCacheDir == "" && f.fileCacheSize == 0 {
		return nil
	}
	switch {
	case bucket == nil:
		return errors.New("--file-cache-dir and --file-cache-size cache reads from a bucket: give --s3-bucket (or --bucket-dir), or drop them")
	case f.fileCacheDir == "" || f.fileCacheSize <= 0:
		return errors.New("the file cache needs both --file-cache-dir and a --file-cache-size above zero")
	}
	c, err := filecache.Open(filecache.Config{Dir: f.fileCacheDir, Capacity: int64(f.fileCacheSize)})
	if err != nil {
		return fmt.Errorf("--file-cache-dir: %w", err)
	}
	cfg.FileCache = c
	cfg.Collectors = append(cfg.Collectors, c.Collectors()...)
	return nil
}

// addSecurity sets up the TLS and authentication the flags ask for in cfg.
func addSecurity(cfg *regionserver.Config, f *regionServerFlags, log *slog.Logger) error {
	sec, err := f.security.load(log)
	if err != nil {
		return err
	}
	cfg.TLS, cfg.Auth = sec.certs, sec.auth
	cfg.Authorization, cfg.Superusers = sec.authorization, sec.superusers
	cfg.NoCellACLEarlyOut = !f.cellACLEarlyOut
	cfg.Collectors = append(cfg.Collectors, sec.collectors()...)
	return nil
}

// objectLogCommitDelay is --wal-commit-delay=auto on object storage: a PUT takes milliseconds, and
// writers acknowledged by one come back within about one (docs/benchmarks.md, "A commit delay").
const objectLogCommitDelay = 2 * time.Millisecond

// directoryCommitDelay is --wal-commit-delay=auto on a directory tree (leader commit, one sync
// slot): writers that would take turns at the disk in two groups share one sync, 1.16× the
// un-batched writes at 4 and 16 writers on the development disk (docs/benchmarks.md,
// "2026-12-06 (seventh)").
const directoryCommitDelay = 200 * time.Microsecond

// commitDelayFlag is --wal-commit-delay: a duration, or auto (the default).
type commitDelayFlag struct {
	d   time.Duration
	set bool // a duration was given; else auto
}

func (c *commitDelayFlag) Set(s string) error {
	if s == "auto" {
		*c = commitDelayFlag{}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: give a duration (0: never) or auto", s)
	}
	*c = commitDelayFlag{d: d, set: true}
	return nil
}

func (c *commitDelayFlag) String() string {
	if !c.set {
		return "auto"
	}
	return c.d.String()
}

func (c *commitDelayFlag) Type() string { return "duration" }

// resolve is the delay for a WAL on object storage or not, with this many syncs or PUTs in flight
// and, on a directory tree, this group-commit mode (a delay needs the leader and one slot).
func (c *commitDelayFlag) resolve(objectStorage bool, slots int, mode wal.CommitMode) time.Duration {
	switch {
	case c.set:
		return c.d
	case objectStorage && wal.ObjectCommitDelayFits(slots):
		return objectLogCommitDelay
	case !objectStorage && wal.CommitDelayFits(mode, slots):
		return directoryCommitDelay
	}
	return 0
}

// commitModeFlag is --wal-group-commit.
type commitModeFlag struct{ wal.CommitMode }

func (c *commitModeFlag) Set(s string) (err error) {
	c.CommitMode, err = wal.ParseCommitMode(s)
	return err
}
func (c *commitModeFlag) Type() string { return "mode" }

// addWALFlags registers how the WAL commits.
// addTableMetricsFlags registers the cardinality guard of the per-table and per-region metrics.
func addTableMetricsFlags(fl *pflag.FlagSet, f *regionServerFlags) {
	fl.IntVar(&f.tableMetricsMax, "table-metrics-max", 100, "tables with per-table metric series; the rest are summed under table=\"_other\"")
	fl.IntVar(&f.regionMetricsTop, "region-metrics-top", 20, "the busiest regions that get metric series of their own (0: none)")
}

func addWALFlags(fl *pflag.FlagSet, f *regionServerFlags) {
	fl.Var(&f.walCommit, "wal-group-commit", "who writes and syncs a WAL batch: leader (the writer that finds a free sync slot, for everyone queued) or syncer (background goroutines, one per slot)")
	fl.DurationVar(&f.slowCall, "slow-call-threshold", 500*time.Millisecond, "log data-path calls and WAL commits that take this long or longer (\"slow call\", \"slow WAL commit\"); negative: never")
	fl.IntVar(&f.walSyncSlots, "wal-sync-slots", 1, "WAL group commits that may be under way at once (1-8): syncs of the segment, or PUTs of the object log on a bucket")
	fl.Var(&f.walDelay, "wal-commit-delay", "how long a WAL commit may wait for more writers when more are expected (as many as waited at once lately; a lone writer waits at most once, after a busier time), so that they share one sync (on object storage one PUT); 0: never; auto: "+objectLogCommitDelay.String()+" on object storage (S3 or --bucket-dir) with one PUT in flight, "+directoryCommitDelay.String()+" on a directory tree with leader commit and one sync slot, else 0")
	fl.BoolVar(&f.walZeroAhead, "wal-zero-ahead", true, "write zeros ahead of the WAL into its preallocated segment, so that its syncs on ext4 or XFS journal no block conversions (a directory tree only): faster small synced writes, every block of the log written twice")
	fl.BoolVar(&f.walCompress, "wal-compression", true, "compress the records of each WAL object with S2 when that saves an eighth of their bytes or more (object storage only: fewer bytes to PUT, store and read back)")
	fl.IntVar(&f.walGroups, "wal-groups", 1, "WALs per server (1-16; HBase's multiwal): each region's edits go to one of them by its name's hash, each commits and syncs on its own (a directory tree only)")
}

// compactionFlags are how regions compact (region.CompactionConfig; HBase's
// hbase.hstore.compaction.*), settings that change without a restart.
type compactionFlags struct {
	minFiles, maxFiles     int
	ratio                  float64
	maxFileSize, bandwidth int64
}

func addCompactionFlags(fl *pflag.FlagSet, f *compactionFlags) {
	fl.IntVar(&f.minFiles, "compaction-min-files", region.DefaultCompactionMinFiles, "a minor compaction needs at least this many store files of a family (hbase.hstore.compaction.min)")
	fl.IntVar(&f.maxFiles, "compaction-max-files", region.DefaultCompactionMaxFiles, "at most this many store files per minor compaction (hbase.hstore.compaction.max)")
	fl.Float64Var(&f.ratio, "compaction-ratio", region.DefaultCompactionRatio, "a file joins a minor compaction only if it is at most this many times the others together (hbase.hstore.compaction.ratio)")
	fl.Int64Var(&f.maxFileSize, "compaction-max-file-size", 0, "store files larger than this many bytes are left out of minor compactions (0: no limit; hbase.hstore.compaction.max.size)")
	fl.Int64Var(&f.bandwidth, "compaction-throughput", 0, "bytes per second a compaction may write (0: no limit; hbase.hstore.compaction.throughput.higher.bound)")
}

func (f *compactionFlags) config() region.CompactionConfig {
	return region.CompactionConfig{MinFiles: f.minFiles, MaxFiles: f.maxFiles, Ratio: f.ratio, MaxFileSize: f.maxFileSize, ThroughputLimit: f.bandwidth}
}

// addAdmissionFlags registers the data path's limits (docs/regionserver.md, "Admission control").
func addAdmissionFlags(fl *pflag.FlagSet, f *regionServerFlags) {
	f.maxRequest = rpc.DefaultMaxFrame
	f.maxScanResult = regionserver.DefaultMaxScanResultSize
	fl.IntVar(&f.maxConns, "max-connections", rpc.DefaultMaxConns, "data-path connections served at once; one more is answered TOO_BUSY and closed")
	fl.Var(&f.maxRequest, "max-request-size", "largest request accepted (checked from its length before it is read; at most --request-queue-size)")
	fl.Var(&f.maxScanResult, "scan-max-result-size", "largest scan answer, whatever caching or max result size the client asks for")
	fl.IntVar(&f.maxScanners, "max-scanners", regionserver.DefaultMaxScanners, "scanners open at once; opening one more is answered TOO_BUSY")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", rpc.DefaultIdleTimeout, "a data-path connection with nothing in flight that sends nothing for this long is closed")
}

func regionServerCommand() *cobra.Command {
	f := &regionServerFlags{mem: offheap.DefaultMemoryConfig()}
	cmd := &cobra.Command{
		Use:   "regionserver",
		Short: "Run a region server: serves regions over the data path, obeys the master",
		Long: `The region server registers with the active master (found among --masters), heartbeats to keep
its lease, opens and closes regions when told, and serves gets, mutations, multi requests and
scans on --data-addr. Its WAL is <storage-dir>/wal/<server>_<start code>/. SIGTERM stops it
gracefully: regions are flushed and closed and the master is told.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, err := loadConfigFile(cmd.Flags(), f.configFile, settings.RegionServer)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runRegionServer(ctx, f, cf)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.storageDir, "storage-dir", "", "shared storage root (the master's): data/, wal/, archive/ (required unless the data is in a bucket: --s3-bucket)")
	addBucketFlags(fl, &f.bucket)
	fl.StringVar(&f.masters, "masters", "127.0.0.1:16000", "masters' gRPC addresses, comma-separated; the active one is found")
	fl.StringVar(&f.dataAddr, "data-addr", ":16020", "address of the data path (get, mutate, multi, scan)")
	fl.StringVar(&f.adminAddr, "admin-addr", ":16021", "address of the Admin gRPC service (the master's orders)")
	fl.StringVar(&f.httpAddr, "http-addr", ":16030", "address of /metrics, /healthz and /readyz")
	fl.StringVar(&f.advertiseHost, "advertise-host", "", "host name clients and the master reach this server by (default: the host name)")
	fl.StringVar(&f.zone, "zone", "", "zone of this server (replicas of a region go to different zones)")
	fl.Int64Var(&f.flushSize, "memstore-flush-size", 128<<20, "a region's memstore is flushed at this many bytes")
	fl.Int64Var(&f.replicationQueue, "replication-queue-size", 16<<20, "bytes a primary region keeps for a read replica that is behind; one further behind is re-synced from the files (a flush)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.configFile, "config", "", "file of 'flag-name = value' lines for flags not given on the command line")
	f.configWatch = watchInterval(configWatchInterval)
	fl.Var(&f.configWatch, "config-watch-interval", configWatchUsage)
	f.mem.AddFlags(fl)
	addAdmissionFlags(fl, f)
	addCompactionFlags(fl, &f.compaction)
	addWALFlags(fl, f)
	addTableMetricsFlags(fl, f)
	addFileCacheFlags(fl, f)
	addServerSecurityFlags(fl, &f.security)
	addCellACLFlag(fl, f)
	addHBaseFlags(fl, f)
	addRemoteFlags(fl, &f.backup, "backup", "the backup location, where --wal-archive archives the WAL")
	addWALArchiveFlags(fl, &f.walArchive, true, false)
	return cmd
}

// addHBaseFlags registers the HBase protocol's flags (docs/hbase-clients.md).
func addHBaseFlags(fl *pflag.FlagSet, f *regionServerFlags) {
	fl.BoolVar(&f.hbaseProtocol, "hbase-protocol", true, "also serve the stock HBase 2.x client's RPC on --data-addr (hbase.client.registry.impl = RpcConnectionRegistry, hbase.client.bootstrap.servers = this address)")
	fl.StringVar(&f.clusterID, "cluster-id", "", "cluster id HBase clients are told (default \"cellstore\")")
}

// addCellACLFlag registers how reads weigh cell ACLs.
func addCellACLFlag(fl *pflag.FlagSet, f *regionServerFlags) {
	fl.BoolVar(&f.cellACLEarlyOut, "cell-acl-early-out", true, "with --security=on: refuse at once a read by a user with no READ grant on what it reads, cell ACLs unread, unless the read asks for the cell-first strategy (HBase's hbase.security.access.early_out); false: return the cells whose ACL grants READ")
}

// newLeveledLogger makes a process's logger and the level it logs at, which may change
// (--log-level is a setting that changes without a restart).
func newLeveledLogger(level string) (*slog.Logger, *slog.LevelVar, error) {
	lv := new(slog.LevelVar)
	if err := setLevel(lv, level); err != nil {
		return nil, nil, err
	}
	// A line repeated more than 10 times in 10 s (a failing peer, a storm of one error) is
	// dropped and counted (telemetry.RateLimited).
	return slog.New(telemetry.RateLimited(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}), telemetry.RateLimitOptions{})), lv, nil
}

func setLevel(lv *slog.LevelVar, level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	lv.Set(l)
	return nil
}

// configWatchInterval is how often a process checks its configuration file for changes.
const configWatchInterval = 10 * time.Second

// regionServerSettings are the region server's settings that change without a restart
// (engine/settings): how each takes effect.
func regionServerSettings(s *regionserver.Server, f *regionServerFlags, lv *slog.LevelVar) map[string]func() error {
	apply := map[string]func() error{
		"log-level":            func() error { return setLevel(lv, f.logLevel) },
		"slow-call-threshold":  func() error { s.SetSlowCall(f.slowCall); return nil },
		"max-scanners":         func() error { return s.SetMaxScanners(f.maxScanners) },
		"scan-max-result-size": func() error { return s.SetMaxScanResultSize(int64(f.maxScanResult)) },
		"max-connections":      func() error { return s.SetMaxConnections(f.maxConns) },
		"idle-timeout":         func() error { return s.SetIdleTimeout(f.idleTimeout) },
	}
	for _, name := range []string{"compaction-min-files", "compaction-max-files", "compaction-ratio", "compaction-max-file-size", "compaction-throughput"} {
		apply[name] = func() error { return s.SetCompaction(f.compaction.config()) }
	}
	return apply
}

// reloadHook is a process's Reload: it re-reads the file and logs what it did.
func reloadHook(cf *configFile, log *slog.Logger) func() *pb.ConfigurationReport {
	return func() *pb.ConfigurationReport {
		r := cf.Reload()
		logReport(log, r)
		return r
	}
}

// memoryPlan validates the memory flags and applies the heap limit.
func memoryPlan(mem *offheap.MemoryConfig, log *slog.Logger) (*offheap.MemoryPlan, error) {
	plan, err := mem.Validate()
	if err != nil {
		return nil, fmt.Errorf("memory budgets: %w", err)
	}
	for _, n := range plan.Notes {
		log.Info("memory", "note", n)
	}
	plan.Apply()
	return plan, nil
}

func regionServerConfig(f *regionServerFlags, fs storage.FS, bucket storage.Bucket, plan *offheap.MemoryPlan, log *slog.Logger) regionserver.Config {
	var masters []string
	for _, m := range strings.Split(f.masters, ",") {
		if m = strings.TrimSpace(m); m != "" {
			masters = append(masters, m)
		}
	}
	return regionserver.Config{Version: version, FS: fs, Bucket: bucket, Masters: masters, DataAddr: f.dataAddr, AdminAddr: f.adminAddr, HTTPAddr: f.httpAddr,
		AdvertiseHost: f.advertiseHost, Zone: f.zone, MemstoreBytes: plan.MemstoreOffheap, BlockCacheOffheap: plan.BlockCacheOffheap,
		NoL2: plan.BlockCacheOffheap == 0, BlockCacheOnheap: plan.BlockCacheOnheap, Hugepages: plan.Hugepages,
		FlushSize: f.flushSize, ReplicationQueueBytes: f.replicationQueue, Logger: log,
		RPC: rpc.ServerOptions{MaxFrame: int(f.maxRequest), MaxQueuedBytes: plan.RequestQueue, MaxConns: f.maxConns,
			IdleTimeout: f.idleTimeout},
		MaxScanResultSize: int64(f.maxScanResult), MaxScanners: f.maxScanners, FunctionMemory: plan.FunctionMemory, Collectors: bucketCollectors(bucket),
		WALGroupCommit: f.walCommit.CommitMode, WALSyncSlots: f.walSyncSlots, WALCommitDelay: f.walDelay.resolve(bucket != nil, f.walSyncSlots, f.walCommit.CommitMode), WALGroups: f.walGroups, WALNoZeroAhead: !f.walZeroAhead, WALNoCompression: !f.walCompress, SlowCall: f.slowCall, Compaction: f.compaction.config(), HBaseProtocol: f.hbaseProtocol, ClusterID: f.clusterID,
		TableMetricsMax: f.tableMetricsMax, RegionMetricsTop: cmp.Or(f.regionMetricsTop, -1)}
}

func runRegionServer(ctx context.Context, f *regionServerFlags, cf *configFile) error {
	log, lv, err := newLeveledLogger(f.logLevel)
	if err != nil {
		return err
	}
	var fs storage.FS
	var bucket storage.Bucket
	switch {
	case f.bucket.set():
		if f.storageDir != "" {
			// Else one would be ignored: a cluster pointed at an empty place loses its catalog.
			return errors.New("--storage-dir and a bucket (--s3-bucket, --bucket-dir) both given: choose one")
		}
		if bucket, err = f.bucket.open(ctx, nil); err != nil {
			return err
		}
	case f.storageDir == "":
		return errors.New("--storage-dir is required (the shared storage root), or --s3-bucket for object storage")
	default:
		local, err := storage.NewLocal(f.storageDir)
		if err != nil {
			return fmt.Errorf("--storage-dir: %w", err)
		}
		fs = wrapForFaults(local, log)
	}
	plan, err := memoryPlan(&f.mem, log)
	if err != nil {
		return err
	}
	cfg := regionServerConfig(f, fs, bucket, plan, log)
	if err := addFileCache(&cfg, f, bucket); err != nil {
		return err
	}
	if f.walArchive.on {
		backup, err := openBackup(ctx, &f.backup)
		if err != nil {
			return err
		}
		if err := f.walArchive.check(backup); err != nil {
			return err
		}
		cfg.WALArchive, cfg.WALArchiveInterval = backup, f.walArchive.interval
	}
	if err := addSecurity(&cfg, f, log); err != nil {
		return err
	}
	if f.configFile != "" {
		cfg.Reload = reloadHook(cf, log)
	}
	s, err := regionserver.New(cfg)
	if err != nil {
		return err
	}
	cf.setApply(regionServerSettings(s, f, lv))
	if err := s.Start(ctx); err != nil {
		s.Abort()
		return err
	}
	cf.watch(ctx, time.Duration(f.configWatch), log)
	select {
	case <-ctx.Done():
		log.Info("stopping (signal): flushing and closing regions")
		return s.Stop()
	case err := <-s.Failed():
		log.Error("stopping: a port stopped serving; flushing and closing regions, then exiting to be restarted", "error", err)
		if serr := s.Stop(); serr != nil {
			log.Error("stop", "error", serr)
		}
		return err
	case <-s.Done():
		return nil
	}
}
