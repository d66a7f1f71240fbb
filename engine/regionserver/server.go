// Package regionserver is Cellstore's region server: it serves regions over the data-path protocol
// (engine/rpc: get, mutate, multi, scan), obeys the master's orders over the Admin gRPC service
// (open, close, flush, compact), keeps one WAL per process on the shared storage root, registers
// with the master and renews its lease with heartbeats, refusing writes once its fence closes.
// See docs/regionserver.md.
package regionserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/hbase"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/filecache"
	"github.com/cellstore/cellstore/engine/telemetry"
	"github.com/cellstore/cellstore/engine/wal"
)

// Config configures a region server.
type Config struct {
	// Version is the server's release version (`cellstore version`), sent when it registers: a
	// master of an older minor version refuses it (engine/version), and it retries until the
	// masters are upgraded.
	Version string
	// FS is the shared storage root (required unless Bucket is set).
	FS storage.FS
	// Bucket, when set, holds everything instead of FS (object storage): regions' files
	// (region.Config.Bucket) and the WAL as an object log (wal.ObjectLog) under
	// wal/<server>,<start code>.
	Bucket storage.Bucket
	// DisableAutoCompaction: regions compact only when asked (CompactRegion), as HBase's
	// compaction_switch false leaves them; a region cloned from a snapshot then keeps its links.
	DisableAutoCompaction bool
	// FileCache, with Bucket, keeps ranges of store files on a local disk (nil: none).
	FileCache *filecache.Cache
	// Masters are the masters' gRPC addresses; the server finds the active one (required).
	Masters []string
	// DataAddr and AdminAddr are the listen addresses of the data path and the Admin gRPC service
	// (defaults ":16020" and ":16021"). DataListener/AdminListener, when set, are used instead.
	DataAddr, AdminAddr         string
	DataListener, AdminListener net.Listener
	// HTTPAddr serves /metrics, /healthz and /readyz ("" = no HTTP endpoint).
	HTTPAddr string
	// AdvertiseHost is the host others reach this server by (default: the host name).
	AdvertiseHost string
	// Zone is reported at registration (replica placement).
	Zone string
	// HBaseProtocol serves the stock HBase client's RPC on the data port beside Cellstore's own
	// (engine/hbase; docs/hbase-clients.md). ClusterID is what HBase clients are told the
	// cluster is (default "cellstore").
	HBaseProtocol bool
	ClusterID     string

	// MemstoreBytes is the off-heap memstore budget (default 256 MiB); BlockCacheOffheap the L2
	// bucket cache (default 64 MiB, 0 with NoL2) and BlockCacheOnheap the L1 cache (default 32 MiB).
	MemstoreBytes     int64
	BlockCacheOffheap int64
	BlockCacheOnheap  int64
	NoL2              bool
	Hugepages         offheap.HugepageMode
	// ChunkSize of the memstore chunk pool (default offheap default).
	ChunkSize int

	// FlushSize is the per-region memstore flush size (default 128 MiB).
	FlushSize int64
	// ScannerLease: a scanner not used for this long is closed (default 60 s).
	ScannerLease time.Duration
	// MaxScanners bounds the scanners open at once; opening one more is answered TOO_BUSY
	// (default DefaultMaxScanners).
	MaxScanners int
	// MovedTTL: how long a region that moved away is answered with REGION_MOVED (default 2 min).
	MovedTTL time.Duration
	// WALSyncInterval bounds ASYNC_WAL latency (default 1 s). WALSegmentSize default 64 MiB.
	WALSyncInterval time.Duration
	WALSegmentSize  int64
	// WALGroups > 1 splits the WAL into that many groups, each with its own commits and syncs;
	// a region's edits go to the group its name hashes to (HBase's multiwal; wal.MultiWAL). On a
	// directory tree only: an object log already has WALSyncSlots PUTs under way at once.
	WALGroups int
	// WALGroupCommit and WALSyncSlots choose how the WAL commits (wal.Options).
	WALGroupCommit wal.CommitMode
	WALSyncSlots   int
	// WALCommitDelay is how long a WAL commit may wait for more writers (wal.Options.CommitDelay,
	// wal.ObjectLogOptions.CommitDelay; one sync slot or PUT in flight).
	WALCommitDelay time.Duration
	// WALNoZeroAhead turns off writing zeros ahead of the log into preallocated segments
	// (wal.Options.NoZeroAhead).
	WALNoZeroAhead bool
	// WALNoCompression turns off compressing the records of each WAL object on object storage
	// (wal.ObjectLogOptions.Compress; a directory tree's WAL is never compressed).
	WALNoCompression bool
	// Compaction is how regions compact (region.CompactionConfig; zero values: the defaults);
	// it changes while the server runs (SetCompaction).
	Compaction region.CompactionConfig
	// SlowCall: a data-path call (get, mutate, multi, scan) or a WAL commit that takes this long
	// or longer is logged with what it was ("slow call", "slow WAL commit"), HBase's
	// responseTooSlow. 0: 500 ms; negative: never.
	SlowCall time.Duration
	// Reload, if set, re-reads the server's configuration file and applies the settings that
	// change without a restart (the Admin service's UpdateConfiguration).
	Reload func() *pb.ConfigurationReport
	// WALMaxBacklog is how many units the WAL may keep for unflushed edits before the regions
	// pinning the oldest are flushed (default 2000 objects on a bucket, 32 closed segments on a
	// directory: HBase's maxlogs).
	WALMaxBacklog int
	// WALArchive, if set, is the backup location the server archives its WAL to, for
	// point-in-time recovery (walarchive.go), every WALArchiveInterval (default 1 min: the most
	// a recovery can miss of what was written before its target time).
	WALArchive         storage.Bucket
	WALArchiveInterval time.Duration
	// TableMetricsMax bounds the tables with per-table series (the busiest keep their names, the
	// rest are summed under table="_other"; default 100). RegionMetricsTop is how many of the
	// busiest regions get series of their own (default 20; negative: none). tablemetrics.go.
	TableMetricsMax  int
	RegionMetricsTop int
	// MaxCellSize bounds one cell (default cell.DefaultMaxCellSize).
	MaxCellSize int
	// RPC bounds what clients can make the data path hold (rpc.ServerOptions: request size and
	// queue, calls in flight and unsent answers per connection, connections, timeouts); zero
	// values take rpc's defaults. Its Logger is the server's.
	RPC rpc.ServerOptions
	// MaxScanResultSize caps the bytes of one scan answer whatever the client asks (its caching
	// or max result size), and the cells of one multi's answer (the actions past it are answered
	// RESULT_TOO_LARGE, for the client to send again): default DefaultMaxScanResultSize.
	MaxScanResultSize int64
	// FunctionMemory bounds what the instances of table functions may reach together (the sum of
	// their MEMORY_MB; function.Runtime.SetMemoryBudget). 0: no bound.
	FunctionMemory int64
	// ReplicationQueueBytes bounds what a primary region keeps for a read replica that is behind
	// (default 16 MiB); a replica further behind gets a new session (a flush of the primary).
	ReplicationQueueBytes int64

	Logger *slog.Logger
	// Registerer receives the metrics (default: the telemetry server's registry when HTTPAddr is
	// set, else none).
	Registerer prometheus.Registerer
	// Collectors are registered with the server's own metrics (the object store's requests).
	Collectors []prometheus.Collector

	// TLS, when set, is the server's certificate: the data path, the Admin service and the HTTP
	// endpoint serve TLS 1.3 with it, and it is presented (mutual TLS) when this server calls
	// the master or another server. Nil: plaintext everywhere.
	TLS *security.Certs
	// Auth decides who callers are (nil: security off, users as named).
	Auth *security.Authenticator
	// Authorization checks every request against the permissions the master holds (fetched
	// when its heartbeat announces a new version) and Superusers ("user" or "@group"); until
	// the first fetch only superusers are served. Needs security on.
	Authorization bool
	Superusers    []string
	// NoCellACLEarlyOut turns off HBase's hbase.security.access.early_out (on by default): with
	// it on, a read by a user with no READ grant on what it reads is refused at once, cell ACLs
	// unread, unless it asks for the cell-first strategy; off, such reads return the cells whose
	// ACL grants READ.
	NoCellACLEarlyOut bool
}

// creds are what the server presents when it calls the master or another server.
func (c *Config) creds() *security.Credentials {
	if c.TLS == nil {
		return nil
	}
	return &security.Credentials{Certs: c.TLS}
}

func (c *Config) fill() error {
	if c.FS == nil && c.Bucket == nil {
		return errors.New("regionserver: Config.FS (the shared storage root) or Config.Bucket (object storage) is required")
	}
	if len(c.Masters) == 0 {
		return errors.New("regionserver: no master address given (--masters)")
	}
	switch {
	case c.WALGroups < 0 || c.WALGroups > wal.MaxGroups:
		return fmt.Errorf("regionserver: %d WAL groups (--wal-groups): want 1 to %d", c.WALGroups, wal.MaxGroups)
	case c.WALGroups > 1 && c.Bucket != nil:
		return fmt.Errorf("regionserver: --wal-groups %d needs a directory tree; on object storage the WAL already has --wal-sync-slots PUTs under way at once: raise that instead", c.WALGroups)
	case c.WALCommitDelay < 0 || c.WALCommitDelay > 100*time.Millisecond:
		return fmt.Errorf("regionserver: --wal-commit-delay %s: from 0 to 100ms", c.WALCommitDelay)
	case c.WALCommitDelay != 0 && c.Bucket != nil && !wal.ObjectCommitDelayFits(c.WALSyncSlots):
		return fmt.Errorf("regionserver: --wal-commit-delay needs one PUT in flight (--wal-sync-slots 1, not %d): it waits while none is under way", c.WALSyncSlots)
	case c.WALCommitDelay != 0 && c.Bucket == nil && !wal.CommitDelayFits(c.WALGroupCommit, c.WALSyncSlots):
		return fmt.Errorf("regionserver: --wal-commit-delay %s needs --wal-group-commit leader and --wal-sync-slots 1 (not %s and %d): it waits while no sync is under way; give --wal-commit-delay 0 with these",
			c.WALCommitDelay, c.WALGroupCommit, c.WALSyncSlots)
	}
	if c.DataAddr == "" {
		c.DataAddr = ":16020"
	}
	if c.AdminAddr == "" {
		c.AdminAddr = ":16021"
	}
	if c.MemstoreBytes <= 0 {
		c.MemstoreBytes = 256 << 20
	}
	if c.TableMetricsMax <= 0 {
		c.TableMetricsMax = 100
	}
	if c.RegionMetricsTop == 0 {
		c.RegionMetricsTop = 20
	}
	if c.WALArchiveInterval <= 0 {
		c.WALArchiveInterval = time.Minute
	}
	if c.BlockCacheOffheap <= 0 && !c.NoL2 {
		c.BlockCacheOffheap = 64 << 20
	}
	if c.BlockCacheOnheap <= 0 {
		c.BlockCacheOnheap = 32 << 20
	}
	if c.ScannerLease <= 0 {
		c.ScannerLease = time.Minute
	}
	if c.MovedTTL <= 0 {
		c.MovedTTL = 2 * time.Minute
	}
	if c.MaxScanners <= 0 {
		c.MaxScanners = DefaultMaxScanners
	}
	if c.MaxScanResultSize <= 0 {
		c.MaxScanResultSize = DefaultMaxScanResultSize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// DefaultMaxScanResultSize caps one scan answer (HBase's client asks for 2 MiB; its server caps
// at hbase.server.scanner.max.result.size).
const DefaultMaxScanResultSize = 8 << 20

// DefaultMaxScanners bounds open scanners: each holds iterators over the region's files and a
// block or so (about 40 KiB measured), so they cost at most about 160 MiB.
const DefaultMaxScanners = 4096

// region states of an onlineRegion.
const (
	stateOpening int32 = iota
	stateOpen
	stateClosing
)

// onlineRegion is a region this server holds or is opening.
type onlineRegion struct {
	name       string
	info       *pb.RegionInfo
	table      *pb.TableDescriptor
	tkey       string // namespace:name
	ns         string
	lat        *tableLatency            // the table's latency histograms
	calls      *[numCallOps]regionCalls // the region's own latency (nil without per-region series): a count and a sum per operation, on a line of their own
	state      atomic.Int32
	r          atomic.Pointer[region.Region]
	cancel     atomic.Bool   // a close arrived while opening
	cancelProc atomic.Uint64 // the master's procedure of that close
	// openProc: the master's procedure of the latest order to open it (echoed in its reports).
	openProc atomic.Uint64
	// preClosing: a flushing close was ordered; the region is pre-flushed while it still serves.
	preClosing atomic.Bool

	// Read replicas: when a batch last came and when the primary was last asked for one (unix
	// nanos); flushWanted asks the primary for a flush in the next answer (memory pressure).
	lastReplicated, lastAsked atomic.Int64
	flushWanted               atomic.Bool
	// functions are the table's functions as loaded for this region (nil without); the region
	// closes them when it closes.
	functions atomic.Pointer[function.Set]
	// serving: the region is open here and serves while its OPENED report is on its way to the
	// master (its state stays stateOpening until the master has taken the report). The master
	// placed it here in the catalog before ordering the open, and takes it away only once this
	// server has confirmed its close or has been fenced, so no other server serves it meanwhile.
	serving atomic.Bool
	// settled is closed when the region starts serving or its open ends, however it ends
	// (lookup waits on it a little); settle closes it once.
	settled    chan struct{}
	settleOnce sync.Once
	// closeDone is closed once closeRegion has reported the region CLOSED (or given up), when
	// closing says closeRegion took it. Writes that arrive meanwhile wait for it (lookup, up to
	// openingWait) instead of being sent on to a destination that is not opening the region yet;
	// reads are served here until the region's last flush is done.
	closing   atomic.Bool
	closeDone chan struct{}
}

// settle closes settled (once): requests waiting for the opening region go on.
func (or *onlineRegion) settle() {
	if or.settled != nil {
		or.settleOnce.Do(func() { close(or.settled) })
	}
}

// live reports whether the region takes writes here: open, or opened and serving while its
// OPENED report is on its way.
func (or *onlineRegion) live() bool {
	serving := or.serving.Load() // before the state, as lookupUntil
	st := or.state.Load()
	return st == stateOpen || st == stateOpening && serving
}

// closingHere reports whether a region in state st is being closed by closeRegion (a close the
// master ordered, serving reads until its last flush is done).
func (or *onlineRegion) closingHere(st int32) bool { return st == stateClosing && or.closing.Load() }

type movedEntry struct {
	to  *pb.ServerName
	seq uint64 // the region's location sequence number there (0: unknown)
	at  time.Time
	// closed, when not nil, is closed once this server has reported the move's close: until then
	// the destination has not been told to open the region, and a request sent there would only
	// bounce back.
	closed <-chan struct{}
}

// Server is a region server.
type Server struct {
	cfg Config
	log *slog.Logger
	// hbase serves HBase clients on the data port (Config.HBaseProtocol; nil without).
	hbase *hbase.Adapter
	// functions runs the tables' WebAssembly functions (docs/functions.md).
	functions *function.Runtime

	pool   *offheap.ChunkPool
	budget *offheap.Budget
	l1     *blockcache.LRU
	l2     *blockcache.BucketCache
	cache  *blockcache.Combined
	// budgets are budget and the budgets under it (memstore, and blockcache with an L2), exported.
	budgets []*offheap.Budget

	walMu  sync.RWMutex
	wal    serverLog
	walDir string
	// tm: per-table and per-region metrics (tablemetrics.go).
	tm *tableMetrics
	// recent: the last warnings and errors; masterHTTP: the active master's HTTP endpoint as it
	// said at registration (status page).
	recent     *telemetry.Recent
	masterHTTP atomic.Pointer[string]
	// WAL archiving (walarchive.go): regions whose table is still to be recorded, and those done.
	archiveRound    sync.Mutex // one archiving round at a time
	archiveMu       sync.Mutex
	archivePending  map[string]string
	archiveRecorded map[string]bool
	startCode       int64
	name            *pb.ServerName // host, port, start code (under walMu for the start code)
	nameStr         string

	regions sync.Map // name → *onlineRegion
	movedMu sync.Mutex
	moved   map[string]movedEntry

	scanners     sync.Map // id → *scanner
	scannerID    atomic.Uint64
	openScanners atomic.Int64
	// memPressure is the server's memstores' pressure (region.PressureBetween from the flush
	// watermark to the budget), updated by pressureLoop.
	memPressure atomic.Uint32
	// Settings that change without a restart (online.go): read at each use.
	slowCallNanos, maxScanners, maxScanResult atomic.Int64
	compaction                                atomic.Pointer[region.CompactionConfig]

	shippers    sync.Map // shipperKey → *shipper
	replFlushAt sync.Map // primary name → unix nanos of the last flush a replica asked for
	adminMu     sync.Mutex
	adminConns  map[string]*grpc.ClientConn
	// prepared: regions a move's source had this server prepare (prepare.go), by name.
	preparedMu      sync.Mutex
	prepared        map[string]*preparedRegion
	preparing       int  // prepares under way
	preparedDropped bool // the server stopped: nothing more is kept

	fence    atomic.Pointer[lease.Fence]
	limiters *quota.Limiters
	// acl is the permissions in force (Config.Authorization).
	acl atomic.Pointer[access.Checker]
	// aclMu serialises fetches of the permissions; aclFetched is when the last one started.
	aclMu         sync.Mutex
	aclFetched    time.Time
	quotasEnabled atomic.Bool
	// aclLoaded: the permissions and labels were fetched from the master once (withVisibility);
	// aclLoading is the first load under way (ensureACL), aclLoadTried when the last one ended.
	aclLoaded    atomic.Bool
	aclLoadMu    sync.Mutex
	aclLoading   chan struct{}
	aclLoadTried time.Time
	hbEvery      atomic.Int64 // heartbeat interval, ns

	mmu        sync.Mutex
	masterAddr string
	masterConn *grpc.ClientConn

	dataLis, adminLis net.Listener
	data              *rpc.Server
	dataSrv           atomic.Pointer[rpc.Server] // data, for readers outside Start/Stop (metrics, readiness)
	adminErr          atomic.Pointer[error]      // why the admin port stopped serving
	failed            chan error                 // Failed
	admin             *grpc.Server
	tel               *telemetry.Server

	registered atomic.Bool
	// droppedCode is the start code of the process whose regions dropEverything dropped: orders
	// for it are refused as for another process (checkProcess).
	droppedCode atomic.Int64
	serving     atomic.Bool
	stopping    atomic.Bool
	stopOnce    sync.Once
	stopErr     error
	quit        chan struct{}
	done        chan struct{}
	bg          sync.WaitGroup
	// The heartbeat loop stops on hbQuit, which a graceful stop closes only after its flushes:
	// the lease is renewed while regions close, so the master never declares a still-flushing
	// server dead and splits its log under it.
	hbQuit   chan struct{}
	hbWG     sync.WaitGroup
	reopenMu sync.Mutex // serialises re-registration

	m *metrics
}

// New prepares a server: memory, block cache and listeners. Start registers and serves.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	recent := telemetry.NewRecent(50)
	s := &Server{cfg: cfg, log: slog.New(recent.Handler(cfg.Logger.Handler())).With("component", "regionserver"), recent: recent, moved: map[string]movedEntry{},
		quit: make(chan struct{}), done: make(chan struct{}), failed: make(chan error, 1), hbQuit: make(chan struct{})}
	s.limiters = quota.NewLimiters(time.Now)
	s.functions = function.NewRuntime(s.log)
	s.functions.SetMemoryBudget(cfg.FunctionMemory)
	s.slowCallNanos.Store(int64(s.slowCallFor(cfg.SlowCall)))
	s.maxScanners.Store(int64(cfg.MaxScanners))
	s.maxScanResult.Store(cfg.MaxScanResultSize)
	cc := cfg.Compaction
	s.compaction.Store(&cc)
	s.acl.Store(access.NewChecker(0, nil, cfg.Superusers))
	s.quotasEnabled.Store(true)
	var err error
	total := cfg.MemstoreBytes + cfg.BlockCacheOffheap
	if s.budget, err = offheap.NewBudget("offheap", total, nil); err != nil {
		return nil, err
	}
	msBudget, err := offheap.NewBudget("memstore", cfg.MemstoreBytes, s.budget)
	if err != nil {
		return nil, err
	}
	s.budgets = []*offheap.Budget{s.budget, msBudget}
	if s.pool, err = offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", ChunkSize: cfg.ChunkSize,
		Hugepages: cfg.Hugepages, Budget: msBudget, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("regionserver: memstore chunk pool: %w", err)
	}
	if s.l1, err = blockcache.NewLRU(blockcache.LRUOptions{Capacity: cfg.BlockCacheOnheap}); err != nil {
		s.pool.Close()
		return nil, err
	}
	if !cfg.NoL2 && cfg.BlockCacheOffheap > 0 {
		cacheBudget, err := offheap.NewBudget("blockcache", cfg.BlockCacheOffheap, s.budget)
		if err != nil {
			s.pool.Close()
			return nil, err
		}
		s.budgets = append(s.budgets, cacheBudget)
		if s.l2, err = blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: cfg.BlockCacheOffheap,
			Hugepages: cfg.Hugepages, Budget: cacheBudget, Logger: cfg.Logger}); err != nil {
			s.pool.Close()
			return nil, fmt.Errorf("regionserver: L2 block cache: %w", err)
		}
	}
	s.cache = blockcache.NewCombined(s.l1, s.l2)
	s.m = newMetrics(s)
	s.tm = newTableMetrics(s, s.cfg.TableMetricsMax, max(s.cfg.RegionMetricsTop, 0))
	if cfg.HTTPAddr != "" {
		s.tel = telemetry.New()
		if cfg.Registerer == nil {
			cfg.Registerer = s.tel.Registry
			s.cfg.Registerer = s.tel.Registry
		}
	}
	if s.cfg.Registerer != nil {
		if err := s.cfg.Registerer.Register(telemetry.BuildInfo("regionserver", s.cfg.Version)); err != nil {
			s.release()
			return nil, err
		}
		if err := s.m.register(s.cfg.Registerer); err != nil {
			s.release()
			return nil, err
		}
		if err := s.cfg.Registerer.Register(s.tm); err != nil {
			s.release()
			return nil, err
		}
		for _, c := range s.cfg.Collectors {
			if err := s.cfg.Registerer.Register(c); err != nil {
				s.release()
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *Server) release() {
	s.functions.Close()
	if s.l2 != nil {
		s.l2.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
}

// Start listens, opens the WAL, registers with the master (waiting until it succeeds or ctx
// ends) and starts the heartbeat loop.
func (s *Server) Start(ctx context.Context) error {
	var err error
	if s.dataLis = s.cfg.DataListener; s.dataLis == nil {
		if s.dataLis, err = net.Listen("tcp", s.cfg.DataAddr); err != nil {
			return fmt.Errorf("regionserver: data address: %w", err)
		}
	}
	if s.adminLis = s.cfg.AdminListener; s.adminLis == nil {
		if s.adminLis, err = net.Listen("tcp", s.cfg.AdminAddr); err != nil {
			s.dataLis.Close()
			return fmt.Errorf("regionserver: admin address: %w", err)
		}
	}
	host := s.cfg.AdvertiseHost
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return fmt.Errorf("regionserver: no advertise host and no host name: %w", err)
		}
	}
	_, portStr, _ := net.SplitHostPort(s.dataLis.Addr().String())
	port, _ := strconv.Atoi(portStr)
	s.name = &pb.ServerName{Host: host, Port: int32(port)}
	s.nameStr = layout.ServerName(s.name)
	if err := s.openWAL(); err != nil {
		return err
	}
	opts := s.cfg.RPC
	opts.Logger = s.log
	opts.TLS, opts.Auth = s.cfg.TLS, s.cfg.Auth
	if s.cfg.HBaseProtocol {
		s.hbase = hbase.New(&hbaseBackend{s: s}, s.log)
		opts.Foreign = s.hbase
	}
	s.data = rpc.NewServer(s.handlers(), opts)
	s.dataSrv.Store(s.data)
	s.admin = grpc.NewServer(append(append([]grpc.ServerOption{telemetry.RecoverPanics(s.log)}, security.GRPCServerOptions(s.cfg.TLS, s.cfg.Auth)...),
		grpc.ChainUnaryInterceptor(s.authorizeAdmin))...)
	pb.RegisterAdminServer(s.admin, &adminService{s: s})
	go func() {
		// Serve retries failed accepts itself; it returns an error only when the data port
		// can no longer serve, and Ready then reports it.
		if err := s.data.Serve(s.dataLis); err != nil {
			s.log.Error("data port stopped serving: the server is not ready", "error", err)
		}
	}()
	go func() {
		// gRPC retries temporary accept errors itself; an error here ends the admin port (the
		// master opens and closes regions through it): not ready, and the process is told.
		if err := s.admin.Serve(s.adminLis); err != nil && !s.stopping.Load() {
			err = fmt.Errorf("admin port %s stopped serving: %w", s.adminLis.Addr(), err)
			s.adminErr.Store(&err)
			s.log.Error("admin port stopped serving: the server is not ready", "error", err)
			s.fail(err)
		}
	}()
	if s.tel != nil {
		s.tel.Live("regionserver", func() error {
			if s.stopping.Load() {
				return errors.New("stopping")
			}
			return nil
		})
		s.tel.Ready("regionserver", s.Ready)
		s.tel.Handle("/prestop", telemetry.LocalOnly(s.PrestopHandler()))
		s.tel.HandleAdmin("/{$}", s.StatusPage())
		s.tel.TLS = s.cfg.TLS
		if s.cfg.Authorization {
			s.tel.Admin = telemetry.SuperusersOnly(s.cfg.Auth, s.cfg.TLS, func(id security.Identity) bool { return s.acl.Load().Superuser(id) })
		}
		if err := s.tel.Start(s.cfg.HTTPAddr); err != nil {
			return err
		}
		go func() {
			select {
			case err := <-s.tel.Failed():
				s.log.Error("HTTP endpoint stopped serving", "error", err)
				s.fail(err)
			case <-s.done:
			}
		}()
	}
	s.serving.Store(true)
	if err := s.register(ctx); err != nil {
		return err
	}
	s.bg.Add(4)
	s.hbWG.Add(1)
	go s.heartbeatLoop()
	go s.walWatch()
	go s.scannerReaper()
	go s.pressureLoop()
	go s.replicaWatch()
	if s.cfg.WALArchive != nil {
		s.bg.Add(1)
		go s.walArchiver()
	}
	s.log.Info("region server started", "server", s.nameStr, "start_code", s.startCode, "wal", s.walDir,
		"admin", s.adminLis.Addr().String(), "master", s.masterAddr)
	return nil
}

// openWAL opens a WAL under a fresh start code and makes it the server's.
func (s *Server) openWAL() error {
	w, dir, code, err := s.newWAL()
	if err != nil {
		return err
	}
	s.installWAL(w, dir, code)
	return nil
}

// serverLog is the server's write-ahead log: segments in a directory (*wal.WAL) or an object log
// (*wal.ObjectLog) on a bucket.
type serverLog interface {
	// Err is why the log acknowledges nothing more (broken, fenced), or nil.
	Err() error
	// Backlog is how many units (objects, closed segments) the log keeps for unflushed edits,
	// and the regions pinning the oldest.
	Backlog() (units int, pinning []string)
	// Archive copies the units not archived yet to the WAL archive (Config.WALArchive).
	Archive(ctx context.Context) (int, error)
	Close() error
}

// logFor is the log a region's edits go to: its group's of a MultiWAL, else the server's.
func logFor(l serverLog, region string) wal.Log {
	if m, ok := l.(*wal.MultiWAL); ok {
		return m.For(region)
	}
	w, _ := l.(wal.Log) // nil before the server opened its WAL
	return w
}

// newWAL opens a WAL under a fresh start code without installing it.
func (s *Server) newWAL() (serverLog, string, int64, error) {
	s.walMu.RLock()
	last := s.startCode
	s.walMu.RUnlock()
	code := time.Now().UnixMilli()
	if code <= last {
		code = last + 1
	}
	dir := path.Join("wal", layout.WALDirName(s.nameStr, code))
	if s.cfg.Bucket != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := wal.OpenObjectLog(ctx, wal.ObjectLogOptions{Bucket: s.cfg.Bucket, Prefix: dir, Writer: s.nameStr,
			MaxInFlight: s.cfg.WALSyncSlots, CommitDelay: s.cfg.WALCommitDelay, Archive: s.walArchiveTarget(code), Slow: s.slowCommit, SlowCommit: time.Nanosecond,
			Compress: !s.cfg.WALNoCompression})
		if err != nil {
			return nil, "", 0, fmt.Errorf("regionserver: opening the WAL %s in %s: %w", dir, s.cfg.Bucket.Describe(), err)
		}
		return l, dir, code, nil
	}
	opts := wal.Options{FS: s.cfg.FS, Dir: dir, SyncInterval: s.cfg.WALSyncInterval, SegmentSize: s.cfg.WALSegmentSize,
		GroupCommit: s.cfg.WALGroupCommit, SyncSlots: s.cfg.WALSyncSlots, CommitDelay: s.cfg.WALCommitDelay, Archive: s.walArchiveTarget(code),
		Slow: s.slowCommit, SlowCommit: time.Nanosecond, NoZeroAhead: s.cfg.WALNoZeroAhead}
	if s.cfg.WALGroups > 1 {
		m, err := wal.OpenMulti(opts, s.cfg.WALGroups)
		if err != nil {
			return nil, "", 0, fmt.Errorf("regionserver: opening the WAL %s: %w", dir, err)
		}
		return m, dir, code, nil
	}
	w, err := wal.Open(opts)
	if err != nil {
		return nil, "", 0, fmt.Errorf("regionserver: opening the WAL %s: %w", dir, err)
	}
	return w, dir, code, nil
}

func (s *Server) installWAL(w serverLog, dir string, code int64) {
	s.walMu.Lock()
	defer s.walMu.Unlock()
	s.wal, s.walDir, s.startCode = w, dir, code
	s.name = &pb.ServerName{Host: s.name.GetHost(), Port: s.name.GetPort(), StartCode: code}
}

func (s *Server) serverName() *pb.ServerName {
	s.walMu.RLock()
	defer s.walMu.RUnlock()
	return s.name
}

func (s *Server) currentWAL() serverLog {
	s.walMu.RLock()
	defer s.walMu.RUnlock()
	return s.wal
}

// Name is the server's name (host:port of the data path).
func (s *Server) Name() string { return s.nameStr }

// DataAddr and AdminAddr are the listening addresses.
func (s *Server) DataAddr() string  { return s.dataLis.Addr().String() }
func (s *Server) AdminAddr() string { return s.adminLis.Addr().String() }

// HTTPAddr is the telemetry address ("" without one).
func (s *Server) HTTPAddr() string {
	if s.tel == nil {
		return ""
	}
	return s.tel.Addr()
}

// Ready is nil when the server is registered with the master and serving: its data port accepts
// connections and its WAL takes writes.
func (s *Server) Ready() error {
	switch {
	case s.stopping.Load():
		return errors.New("region server is stopping")
	case !s.serving.Load():
		return errors.New("region server is not serving")
	case !s.registered.Load():
		return errors.New("region server is not registered with the master")
	}
	if d := s.dataSrv.Load(); d != nil {
		if err := d.Healthy(); err != nil {
			return err
		}
	}
	if err := s.adminErr.Load(); err != nil {
		return *err
	}
	if w := s.currentWAL(); w != nil {
		if err := w.Err(); err != nil {
			return fmt.Errorf("the WAL cannot be written: %w", err)
		}
	}
	return nil
}

// Failed delivers the first error of a port that stopped serving for good (the admin port, the
// HTTP endpoint): the process should stop the server and exit, and be restarted. (The data port's
// failure is reported by Ready; its accept errors are retried.)
func (s *Server) Failed() <-chan error { return s.failed }

func (s *Server) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// Done is closed once the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// OnlineRegions returns the names of the regions open here.
func (s *Server) OnlineRegions() []string {
	var out []string
	s.regions.Range(func(k, v any) bool {
		if v.(*onlineRegion).state.Load() == stateOpen {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// openingWait is how long a request for a region opening here waits for the open to end: a
// move's open takes a few round trips to storage and the master's catalog write of OPENED
// (hundreds of milliseconds on a loaded object store), and a request that waits is answered the
// moment the region opens, where an answer to retry adds the client's pause to every round.
const openingWait = time.Second

// openingDeadline is until when a request waits for regions opening here: openingWait from now,
// never past the request's own deadline. A request that names several regions (a multi) waits
// until this one time for all of them, not openingWait for each.
func openingDeadline(ctx context.Context) time.Time { return deadlineWithin(ctx, openingWait) }

// deadlineWithin is d from now, or ctx's deadline when that comes first.
func deadlineWithin(ctx context.Context, d time.Duration) time.Time {
	until := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	return until
}

// lookup finds an open region or says why not, waiting up to openingWait for one opening or
// closing here.
func (s *Server) lookup(name string) (*onlineRegion, *region.Region, *pb.ErrorDetail) {
	return s.lookupUntil(name, time.Now().Add(openingWait), false)
}

// wait waits for ch until until at most; it reports whether ch was closed.
func wait(ch <-chan struct{}, until time.Time) bool {
	d := time.Until(until)
	if d <= 0 {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// lookupUntil is lookup waiting until until at most for a region that is opening or closing
// here. With reads, a closing region still serving reads (its last flush under way) is returned:
// only gets and scans may use it.
func (s *Server) lookupUntil(name string, until time.Time, reads bool) (*onlineRegion, *region.Region, *pb.ErrorDetail) {
	if s.stopping.Load() && !s.serving.Load() {
		return nil, nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_SERVER_STOPPING, Region: name,
			Message: "region server is stopping", Retryable: true}
	}
	v, ok := s.regions.Load(name)
	if ok {
		or := v.(*onlineRegion)
		if or.state.Load() == stateOpening && !or.serving.Load() && or.settled != nil && time.Until(until) > 0 {
			// A region that moved here is usually a few milliseconds from open: a request that
			// waits for it here is answered at once instead of after the client's back-off and
			// another round trip.
			wait(or.settled, until)
		}
		// live reads serving before the state: a graceful stop switches an opening region to
		// closing and then closes the region it finds, and the opener stores the region before
		// it serves, so a region seen serving here is either still opening or was closed by that
		// stop (its writes then fail with ErrClosed and are retried).
		if or.live() {
			if r := or.r.Load(); r != nil {
				return or, r, nil
			}
		}
		st := or.state.Load()
		if or.closingHere(st) {
			if r := or.r.Load(); reads && r != nil && r.Readable() {
				return or, r, nil
			}
			// A move's close: its destination opens the region only once this server reported it
			// CLOSED. A write waits here for that (the close's last flush, the report) and is
			// then sent on, rather than sent at once to a destination that would refuse it.
			wait(or.closeDone, until)
			st = or.state.Load()
		}
		switch st {
		case stateOpening:
			return nil, nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_OPENING, Region: name,
				Message: "region is opening on this server", Retryable: true, RetryAfterMs: 100}
		case stateOpen:
			if r := or.r.Load(); r != nil {
				return or, r, nil
			}
		}
	}
	if e, ok := s.movedAway(name); ok && e.closed != nil {
		// Closed and being reported: the destination is told to open it once the master has
		// the report.
		wait(e.closed, until)
	}
	return nil, nil, s.notServing(name)
}

// notServing is REGION_MOVED when the region recently moved away, else NOT_SERVING_REGION.
func (s *Server) notServing(name string) *pb.ErrorDetail {
	if e, ok := s.movedAway(name); ok {
		return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_MOVED, Region: name, NewLocation: e.to, NewLocationSeq: e.seq,
			Message: "region moved to " + layout.ServerName(e.to), Retryable: true}
	}
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: name,
		Message: "region is not online on " + s.nameStr, Retryable: true}
}

// movedAway is where a region that moved away within MovedTTL went (an older entry is dropped).
func (s *Server) movedAway(name string) (movedEntry, bool) {
	s.movedMu.Lock()
	defer s.movedMu.Unlock()
	e, ok := s.moved[name]
	if ok && time.Since(e.at) > s.cfg.MovedTTL {
		delete(s.moved, name)
		ok = false
	}
	return e, ok
}

func (s *Server) rememberMoved(name string, to *pb.ServerName, seq uint64, closed <-chan struct{}) {
	s.movedMu.Lock()
	defer s.movedMu.Unlock()
	now := time.Now()
	for k, e := range s.moved {
		if now.Sub(e.at) > s.cfg.MovedTTL {
			delete(s.moved, k)
		}
	}
	if to != nil && to.GetHost() != "" {
		s.moved[name] = movedEntry{to: to, seq: seq, at: now, closed: closed}
	}
}

// regionConfig is the region.Config of this server for a region (encoded name).
func (s *Server) regionConfig(table *pb.TableDescriptor, regionName string) region.Config {
	flush := s.cfg.FlushSize
	if table.GetMemstoreFlushSize() > 0 {
		flush = table.GetMemstoreFlushSize()
	}
	// The master refuses a policy it cannot parse at create and alter.
	policy, err := region.ParseFlushPolicy(table.GetAttributes())
	if err != nil {
		s.log.Warn("table flush policy ignored", "table", table.GetName().GetName(), "error", err)
	}
	return region.Config{FS: s.cfg.FS, Bucket: s.cfg.Bucket, FileCache: s.cfg.FileCache, WAL: logFor(s.currentWAL(), regionName), Pool: s.pool, Cache: s.cache, FlushSize: flush,
		FlushPolicy: policy,
		Logger:      s.cfg.Logger, DisableAutoCompaction: s.cfg.DisableAutoCompaction, Compaction: *s.compaction.Load(),
		BlockedWrites: &s.m.blockedWrites}
}

// Stop shuts the server down gracefully: it tells the master it is stopping, closes every region
// with a flush (reporting each CLOSED), sends a last heartbeat and stops serving.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.shutdown(true) })
	return s.stopErr
}

// Abort stops at once without flushing or telling the master, as a crash would: the master
// declares the server dead when its lease runs out and recovers its regions from the WAL.
func (s *Server) Abort() {
	s.stopOnce.Do(func() { s.stopErr = s.shutdown(false) })
}

func (s *Server) shutdown(graceful bool) error {
	s.stopping.Store(true)
	close(s.quit)
	if s.data == nil { // never started
		s.release()
		close(s.done)
		return nil
	}
	if !graceful {
		close(s.hbQuit)
		s.serving.Store(false)
		s.data.Close()
		s.admin.Stop()
		s.bg.Wait()
		s.hbWG.Wait()
		s.closeScanners()
		s.forEachRegion(func(or *onlineRegion, r *region.Region) { r.Abort() })
		_ = s.currentWAL().Close()
		s.finish()
		return nil
	}
	s.bg.Wait() // background work stopped; heartbeats go on (saying "stopping") until the end
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.heartbeat(ctx, true)
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	var closedMu sync.Mutex
	var closed []*onlineRegion
	s.regions.Range(func(k, v any) bool {
		or := v.(*onlineRegion)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if or.closing.Load() {
				// A close the master ordered is under way (closeRegion): it reports the region.
				// Wait for its last flush (a second Close returns once the first is done), not for
				// its report, before the WAL closes.
				if r := or.r.Load(); r != nil {
					_ = r.Close()
				}
				return
			}
			or.state.Store(stateClosing)
			// The region leaves the map once flushed, not before (and not at all when the flush
			// fails): an order for it meanwhile is answered as for a region being closed here (a
			// close waits for the CLOSED report below, an open is sent again), not as for one
			// this server does not have, which the master would take for closed and open
			// elsewhere without what only this server's WAL has.
			if r := or.r.Load(); r != nil {
				if err := r.Close(); err != nil && !errors.Is(err, region.ErrClosed) {
					// Not reported CLOSED: the master recovers it from this server's WAL once
					// the lease runs out.
					s.log.Error("closing region failed to flush: leaving it to WAL recovery", "region", or.name, "error", err)
					return
				}
			}
			s.regions.CompareAndDelete(or.name, or)
			closedMu.Lock()
			closed = append(closed, or)
			closedMu.Unlock()
		}()
		return true
	})
	wg.Wait()
	s.closeScanners()
	// Every region is closed (flushed): the WAL is done with. Close it before the master learns
	// that this server holds nothing — from then on it may recover the server's (empty) log and
	// rename its directory — so the CLOSED reports come after it. Heartbeats went on all along.
	if err := s.currentWAL().Close(); err != nil {
		errs = append(errs, err)
	}
	// The reports and the last heartbeat get their own time: the closes may have taken long (a
	// close flushes again, for up to 30 s, while the object store is unavailable).
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, or := range closed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.report(ctx, or.info, pb.RegionTransition_REGION_TRANSITION_CLOSED, 0, 0, "") // closed on its own
		}()
	}
	wg.Wait()
	close(s.hbQuit)
	s.hbWG.Wait()
	_, _ = s.heartbeat(ctx, true)
	s.serving.Store(false)
	s.data.Close()
	stopped := make(chan struct{})
	go func() { s.admin.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.admin.Stop()
	}
	s.finish()
	return errors.Join(errs...)
}

func (s *Server) finish() {
	if s.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.tel.Stop(ctx)
		cancel()
	}
	s.mmu.Lock()
	if s.masterConn != nil {
		s.masterConn.Close()
		s.masterConn = nil
	}
	s.mmu.Unlock()
	s.closeAdminConns()
	s.dropPrepared()
	s.release()
	s.log.Info("region server stopped", "server", s.nameStr)
	close(s.done)
}

// every runs fn each period until the server stops: the body of a background loop started with
// s.bg.Add(1) (it calls s.bg.Done).
func (s *Server) every(period time.Duration, fn func()) {
	defer s.bg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		fn()
	}
}

func (s *Server) forEachRegion(fn func(*onlineRegion, *region.Region)) {
	s.regions.Range(func(k, v any) bool {
		or := v.(*onlineRegion)
		s.regions.Delete(k)
		or.state.Store(stateClosing)
		if r := or.r.Load(); r != nil {
			fn(or, r)
		}
		return true
	})
}

func splitHostPort(a string) (string, string, error) { return net.SplitHostPort(a) }
func joinHostPort(h, p string) string                { return net.JoinHostPort(h, p) }

// slowCall is the threshold of the slow-call log (Config.SlowCall, SetSlowCall).
func (s *Server) slowCall() time.Duration { return time.Duration(s.slowCallNanos.Load()) }

// slowCommit logs a WAL commit that took long: the logs report every commit (a threshold of
// 1 ns) and the current threshold decides.
func (s *Server) slowCommit(c wal.SlowCommit) {
	if c.Took < s.slowCall() {
		return
	}
	attrs := []any{"log", c.Log, "bytes", c.Bytes, "took", c.Took.Round(time.Millisecond)}
	if c.Retries > 0 {
		attrs = append(attrs, "retries_after_store_unavailable", c.Retries)
	}
	if c.Err != nil {
		s.log.Warn("slow WAL commit", append(attrs, "error", c.Err)...)
		return
	}
	s.log.Info("slow WAL commit", attrs...)
}

// noteSlowFailure logs a data-path call that took long to fail: its method, region, time and
// answer (a request that waited for a region to open or close, say).
func (s *Server) noteSlowFailure(method, region string, start time.Time, d *pb.ErrorDetail) {
	if took := time.Since(start); took >= s.slowCall() {
		s.log.Info("slow call", "method", method, "region", region, "took", took.Round(time.Millisecond), "error", d.GetCode())
	}
}

// noteSlowCall logs a data-path call that took long: its method, region and time.
func (s *Server) noteSlowCall(method, region string, start time.Time) {
	if took := time.Since(start); took >= s.slowCall() {
		s.log.Info("slow call", "method", method, "region", region, "took", took.Round(time.Millisecond))
	}
}
