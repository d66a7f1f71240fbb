package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/regionserver"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/settings"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/telemetry"
)

type standaloneFlags struct {
	dir, masterAddr, masterHTTP string
	archiveTTL                  time.Duration
	backup                      bucketFlags
	walArchive                  walArchiveFlags
	rs                          regionServerFlags
}

func standaloneCommand() *cobra.Command {
	f := &standaloneFlags{}
	f.rs.mem = offheap.DefaultMemoryConfig()
	f.rs.mem.MemstoreOffheap = 256 << 20
	f.rs.mem.BlockCacheOffheap = 128 << 20
	f.rs.mem.BlockCacheOnheap = 64 << 20
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a master and one region server in one process over a local directory",
		Long: `standalone runs the master (no election) and one region server in one process, storing
everything under --dir. Ctrl-C (or SIGTERM) flushes every region and exits; starting again on the
same directory recovers the tables.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, err := loadConfigFile(cmd.Flags(), f.rs.configFile, settings.RegionServer)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runStandalone(ctx, cmd, f, cf)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "directory holding all the data (required unless it is in a bucket: --s3-bucket or --bucket-dir)")
	addBucketFlags(fl, &f.rs.bucket)
	addArchiveTTLFlag(fl, &f.archiveTTL)
	addRemoteFlags(fl, &f.backup, "backup", "where snapshots are exported to and imported from (backups)")
	addWALArchiveFlags(fl, &f.walArchive, true, true)
	fl.StringVar(&f.masterAddr, "master-addr", "127.0.0.1:16000", "address of the Master gRPC service")
	fl.StringVar(&f.masterHTTP, "master-http-addr", "127.0.0.1:16010", "the master's /metrics, /healthz, /readyz")
	fl.StringVar(&f.rs.dataAddr, "data-addr", "127.0.0.1:16020", "address of the region server's data path")
	fl.StringVar(&f.rs.adminAddr, "admin-addr", "127.0.0.1:16021", "address of the region server's Admin gRPC service")
	fl.StringVar(&f.rs.httpAddr, "http-addr", "127.0.0.1:16030", "the region server's /metrics, /healthz, /readyz")
	fl.StringVar(&f.rs.advertiseHost, "advertise-host", "127.0.0.1", "host name clients reach the servers by")
	fl.Int64Var(&f.rs.flushSize, "memstore-flush-size", 128<<20, "a region's memstore is flushed at this many bytes")
	fl.StringVar(&f.rs.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.rs.configFile, "config", "", "file of 'flag-name = value' lines for flags not given on the command line")
	f.rs.configWatch = watchInterval(configWatchInterval)
	fl.Var(&f.rs.configWatch, "config-watch-interval", configWatchUsage)
	f.rs.mem.AddFlags(fl)
	addAdmissionFlags(fl, &f.rs)
	addCompactionFlags(fl, &f.rs.compaction)
	addWALFlags(fl, &f.rs)
	addTableMetricsFlags(fl, &f.rs)
	addFileCacheFlags(fl, &f.rs)
	addServerSecurityFlags(fl, &f.rs.security)
	addCellACLFlag(fl, &f.rs)
	addHBaseFlags(fl, &f.rs)
	return cmd
}

func runStandalone(ctx context.Context, cmd *cobra.Command, f *standaloneFlags, cf *configFile) error {
	log, lv, err := newLeveledLogger(f.rs.logLevel)
	if err != nil {
		return err
	}
	var fs storage.FS
	var bucket storage.Bucket
	where := f.dir
	switch {
	case f.rs.bucket.set():
		// A second process on the same bucket fences the first one's logs (catalog and WAL):
		// the older one stops acknowledging, so no lock is needed.
		if f.dir != "" {
			return errors.New("--dir and a bucket (--s3-bucket, --bucket-dir) both given: choose one")
		}
		if bucket, err = f.rs.bucket.open(ctx, nil); err != nil {
			return err
		}
		where = bucket.Describe()
	case f.dir == "":
		return errors.New("--dir is required (where the data lives), or --s3-bucket / --bucket-dir for object storage")
	default:
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		// One process per directory: a second one would replay and append to the same catalog and WAL.
		lock, err := storage.LockDir(f.dir)
		if err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		defer lock.Release()
		if fs, err = storage.NewLocal(f.dir); err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
	}
	plan, err := memoryPlan(&f.rs.mem, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", f.masterAddr)
	if err != nil {
		return fmt.Errorf("--master-addr: %w", err)
	}
	defer lis.Close()
	maddr := lis.Addr().String()
	if host, port, err := net.SplitHostPort(maddr); err == nil && (host == "::" || host == "0.0.0.0" || host == "") {
		maddr = net.JoinHostPort(f.rs.advertiseHost, port)
	}
	sec, err := f.rs.security.load(log)
	if err != nil {
		return err
	}
	mtel := telemetry.New()
	mtel.TLS, mtel.Admin = sec.certs, sec.adminHTTP()
	mtel.Registry.MustRegister(telemetry.BuildInfo("master", version))
	backup, err := openBackup(ctx, &f.backup)
	if err != nil {
		return err
	}
	if err := f.walArchive.check(backup); err != nil {
		return err
	}
	m, err := master.New(master.Config{FS: fs, Bucket: bucket, Address: maddr, Election: master.NoElection{Identity: maddr}, Version: version,
		Logger: log.With("process", "master"), Registerer: mtel.Registry, RetryDelay: 200 * time.Millisecond, Creds: sec.creds(),
		Authorization: sec.authorization, Superusers: sec.superusers, ArchiveTTL: f.archiveTTL, Backup: backup,
		WALArchive: f.walArchive.on, WALRetention: f.walArchive.retention,
		// The process's settings are the region server's: its report says what the file did.
		Reload: func() *pb.ConfigurationReport { return &pb.ConfigurationReport{} }})
	if err != nil {
		return err
	}
	mtel.Live("master", m.Live)
	mtel.Ready("master", m.Ready)
	mtel.Handle("/prestop", telemetry.LocalOnly(masterPrestop))
	page := m.StatusPage()
	mtel.HandleAdmin("/{$}", page)
	mtel.HandleAdmin("/table", page)
	if f.masterHTTP != "" {
		if err := mtel.Start(f.masterHTTP); err != nil {
			return err
		}
		if host, _, err := net.SplitHostPort(maddr); err == nil {
			if _, port, err := net.SplitHostPort(mtel.Addr()); err == nil {
				m.SetHTTPAddress(net.JoinHostPort(host, port))
			}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = mtel.Stop(sctx)
		}()
	}
	gs := m.NewGRPCServer(security.GRPCServerOptions(sec.certs, sec.auth)...)
	grpcFailed := serveGRPC(gs, lis)
	if err := m.Start(context.Background()); err != nil {
		gs.Stop()
		return err
	}
	stopMaster := func() {
		_ = m.Stop()
		stopGRPC(gs, 5*time.Second)
	}
	f.rs.masters = maddr
	cfg := regionServerConfig(&f.rs, fs, bucket, plan, log.With("process", "regionserver"))
	if f.walArchive.on {
		cfg.WALArchive, cfg.WALArchiveInterval = backup, f.walArchive.interval
	}
	if err := addFileCache(&cfg, &f.rs, bucket); err != nil {
		stopMaster()
		return err
	}
	cfg.TLS, cfg.Auth = sec.certs, sec.auth
	cfg.Authorization, cfg.Superusers = sec.authorization, sec.superusers
	cfg.NoCellACLEarlyOut = !f.rs.cellACLEarlyOut
	cfg.Collectors = append(cfg.Collectors, sec.collectors()...)
	if f.rs.configFile != "" {
		cfg.Reload = reloadHook(cf, log)
	}
	s, err := regionserver.New(cfg)
	if err != nil {
		stopMaster()
		return err
	}
	cf.setApply(regionServerSettings(s, &f.rs, lv))
	cf.watch(ctx, time.Duration(f.rs.configWatch), log)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = s.Start(sctx)
	cancel()
	if err != nil {
		s.Abort()
		stopMaster()
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cellstore standalone is running over %s\n  master %s, region server %s\n  connect with: cellstore shell --masters %s\n",
		where, maddr, s.DataAddr(), maddr)
	var failed error
	select {
	case <-ctx.Done():
		log.Info("stopping: flushing and closing regions")
	case failed = <-grpcFailed:
	case failed = <-s.Failed():
	case failed = <-mtel.Failed():
	case <-s.Done():
	case <-m.Done():
	}
	if failed != nil {
		log.Error("stopping: a port stopped serving; flushing and closing regions", "error", failed)
	}
	serr := s.Stop()
	stopMaster()
	if failed != nil {
		return failed
	}
	if serr != nil {
		return serr
	}
	if err := m.Err(); err != nil {
		return fmt.Errorf("master stopped: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "cellstore standalone stopped")
	return nil
}
