package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/settings"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/telemetry"
)

// masterFlags are the `cellstore master` settings (flags, or lines of the --config file).
type masterFlags struct {
	storageDir, grpcAddr, httpAddr, advertiseHost   string
	security                                        serverSecurityFlags
	bucket                                          bucketFlags
	election, leaseName, leaseNamespace, kubeconfig string
	leaseDuration, renewDeadline, retryPeriod       time.Duration
	serverLease, heartbeatInterval                  time.Duration
	selfFenceMargin, deadMargin                     time.Duration
	defaultReplication                              int32
	hedgeDelay                                      time.Duration
	quotasDisabled                                  bool
	balancerPeriod, openTimeout, closeTimeout       time.Duration
	normalizerPeriod, normalizerMinAge              time.Duration
	normalizerMinSize                               int64
	maxMoves, maxMovesPerServer                     int
	splitSize                                       int64
	maxRegionsPerServer                             int
	archiveTTL                                      time.Duration
	backup                                          bucketFlags
	walArchive                                      walArchiveFlags
	logLevel, configFile                            string
	configWatch                                     watchInterval
	shutdownTimeout                                 time.Duration

	// started, when set, is told the listening addresses (tests).
	started func(grpcAddr, httpAddr string)
}

func masterCommand() *cobra.Command { return newMasterCommand(&masterFlags{}) }

func newMasterCommand(f *masterFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run a master: the catalog, assignment, crash recovery and balancing (active or standby)",
		Long: `The master keeps the catalog under <storage-dir>/meta, assigns regions to region servers, recovers
dead servers (fencing and splitting their logs) and balances. With --election=kubernetes several
masters run and a coordination.k8s.io Lease elects the active one; the others answer every call
with NOT_ACTIVE_MASTER naming it. A master that loses the Lease exits (its pod restarts as a
standby). SIGTERM stops it gracefully, handing the Lease over at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, err := loadConfigFile(cmd.Flags(), f.configFile, settings.Master)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runMaster(ctx, f, cf)
		},
	}
	d := lease.Default
	fl := cmd.Flags()
	fl.StringVar(&f.storageDir, "storage-dir", "", "shared storage root (a local directory or a shared volume): meta/, data/, wal/, archive/ (required unless the data is in a bucket: --s3-bucket)")
	addBucketFlags(fl, &f.bucket)
	fl.StringVar(&f.grpcAddr, "grpc-addr", ":16000", "address of the Master gRPC service")
	fl.StringVar(&f.httpAddr, "http-addr", ":16010", "address of the telemetry endpoint (/metrics, /healthz, /readyz, /debug/pprof)")
	fl.StringVar(&f.advertiseHost, "advertise-host", "", "host name others reach this master by (default: the host name); with the gRPC port it is the master's identity")
	fl.StringVar(&f.election, "election", "none", "how the active master is chosen: none (this one) or kubernetes (a coordination.k8s.io Lease)")
	fl.StringVar(&f.leaseName, "lease-name", "", "name of the Lease (--election=kubernetes)")
	fl.StringVar(&f.leaseNamespace, "lease-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for the election outside a cluster (default: in-cluster, then $KUBECONFIG)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "election: a standby takes over this long after the last renewal it saw")
	fl.DurationVar(&f.renewDeadline, "renew-deadline", 10*time.Second, "election: the active master stops when it could not renew for this long")
	fl.DurationVar(&f.retryPeriod, "retry-period", 2*time.Second, "election: time between attempts to acquire or renew the Lease")
	fl.DurationVar(&f.serverLease, "server-lease", d.Lease, "region servers' lease, from the master's receipt of each heartbeat")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", d.HeartbeatInterval, "how often region servers heartbeat (at most half the lease)")
	fl.DurationVar(&f.selfFenceMargin, "self-fence-margin", d.SelfFenceMargin, "region servers stop acknowledging writes this long before their lease can expire")
	fl.DurationVar(&f.deadMargin, "dead-margin", d.DeadMargin, "a server is declared dead this long after its lease expired")
	fl.Int32Var(&f.defaultReplication, "default-region-replication", 1, "REGION_REPLICATION of tables that do not set one (SetClusterConfig overrides)")
	fl.DurationVar(&f.hedgeDelay, "hedge-delay", 10*time.Millisecond, "TIMELINE reads ask replicas after this long (SetClusterConfig overrides)")
	fl.BoolVar(&f.quotasDisabled, "quotas-disabled", false, "turn request throttling off (SetClusterConfig overrides)")
	fl.DurationVar(&f.balancerPeriod, "balancer-period", 5*time.Minute, "period of the balancer (negative: only when asked)")
	fl.DurationVar(&f.normalizerPeriod, "normalizer-period", 5*time.Minute, "period of the region normalizer, for tables with NORMALIZATION_ENABLED (negative: only when asked: normalize)")
	fl.DurationVar(&f.normalizerMinAge, "normalizer-merge-min-age", 72*time.Hour, "the normalizer merges no region younger than this")
	fl.Int64Var(&f.normalizerMinSize, "normalizer-merge-min-size", 1<<20, "the normalizer merges no region with fewer store file bytes than this")
	fl.IntVar(&f.maxMoves, "max-moves-in-flight", 16, "moves the balancer and drains run at once")
	fl.IntVar(&f.maxMovesPerServer, "max-moves-per-server", 2, "moves the balancer and drains run at once from or to one server")
	fl.IntVar(&f.maxRegionsPerServer, "max-regions-per-server", master.DefaultMaxRegionsPerServer,
		"regions (replicas included) each live region server may be asked to hold; a create that would pass it fails")
	addArchiveTTLFlag(fl, &f.archiveTTL)
	addRemoteFlags(fl, &f.backup, "backup", "where snapshots are exported to and imported from (backups)")
	addWALArchiveFlags(fl, &f.walArchive, false, true)
	fl.Int64Var(&f.splitSize, "split-size", 10<<30, "a region whose store files exceed this many bytes is split (a table's MAX_FILESIZE and the cluster setting region_split_size override it)")
	fl.DurationVar(&f.openTimeout, "open-timeout", 2*time.Minute, "an open not reported by then is aborted and retried elsewhere")
	fl.DurationVar(&f.closeTimeout, "close-timeout", 2*time.Minute, "a server that has not closed a region by then is expelled (declared dead after its lease)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.configFile, "config", "", "file of 'flag-name = value' lines for flags not given on the command line")
	f.configWatch = watchInterval(configWatchInterval)
	fl.Var(&f.configWatch, "config-watch-interval", configWatchUsage)
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for calls in flight")
	addServerSecurityFlags(fl, &f.security)
	return cmd
}

func runMaster(ctx context.Context, f *masterFlags, cf *configFile) error {
	log, lv, err := newLeveledLogger(f.logLevel)
	if err != nil {
		return err
	}
	tel := telemetry.New()
	sec, err := f.security.load(log)
	if err != nil {
		return err
	}
	tel.TLS, tel.Admin = sec.certs, sec.adminHTTP()
	tel.Registry.MustRegister(sec.collectors()...)
	tel.Registry.MustRegister(telemetry.BuildInfo("master", version))
	var fs storage.FS
	var bucket storage.Bucket
	switch {
	case f.bucket.set():
		if f.storageDir != "" {
			// Else one would be ignored: a cluster pointed at an empty place loses its catalog.
			return errors.New("--storage-dir and a bucket (--s3-bucket, --bucket-dir) both given: choose one")
		}
		if bucket, err = f.bucket.open(ctx, tel.Registry); err != nil {
			return err
		}
	case f.storageDir == "":
		return errors.New("--storage-dir is required (the shared storage root), or --s3-bucket for object storage")
	default:
		if fs, err = storage.NewLocal(f.storageDir); err != nil {
			return fmt.Errorf("--storage-dir: %w", err)
		}
	}
	backup, err := openBackup(ctx, &f.backup)
	if err != nil {
		return err
	}
	if err := f.walArchive.check(backup); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	defer lis.Close()
	host := f.advertiseHost
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return fmt.Errorf("--advertise-host not given and no host name: %w", err)
		}
	}
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	identity := net.JoinHostPort(host, port)

	var elector master.Elector
	switch f.election {
	case "none":
		elector = master.NoElection{Identity: identity}
	case "kubernetes":
		ke, err := kubernetesElection(*f, identity)
		if err != nil {
			return err
		}
		elector = ke
	default:
		return fmt.Errorf("--election must be none or kubernetes, got %q", f.election)
	}

	m, err := master.New(master.Config{
		FS: fs, Bucket: bucket, Address: identity, Election: elector, Version: version,
		Lease: lease.Config{Lease: f.serverLease, HeartbeatInterval: f.heartbeatInterval,
			SelfFenceMargin: f.selfFenceMargin, DeadMargin: f.deadMargin},
		DefaultRegionReplication: f.defaultReplication, HedgeDelay: f.hedgeDelay, QuotasDisabled: f.quotasDisabled,
		BalancerInterval: f.balancerPeriod, NormalizerInterval: f.normalizerPeriod, NormalizerMergeMinAge: f.normalizerMinAge,
		NormalizerMergeMinSize: f.normalizerMinSize, MaxMovesInFlight: f.maxMoves, MaxMovesPerServer: f.maxMovesPerServer, SplitSize: f.splitSize, MaxRegionsPerServer: f.maxRegionsPerServer,
		ArchiveTTL: f.archiveTTL, Backup: backup, WALArchive: f.walArchive.on, WALRetention: f.walArchive.retention,
		OpenTimeout: f.openTimeout, CloseTimeout: f.closeTimeout, Reload: reloadHook(cf, log),
		Logger: log, Registerer: tel.Registry, Creds: sec.creds(), Authorization: sec.authorization, Superusers: sec.superusers,
	})
	if err != nil {
		return err
	}
	cf.setApply(masterSettings(m, f, lv))
	cf.watch(ctx, time.Duration(f.configWatch), log)
	tel.Live("master", m.Live)
	tel.Ready("master", m.Ready)
	tel.Handle("/prestop", telemetry.LocalOnly(masterPrestop))
	page := m.StatusPage()
	tel.HandleAdmin("/{$}", page)
	tel.HandleAdmin("/table", page)
	if err := tel.Start(f.httpAddr); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(tel.Addr()); err == nil {
		m.SetHTTPAddress(net.JoinHostPort(host, port))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
		defer cancel()
		_ = tel.Stop(sctx)
	}()
	gs := m.NewGRPCServer(security.GRPCServerOptions(sec.certs, sec.auth)...)
	grpcFailed := serveGRPC(gs, lis)
	log.Info("master starting", "identity", identity, "election", f.election, "storage", f.storageDir,
		"grpc", lis.Addr().String(), "http", tel.Addr())
	if err := m.Start(context.Background()); err != nil {
		gs.Stop()
		return err
	}
	if f.started != nil {
		f.started(lis.Addr().String(), tel.Addr())
	}
	select {
	case <-ctx.Done():
		log.Info("stopping (signal)")
		_ = m.Stop()
		stopGRPC(gs, f.shutdownTimeout)
		return nil
	case err := <-grpcFailed:
		return stopOnFailure(log, m, gs, err)
	case err := <-tel.Failed():
		return stopOnFailure(log, m, gs, err)
	case <-m.Done():
		stopGRPC(gs, f.shutdownTimeout)
		if err := m.Err(); err != nil {
			return fmt.Errorf("master stopped: %w", err)
		}
		return nil
	}
}

// serveGRPC serves lis; the channel delivers the error if serving stops other than by Stop (gRPC
// retries temporary accept errors itself, so this is the port's end).
func serveGRPC(gs *grpc.Server, lis net.Listener) <-chan error {
	failed := make(chan error, 1)
	go func() {
		if err := gs.Serve(lis); err != nil {
			failed <- fmt.Errorf("gRPC port %s stopped serving: %w", lis.Addr(), err)
		}
	}()
	return failed
}

// stopOnFailure stops the master after one of its ports stopped serving, and returns the error
// so the process exits non-zero and is restarted (a backup master takes over meanwhile).
func stopOnFailure(log *slog.Logger, m *master.Master, gs *grpc.Server, err error) error {
	log.Error("stopping: a port stopped serving; exiting to be restarted", "error", err)
	_ = m.Stop()
	gs.Stop()
	return err
}

// stopGRPC stops gracefully, or at once after timeout.
func stopGRPC(gs interface {
	GracefulStop()
	Stop()
}, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		gs.Stop()
	}
}

// kubernetesElection builds the Lease elector from the flags.
func kubernetesElection(f masterFlags, identity string) (*master.KubernetesElection, error) {
	if f.leaseName == "" {
		return nil, errors.New("--election=kubernetes needs --lease-name")
	}
	ns := f.leaseNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns == "" {
		return nil, errors.New("--election=kubernetes needs --lease-namespace (no pod namespace found)")
	}
	var cfg *rest.Config
	var err error
	switch {
	case f.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	default:
		cfg, err = rest.InClusterConfig()
		if err != nil && os.Getenv("KUBECONFIG") != "" {
			cfg, err = clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration for the election: %w", err)
	}
	e := &master.KubernetesElection{Config: cfg, Namespace: ns, Name: f.leaseName, Identity: identity,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// walArchiveFlags are --wal-archive and its settings (point-in-time recovery).
type walArchiveFlags struct {
	on                  bool
	interval, retention time.Duration
}

// addWALArchiveFlags registers --wal-archive, with --wal-archive-interval (region servers) and
// --wal-archive-retention (the master).
func addWALArchiveFlags(fl *pflag.FlagSet, f *walArchiveFlags, interval, retention bool) {
	fl.BoolVar(&f.on, "wal-archive", false, "archive the WAL at the backup location (--backup-dir or --backup-s3-*) for point-in-time recovery")
	if interval {
		fl.DurationVar(&f.interval, "wal-archive-interval", time.Minute, "how often a region server archives its WAL: the most a point-in-time recovery can miss of what was written before its target")
	}
	if retention {
		fl.DurationVar(&f.retention, "wal-archive-retention", 7*24*time.Hour, "archived WAL older than this is deleted (negative: kept forever); a point-in-time recovery reaches back to the oldest archived edit")
	}
}

// check refuses --wal-archive without a backup location.
func (f *walArchiveFlags) check(backup storage.Bucket) error {
	if f.on && backup == nil {
		return errors.New("--wal-archive needs a backup location: --backup-dir or --backup-s3-*")
	}
	return nil
}

// addArchiveTTLFlag is --archive-ttl, of the master and standalone.
func addArchiveTTLFlag(fl *pflag.FlagSet, ttl *time.Duration) {
	fl.DurationVar(ttl, "archive-ttl", 5*time.Minute, "store files compacted away or dropped are deleted from archive/ this long after the cleaner first sees them, unless a snapshot or a cloned table still needs them (negative: keep forever)")
}

// masterSettings are the master's settings that change without a restart (engine/settings):
// how each takes effect.
func masterSettings(m *master.Master, f *masterFlags, lv *slog.LevelVar) map[string]func() error {
	set := func(fn func(c *master.Config)) func() error { return func() error { return m.Reconfigure(fn) } }
	return map[string]func() error{
		"log-level":              func() error { return setLevel(lv, f.logLevel) },
		"archive-ttl":            set(func(c *master.Config) { c.ArchiveTTL = f.archiveTTL }),
		"balancer-period":        set(func(c *master.Config) { c.BalancerInterval = f.balancerPeriod }),
		"normalizer-period":      set(func(c *master.Config) { c.NormalizerInterval = f.normalizerPeriod }),
		"open-timeout":           set(func(c *master.Config) { c.OpenTimeout = f.openTimeout }),
		"close-timeout":          set(func(c *master.Config) { c.CloseTimeout = f.closeTimeout }),
		"max-moves-in-flight":    set(func(c *master.Config) { c.MaxMovesInFlight = f.maxMoves }),
		"max-moves-per-server":   set(func(c *master.Config) { c.MaxMovesPerServer = f.maxMovesPerServer }),
		"max-regions-per-server": set(func(c *master.Config) { c.MaxRegionsPerServer = f.maxRegionsPerServer }),
		"split-size":             set(func(c *master.Config) { c.SplitSize = f.splitSize }),
	}
}
