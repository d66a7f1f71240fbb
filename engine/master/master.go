package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/telemetry"
	"github.com/cellstore/cellstore/engine/wal"
)

// Config configures a Master.
type Config struct {
	// FS is the shared storage root holding meta/, data/, wal/ and archive/. Required unless
	// Bucket is set.
	FS storage.FS
	// Bucket, when set, holds the same keys instead of FS (object storage): the catalog as a
	// snapshot and per-activation object logs (OpenBucketCatalog), dead servers' object logs
	// fenced and split by conditional creates; region splits write the daughters' objects.
	Bucket storage.Bucket
	// Address is this master's advertised gRPC address (host:port): its identity in the election,
	// what ClusterStatus names as the active master, and what standbys send clients to.
	Address string
	// Version is this master's release version (`cellstore version`): reported in ClusterStatus
	// and checked against each registering region server's (engine/version).
	Version string
	// Election decides when this master is active. nil: NoElection (active at once).
	Election Elector
	// Lease is the region servers' lease timing. Zero: lease.Default.
	Lease lease.Config

	// DefaultRegionReplication is REGION_REPLICATION for tables that do not set it (default 1),
	// HedgeDelay the TIMELINE hedge delay servers and clients are told (default 10 ms) and
	// QuotasDisabled turns throttling off. Values set with SetClusterConfig (kept in the catalog)
	// override these.
	DefaultRegionReplication int32
	HedgeDelay               time.Duration
	QuotasDisabled           bool

	// BalancerInterval is the period of the balancer (default 5 min; negative: only on Balance
	// calls). MaxMovesInFlight bounds the balancer's and drains' concurrent moves (default 16),
	// MaxMovesPerServer those from or to one server (default 2).
	BalancerInterval  time.Duration
	MaxMovesInFlight  int
	MaxMovesPerServer int
	// NormalizerInterval is the period of the region normalizer (default 5 min; negative: only
	// on Normalize calls). It looks at tables with NORMALIZATION_ENABLED (docs/master.md,
	// "Normalizer"): regions smaller than NormalizerMergeMinSize (default 1 MiB) or younger than
	// NormalizerMergeMinAge (default 3 days) are not merged.
	NormalizerInterval     time.Duration
	NormalizerMergeMinAge  time.Duration
	NormalizerMergeMinSize int64
	// MaxOpenAttempts: an open that fails this many times leaves the region FAILED_OPEN (default 3).
	MaxOpenAttempts int
	// OpenTimeout: a region server that has not reported an open after this long is told to
	// abort it, and the open is retried elsewhere (default 2 min). CloseTimeout: a server that has
	// not reported a close after this long is expelled (its lease is no longer renewed; it is
	// declared dead and recovered) (default 2 min).
	OpenTimeout  time.Duration
	CloseTimeout time.Duration
	// RPCTimeout bounds one call to a region server (default 10 s); RetryDelay is the pause
	// before an order that did not get through is sent again (default 1 s).
	RPCTimeout time.Duration
	RetryDelay time.Duration
	// TickInterval is the period of the master's housekeeping: lease expiry, procedure timeouts
	// and retries (default 250 ms; events also wake it at once).
	TickInterval time.Duration
	// CatalogFollowInterval is how often a standby master on a bucket reads what the active one
	// wrote to the catalog (CatalogFollower), so that taking over reads only the last changes.
	// Default 1 s; negative: a standby reads the whole catalog when elected.
	CatalogFollowInterval time.Duration
	// StandbyReportInterval is how often a standby master tells the active one it is there
	// (ReportStandby; default 3 s); the active lists it for three intervals after its last report.
	StandbyReportInterval time.Duration
	// DDLWait bounds how long DDL, MoveRegion and drain calls wait for the regions to settle
	// before they return (default 30 s; the work goes on after they return).
	DDLWait time.Duration
	// MaxConcurrentRPCs bounds the Open/CloseRegion calls in flight (default 64).
	MaxConcurrentRPCs int
	// SplitSize: a primary whose store files exceed it is split (default 10 GiB; a table's
	// MAX_FILESIZE and the cluster setting region_split_size override it). JanitorInterval is how
	// often split parents are checked for cleanup (default 10 s).
	SplitSize       int64
	JanitorInterval time.Duration
	// MaxRegionsPerServer bounds the regions (replicas included) the live servers are asked to
	// hold: a create that would pass it fails before doing anything (default
	// DefaultMaxRegionsPerServer; measured: a region server holds 10 000 empty regions in about
	// 100 MiB of heap, docs/regionserver.md).
	MaxRegionsPerServer int
	// ArchiveTTL: files under archive/data that no snapshot names are deleted once they have
	// been there this long (default 5 min, HBase's hbase.master.hfilecleaner.ttl; negative:
	// never). CleanerInterval is how often the cleaner looks (default 1 min).
	ArchiveTTL      time.Duration
	CleanerInterval time.Duration
	// Backup is where snapshots are exported to and imported from (a backup bucket or prefix, a
	// directory); nil: none.
	Backup storage.Bucket
	// WALArchive: the region servers archive their WALs to Backup (point-in-time recovery); the
	// master archives what a dead server left unarchived before deleting its log, and deletes
	// archived WAL older than WALRetention (default 7 days; negative: never).
	WALArchive   bool
	WALRetention time.Duration

	// Clock is the master's clock (tests inject one). Default time.Now.
	Clock func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// HTTPAddress is where this master's HTTP endpoint (status page) is reached, told to region
	// servers for links; empty without one (SetHTTPAddress sets it once the endpoint listens).
	HTTPAddress string
	// Reload, if set, re-reads the master's configuration file and applies the settings that
	// change without a restart (UpdateConfiguration; they call Reconfigure).
	Reload func() *pb.ConfigurationReport
	// Registerer receives the master's metrics; nil registers none.
	Registerer prometheus.Registerer
	// DialAdmin returns the Admin client of a region server address; nil dials gRPC with Creds.
	DialAdmin func(addr string) (pb.AdminClient, error)
	// Creds are what the master presents when it calls region servers and the active master
	// (its own certificate: mutual TLS). Nil: plaintext.
	Creds *security.Credentials
	// Authorization checks every call against the permissions granted (GrantRequest) and
	// Superusers (user names and "@group"s that may do anything; the servers must be among
	// them). It needs authenticated callers (security on). Off: every caller may do anything.
	Authorization bool
	Superusers    []string
}

func (c *Config) fill() error {
	if c.FS == nil && c.Bucket == nil {
		return errors.New("master: Config.FS (the shared storage root) or Config.Bucket (object storage) is required")
	}
	if c.Election == nil {
		c.Election = NoElection{Identity: c.Address}
	}
	if c.Lease == (lease.Config{}) {
		c.Lease = lease.Default
	}
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if c.DefaultRegionReplication == 0 {
		c.DefaultRegionReplication = 1
	}
	if c.DefaultRegionReplication < 1 || c.DefaultRegionReplication > maxReplication {
		return fmt.Errorf("master: default region replication %d is not in [1, %d]", c.DefaultRegionReplication, maxReplication)
	}
	if c.HedgeDelay < 0 {
		return fmt.Errorf("master: hedge delay %v is negative", c.HedgeDelay)
	}
	if c.HedgeDelay == 0 {
		c.HedgeDelay = 10 * time.Millisecond
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.BalancerInterval, 5*time.Minute)
	def(&c.NormalizerInterval, 5*time.Minute)
	def(&c.NormalizerMergeMinAge, 72*time.Hour)
	if c.NormalizerMergeMinSize == 0 {
		c.NormalizerMergeMinSize = 1 << 20
	}
	def(&c.OpenTimeout, 2*time.Minute)
	def(&c.CloseTimeout, 2*time.Minute)
	def(&c.RPCTimeout, 10*time.Second)
	def(&c.RetryDelay, time.Second)
	def(&c.TickInterval, 250*time.Millisecond)
	def(&c.StandbyReportInterval, 3*time.Second)
	def(&c.CatalogFollowInterval, time.Second)
	def(&c.DDLWait, 30*time.Second)
	def(&c.JanitorInterval, 10*time.Second)
	def(&c.ArchiveTTL, 5*time.Minute)
	def(&c.CleanerInterval, time.Minute)
	def(&c.WALRetention, 7*24*time.Hour)
	if c.WALArchive && c.Backup == nil {
		return errors.New("master: WAL archiving needs a backup location (--backup-dir or --backup-s3-*)")
	}
	if c.MaxRegionsPerServer <= 0 {
		c.MaxRegionsPerServer = DefaultMaxRegionsPerServer
	}
	if c.SplitSize == 0 {
		c.SplitSize = 10 << 30
	}
	if c.SplitSize < 0 {
		return fmt.Errorf("master: split size %d is negative", c.SplitSize)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"open timeout", c.OpenTimeout}, {"close timeout", c.CloseTimeout}, {"RPC timeout", c.RPCTimeout},
		{"retry delay", c.RetryDelay}, {"tick interval", c.TickInterval}, {"DDL wait", c.DDLWait},
		{"janitor interval", c.JanitorInterval}, {"cleaner interval", c.CleanerInterval}} {
		if d.v <= 0 {
			return fmt.Errorf("master: %s %v must be positive", d.name, d.v)
		}
	}
	if c.MaxMovesInFlight == 0 {
		c.MaxMovesInFlight = 16
	}
	if c.MaxMovesPerServer == 0 {
		c.MaxMovesPerServer = 2
	}
	if c.MaxOpenAttempts == 0 {
		c.MaxOpenAttempts = 3
	}
	if c.MaxConcurrentRPCs == 0 {
		c.MaxConcurrentRPCs = 64
	}
	if c.MaxMovesInFlight < 0 || c.MaxMovesPerServer < 0 || c.MaxOpenAttempts < 0 || c.MaxConcurrentRPCs < 0 {
		return errors.New("master: MaxMovesInFlight, MaxMovesPerServer, MaxOpenAttempts and MaxConcurrentRPCs must not be negative")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Master states.
const (
	stateNew int32 = iota
	stateStandby
	stateActivating
	stateActive
	stateStopped
)

// ErrLostLeadership ends a master that was active and lost its election: the process should exit
// (and restart as a standby).
var ErrLostLeadership = errors.New("master: lost the leadership")

// Master is Cellstore's master. It serves the Master gRPC service (Register it on a grpc.Server)
// on every master process; only the elected one is active: it opens the catalog and does the
// work, the others answer NOT_ACTIVE_MASTER naming the active one.
type Master struct {
	pb.UnimplementedMasterServer

	cfg     Config
	log     *slog.Logger
	recent  *telemetry.Recent // the last warnings and errors (status page)
	clock   func() time.Time
	metrics *metrics
	admin   *adminPool
	rpcSem  chan struct{}

	status atomic.Int32
	leader atomic.Pointer[string]
	// checker holds the permissions of the last ACL version asked for (aclChecker).
	checker atomic.Pointer[access.Checker]
	// acl is the active master's model's permissions (nil when not active): every call's
	// authorization reads it without the master's lock.
	acl atomic.Pointer[pb.CatalogACL]
	// standbyExternal is, on a standby, the external addresses the active master last answered
	// its ReportStandby with (GetExternalAddresses).
	standbyExternal atomic.Pointer[map[string]string]
	// follower is, on a standby with a bucket catalog, its copy of the catalog (followMu held to
	// use it); the elected master opens the catalog from it.
	followMu sync.Mutex
	follower *CatalogFollower

	lifeMu      sync.Mutex
	stopping    bool
	stopDone    chan struct{} // closed when Stop has finished
	electCancel context.CancelFunc
	electDone   chan struct{}
	done        chan struct{}
	doneOnce    sync.Once
	err         error

	// reg is the region servers' registry (its own lock; reset when the master becomes active).
	reg *Registry
	// reports are the region servers' transition reports waiting for a group's write (reports.go).
	reports reportQueue

	// The active phase. mu guards everything below and the model.
	mu          sync.Mutex
	cat         *Catalog
	catLock     *storage.DirLock // the catalog directory's lock while active (local filesystems)
	st          *model
	activeCtx   context.Context
	activeStop  context.CancelFunc
	activeWG    sync.WaitGroup
	kickCh      chan struct{}
	changed     chan struct{}
	loads       map[string]*pb.ServerLoad // by server, from heartbeats
	httpAddrs   map[string]string         // by server: its HTTP endpoint (status page links)
	versions    map[string]string         // by server and by standby master address: its release version
	features    map[string][]string       // by server: what it announced (layout.Feature*)
	stoppingSrv map[string]int64          // servers that said they are stopping: start code
	standbys    map[string]time.Time      // standby masters' addresses: their last report
	moveQueue   []queuedMove
	// locateWaiters counts the LocateRegion calls waiting for a moving region.
	locateWaiters atomic.Int64
	queued        map[string]bool
	nextBalance   time.Time
	nextNormalize time.Time
	nextSweep     time.Time
	busyTables    map[string]bool // tables whose delete or archive runs
	// restoreFailed: clones and restores whose last writing of the regions failed, by table: the
	// next try waits (backoff), and ListTables names the error.
	restoreFailed map[string]*restoreFailure
	// Splits: parents whose cleanup runs, when the janitor runs next, and regions whose last
	// split was rolled back (not split again by the size policy before the time).
	cleaning    map[string]bool
	nextJanitor time.Time
	splitHold   map[string]time.Time
	splitChecks map[string]bool // the size policy reads their split rows
	// Snapshots and the archive cleaner (snapshots.go, cleaner.go).
	snapGuard snapGuard
	cleaner   archiveCleaner
	copies    copyJobs
}

// New makes a master. It does nothing until Start.
func New(cfg Config) (*Master, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	reg, err := NewRegistry(cfg.Lease, cfg.Clock)
	if err != nil {
		return nil, err
	}
	m := &Master{
		cfg:     cfg,
		recent:  telemetry.NewRecent(50),
		clock:   cfg.Clock,
		metrics: newMetrics(cfg.Registerer),
		admin:   newAdminPool(cfg.DialAdmin, cfg.Creds),
		rpcSem:  make(chan struct{}, cfg.MaxConcurrentRPCs),
		done:    make(chan struct{}),
		reg:     reg,
	}
	m.reports.waiting = m.metrics.reportsWaiting
	m.log = slog.New(m.recent.Handler(cfg.Logger.Handler())).With("component", "master")
	none := ""
	m.leader.Store(&none)
	return m, nil
}

// Register adds the Master gRPC service to s.
func (m *Master) Register(s *grpc.Server) { pb.RegisterMasterServer(s, m) }

// NewGRPCServer makes a gRPC server with the Master service registered.
func (m *Master) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	// Table functions' modules come in ModifyTable requests (function.MaxModulesSize).
	opts = append([]grpc.ServerOption{telemetry.RecoverPanics(m.log)}, opts...)
	s := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(function.MaxModulesSize+4<<20), grpc.ChainUnaryInterceptor(m.authorize))...)
	m.Register(s)
	return s
}

// Start begins campaigning; the master becomes active when elected. It returns at once. The
// master runs until Stop, until ctx ends (which stops it as Stop does), or until it fails or
// loses the leadership (Done is closed and Err says why).
func (m *Master) Start(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.status.Load() != stateNew {
		return errors.New("master: Start called twice, or after Stop")
	}
	if v, ok := m.cfg.Election.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	m.status.Store(stateStandby)
	ectx, cancel := context.WithCancel(context.Background())
	m.electCancel = cancel
	m.electDone = make(chan struct{})
	go func() {
		defer close(m.electDone)
		m.cfg.Election.Run(ectx, ElectionCallbacks{Elected: m.elected, Leader: m.observeLeader})
		// The election ended: by Stop (the master is stopping) or because it was lost.
		m.finish(ErrLostLeadership)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = m.Stop()
		case <-m.done:
		}
	}()
	go m.reportStandby()
	if m.cfg.Bucket != nil && m.cfg.CatalogFollowInterval > 0 {
		go m.followCatalog()
	}
	return nil
}

// followCatalog keeps a standby's copy of the catalog up to date (CatalogFollower) until the
// master is elected or stops.
func (m *Master) followCatalog() {
	t := time.NewTicker(m.cfg.CatalogFollowInterval)
	defer t.Stop()
	f := NewCatalogFollower(m.cfg.Bucket, "meta")
	m.followMu.Lock()
	m.follower = f
	m.followMu.Unlock()
	for {
		m.followMu.Lock()
		if m.follower == nil || m.status.Load() != stateStandby {
			m.followMu.Unlock()
			return // taken by the election, or stopped
		}
		ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
		if err := f.Refresh(ctx); err != nil {
			m.log.Debug("following the catalog", "err", err)
		}
		cancel()
		m.followMu.Unlock()
		select {
		case <-m.done:
			return
		case <-t.C:
		}
	}
}

// reportStandby tells the active master, while this one is a standby, that it is there
// (ReportStandby), until the master stops.
func (m *Master) reportStandby() {
	t := time.NewTicker(m.cfg.StandbyReportInterval)
	defer t.Stop()
	var conn *grpc.ClientConn
	connTo := ""
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		leader := m.Leader()
		if m.status.Load() != stateStandby || leader == "" || leader == m.cfg.Address {
			continue
		}
		if connTo != leader {
			if conn != nil {
				conn.Close()
			}
			c, err := security.Dial(leader, m.cfg.Creds)
			if err != nil {
				m.log.Debug("standby report: dial the active master", "leader", leader, "err", err)
				conn, connTo = nil, ""
				continue
			}
			conn, connTo = c, leader
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StandbyReportInterval)
		resp, err := pb.NewMasterClient(conn).ReportStandby(ctx, &pb.ReportStandbyRequest{Address: m.cfg.Address, Version: m.cfg.Version})
		cancel()
		if err != nil {
			m.log.Debug("standby report failed", "leader", leader, "err", err)
			continue
		}
		ext := resp.GetExternalAddresses()
		m.standbyExternal.Store(&ext)
	}
}

// Stop stops the master: it ends the active phase (every loop and RPC it started), closes the
// catalog, and only then gives up the leadership, so that the next master never overlaps it.
func (m *Master) Stop() error {
	m.lifeMu.Lock()
	if m.stopDone != nil { // another Stop runs or ran
		ch := m.stopDone
		m.lifeMu.Unlock()
		<-ch
		return nil
	}
	m.stopDone = make(chan struct{})
	defer close(m.stopDone)
	m.stopping = true
	cancel, electDone := m.electCancel, m.electDone
	m.lifeMu.Unlock()
	if cancel == nil { // never started
		m.finish(nil)
		return nil
	}
	start := time.Now()
	m.deactivate()
	deactivated := time.Since(start)
	m.finish(nil)
	cancel()
	<-electDone
	// The next master waits for both: the end of the active phase, then the release of the Lease.
	m.log.Info("master stopped", "active_phase_ended_in", deactivated.Round(time.Millisecond),
		"election_ended_in", (time.Since(start) - deactivated).Round(time.Millisecond))
	m.admin.close()
	return nil
}

// Done is closed when the master has stopped; Err then says why (nil after Stop).
func (m *Master) Done() <-chan struct{} { return m.done }

// Err is why the master stopped: nil after Stop, ErrLostLeadership, or a failure.
func (m *Master) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

// finish ends the master with err (the first call wins).
func (m *Master) finish(err error) {
	m.doneOnce.Do(func() {
		m.lifeMu.Lock()
		if m.stopping {
			err = nil
		}
		m.lifeMu.Unlock()
		m.err = err
		m.status.Store(stateStopped)
		m.metrics.isActive.Set(0)
		close(m.done)
	})
}

// fail stops an active master that cannot go on (its catalog failed, its leadership lapsed):
// it stops at once and lets the election go, so another master takes over.
func (m *Master) fail(err error) {
	m.log.Error("master stopping", "err", err)
	go func() {
		m.deactivate()
		m.finish(err)
		m.lifeMu.Lock()
		cancel := m.electCancel
		m.lifeMu.Unlock()
		if cancel != nil {
			cancel()
		}
	}()
}

// Active reports whether this master is the active one and has loaded its catalog.
func (m *Master) Active() bool { return m.status.Load() == stateActive }

// Leader is the active master's address as last known ("" when unknown).
func (m *Master) Leader() string { return *m.leader.Load() }

// Ready is the readiness check: nil when active with the catalog loaded, or when a healthy
// standby.
func (m *Master) Ready() error {
	switch m.status.Load() {
	case stateActive, stateStandby:
		return nil
	case stateActivating:
		return errors.New("elected, loading the catalog")
	case stateNew:
		return errors.New("not started")
	}
	if err := m.Err(); err != nil {
		return err
	}
	return errors.New("stopped")
}

// Live is the liveness check: nil until the master has stopped.
func (m *Master) Live() error {
	if m.status.Load() == stateStopped {
		if err := m.Err(); err != nil {
			return err
		}
		return errors.New("stopped")
	}
	return nil
}

func (m *Master) observeLeader(id string) {
	m.leader.Store(&id)
	m.log.Info("active master", "leader", id, "self", id == m.cfg.Address)
}

// elected runs the active phase until ctx (the leadership) ends.
func (m *Master) elected(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	addr := m.cfg.Address
	m.leader.Store(&addr)
	lock, err := m.lockCatalog(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.fail(err)
		}
		return
	}
	m.catLock = lock
	if err := m.activate(ctx); err != nil {
		m.releaseCatalogLock()
		m.fail(err)
		return
	}
	<-ctx.Done()
	m.lifeMu.Lock()
	stopping := m.stopping
	m.lifeMu.Unlock()
	m.deactivate()
	if !stopping {
		m.log.Error("lost the leadership: stopping")
		m.finish(ErrLostLeadership)
	}
}

// lockCatalog takes the exclusive lock of the catalog's directory on a local (or shared POSIX)
// filesystem before the catalog is opened, waiting while another master holds it. The election
// alone cannot keep two masters from writing: a master paused past its Lease (SIGSTOP, a long GC,
// a frozen VM) resumes believing it is active and commits once more while its successor writes —
// the chaos run corrupted the catalog that way ("sequence id 289 is not above the previous 319").
// The kernel drops a dead holder's lock; a paused one keeps it, and the new master waits until it
// resumes, notices the lost leadership and stops. Other filesystems (in memory) take no lock.
func (m *Master) lockCatalog(ctx context.Context) (*storage.DirLock, error) {
	local, ok := m.cfg.FS.(interface{ Root() string })
	if !ok {
		return nil, nil // in memory, or a bucket: the catalog there fences earlier masters' logs
	}
	dir := filepath.Join(local.Root(), "meta")
	for logged := false; ; {
		lock, err := storage.LockDir(dir)
		if err == nil {
			return lock, nil
		}
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
			// A shared filesystem without locks (some NFS setups): the election alone guards it.
			m.log.Warn("the storage does not support file locks: a master paused past its Lease could still write the catalog once more", "error", err)
			return nil, nil
		}
		if !errors.Is(err, storage.ErrLocked) {
			return nil, fmt.Errorf("master: lock the catalog: %w", err)
		}
		if !logged {
			m.log.Warn("elected, waiting for the previous master to release the catalog", "reason", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (m *Master) releaseCatalogLock() {
	if m.catLock != nil {
		_ = m.catLock.Release()
		m.catLock = nil
	}
}

// activate opens the catalog and starts the active phase.
func (m *Master) activate(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.stopping {
		return nil
	}
	m.status.Store(stateActivating)
	start := time.Now()
	var cat *Catalog
	var err error
	followed := false
	if m.cfg.Bucket != nil {
		m.followMu.Lock() // waits for a refresh under way: its result is used
		f := m.follower
		m.follower = nil
		m.followMu.Unlock()
		followed = f != nil && f.loaded
		cat, err = OpenBucketCatalogFrom(m.cfg.Bucket, "meta", m.cfg.Address, f)
	} else {
		cat, err = OpenCatalog(m.cfg.FS, "meta")
	}
	if err != nil {
		return fmt.Errorf("master: open the catalog: %w", err)
	}
	now := m.clock()
	st, err := loadModel(cat, now)
	if err != nil {
		cat.Close()
		return err
	}
	reg := m.reg
	reg.Reset()
	actx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	m.cat, m.st = cat, st
	m.setACLLocked()
	m.activeCtx, m.activeStop = actx, cancel
	m.kickCh = make(chan struct{}, 1)
	m.changed = make(chan struct{})
	m.loads = map[string]*pb.ServerLoad{}
	m.httpAddrs = map[string]string{}
	m.versions = map[string]string{}
	m.features = map[string][]string{}
	m.stoppingSrv = map[string]int64{}
	m.standbys = map[string]time.Time{}
	m.moveQueue, m.queued = nil, map[string]bool{}
	m.busyTables, m.restoreFailed = map[string]bool{}, map[string]*restoreFailure{}
	m.cleaning, m.splitHold, m.splitChecks, m.nextJanitor = map[string]bool{}, map[string]time.Time{}, map[string]bool{}, now
	m.nextBalance = now.Add(m.cfg.BalancerInterval)
	m.nextNormalize = now.Add(m.cfg.NormalizerInterval)
	m.nextSweep = now
	m.cleaner.next, m.cleaner.linkChecks = now.Add(m.cfg.CleanerInterval), map[string]bool{}
	// Servers the catalog knows get a fresh lease: they go on heartbeating to this master, or
	// are declared dead when it runs out.
	for _, s := range st.servers {
		if s.GetStartCode() != 0 && !m.deadPendingLocked(s.GetServer(), s.GetStartCode()) {
			reg.Restore(s.GetServer(), s.GetStartCode(), s.GetAdminAddress(), s.GetZone(), s.GetDraining())
		}
	}
	m.updateGaugesLocked()
	m.mu.Unlock()
	m.status.Store(stateActive)
	m.metrics.isActive.Set(1)
	m.log.Info("active: catalog loaded", "tables", len(st.tables), "regions", len(st.regions),
		"procedures", len(st.procs), "dead_servers", len(st.dead), "took", time.Since(start).Round(time.Millisecond),
		"from_followed_copy", followed)
	m.activeWG.Add(1)
	go func() {
		defer m.activeWG.Done()
		m.loop(actx)
	}()
	m.activeWG.Add(1)
	go func() {
		defer m.activeWG.Done()
		if m.cfg.Election.Check() != nil {
			return // (a deposed master writes no snapshot: its successor has read the catalog)
		}
		if err := cat.SnapshotIfPending(); err != nil && actx.Err() == nil {
			m.log.Warn("the snapshot after taking over failed: the next takeover reads the earlier logs again", "err", err)
		}
	}()
	return nil
}

// deactivate ends the active phase: handlers refuse, loops and RPCs stop, the catalog closes.
func (m *Master) deactivate() {
	m.mu.Lock()
	if m.st == nil {
		m.mu.Unlock()
		return
	}
	if s := m.status.Load(); s == stateActive || s == stateActivating {
		m.status.Store(stateStandby)
	}
	m.activeStop()
	m.mu.Unlock()
	m.activeWG.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return
	}
	if err := m.cat.Close(); err != nil {
		m.log.Error("close the catalog", "err", err)
	}
	m.releaseCatalogLock()
	m.st, m.cat = nil, nil
	m.acl.Store(nil)
	close(m.changed)
	m.metrics.isActive.Set(0)
}

// activeLocked reports whether the active phase is on (m.mu held).
func (m *Master) activeLocked() bool {
	return m.st != nil && m.activeCtx.Err() == nil && m.status.Load() == stateActive
}

// The pauses a master asks of its callers while no master is active: a standby that knows no
// leader (or one that is stepping down) and a master loading the catalog.
const (
	notActiveRetryMs  = 100
	activatingRetryMs = 50
)

// notActive is the answer of a master that is not the active one.
func (m *Master) notActive() error {
	leader := m.Leader()
	st := m.status.Load()
	if leader == m.cfg.Address && (st != stateActivating || m.cfg.Election.Check() != nil) {
		// Elected but not serving any more (stepping down), or loading the catalog with a
		// leadership that has lapsed meanwhile (client-go names no new leader to a master whose
		// election ended): the caller tries the others.
		leader = ""
	}
	msg := "this master is a standby"
	// Without a leader to name, a handover is under way: the standby takes a released Lease at
	// once and an elected master loads the catalog in milliseconds, so the caller asks again soon.
	var retryAfter int64 = notActiveRetryMs
	switch st {
	case stateActivating:
		msg = "this master was elected and is loading the catalog"
		retryAfter = activatingRetryMs
	case stateStopped:
		msg = "this master has stopped"
	}
	switch {
	case leader == m.cfg.Address:
		// Elected and loading the catalog: it names itself, so that callers ask it again after
		// the short pause instead of trying the other masters (a stopped one costs them a
		// connect timeout) while every region server's lease runs down.
	case leader != "":
		msg += "; the active master is " + leader
		retryAfter = 0 // the caller goes there at once
	}
	return (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER, Message: msg, NewMaster: leader, Retryable: true,
		RetryAfterMs: retryAfter}).Status()
}

// lock takes m.mu for a handler if this master is active; otherwise it returns the answer.
func (m *Master) lock() error {
	if m.status.Load() != stateActive {
		return m.notActive()
	}
	m.mu.Lock()
	if !m.activeLocked() {
		m.mu.Unlock()
		return m.notActive()
	}
	return nil
}

// commit writes a batch to the catalog and applies it to the model (m.mu held). A master that
// cannot write its catalog stops (fail-stop); the next one replays the catalog.
func (m *Master) commit(b *batch) error {
	if b.empty() {
		return nil
	}
	changes, err := b.catalogChanges()
	if err != nil {
		return errInvalid("%v", err)
	}
	if err := m.writeCatalogLocked(changes, b.rows, true); err != nil {
		return err
	}
	m.applyLocked(b)
	m.notifyLocked()
	return nil
}

// writeCatalogLocked writes changes (rows names them, for an error) to the catalog while this
// master's election still holds (checked after the changes were encoded, as for a report group:
// a batch that cannot be encoded is refused without a look at the election). When either fails,
// the active phase stops before anything more is written or sent (a report group, say): from
// then on no handler reads the model. With refusable (the model is not ahead of the catalog), a
// write too large for the catalog's log is refused and the master goes on.
func (m *Master) writeCatalogLocked(changes []CatalogChange, rows func() string, refusable bool) error {
	err := m.cfg.Election.Check()
	if err == nil {
		if err = m.cat.Apply(changes...); refusable && errors.Is(err, wal.ErrRecordTooLarge) {
			// Refused before anything was written (the catalog and its log are as they were): the
			// request that made the write is refused.
			m.metrics.catalogRefused.Inc()
			return errInvalid("a catalog write of %d rows is too large for the catalog's log (%v); make the request smaller (fewer or shorter split keys, attributes, grants)", len(changes), err)
		}
		if err != nil {
			err = fmt.Errorf("master: catalog write of %s failed: %w", rows(), err)
		}
	}
	if err != nil {
		m.activeStop()
		m.fail(err)
	}
	return err
}

// applyLocked applies a batch to the model.
func (m *Master) applyLocked(b *batch) {
	now := m.clock()
	for _, f := range b.apply {
		f(m.st, now)
	}
	if b.state != nil {
		m.st.state = b.state
	}
	m.setACLLocked()
	checkModel(m.st)
}

// setACLLocked publishes the model's permissions to the calls' authorization (aclChecker).
func (m *Master) setACLLocked() {
	acl := m.st.acl
	if acl == nil {
		acl = &pb.CatalogACL{}
	}
	m.acl.Store(acl)
}

// catalogGroup is several batches that one catalog write makes durable (commitGroupLocked). The latest
// change of each row is written.
type catalogGroup struct {
	changes []CatalogChange
	at      map[string]int // row: its index in changes
	bytes   int            // about what changes take (each staged change counted)
}

// stageLocked adds b to g and applies it to the model at once, so that the next batch of the
// group is made from the model b leaves. m.mu stays held from the first stage to the group's
// write (commitGroupLocked): nobody else sees the model ahead of the catalog, and a failed write
// stops the master before anyone can.
func (m *Master) stageLocked(g *catalogGroup, b *batch) error {
	if b.empty() {
		return nil
	}
	changes, err := b.catalogChanges()
	if err != nil {
		return errInvalid("%v", err)
	}
	if g.at == nil {
		g.at = make(map[string]int)
	}
	for _, ch := range changes {
		g.bytes += len(ch.Key) + len(ch.Value)
		if i, ok := g.at[ch.Key]; ok {
			g.changes[i] = ch
			continue
		}
		g.at[ch.Key] = len(g.changes)
		g.changes = append(g.changes, ch)
	}
	m.applyLocked(b)
	return nil
}

// commitGroupLocked writes what stageLocked applied in one catalog write. A master that cannot
// write it stops at once: its model is ahead of its catalog, so it answers nothing more.
func (m *Master) commitGroupLocked(g *catalogGroup) error {
	if len(g.changes) == 0 {
		return nil
	}
	if err := m.writeCatalogLocked(g.changes, func() string { return fmt.Sprintf("%d rows", len(g.changes)) }, false); err != nil {
		return err
	}
	m.notifyLocked()
	return nil
}

// notifyLocked wakes the waiters on model changes and the loop.
func (m *Master) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
	m.kick()
}

// runIO runs io (storage work) on a goroutine of the active phase, without the master's lock,
// then done with the lock held, unless the active phase ended meanwhile. Called with m.mu held.
func (m *Master) runIO(io func() error, done func(err error)) {
	ctx := m.activeCtx
	m.activeWG.Add(1)
	go func() {
		defer m.activeWG.Done()
		err := io()
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.activeLocked() {
			return
		}
		done(err)
	}()
}

// kick wakes the loop.
func (m *Master) kick() {
	select {
	case m.kickCh <- struct{}{}:
	default:
	}
}

// waitFor waits until cond (called with m.mu held) holds, ctx ends, or DDLWait passes (or most
// of the time left before ctx's deadline, so the caller still gets the answer). It is called with
// m.mu held and returns with it held: done when cond came true. When this master stopped being
// active meanwhile it returns stopped: its model is gone (or ahead of a catalog write that
// failed), and the caller must not read it — what it waited for was written before, and the
// next master goes on with it, so the caller answers as for a wait that ran out.
func (m *Master) waitFor(ctx context.Context, cond func() bool) (done, stopped bool) {
	wait := m.cfg.DDLWait
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = max(0, min(wait, left-left/10-50*time.Millisecond))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if !m.activeLocked() {
			return false, true
		}
		if cond() {
			return true, false
		}
		ch, actx := m.changed, m.activeCtx
		m.mu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-ctx.Done():
		case <-actx.Done():
		case <-t.C:
			expired = true
		}
		m.mu.Lock()
		if !m.activeLocked() {
			return false, true
		}
		if ctx.Err() != nil {
			return false, false
		}
		if expired {
			return cond(), false
		}
	}
}

// loop is the active master's housekeeping.
func (m *Master) loop(ctx context.Context) {
	t := time.NewTicker(m.cfg.TickInterval)
	defer t.Stop()
	for {
		m.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kickCh:
		}
	}
}

func (m *Master) tick(ctx context.Context) {
	dead := m.reg.Expire()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.activeLocked() || ctx.Err() != nil {
		return
	}
	now := m.clock()
	for _, d := range dead {
		m.log.Warn("region server lease expired: declaring it dead", "server", d.Name, "start_code", d.StartCode,
			"last_heartbeat_ago", now.Sub(d.LastSeen).Round(time.Millisecond))
		if err := m.serverDiedLocked(d.Name, d.StartCode); err != nil {
			return
		}
	}
	steps := []func(time.Time) error{
		m.progressDeadLocked,
		m.progressTablesLocked,
		m.sweepLocked,
		m.janitorLocked,
		m.cleanerLocked,
		m.drainLocked,
		m.advanceProcsLocked,
		m.startMovesLocked,
		m.balancerTickLocked,
		m.normalizerTickLocked,
	}
	for _, step := range steps {
		if !m.activeLocked() {
			return
		}
		if err := step(now); err != nil {
			if !m.activeLocked() {
				return
			}
			// Refused (a write too large for the catalog's log): the other steps go on, and this
			// one tries again at the next tick.
			m.log.Warn("a step of the master's loop was refused; the next tick tries again", "error", err)
		}
	}
	m.updateGaugesLocked()
}

// updateGaugesLocked sets the gauges from counts the model keeps.
func (m *Master) updateGaugesLocked() {
	st := m.st
	m.metrics.ritCount.Set(float64(st.inTransition))
	m.metrics.regionCount.Set(float64(len(st.regions)))
	m.metrics.tableCount.Set(float64(len(st.tables)))
	m.metrics.deadServers.Set(float64(len(st.dead)))
	live, draining := 0, 0
	for _, s := range m.reg.All() {
		if s.Live {
			live++
			if s.Draining {
				draining++
			}
		}
	}
	m.metrics.liveServers.Set(float64(live))
	m.metrics.drainingServer.Set(float64(draining))
	oldest := time.Duration(0)
	now := m.clock()
	for _, p := range st.procs {
		oldest = max(oldest, now.Sub(time.UnixMilli(p.p.GetStartedMs())))
	}
	m.metrics.ritOldestAge.Set(oldest.Seconds())
	failed := 0
	for _, r := range st.regions {
		if r.GetState() == stateFailedOpen {
			failed++
		}
	}
	m.metrics.failedOpenRegions.Set(float64(failed))
}

// clusterConfigLocked is the effective cluster configuration: the flags' values overridden by
// the catalog's.
func (m *Master) clusterConfigLocked() map[string]string {
	out := map[string]string{
		layout.ConfigDefaultRegionReplication: strconv.Itoa(int(m.cfg.DefaultRegionReplication)),
		layout.ConfigHedgeDelayMS:             strconv.FormatInt(m.cfg.HedgeDelay.Milliseconds(), 10),
		layout.ConfigQuotasEnabled:            strconv.FormatBool(!m.cfg.QuotasDisabled),
		layout.ConfigRegionSplitSize:          strconv.FormatInt(m.cfg.SplitSize, 10),
		layout.ConfigSplitsEnabled:            "true",
	}
	for k, v := range m.st.config.GetConfig() {
		out[k] = v
	}
	return out
}

func (m *Master) defaultReplicationLocked() int32 {
	n, err := strconv.Atoi(m.clusterConfigLocked()[layout.ConfigDefaultRegionReplication])
	if err != nil || n < 1 {
		return m.cfg.DefaultRegionReplication
	}
	return int32(n)
}
