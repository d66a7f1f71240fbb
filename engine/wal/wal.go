package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// Durability is the durability level of a mutation (HBase's Durability).
type Durability int

const (
	// DurabilityDefault means the table's default, SyncWAL.
	DurabilityDefault Durability = iota
	// SkipWAL writes no WAL record: the mutation is lost if the server
	// dies before its memstore is flushed. Append with SkipWAL writes
	// nothing and only allocates a sequence id (as NextSeq).
	SkipWAL
	// AsyncWAL acknowledges once the record is buffered; the record is
	// written and synced within Options.SyncInterval.
	AsyncWAL
	// SyncWAL acknowledges once the record is synced to the storage
	// backend (the default).
	SyncWAL
	// FsyncWAL is SyncWAL: backends have one sync. Kept for API
	// compatibility.
	FsyncWAL
)

func (d Durability) String() string {
	switch d {
	case DurabilityDefault:
		return "USE_DEFAULT"
	case SkipWAL:
		return "SKIP_WAL"
	case AsyncWAL:
		return "ASYNC_WAL"
	case SyncWAL:
		return "SYNC_WAL"
	case FsyncWAL:
		return "FSYNC_WAL"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Options configures a WAL.
type Options struct {
	// FS is the storage backend. Required.
	FS storage.FS
	// Dir is the WAL directory of the region server, e.g. "wal/rs1".
	// Required.
	Dir string
	// ArchiveDir receives segments whose edits are all flushed. Empty
	// means delete them instead.
	ArchiveDir string
	// NoPreallocate turns off preallocating segment files (fallocate) on
	// file systems that support it.
	NoPreallocate bool
	// NoZeroAhead turns off writing zeros ahead of the log into a preallocated segment
	// (storage.Zeroer: on ext4 and XFS a sync of records written into preallocated but never
	// written blocks also journals their conversion; see zeroAhead).
	NoZeroAhead bool
	// SegmentSize rolls to a new segment once the current one reaches
	// this many bytes. Default 64 MiB.
	SegmentSize int64
	// RollInterval rolls a non-empty segment older than this. Default
	// 1 hour; negative disables.
	RollInterval time.Duration
	// SyncInterval bounds how long an AsyncWAL record stays unsynced.
	// Default 1 second.
	SyncInterval time.Duration
	// MaxRecordSize limits the payload of one record (one edit). Default
	// 64 MiB, at most MaxRecordSize.
	MaxRecordSize int
	// FlushThreshold is the amount of buffered data that triggers a
	// write even when no appender waits. Default 1 MiB.
	FlushThreshold int
	// InitialSeq makes the first sequence id above it (on top of the
	// highest sequence id found in existing segments).
	InitialSeq uint64
	// GroupCommit chooses who writes and syncs a batch (see CommitMode).
	// Default LeaderCommit.
	GroupCommit CommitMode
	// SyncSlots is how many syncs of the active segment may be under way
	// at once (a batch is written while the previous one syncs). Default 1;
	// at most 8.
	SyncSlots int
	// CommitDelay, if positive, lets a leader (LeaderCommit with one sync
	// slot only) wait up to this long before it commits, until as many
	// writers wait for the commit as waited at once lately: writers that
	// would otherwise split into groups taking turns at the disk then share
	// one sync (PostgreSQL's commit_delay, with its commit_siblings learned
	// from the load; group.go). A lone writer waits at most once, right after
	// a busier time. At most 100 ms. Default 0: commit at once.
	CommitDelay time.Duration
	// Archive, if set, keeps every closed segment until Archive has copied it there
	// (point-in-time recovery), as well as until its regions flushed.
	Archive *ArchiveTarget
	// Seqs, if set, hands out the sequence ids (shared with the other groups of a MultiWAL, so
	// that ids are unique across them).
	Seqs *SeqCounter
	// Slow, if set, is told of every commit (write and sync) that took SlowCommit or longer.
	Slow func(SlowCommit)
	// SlowCommit is the threshold of Slow (default 500 ms).
	SlowCommit time.Duration
}

// SlowCommit describes a group commit that took long: what a write acknowledged late waited for.
type SlowCommit struct {
	Log   string // the segment or object written
	Bytes int
	Took  time.Duration
	Err   error
	// Retries: the times the object store was asked again after it was unavailable (the
	// object log; Took includes them).
	Retries int
}

// slowCommit tells slow of a commit that took threshold (default 500 ms) or longer.
func slowCommit(slow func(SlowCommit), threshold time.Duration, c SlowCommit) {
	if slow != nil && c.Took >= cmp.Or(threshold, 500*time.Millisecond) {
		slow(c)
	}
}

// CommitMode chooses who commits a batch: writes the buffered records to
// the active segment and syncs them.
type CommitMode int

const (
	// LeaderCommit: the appender that waits for its record and finds a
	// free sync slot commits the batch itself, for everyone queued in it;
	// a background goroutine commits only what nobody waits for (ASYNC_WAL)
	// and buffers past FlushThreshold. No hand-off: a writer that finds the
	// log idle pays one write and one sync, nothing more.
	LeaderCommit CommitMode = iota
	// SyncerCommit: waiters wake background goroutines (SyncSlots of them,
	// like HBase's SyncRunners) that commit for them.
	SyncerCommit
)

// String names the mode as the region server's flag does.
func (m CommitMode) String() string {
	switch m {
	case LeaderCommit:
		return "leader"
	case SyncerCommit:
		return "syncer"
	}
	return fmt.Sprintf("CommitMode(%d)", int(m))
}

// ParseCommitMode parses "leader" or "syncer".
func ParseCommitMode(s string) (CommitMode, error) {
	switch s {
	case "leader", "":
		return LeaderCommit, nil
	case "syncer":
		return SyncerCommit, nil
	}
	return 0, fmt.Errorf("wal: group commit mode %q: want leader or syncer", s)
}

func (o *Options) fillDefaults() error {
	if o.FS == nil {
		return errors.New("wal: Options.FS is required")
	}
	d, err := storage.Clean(o.Dir)
	if err != nil || d == "." {
		return fmt.Errorf("wal: bad Options.Dir %q", o.Dir)
	}
	o.Dir = d
	if o.Archive != nil {
		if err := o.Archive.check(); err != nil {
			return err
		}
	}
	if o.ArchiveDir != "" {
		a, err := storage.Clean(o.ArchiveDir)
		if err != nil || a == "." || a == d {
			return fmt.Errorf("wal: bad Options.ArchiveDir %q", o.ArchiveDir)
		}
		o.ArchiveDir = a
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = 64 << 20
	}
	if o.RollInterval == 0 {
		o.RollInterval = time.Hour
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = time.Second
	}
	if o.MaxRecordSize <= 0 {
		o.MaxRecordSize = 64 << 20
	}
	o.MaxRecordSize = min(o.MaxRecordSize, MaxRecordSize)
	if o.FlushThreshold <= 0 {
		o.FlushThreshold = 1 << 20
	}
	if o.GroupCommit != LeaderCommit && o.GroupCommit != SyncerCommit {
		return fmt.Errorf("wal: unknown Options.GroupCommit %d", int(o.GroupCommit))
	}
	if o.SyncSlots <= 0 {
		o.SyncSlots = 1
	}
	if o.SyncSlots > 8 {
		return fmt.Errorf("wal: Options.SyncSlots %d: at most 8", o.SyncSlots)
	}
	switch {
	case o.CommitDelay < 0 || o.CommitDelay > 100*time.Millisecond:
		return fmt.Errorf("wal: Options.CommitDelay %s: from 0 to 100ms", o.CommitDelay)
	case o.CommitDelay > 0 && !CommitDelayFits(o.GroupCommit, o.SyncSlots):
		return fmt.Errorf("wal: a commit delay needs leader group commit with one sync slot (it waits while no sync is under way)")
	}
	return nil
}

// CommitDelayFits says whether a commit delay (Options.CommitDelay) can act with this group-commit
// mode and this many sync slots (0: the default, one): a lingering leader waits while no sync is
// under way, which needs the leader commit and one slot.
func CommitDelayFits(mode CommitMode, slots int) bool { return mode == LeaderCommit && slots <= 1 }

// WAL is the write-ahead log of one region server: a directory of segments
// written from a shared buffer by group commit (group.go).
//
// Appenders encode their record into the buffer under a short lock and get
// a sequence id. A commit swaps the buffer out and writes it with one Write
// under the order lock (wmu), then syncs the segment and acknowledges, in
// order, every appender whose record that sync covered. Who commits is
// Options.GroupCommit; up to Options.SyncSlots syncs overlap (a sync covers
// every write made before it started). Rolling, archiving and closing run on
// the syncer goroutine under the order lock once no sync is under way, so
// they never race with writes.
//
// Sequence ids are assigned here, strictly increasing, one per edit; the
// region uses the returned id as its MVCC write number. A region that opens
// calls AdvanceSeq with its highest persisted sequence id first, so that its
// ids keep increasing across servers.
type WAL struct {
	opts Options
	fs   storage.FS

	// archived: how far the segments are archived (with opts.Archive).
	archived archiveProgress

	// Append side, guarded by amu.
	amu     sync.Mutex
	buf     *batch
	epoch   uint64
	nextSeq uint64
	closed  bool
	broken  error // non-nil: appends are refused until Roll
	// brokenErr mirrors broken for Err, which takes no lock (writers check it).
	brokenErr atomic.Pointer[error]
	regions   map[string]*regionState
	// lastAppended is the sequence id of the last appended record.
	lastAppended uint64

	lastAssigned atomic.Uint64

	// Sync side, guarded by smu.
	smu      sync.Mutex
	scond    sync.Cond
	synced   uint64     // every record with a sequence id <= synced is durable
	serr     error      // sticky sync error (until Roll)
	lost     []seqRange // sequence ids dropped by failures
	stopped  bool
	gc       committer[syncedTo]
	syncing  int          // commits staged and not yet finished
	isBroken bool         // a commit failed: nothing is written until Roll
	goodOff  int64        // size of the active segment before the first failed write
	sealed   bool         // closed: commits write nothing more
	delay    *commitDelay // Options.CommitDelay (nil: none), guarded by smu

	kick chan struct{}
	// zkick wakes the zeroer (zeroLoop).
	zkick chan struct{}
	reqs  chan *request
	done  chan struct{}
	quit  chan struct{} // closed when the syncer stops: extra sync runners exit

	// The order lock: staging a batch (buffer swap + write) and changes of
	// the active segment. Rolls and archiving run on the syncer goroutine
	// and hold it too.
	wmu      sync.Mutex
	spare    *batch
	seg      *activeSegment
	stagedTo uint64 // highest sequence id a staged commit covers

	segs    []*segmentMeta // closed segments, oldest first
	flushed map[string]uint64

	stats counters
}

type batch struct {
	data    []byte
	epoch   uint64
	regions []*regionState // regions with records in this batch
	maxes   []regionSeq    // snapshot of their highest sequence ids
}

func (b *batch) reset() {
	if cap(b.data) > 16<<20 {
		b.data = nil // do not pin a huge buffer after a burst
	}
	b.data = b.data[:0]
	clear(b.regions)
	b.regions = b.regions[:0]
	b.maxes = b.maxes[:0]
}

type regionState struct {
	name  string
	epoch uint64 // epoch of the batch the region was last added to
	max   uint64 // highest sequence id of the region in that batch
}

type regionSeq struct {
	name string
	seq  uint64
}

type seqRange struct{ from, to uint64 }

// syncedTo is what a commit makes durable: every sequence id up to upTo, and
// segment seg's bytes up to end; good is the segment's size before its write
// (where a failed segment is cut back to).
type syncedTo struct {
	upTo uint64
	good int64
	seg  *activeSegment
	end  int64
}

type segmentMeta struct {
	num     uint64
	path    string
	size    int64
	maxSeq  uint64
	regions map[string]uint64 // highest sequence id of each region in the segment
}

type activeSegment struct {
	meta    *segmentMeta
	f       storage.File
	closed  bool
	created time.Time
	// preallocated: the file was extended to the segment size up front and
	// must be truncated to meta.size before another segment follows it.
	preallocated bool
	// zeroedTo: the zeroer wrote zeros up to here (zeroAhead); noZero: it stopped for this
	// segment (the file cannot, or a write of zeros failed).
	zeroedTo int64
	noZero   bool
	// synced: every byte before it is synced (the end of the last acknowledged commit), what
	// the next commit's marker says.
	synced atomic.Int64
	marked int64 // what the last commit's marker said (under wmu)
}

// zeroable says whether the zeroer may still write into the segment (under wmu): preallocated,
// not being trimmed or closed, no write of zeros failed.
func (s *activeSegment) zeroable() bool { return s.preallocated && !s.closed && !s.noZero }

type reqKind int

const (
	reqRoll reqKind = iota
	reqFlushed
	reqClose
	reqInspect
)

type request struct {
	kind   reqKind
	region string
	seq    uint64
	fn     func()
	reply  chan error
}

// Open opens the WAL in opts.Dir, creating the directory if needed.
// Existing segments (a restart on the same directory) are checked and kept:
// a torn tail of the last segment is truncated, corruption elsewhere fails
// Open, sequence ids continue above the highest one found, and the old
// segments are archived once their regions report flushes past them. New
// records always go to a new segment.
func Open(opts Options) (*WAL, error) {
	if err := opts.fillDefaults(); err != nil {
		return nil, err
	}
	w := &WAL{
		opts:    opts,
		fs:      opts.FS,
		buf:     &batch{epoch: 1},
		epoch:   1,
		regions: map[string]*regionState{},
		kick:    make(chan struct{}, 1),
		zkick:   make(chan struct{}, 1),
		reqs:    make(chan *request),
		done:    make(chan struct{}),
		quit:    make(chan struct{}),
		spare:   &batch{},
		flushed: map[string]uint64{},
		gc:      newCommitter[syncedTo](opts.SyncSlots),
	}
	w.scond.L = &w.smu
	if err := w.fs.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", opts.Dir, err)
	}
	if opts.ArchiveDir != "" {
		if err := w.fs.MkdirAll(opts.ArchiveDir); err != nil {
			return nil, fmt.Errorf("wal: create %s: %w", opts.ArchiveDir, err)
		}
	}
	lastSeq, lastNum, err := w.recover()
	if err != nil {
		return nil, err
	}
	w.nextSeq = max(lastSeq, opts.InitialSeq) + 1
	if opts.Seqs != nil {
		opts.Seqs.advance(w.nextSeq - 1)
	}
	w.lastAssigned.Store(w.nextSeq - 1)
	w.synced = w.nextSeq - 1
	w.stagedTo = w.synced
	w.delay = newCommitDelay(opts.CommitDelay, w.synced)
	w.stats.syncedSeq.Store(w.synced)
	seg, err := w.createSegment(lastNum + 1)
	if err != nil {
		return nil, err
	}
	w.seg = seg
	f := seg.f
	w.stats.segments.Store(int64(len(w.segs) + 1))
	if err := w.archive(); err != nil {
		f.Close()
		return nil, err
	}
	go w.run()
	if !opts.NoPreallocate && !opts.NoZeroAhead {
		go w.zeroLoop()
		kick(w.zkick)
	}
	if opts.GroupCommit == SyncerCommit {
		for range opts.SyncSlots - 1 {
			go w.runner()
		}
	}
	return w, nil
}

// recover scans the existing segments, repairs a torn tail and returns the
// highest sequence id and segment number found.
func (w *WAL) recover() (lastSeq, lastNum uint64, err error) {
	r, err := NewReader(w.fs, w.opts.Dir, ReplayOptions{})
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	metas := map[string]*segmentMeta{}
	for _, f := range r.files {
		num, _ := parseSegmentName(path.Base(f))
		m := &segmentMeta{num: num, path: f, regions: map[string]uint64{}}
		metas[f] = m
		w.segs = append(w.segs, m)
		lastNum = max(lastNum, num)
	}
	for r.Next() {
		file, _ := r.Position()
		m := metas[file]
		e := r.Edit()
		m.regions[string(e.Region)] = e.Seq
		m.maxSeq = e.Seq
	}
	if err := r.Err(); err != nil {
		return 0, 0, fmt.Errorf("wal: open %s: %w", w.opts.Dir, err)
	}
	lastSeq, _ = r.LastSeq()
	if torn, ok := r.TornTail(); ok {
		if torn.Offset < headerSize {
			if err := w.fs.Remove(torn.File); err != nil {
				return 0, 0, fmt.Errorf("wal: remove torn segment %s: %w", torn.File, err)
			}
			if err := w.fs.SyncDir(w.opts.Dir); err != nil {
				return 0, 0, fmt.Errorf("wal: %w", err)
			}
			w.segs = slices.DeleteFunc(w.segs, func(m *segmentMeta) bool { return m.path == torn.File })
		} else if err := w.fs.Truncate(torn.File, torn.Offset); err != nil {
			return 0, 0, fmt.Errorf("wal: truncate torn tail of %s at %d: %w", torn.File, torn.Offset, err)
		}
	}
	for _, m := range w.segs {
		if fi, err := w.fs.Stat(m.path); err == nil {
			m.size = fi.Size
		}
	}
	return lastSeq, lastNum, nil
}

// createSegment creates segment num durably: header written and synced,
// directory synced. Where the file system can, the segment's space is
// preallocated (Options.NoPreallocate): a sync then journals no size change,
// which made group-commit syncs about a third cheaper on ext4.
func (w *WAL) createSegment(num uint64) (*activeSegment, error) {
	p := path.Join(w.opts.Dir, segmentName(num))
	// A failed roll may have left a partial file with this number.
	if err := w.fs.RemoveAll(p); err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	f, err := w.fs.Create(p)
	if err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	_, err = f.Write(appendVersionedHeader(nil, markedVersion, kindSegment, num))
	preallocated := false
	if pa, ok := f.(storage.Preallocator); ok && err == nil && !w.opts.NoPreallocate {
		// Best effort: a file system without fallocate, or without the
		// space, gets an ordinary appended segment.
		if perr := pa.Preallocate(w.opts.SegmentSize); perr == nil {
			preallocated = true
		} else if terr := pa.Trim(headerSize); terr != nil {
			err = terr
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = w.fs.SyncDir(w.opts.Dir)
	}
	if err != nil {
		f.Close()
		w.fs.RemoveAll(p) // best effort; a leftover is removed by the next attempt
		return nil, fmt.Errorf("wal: create segment %s: %w", p, err)
	}
	s := &activeSegment{meta: &segmentMeta{num: num, path: p, size: headerSize, regions: map[string]uint64{}}, f: f,
		created: time.Now(), preallocated: preallocated}
	s.synced.Store(headerSize)
	return s, nil
}

// trimSegment cuts a preallocated segment back to the bytes written (and
// syncs that), so only the last segment of a directory can end in zeros:
// replay takes zeros after the last record as the torn tail of a crash.
func (w *WAL) trimSegment(s *activeSegment) error {
	if !s.preallocated {
		return nil
	}
	s.noZero = true // for good: a failed trim may have cut the file already
	if err := s.f.(storage.Preallocator).Trim(s.meta.size); err != nil {
		return fmt.Errorf("wal: trim preallocated segment %s to %d bytes: %w", s.meta.path, s.meta.size, err)
	}
	s.preallocated = false
	return nil
}

// Append logs e with durability d and returns its sequence id (also stored
// in e.Seq). SyncWAL and FsyncWAL (and DurabilityDefault) return once the
// record is durable; AsyncWAL returns at once; SkipWAL logs nothing and
// only allocates a sequence id. An error means the edit must not be
// acknowledged.
func (w *WAL) Append(e *Edit, d Durability) (uint64, error) {
	switch d {
	case SkipWAL:
		seq, err := w.NextSeq()
		e.Seq = seq
		return seq, err
	case AsyncWAL:
		return w.AppendNoWait(e)
	case DurabilityDefault, SyncWAL, FsyncWAL:
		seq, err := w.AppendNoWait(e)
		if err != nil {
			return 0, err
		}
		return seq, w.WaitDurable(seq)
	}
	return 0, fmt.Errorf("wal: unknown durability %d", int(d))
}

// AppendNoWait buffers the record of e, assigns its sequence id (also
// stored in e.Seq) and returns without waiting. Call WaitDurable to wait for
// the record to be synced. This lets a region insert into its memstore
// while the sync is under way, as HBase does.
func (w *WAL) AppendNoWait(e *Edit) (uint64, error) {
	if len(e.Region) == 0 {
		return 0, fmt.Errorf("%w: empty region name", ErrInvalidEdit)
	}
	for i, c := range e.Cells {
		if _, n, err := cell.ParseKeyValue(c); err != nil || n != len(c) {
			if err == nil {
				err = fmt.Errorf("%d trailing bytes", len(c)-n)
			}
			return 0, fmt.Errorf("%w: cell %d: %w", ErrInvalidEdit, i, err)
		}
	}
	size := payloadSize(e)
	if size > w.opts.MaxRecordSize {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, size, w.opts.MaxRecordSize)
	}
	wt := e.WriteTime
	if wt == 0 {
		wt = time.Now().UnixNano()
	}

	w.amu.Lock()
	if w.closed {
		w.amu.Unlock()
		return 0, ErrClosed
	}
	if w.broken != nil {
		err := w.broken
		w.amu.Unlock()
		return 0, err
	}
	seq := w.takeSeq()
	checkSeqIncreasing(w.lastAppended, seq)
	w.lastAppended = seq
	b := w.buf
	if len(b.data) == 0 {
		// Room for the commit marker that begins the write of this batch (filled in by commit).
		b.data = append(b.data, make([]byte, commitMarkerSize)...)
	}
	start := len(b.data)
	b.data = appendRecord(b.data, e, seq, wt, size)
	checkAppended(b.data[start:], e, seq)
	rs := w.regions[string(e.Region)]
	if rs == nil {
		rs = &regionState{name: string(e.Region)}
		w.regions[rs.name] = rs
	}
	if rs.epoch != b.epoch {
		rs.epoch = b.epoch
		b.regions = append(b.regions, rs)
	}
	rs.max = seq
	w.lastAssigned.Store(seq)
	full := len(b.data) >= w.opts.FlushThreshold
	w.amu.Unlock()

	w.stats.appends.Add(1)
	w.stats.appendedBytes.Add(uint64(size + recordHeaderSize))
	if full {
		w.signal()
	}
	e.Seq = seq
	return seq, nil
}

// WaitDurable waits until the record with sequence id seq (and every
// earlier one) is durable. It returns an error if the record was lost by a
// failed write or sync, or if the WAL closed before syncing it.
func (w *WAL) WaitDurable(seq uint64) error {
	if seq > w.lastAssigned.Load() {
		return fmt.Errorf("wal: sequence id %d was never assigned", seq)
	}
	w.smu.Lock()
	defer w.smu.Unlock()
	if w.delay != nil { // the commit delay counts the writers
		w.delay.arrived(seq)
		defer w.delay.left()
	}
	kicked := false
	for {
		for _, r := range w.lost {
			if seq >= r.from && seq <= r.to {
				if w.serr != nil {
					return w.serr
				}
				return ErrLost
			}
		}
		if w.synced >= seq {
			return nil
		}
		if w.serr != nil {
			return w.serr
		}
		if w.stopped {
			return ErrClosed
		}
		if w.opts.GroupCommit == LeaderCommit {
			if w.gc.reserve() {
				w.smu.Unlock()
				if w.delay != nil {
					w.delay.linger(&w.smu, func() bool { return w.stopped || w.serr != nil })
				}
				w.commit()
				w.smu.Lock()
				continue
			}
		} else if !kicked {
			w.signal()
			kicked = true
		}
		w.scond.Wait()
	}
}

// Sync makes every record appended so far durable.
func (w *WAL) Sync() error {
	seq := w.lastAssigned.Load()
	if seq == 0 {
		return nil
	}
	return w.WaitDurable(seq)
}

// NextSeq allocates a sequence id without writing a record (for SkipWAL
// mutations).
func (w *WAL) NextSeq() (uint64, error) {
	w.amu.Lock()
	defer w.amu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	seq := w.takeSeq()
	w.lastAssigned.Store(seq)
	return seq, nil
}

// takeSeq assigns the next sequence id (under amu).
func (w *WAL) takeSeq() uint64 {
	seq := w.nextSeq
	if w.opts.Seqs != nil {
		seq = w.opts.Seqs.next(seq)
	}
	w.nextSeq = seq + 1
	return seq
}

// AdvanceSeq makes every later sequence id greater than seq. A region
// calls it when it opens, with the highest sequence id in its store files
// and recovered edits.
func (w *WAL) AdvanceSeq(seq uint64) {
	w.amu.Lock()
	defer w.amu.Unlock()
	if w.opts.Seqs != nil {
		w.opts.Seqs.advance(seq)
	}
	if w.nextSeq <= seq {
		w.nextSeq = seq + 1
		w.lastAssigned.Store(seq)
	}
}

// LastSeq returns the highest sequence id assigned so far.
func (w *WAL) LastSeq() uint64 { return w.lastAssigned.Load() }

// MarkFlushed records that region has flushed every edit with a sequence
// id <= seq to store files, and archives (or deletes) the segments that no
// longer hold unflushed edits. HBase calls this completeCacheFlush.
func (w *WAL) MarkFlushed(region string, seq uint64) error {
	return w.request(&request{kind: reqFlushed, region: region, seq: seq})
}

// Roll closes the current segment and starts a new one. After a failed
// write or sync it is also the way back: it truncates the failed segment to
// its last good record and, if that works, accepts appends again.
func (w *WAL) Roll() error { return w.request(&request{kind: reqRoll}) }

func (w *WAL) request(r *request) error {
	r.reply = make(chan error, 1)
	select {
	case w.reqs <- r:
	case <-w.done:
		return ErrClosed
	}
	return <-r.reply
}

// Close writes and syncs the buffered records, ends the current segment with
// a closing commit marker, closes it and stops the WAL. Later appends fail
// with ErrClosed. It returns the error that broke the WAL, if any, or that of
// writing the closing marker (everything acknowledged is durable then; a
// partial marker reads as a torn tail).
func (w *WAL) Close() error {
	w.amu.Lock()
	if w.closed {
		w.amu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.amu.Unlock()
	err := w.request(&request{kind: reqClose})
	<-w.done
	return err
}

func (w *WAL) signal() { kick(w.kick) }

// kick wakes the goroutine that waits on c (a channel of capacity 1), or does nothing when it is
// already woken.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run is the syncer goroutine: it commits what nobody waits for (ticks,
// FlushThreshold, waiters in SyncerCommit mode), rolls, archives and closes.
func (w *WAL) run() {
	defer close(w.done)
	defer close(w.quit)
	t := time.NewTicker(w.opts.SyncInterval)
	defer t.Stop()
	for {
		var req *request
		tick := false
		select {
		case <-w.kick:
		case <-t.C:
			tick = true
		case req = <-w.reqs:
		}
		w.commitWhenFree()
		if req != nil {
			switch req.kind {
			case reqClose:
				req.reply <- w.finish()
				return
			case reqRoll:
				req.reply <- w.roll(nil)
			case reqFlushed:
				w.wmu.Lock()
				if req.seq > w.flushed[req.region] {
					w.flushed[req.region] = req.seq
				}
				err := w.archive()
				w.wmu.Unlock()
				req.reply <- err
			case reqInspect:
				w.wmu.Lock()
				req.fn()
				w.wmu.Unlock()
				req.reply <- nil
			}
			continue
		}
		if tick && w.opts.RollInterval > 0 {
			w.rollIf(func(s *activeSegment) bool {
				return s.meta.maxSeq > 0 && time.Since(s.created) >= w.opts.RollInterval
			})
		}
	}
}

// Zeros ahead of the log (on unless Options.NoZeroAhead). A preallocated
// segment's blocks are reserved but unwritten: on ext4 (and XFS) the first write into each converts
// it to written, a change to the file's extent tree that the next fdatasync has to journal — an
// extra journal write and flush every few syncs when small records fill a block in a few commits,
// and every sync once a commit fills a block (measured on this project's development disk with a
// scratch program, write + fdatasync of 1,140 bytes, the size of a commit of 16 writers: 163–208 µs
// per sync into preallocated space against 145–176 µs into blocks written before; 4 KiB: 225–342
// against 156–165). So a zeroer keeps at least zeroAhead/2 and at most zeroAhead + zeroChunk bytes
// past the log's end written with zeros, zeroChunk at a time, and starts their write-back at once
// so they do not ride on the log's next sync; a commit's syncs then flush its data alone, and only
// the first sync after a chunk journals the chunk's conversion. Every block of the log is thus
// written twice, zeros first: small commits, whose syncs cost the same for a few hundred bytes or a
// few KiB, are what it is for. Commits of zeroSmallCommit bytes or more (a bulk load's batches) do
// not call the zeroer (each new segment still gets its first zeroAhead bytes zeroed): their syncs
// are dominated by their own data.
//
// The zeros never cover a record: the zeroer writes only from the first page boundary past the
// segment's written size (so it never dirties a page holding records again), under the lock
// every segment write holds (wmu, a chunk at a time: a commit waits for at most one chunk's
// copy into the page cache), and never past the preallocated size or into a segment being
// trimmed or closed (a roll, a close, a failure: noZero and closed are set under wmu). A failed
// write of zeros stops the zeroer for that segment (Stats.ZeroErrors) and fails nothing else;
// the zeros' write-back errors reach the file's next sync — the log's, or a roll's trim, which
// then fails and is retried — like any other write's.
//
// What it changes for a power loss: into unwritten blocks a commit's records become readable
// only with the journal commit that converts the blocks, which ext4 and XFS make after the data
// is on the disk, so a power loss mid-sync leaves the commit's new blocks all zeros. Into blocks
// written before, a commit's pages are overwritten in place and reach the disk in any order: a
// power loss mid-sync can keep a later page of the commit and lose an earlier one. Replay takes
// that for a torn tail too because every commit begins with a marker saying how far the segment
// was synced (format.go; reader.go handleBad): valid records after damage are corruption only
// when a later commit vouches that the damaged bytes had been synced.
const (
	zeroAhead       = 1 << 20
	zeroChunk       = 64 << 10
	zeroAlign       = 4 << 10
	zeroSmallCommit = 64 << 10
)

// zeroLoop is the zeroer goroutine: it writes zeros ahead of the log whenever kicked.
func (w *WAL) zeroLoop() {
	for {
		select {
		case <-w.zkick:
			w.zeroAhead()
		case <-w.quit:
			return
		}
	}
}

// zeroAhead writes zeros, a chunk at a time, until zeroAhead bytes past the active segment's end
// are written (or the segment's preallocated end is reached).
func (w *WAL) zeroAhead() {
	for {
		w.wmu.Lock()
		s := w.seg
		z, ok := s.f.(storage.Zeroer)
		if !ok || !s.zeroable() {
			w.wmu.Unlock()
			return
		}
		from := max(s.zeroedTo, (s.meta.size+zeroAlign-1)/zeroAlign*zeroAlign)
		n := min(zeroChunk, w.opts.SegmentSize-from)
		if from >= s.meta.size+zeroAhead || n <= 0 {
			w.wmu.Unlock()
			return
		}
		err := z.WriteZeros(from, n)
		if err != nil {
			s.noZero = true
			w.stats.zeroErrors.Add(1)
		} else {
			s.zeroedTo = from + n
		}
		w.wmu.Unlock()
		if err != nil {
			return
		}
		w.stats.zeroedBytes.Add(uint64(n))
		// Outside the lock: commits go on meanwhile. A write-back that cannot start is left to
		// the log's next sync, which writes these blocks with its own.
		_ = z.StartWriteback(from, n)
	}
}

// rollIf rolls when the WAL is not broken and need says the active segment
// must go; a failed roll is counted and retried at the next trigger.
func (w *WAL) rollIf(need func(*activeSegment) bool) {
	if err := w.roll(need); err != nil {
		w.stats.rollErrors.Add(1)
	}
}

func (w *WAL) segmentFull(s *activeSegment) bool { return s.meta.size >= w.opts.SegmentSize }

// runner is one of the extra sync runners of SyncerCommit mode: it commits
// when kicked while the others are busy.
func (w *WAL) runner() {
	for {
		select {
		case <-w.kick:
			w.commitWhenFree()
		case <-w.quit:
			return
		}
	}
}

// commitWhenFree waits for a free sync slot and commits.
func (w *WAL) commitWhenFree() {
	w.smu.Lock()
	for !w.gc.reserve() {
		w.scond.Wait()
	}
	w.smu.Unlock()
	w.commit()
}

// commit writes the buffered records to the active segment (one Write,
// under the order lock), syncs them and acknowledges them in order. The
// caller holds a slot of w.gc; commit gives it back.
func (w *WAL) commit() {
	w.wmu.Lock()
	w.smu.Lock()
	skip := w.isBroken || w.sealed
	w.smu.Unlock()
	var b *batch
	var upTo uint64
	if !skip {
		w.amu.Lock()
		b = w.buf
		upTo = w.nextSeq - 1
		if len(b.data) > 0 {
			for _, rs := range b.regions {
				b.maxes = append(b.maxes, regionSeq{rs.name, rs.max})
			}
			w.epoch++
			w.spare.epoch = w.epoch
			w.buf = w.spare
			w.spare = nil
		} else {
			b = nil
		}
		w.amu.Unlock()
	}
	var err error
	var good int64
	var written int
	if b == nil {
		// Nothing to write. Sequence ids up to upTo without a record
		// (SKIP_WAL, AdvanceSeq) are durable once the commits before them
		// are: an empty commit in the same order says so.
		if skip || upTo <= w.stagedTo {
			w.wmu.Unlock()
			w.smu.Lock()
			w.gc.release()
			w.scond.Broadcast()
			w.smu.Unlock()
			return
		}
	}
	s := w.seg
	if b != nil {
		good = s.meta.size
		synced := s.synced.Load()
		checkCommitMarker(s.marked, synced, good)
		s.marked = synced
		putCommitMarker(b.data, synced)
		var n int
		n, err = s.f.Write(b.data)
		written = n
		s.meta.size += int64(n)
		w.stats.bytesWritten.Add(uint64(n))
		for _, m := range b.maxes {
			s.meta.regions[m.name] = m.seq
			s.meta.maxSeq = max(s.meta.maxSeq, m.seq)
		}
		b.reset()
		w.spare = b
		if n < zeroSmallCommit && s.zeroable() && s.zeroedTo < w.opts.SegmentSize && s.zeroedTo-s.meta.size < zeroAhead/2 {
			kick(w.zkick)
		}
	}
	w.stagedTo = upTo
	end := s.meta.size
	full := w.segmentFull(s)
	w.smu.Lock()
	t := w.gc.issue()
	w.syncing++
	if w.delay != nil {
		w.delay.staged(upTo)
	}
	w.smu.Unlock()
	w.wmu.Unlock()

	if err == nil && b != nil {
		start := time.Now()
		err = s.f.Sync()
		took := time.Since(start)
		w.stats.observeSync(took)
		slowCommit(w.opts.Slow, w.opts.SlowCommit, SlowCommit{Log: s.meta.path, Bytes: written, Took: took, Err: err})
	}

	w.smu.Lock()
	failed := w.completeLocked(t, syncedTo{upTo: upTo, good: good, seg: s, end: end}, err)
	w.gc.release()
	if !failed {
		w.syncing--
	}
	w.scond.Broadcast()
	w.smu.Unlock()
	if failed {
		w.dropAfterFailure()
	}
	if full {
		// The committer that filled the segment rolls it before its writer
		// returns (HBase's roll also holds writes back).
		w.rollIf(w.segmentFull)
	}
}

// completeLocked records how commit t ended (smu held) and acknowledges, in
// order, what is now durable. It reports whether a failure came into order:
// the WAL is then broken (isBroken, serr) and the caller must finish with
// dropAfterFailure.
func (w *WAL) completeLocked(t uint64, r syncedTo, err error) (failed bool) {
	w.gc.complete(t, r, err, func(r syncedTo, err error) {
		if err != nil {
			failed = true
			w.isBroken = true
			w.goodOff = r.good
			w.serr = fmt.Errorf("%w: %w", ErrBroken, err)
			w.stats.failures.Add(1)
			return
		}
		r.seg.synced.Store(r.end) // in staging order: it only grows
		if r.upTo > w.synced {
			checkDurable(w.synced, r.upTo, w.lastAssigned.Load())
			w.synced = r.upTo
			w.stats.syncedSeq.Store(r.upTo)
		}
	})
	return failed
}

// dropAfterFailure finishes breaking the WAL after a failed write or sync:
// appends are refused until Roll, buffered records are dropped, and every
// sequence id not yet durable is lost (its waiters get the error). The
// failed commit still counts in syncing, so a Roll waits for this.
func (w *WAL) dropAfterFailure() {
	w.smu.Lock()
	err := w.serr
	w.smu.Unlock()
	w.amu.Lock()
	w.broken = err
	w.brokenErr.Store(&err)
	lostTo := w.nextSeq - 1
	w.buf.reset()
	w.epoch++
	w.buf.epoch = w.epoch // regions of the dropped records must be re-added
	w.amu.Unlock()
	w.smu.Lock()
	if lostTo > w.synced {
		w.lost = append(w.lost, seqRange{w.synced + 1, lostTo})
	}
	w.syncing--
	w.scond.Broadcast()
	w.smu.Unlock()
}

// quiesce takes the order lock and waits until no commit is under way; it
// returns whether the WAL is broken, the good size of the failed segment and
// whether the WAL is sealed (closed).
func (w *WAL) quiesce() (broken bool, goodOff int64, sealed bool) {
	w.wmu.Lock()
	w.smu.Lock()
	defer w.smu.Unlock()
	for w.syncing > 0 {
		w.scond.Wait()
	}
	return w.isBroken, w.goodOff, w.sealed
}

// roll switches to a new segment once no commit is under way. With a need
// function it rolls only a healthy WAL whose active segment need selects
// (another committer may have rolled first); Roll's, with none, always rolls
// and is the way back after a failure.
func (w *WAL) roll(need func(*activeSegment) bool) error {
	broken, goodOff, sealed := w.quiesce()
	defer w.wmu.Unlock()
	if sealed {
		// Closed meanwhile (a committer that filled the segment rolls after it let go of its
		// sync slot, and Close may seal first): no new segment after the last one.
		if need != nil {
			return nil
		}
		return ErrClosed
	}
	if need != nil && (broken || !need(w.seg)) {
		return nil
	}
	old := w.seg
	if broken && !old.closed {
		old.f.Close()
		old.closed = true
	}
	if broken {
		// Cut the failed segment back to its last good record so it
		// stays a clean, non-last segment.
		if err := w.fs.Truncate(old.meta.path, goodOff); err != nil {
			return fmt.Errorf("wal: truncate %s to %d after a failed write: %w", old.meta.path, goodOff, err)
		}
		old.meta.size = goodOff
		old.preallocated = false
	}
	// The old segment stops being the last one: it must not end in zeros.
	if err := w.trimSegment(old); err != nil {
		return err
	}
	seg, err := w.createSegment(old.meta.num + 1)
	if err != nil {
		return err
	}
	if !old.closed {
		old.f.Close() // its data is synced; a close error changes nothing
		old.closed = true
	}
	w.segs = append(w.segs, old.meta)
	w.seg = seg
	kick(w.zkick)
	w.stats.rolls.Add(1)
	w.stats.segments.Store(int64(len(w.segs) + 1))
	if broken {
		w.amu.Lock()
		w.broken = nil
		w.brokenErr.Store(nil)
		w.amu.Unlock()
		w.smu.Lock()
		w.isBroken = false
		w.serr = nil
		w.gc.reset()
		w.smu.Unlock()
	}
	return w.archive()
}

// archive moves closed segments whose regions have all flushed past their
// edits to the archive directory (or deletes them).
func (w *WAL) archive() error {
	var firstErr error
	moved := false
	kept := w.segs[:0]
	for _, m := range w.segs {
		if firstErr == nil && w.archivable(m) {
			var err error
			if w.opts.ArchiveDir != "" {
				err = w.fs.Rename(m.path, path.Join(w.opts.ArchiveDir, path.Base(m.path)))
			} else {
				err = w.fs.Remove(m.path)
			}
			if err == nil {
				moved = true
				w.stats.archived.Add(1)
				continue
			}
			firstErr = fmt.Errorf("wal: archive %s: %w", m.path, err)
		}
		kept = append(kept, m)
	}
	clear(w.segs[len(kept):])
	w.segs = kept
	w.stats.segments.Store(int64(len(w.segs) + 1))
	if moved {
		if err := w.fs.SyncDir(w.opts.Dir); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("wal: %w", err)
		}
		if w.opts.ArchiveDir != "" {
			if err := w.fs.SyncDir(w.opts.ArchiveDir); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("wal: %w", err)
			}
		}
	}
	return firstErr
}

func (w *WAL) archivable(m *segmentMeta) bool {
	if w.opts.Archive != nil && m.num > w.archived.through.Load() {
		return false
	}
	for r, seq := range m.regions {
		if w.flushed[r] < seq {
			return false
		}
	}
	return true
}

// finish runs on the syncer when the WAL closes: the final commit has run.
func (w *WAL) finish() error {
	broken, _, _ := w.quiesce()
	defer w.wmu.Unlock()
	w.smu.Lock()
	w.sealed = true
	err := w.serr
	if !broken {
		err = nil
	}
	w.smu.Unlock()
	if !broken && !w.seg.closed {
		if merr := w.closingMarker(w.seg); merr != nil && err == nil {
			err = merr
		}
		if terr := w.trimSegment(w.seg); terr != nil && err == nil {
			err = terr
		}
	}
	if !w.seg.closed {
		if cerr := w.seg.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("wal: close %s: %w", w.seg.meta.path, cerr)
		}
		w.seg.closed = true
	}
	w.smu.Lock()
	w.stopped = true
	w.scond.Broadcast()
	w.smu.Unlock()
	return err
}

// closingMarker ends a segment that holds commits, when the WAL closes with nothing under way,
// with a commit marker of its own, synced: it says every commit before it was synced, so that
// damage to the last commits is corruption on replay, not a torn tail no later commit could
// contradict (docs/storage-format.md, "Replay, torn tails, corruption"). Under wmu.
func (w *WAL) closingMarker(s *activeSegment) error {
	if s.meta.size <= headerSize {
		return nil
	}
	synced := s.synced.Load()
	checkCommitMarker(s.marked, synced, s.meta.size)
	s.marked = synced
	var rec [commitMarkerSize]byte
	putCommitMarker(rec[:], synced)
	n, err := s.f.Write(rec[:])
	s.meta.size += int64(n)
	w.stats.bytesWritten.Add(uint64(n))
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("wal: close %s: write its closing commit marker: %w", s.meta.path, err)
	}
	return nil
}

// SegmentInfo describes a live segment.
type SegmentInfo struct {
	Path   string
	Size   int64
	MaxSeq uint64
	// Regions maps each region with edits in the segment to its highest
	// sequence id there.
	Regions map[string]uint64
	Active  bool
}

// Segments lists the live segments, oldest first (the last is active).
func (w *WAL) Segments() ([]SegmentInfo, error) {
	var out []SegmentInfo
	err := w.onSyncer(func() {
		for _, m := range append(slices.Clone(w.segs), w.seg.meta) {
			out = append(out, SegmentInfo{Path: m.path, Size: m.size, MaxSeq: m.maxSeq, Regions: maps(m.regions), Active: m == w.seg.meta})
		}
	})
	return out, err
}

// Backlog returns the number of closed segments kept (with edits some region has not flushed)
// and the regions whose unflushed edits keep the oldest closed segment alive: flushing them lets
// it be archived (HBase forces such flushes when there are too many WAL files).
func (w *WAL) Backlog() (units int, pinning []string) {
	_ = w.onSyncer(func() {
		units = len(w.segs)
		if units == 0 {
			return
		}
		for r, seq := range w.segs[0].regions {
			if w.flushed[r] < seq {
				pinning = append(pinning, r)
			}
		}
		slices.Sort(pinning)
	})
	return units, pinning
}

// Archive copies the closed segments not archived yet to opts.Archive, after rolling the active
// segment if it holds edits (so everything acknowledged before the call is archived by its end),
// then deletes the segments whose regions have flushed. It returns how many segments it
// archived. Nothing is deleted before it is archived, so a failing archive makes the WAL keep
// its segments (Backlog grows) until it works again.
func (w *WAL) Archive(ctx context.Context) (int, error) {
	t := w.opts.Archive
	if t == nil {
		return 0, errors.New("wal: the log has no archive")
	}
	w.archived.round.Lock()
	defer w.archived.round.Unlock()
	if err := w.archived.begin(ctx, t); err != nil {
		return 0, err
	}
	segs, err := w.Segments()
	if err != nil {
		return 0, err
	}
	// Not a broken WAL: its Roll is the region server's way back (it takes a new WAL instead).
	if a := segs[len(segs)-1]; a.Active && a.MaxSeq > 0 && w.Err() == nil {
		if err := w.Roll(); err != nil {
			return 0, err
		}
		if segs, err = w.Segments(); err != nil {
			return 0, err
		}
	}
	done := 0
	var p archivePack
	for _, sg := range segs {
		n, ok := parseSegmentName(path.Base(sg.Path))
		if sg.Active || !ok || n <= w.archived.through.Load() {
			continue
		}
		recs, err := segmentRecords(w.fs, sg.Path, false, nil, nil) // closed: trimmed and synced at its roll
		if err != nil {
			return done, err
		}
		p.add(n, recs)
		done++
		if p.full() {
			if err := w.archived.put(ctx, t, &p); err != nil {
				return done, err
			}
		}
	}
	if err := w.archived.put(ctx, t, &p); err != nil {
		return done, err
	}
	return done, w.request(&request{kind: reqFlushed})
}

// onSyncer runs fn on the syncer goroutine, which owns the segment state.
func (w *WAL) onSyncer(fn func()) error { return w.request(&request{kind: reqInspect, fn: fn}) }

func maps(m map[string]uint64) map[string]uint64 {
	c := make(map[string]uint64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Stats are counters of a WAL.
type Stats struct {
	Appends          uint64 // records appended
	AppendedBytes    uint64 // bytes of appended records
	BytesWritten     uint64 // bytes written to segments (headers excluded)
	Syncs            uint64 // syncs of segment data
	SyncNanos        uint64 // total time spent in those syncs
	Rolls            uint64
	RollErrors       uint64
	Failures         uint64 // failed writes or syncs
	SegmentsArchived uint64
	Segments         int64  // live segments, including the active one
	LastSeq          uint64 // highest sequence id assigned
	SyncedSeq        uint64 // every record up to this sequence id is durable
	ZeroedBytes      uint64 // zeros written ahead of the log (unless Options.NoZeroAhead)
	ZeroErrors       uint64 // failed writes of zeros (each stops the zeroer for its segment)
	// CommitsDelayed counts commits whose leader waited for more writers (Options.CommitDelay)
	// and saw them come; CommitDelaysExpired those whose delay ran out first.
	CommitsDelayed, CommitDelaysExpired uint64
	// SyncLatency counts syncs by latency: bucket i holds syncs that took
	// less than SyncLatencyBound(i) (the last bucket: the rest).
	SyncLatency [NumLatencyBuckets]uint64
}

// NumLatencyBuckets is the number of sync latency buckets.
const NumLatencyBuckets = 16

// SyncLatencyBound returns the exclusive upper bound of latency bucket i:
// 16µs << i (16µs ... 262ms); the last bucket has no bound.
func SyncLatencyBound(i int) time.Duration { return 16 * time.Microsecond << i }

type counters struct {
	appends, appendedBytes, bytesWritten, syncs, syncNanos atomic.Uint64
	rolls, rollErrors, failures, archived, syncedSeq       atomic.Uint64
	zeroedBytes, zeroErrors                                atomic.Uint64
	segments                                               atomic.Int64
	latency                                                [NumLatencyBuckets]atomic.Uint64
}

func (c *counters) observeSync(d time.Duration) {
	c.syncs.Add(1)
	c.syncNanos.Add(uint64(d))
	us := uint64(d / (16 * time.Microsecond))
	i := bits.Len64(us)
	if i >= NumLatencyBuckets {
		i = NumLatencyBuckets - 1
	}
	c.latency[i].Add(1)
}

// Err is the error that broke the WAL (a failed write or sync: appends are refused until a Roll
// succeeds), or nil while it takes appends.
func (w *WAL) Err() error {
	if p := w.brokenErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns the current counters. It takes no locks.
func (w *WAL) Stats() Stats {
	s := Stats{
		Appends:          w.stats.appends.Load(),
		AppendedBytes:    w.stats.appendedBytes.Load(),
		BytesWritten:     w.stats.bytesWritten.Load(),
		Syncs:            w.stats.syncs.Load(),
		SyncNanos:        w.stats.syncNanos.Load(),
		Rolls:            w.stats.rolls.Load(),
		RollErrors:       w.stats.rollErrors.Load(),
		Failures:         w.stats.failures.Load(),
		SegmentsArchived: w.stats.archived.Load(),
		Segments:         w.stats.segments.Load(),
		LastSeq:          w.lastAssigned.Load(),
		SyncedSeq:        w.stats.syncedSeq.Load(),
		ZeroedBytes:      w.stats.zeroedBytes.Load(),
		ZeroErrors:       w.stats.zeroErrors.Load(),
	}
	if w.delay != nil {
		s.CommitsDelayed, s.CommitDelaysExpired = w.delay.joined.Load(), w.delay.expired.Load()
	}
	for i := range s.SyncLatency {
		s.SyncLatency[i] = w.stats.latency[i].Load()
	}
	return s
}
