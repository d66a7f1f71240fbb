package region

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/filecache"
	"github.com/cellstore/cellstore/engine/wal"
)

// Errors of the region. Errors returned by the region wrap one of these
// where one applies (errors.Is).
var (
	// ErrClosed: the region is closed (or closing). Close returns it when another close
	// already flushed the region.
	ErrClosed = errors.New("region: closed")
	// ErrAborted: Close found the region aborted, closed without a flush: its unflushed edits
	// are only in the WAL, so it must not be reported closed.
	ErrAborted = errors.New("region: aborted without a flush")
	// ErrBroken: a WAL write failed after the mutation entered the
	// memstore; the region refuses further work and must be reopened
	// (which replays the WAL).
	ErrBroken = errors.New("region: broken by a WAL failure; reopen it")
	// ErrUnsynced: the write is in the WAL but the WAL's sync (or its object's PUT) failed, so
	// it was not acknowledged and it may or may not survive the region's recovery; the region is
	// broken (ErrBroken). The error wraps the WAL's too.
	ErrUnsynced = errors.New("region: the write's WAL sync failed: it may or may not survive")
	// ErrWrongRegion: the row is outside the region's key range.
	ErrWrongRegion = errors.New("region: row not in region")
	// ErrNoSuchFamily: the mutation or read names an unknown family.
	ErrNoSuchFamily = errors.New("region: no such column family")
	// ErrWritesBlocked: the memstore is over its blocking size (or the
	// off-heap budget is exhausted) and a flush did not free enough in
	// time (HBase's RegionTooBusyException).
	ErrWritesBlocked = errors.New("region: writes blocked: memstore over its limit")
	// ErrRowLockTimeout: a row lock could not be taken in time.
	ErrRowLockTimeout = errors.New("region: timed out waiting for a row lock")
	// ErrNotALong: an increment found a value that is not 8 bytes.
	ErrNotALong = errors.New("region: field is not a long")
	// ErrInvalid: a malformed request (empty row, bad timestamp, ...).
	ErrInvalid = errors.New("region: invalid request")
	// ErrCorrupt: a damaged region file (manifest, reference, store file).
	ErrCorrupt = errors.New("region: corrupt file")
	// ErrCannotSplit: no valid split point or the region holds references.
	ErrCannotSplit = errors.New("region: cannot split")
	// ErrCannotMerge: the regions do not touch, hold references or have edits not replayed.
	ErrCannotMerge = errors.New("region: cannot merge")
)

// Requester is called when the region wants a flush or a compaction; the
// region server queues the work and calls Region.Flush / Region.Compact.
// Without one the region runs the work on its own background goroutine.
type Requester interface {
	RequestFlush(r *Region)
	RequestCompaction(r *Region, major bool)
}

// Config is what a region needs from its region server.
type Config struct {
	// FS is the storage root (required unless Bucket is set).
	FS storage.FS
	// Bucket, when set, holds the region's files instead of FS: store files written once by
	// create-only PUTs, the manifest replaced by conditional PUTs (docs/architecture.md, "Object
	// storage"). Recovered edits are objects written by wal.SplitObjectLog.
	Bucket storage.Bucket
	// FileCache, with Bucket, keeps ranges of store files read from the bucket on a local disk
	// (nil: every read that misses the block caches is a ranged GET).
	FileCache *filecache.Cache
	// WAL is the region server's WAL (required): sequence ids and logging.
	WAL wal.Log
	// Pool supplies memstore chunks (required).
	Pool *offheap.ChunkPool
	// Cache is the block cache (optional).
	Cache *blockcache.Combined
	// Clock returns the current time (cell timestamps, TTL, time limits);
	// nil means time.Now.
	Clock func() time.Time
	// realClock: Clock is the system's (not a test's): scans' time limits run on timers.
	realClock bool
	// FlushSize triggers a flush when the memstore holds this many data
	// bytes (default 128 MiB).
	FlushSize int64
	// FlushPolicy chooses the families the region's own flushes write (ParseFlushPolicy).
	FlushPolicy FlushPolicy
	// InMemoryFlushSize: a region with a BASIC or EAGER family freezes its active memstore
	// segment into the pipeline at this many data bytes (0: FlushSize/16, at least 64 KiB).
	InMemoryFlushSize int64
	// BlockingMultiplier: writes block when the memstore holds
	// FlushSize*BlockingMultiplier bytes (default 4).
	BlockingMultiplier int64
	// BlockingWait is how long a blocked write waits for a flush before
	// failing with ErrWritesBlocked (default 10 s).
	BlockingWait time.Duration
	// RowLockTimeout (default 30 s).
	RowLockTimeout time.Duration
	// Requester receives flush and compaction requests (nil: the region's
	// own background goroutine does the work).
	Requester Requester
	// DisableAutoFlush and DisableAutoCompaction turn the automatic
	// triggers off (tests drive flushes and compactions explicitly).
	DisableAutoFlush      bool
	DisableAutoCompaction bool
	// Compaction policy.
	Compaction CompactionConfig
	// ReplayWALDirs are WAL directories (of this or a dead server) to
	// replay this region's edits from on open, besides the region's
	// recovered.edits. Used by standalone restarts and tests.
	ReplayWALDirs []string
	// Descriptor, when set, is the table's descriptor as the master has it: Open writes the
	// region's .regioninfo with it (creating the region's directory when new) unless the file
	// holds exactly that already — checked while the manifest is read, at no extra round trip.
	Descriptor *TableDescriptor
	// Prepared is what Prepare opened ahead of this Open (a move's destination, while the source
	// still served the region): the store files the manifest still names are taken from it, and
	// Open releases the others. It is Open's once passed: the caller does not use it again.
	Prepared *Prepared
	// NonceTTL is how long a nonce's result is remembered (default 30 min).
	NonceTTL time.Duration
	// NonceTableBytes bounds the memory of the remembered nonces (default 4 MiB; the oldest go
	// first).
	NonceTableBytes int
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// BlockedWrites, when set, counts the region's writes that waited for a flush beside its own
	// Metrics().BlockedWrites: the server's total, which does not drop when the region closes.
	BlockedWrites *atomic.Int64
}

// CompactionConfig tunes compaction selection (HBase's exploring policy)
// and throughput.
type CompactionConfig struct {
	// MinFiles: a minor compaction needs at least this many files
	// (hbase.hstore.compaction.min, default 3).
	MinFiles int
	// MaxFiles: at most this many files per minor compaction (default 10).
	MaxFiles int
	// Ratio: a file joins a selection only if it is at most Ratio times
	// the total of the other selected files (default 1.2).
	Ratio float64
	// MaxFileSize: larger files are never minor-compacted (0: no limit).
	MaxFileSize int64
	// ThroughputLimit in bytes per second written (0: unlimited).
	ThroughputLimit int64
	// Sleep is used by the throughput limiter (nil: time.Sleep).
	Sleep func(time.Duration)
}

func (c *Config) fill() error {
	if (c.FS == nil && c.Bucket == nil) || c.WAL == nil || c.Pool == nil {
		return errors.New("region: Config needs FS or Bucket, WAL and Pool")
	}
	if c.Clock == nil {
		c.Clock, c.realClock = time.Now, true
	}
	if c.FlushSize <= 0 {
		c.FlushSize = 128 << 20
	}
	if c.InMemoryFlushSize <= 0 {
		c.InMemoryFlushSize = max(c.FlushSize/16, 64<<10)
	}
	if c.BlockingMultiplier <= 0 {
		c.BlockingMultiplier = 4
	}
	if c.BlockingWait <= 0 {
		c.BlockingWait = 10 * time.Second
	}
	if c.RowLockTimeout <= 0 {
		c.RowLockTimeout = 30 * time.Second
	}
	if c.NonceTTL <= 0 {
		c.NonceTTL = 30 * time.Minute
	}
	if c.NonceTableBytes <= 0 {
		c.NonceTableBytes = 4 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Compaction.fill()
	return nil
}

// CompactionConfig's defaults (HBase's hbase.hstore.compaction.min, .max and .ratio).
const (
	DefaultCompactionMinFiles = 3
	DefaultCompactionMaxFiles = 10
	DefaultCompactionRatio    = 1.2
)

// fill gives unset fields their defaults.
func (cc *CompactionConfig) fill() {
	if cc.MinFiles <= 1 {
		cc.MinFiles = DefaultCompactionMinFiles
	}
	if cc.MaxFiles < cc.MinFiles {
		cc.MaxFiles = max(DefaultCompactionMaxFiles, cc.MinFiles)
	}
	if cc.Ratio <= 0 {
		cc.Ratio = DefaultCompactionRatio
	}
	if cc.Sleep == nil {
		cc.Sleep = time.Sleep
	}
}

// CheckCompaction refuses compaction settings no region can use (a change made while regions
// are open, SetCompaction).
func CheckCompaction(cc CompactionConfig) error {
	switch {
	case cc.MinFiles < 2:
		return fmt.Errorf("a minor compaction needs at least 2 files, got a minimum of %d", cc.MinFiles)
	case cc.MaxFiles < cc.MinFiles:
		return fmt.Errorf("at most %d files per compaction is below the minimum of %d", cc.MaxFiles, cc.MinFiles)
	case cc.Ratio <= 0:
		return fmt.Errorf("compaction ratio %v: want a positive number", cc.Ratio)
	case cc.MaxFileSize < 0 || cc.ThroughputLimit < 0:
		return errors.New("the compaction's maximum file size and throughput must not be negative (0: no limit)")
	}
	return nil
}
