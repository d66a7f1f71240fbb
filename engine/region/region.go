package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// Region is an open region: a key range of a table with a store per column
// family (a shared memstore and per-family store files), MVCC, row locks,
// and the read, write, flush, compaction and split machinery. All methods
// are safe for concurrent use.
type Region struct {
	info     Info
	name     string
	dir      string
	table    TableDescriptor
	fams     []Family // sorted by name
	famNames [][]byte
	store    regionFiles // where the region's files are (FS or Bucket)
	wal      wal.Log
	cfg      Config
	log      *slog.Logger
	// On a bucket (nil on a directory tree): manifestRead is the manifest read started with the
	// .regioninfo's (loadFiles takes it), recoveredRead the listing of the recovered edits started
	// with the store files' opens (replay takes it); each is a round trip not waited for in turn.
	manifestRead  chan manifestRead
	recoveredRead chan recoveredRead
	// compaction is cfg.Compaction, which changes while the region is open (SetCompaction).
	compaction atomic.Pointer[CompactionConfig]
	// observer is the table's functions (SetObserver); nil without.
	observer atomic.Pointer[observed]
	// inMem is the compacting memstore's state (a primary with a BASIC or EAGER family).
	inMem inMemoryCompaction

	// mem: one memstore per family (memstores.go).
	mem   memstores
	mvcc  *mvcc
	locks *rowLocks

	// updatesLock: writers hold it shared from the memstore reservation to
	// the last insert; a flush takes it exclusively to snapshot.
	updatesLock sync.RWMutex
	// viewMu: scanners open under it shared; flush and compaction commits
	// swap the file set and clear the snapshot under it exclusively.
	viewMu  sync.RWMutex
	files   atomic.Pointer[fileSet]
	filesMu sync.Mutex // manifest changes
	// filesReleased (under filesMu): the region let go of its files (closed or aborted); no
	// manifest may be committed or applied after it, least of all one made from the empty set a
	// flush or compaction racing an Abort would find (it would name only its own new files).
	filesReleased bool
	man           *manifest // under filesMu
	manVersion    string    // under filesMu: the manifest's version on a bucket (its ETag)
	// unsureManifests (under filesMu): the bodies of the manifest commits since the last known
	// version whose outcome is not known (the store's answer was lost, or another attempt was
	// under way); nil when the last commit's outcome is known.
	unsureManifests [][]byte

	flushMu sync.Mutex
	// pending is a flush whose snapshots were taken and not committed (under flushMu): the next
	// flush retries it before anything else.
	pending *pendingFlush
	// handoffClose: the close under way is a move's (CloseForMove): its flush may hand the
	// memstore off in the manifest.
	handoffClose atomic.Bool
	// handoffHeld: the manifest holds handed-off edits (a flush is due for them).
	handoffHeld atomic.Bool
	compactMu   sync.Mutex

	// closed: the region takes no more writes and its background work stops (a close or an
	// abort began). readsClosed: it serves no more reads either — a close sets it once its last
	// flush is done, so gets and scans are answered here all through the flush (a moving region
	// is unreadable only while its destination opens it); an abort sets it at once.
	closed atomic.Bool
	// abortRetries: an Abort came while a close was under way: the close stops flushing again
	// against an unavailable object store (its server dropped the region).
	abortRetries atomic.Bool
	readsClosed  atomic.Bool
	// closeDone is closed once the close or abort that set closed finished, closeErr saying how:
	// nil for a close that flushed, ErrAborted for an abort, else the close's flush error. A
	// second closer waits for it and answers the same, so nobody takes a close still flushing,
	// or an abort, for a flushed close.
	closeDone chan struct{}
	closeErr  error
	// labelsInUse: cells may carry visibility tags (SetLabelsInUse).
	labelsInUse atomic.Bool
	broken      atomic.Pointer[error]

	nonces *nonceTable

	// replica: a read replica (OpenReplica) with its replication state;
	// repl: a primary's change queue (EnableReplication).
	replica bool
	// replayFlushes counts the flushes replay made on its way (the open then records every
	// replayed edit flushed).
	replayFlushes int
	rs            *replicaState
	repl          atomic.Pointer[replQueue]

	blockMu   sync.Mutex
	blockCond *sync.Cond
	flushGen  atomic.Uint64

	flushRequested   atomic.Bool
	blockedWriters   atomic.Int32 // writers waiting in reserve for memstore room
	compactRequested atomic.Bool
	// compactionsHeld: the region closes soon (HoldCompactions); no compaction starts or goes on.
	compactionsHeld atomic.Bool
	bgReq           chan bgRequest
	bgDone          chan struct{}
	bgWG            sync.WaitGroup

	metrics Metrics
}

type bgRequest struct {
	flush, compact, major bool
}

// fileSet is an immutable snapshot of the live store files per family.
type fileSet struct {
	byFamily [][]*storeFile
}

func (s *fileSet) count() (n int, size int64) {
	for _, fs := range s.byFamily {
		for _, f := range fs {
			n++
			size += f.size
		}
	}
	return
}

// Info returns the region's descriptor.
func (r *Region) Info() Info { return r.info }

// Name returns the encoded region name.
func (r *Region) Name() string { return r.name }

// Table returns the table descriptor.
func (r *Region) Table() TableDescriptor { return r.table }

// Create writes a new region's directory and .regioninfo (idempotent for
// the same info).
func Create(fsys storage.FS, table TableDescriptor, info Info) error {
	return create(filesOf(fsys, nil), table, info)
}

// CreateOnBucket writes a new region's .regioninfo to a bucket (idempotent for the same info).
func CreateOnBucket(b storage.Bucket, table TableDescriptor, info Info) error {
	return create(filesOf(nil, b), table, info)
}

func create(store regionFiles, table TableDescriptor, info Info) error {
	return createDir(store, table, info, store.writeFile)
}

// createDir is create with the .regioninfo written by write.
func createDir(store regionFiles, table TableDescriptor, info Info, write func(p string, b []byte) error) error {
	if err := table.Validate(); err != nil {
		return err
	}
	if info.Namespace != table.Namespace || info.Table != table.Name {
		return fmt.Errorf("%w: region %s does not belong to table %s:%s", ErrInvalid, info.String(), table.Namespace, table.Name)
	}
	if len(info.EndKey) > 0 && bytes.Compare(info.StartKey, info.EndKey) >= 0 {
		return fmt.Errorf("%w: region start key %q not below end key %q", ErrInvalid, info.StartKey, info.EndKey)
	}
	dir := info.Dir()
	b, err := encodeChecked(regionInfoFile{Info: info, Table: table})
	if err != nil {
		return err
	}
	p := path.Join(dir, ".regioninfo")
	if cur, err := store.readFile(p); err == nil && bytes.Equal(cur, b) {
		// Opened before with this descriptor (a move, a restart): nothing to write. On a bucket
		// a read costs the region's open far less than a PUT, during which nobody serves it.
		return nil
	}
	dirs := []string{dir}
	for _, f := range table.Families {
		dirs = append(dirs, path.Join(dir, f.Name))
	}
	if err := store.mkdirs(dirs...); err != nil {
		return err
	}
	if err := write(p, b); err != nil {
		return err
	}
	if fsys := store.fs(); fsys != nil {
		// Make the region directory's entry durable in the table directory.
		return fsys.SyncDir(path.Dir(dir))
	}
	return nil
}

// regionInfoFor reads a region's .regioninfo; given the table's descriptor, it writes it with that
// instead when the file does not hold exactly that (create: a new region — its directory created —
// or a reopen after ModifyTable). Open calls it while the manifest is read, so a region that has
// it costs the open no round trip of its own.
func regionInfoFor(store regionFiles, info Info, want *TableDescriptor) (Info, TableDescriptor, error) {
	if want == nil {
		return readRegionInfo(store, info.Dir())
	}
	if err := create(store, *want, info); err != nil {
		return Info{}, TableDescriptor{}, err
	}
	return info, *want, nil
}

// ReadRegionInfo reads a region's .regioninfo.
func ReadRegionInfo(fsys storage.FS, dir string) (Info, TableDescriptor, error) {
	return readRegionInfo(filesOf(fsys, nil), dir)
}

func readRegionInfo(store regionFiles, dir string) (Info, TableDescriptor, error) {
	b, err := store.readFile(path.Join(dir, ".regioninfo"))
	if err != nil {
		return Info{}, TableDescriptor{}, err
	}
	var ri regionInfoFile
	if err := decodeChecked(b, &ri); err != nil {
		return Info{}, TableDescriptor{}, fmt.Errorf("%w: %s/.regioninfo: %w", ErrCorrupt, dir, err)
	}
	return ri.Info, ri.Table, nil
}

// Open opens a region created with Create: it reads the manifest, opens
// the store files, archives leftovers of interrupted flushes and
// compactions, replays edits newer than the flushed sequence id (from
// recovered.edits and cfg.ReplayWALDirs), flushes them, and advances the
// WAL's sequence ids past everything it found. The edits a move's close
// handed off in the manifest are replayed and not flushed (handoff.go).
func Open(cfg Config, info Info) (*Region, error) {
	// What the open did not take of what was prepared is released (also when it fails).
	defer cfg.Prepared.Release()
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	r, err := newRegion(cfg, info, false)
	if err != nil {
		return nil, err
	}
	r.cfg.Prepared = nil
	if r.store.fs() == nil {
		// Nothing writes recovered edits while the region opens (the master's log split is done
		// before it orders the open): they can be listed before the store files are open.
		r.recoveredRead = make(chan recoveredRead, 1)
		go func() {
			keys, err := wal.ListRecoveredEdits(context.Background(), r.cfg.Bucket, r.recoveredEditsDir())
			r.recoveredRead <- recoveredRead{keys, err}
		}()
	}
	if err := r.loadFiles(cfg.Prepared); err != nil {
		r.releaseAll()
		return nil, err
	}
	r.mvcc = newMVCC(r.man.MaxSeq)
	maxSeq, replayed, handedOff, recovered, err := r.replay()
	if err != nil {
		r.releaseAll()
		return nil, err
	}
	replayMax := maxSeq
	maxSeq = max(maxSeq, r.man.MaxSeq, r.man.FlushedSeq)
	r.wal.AdvanceSeq(maxSeq)
	r.mvcc.advanceTo(maxSeq)
	// Edits a move's close handed off in the manifest stay there until a flush takes them: the
	// region serves without flushing them first. Edits recovered from a WAL are flushed now, so
	// that their recovered edits can go.
	if replayed > 0 || r.replayFlushes > 0 {
		if _, err := r.Flush(); err != nil {
			r.releaseAll()
			return nil, fmt.Errorf("region %s: flushing replayed edits: %w", r.name, err)
		}
	}
	// The files of families the table no longer has (an alter dropped them) leave the manifest
	// now and go to the archive, as HBase deletes a dropped family's directory: else re-adding
	// the family would bring its old cells back, and a merge or a snapshot would find files of a
	// family the table does not have.
	dropped := r.droppedFamilies()
	if r.replayFlushes > 0 || len(dropped) > 0 {
		// Every replayed edit is in the files now (replayFlush left the flushed sequence ids
		// below what it wrote, and the flush above took only what it found in memory). The
		// commit writes the families of r.fams only.
		if err := r.commitFiles(nil, nil, -1, false, false, func(m *manifest) {
			if r.replayFlushes > 0 {
				m.FlushedSeq = max(m.FlushedSeq, replayMax)
				m.MaxSeq = max(m.MaxSeq, replayMax)
			}
			for f, v := range m.FamilyFlushedSeq {
				if _, gone := dropped[f]; gone || v <= m.FlushedSeq {
					delete(m.FamilyFlushedSeq, f)
				}
			}
		}, nil); err != nil {
			r.releaseAll()
			return nil, fmt.Errorf("region %s: recording the replayed edits flushed and the dropped families gone: %w", r.name, err)
		}
		for fam, files := range dropped {
			for _, mf := range files {
				r.archivePath(path.Join(r.dir, fam, mf.Name), fam, mf.Name)
			}
			r.log.Info("archived the files of a dropped family", "family", fam, "files", len(files))
		}
	}
	if err := r.removeRecoveredEdits(recovered); err != nil {
		r.releaseAll()
		return nil, err
	}
	r.updateFileMetrics()
	r.bgReq = make(chan bgRequest, 4)
	r.bgDone = make(chan struct{})
	if cfg.Requester == nil {
		r.bgWG.Add(1)
		go r.background()
	}
	r.startInMemoryCompaction()
	if handedOff > 0 && replayed == 0 {
		// Flushed soon, not at once: the moves around this one are done first.
		time.AfterFunc(handoffFlushAfter, r.requestFlush)
	}
	if r.HasReferences() {
		// A split daughter: rewrite its halves of the parent's files into its own, so the
		// parent's files can go and the daughter can split in turn.
		r.requestCompaction()
	}
	r.log.Debug("region opened", "files", len(r.files.Load().byFamily), "replayed", replayed, "handed_off", handedOff, "seq", maxSeq)
	return r, nil
}

// OpenReplica opens a read replica of a region over the primary's
// directory: the store files of its manifest and an empty memstore, which
// ApplyReplication fills. It writes nothing: no replay, no leftovers
// archived, no flushes or compactions; writes fail with ErrReadOnlyReplica.
// cfg.WAL is not needed.
func OpenReplica(cfg Config, info Info) (*Region, error) {
	defer cfg.Prepared.Release() // a primary's: not used
	if (cfg.FS == nil && cfg.Bucket == nil) || cfg.Pool == nil {
		return nil, errors.New("region: Config needs FS or Bucket, and Pool")
	}
	if cfg.WAL == nil {
		cfg.WAL = &wal.WAL{} // never used by a replica; satisfies fill
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	r, err := newRegion(cfg, info, true)
	if err != nil {
		return nil, err
	}
	if err := r.loadFiles(nil); err != nil {
		r.releaseAll()
		return nil, err
	}
	r.mvcc = newMVCC(max(r.man.MaxSeq, r.man.FlushedSeq))
	r.updateFileMetrics()
	r.bgDone = make(chan struct{})
	return r, nil
}

// newRegion reads a region's .regioninfo and sets up what Open and
// OpenReplica share: the Region with its families and an empty memstore.
func newRegion(cfg Config, info Info, replica bool) (*Region, error) {
	r, err := regionShell(cfg, info, replica)
	if err != nil {
		return nil, err
	}
	ms, err := newMemstores(cfg.Pool, len(r.fams))
	if err != nil {
		return nil, err
	}
	r.mem = ms
	return r, nil
}

// regionShell is newRegion without the memstore (what Prepare needs to open store files).
func regionShell(cfg Config, info Info, replica bool) (*Region, error) {
	dir := info.Dir()
	store := filesOf(cfg.FS, cfg.Bucket)
	if bf, ok := store.(bucketFiles); ok {
		bf.cache = cfg.FileCache
		store = bf
	}
	var manifestCh chan manifestRead
	if store.fs() == nil {
		// On a bucket: read the manifest while the .regioninfo is read.
		manifestCh = make(chan manifestRead, 1)
		go func() {
			m, version, _, err := readManifest(store, dir)
			manifestCh <- manifestRead{m, version, err}
		}()
	}
	var onDisk Info
	var table TableDescriptor
	var err error
	if replica && cfg.Descriptor != nil {
		// A read replica takes the table's descriptor from its open order, not from the
		// primary's .regioninfo, which an alter's reopen of the primary may not have rewritten
		// yet: it would serve the old families and settings until its next open. It writes
		// nothing.
		onDisk, _, err = readRegionInfo(store, dir)
		table = *cfg.Descriptor
	} else {
		onDisk, table, err = regionInfoFor(store, info, cfg.Descriptor)
	}
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", info.EncodedName(), err)
	}
	if onDisk.EncodedName() != info.EncodedName() {
		return nil, fmt.Errorf("%w: %s/.regioninfo describes region %s", ErrCorrupt, dir, onDisk.String())
	}
	if err := table.Validate(); err != nil {
		return nil, err
	}
	r := &Region{
		info:    onDisk,
		name:    onDisk.EncodedName(),
		dir:     dir,
		table:   table,
		fams:    sortedFamilies(table.Families),
		store:   store,
		wal:     cfg.WAL,
		cfg:     cfg,
		log:     cfg.Logger.With("region", onDisk.EncodedName()),
		locks:   newRowLocks(),
		replica: replica,

		closeDone:    make(chan struct{}),
		manifestRead: manifestCh,
	}
	cc := cfg.Compaction
	r.compaction.Store(&cc)
	if replica {
		r.wal, r.rs = nil, &replicaState{}
		r.log = r.log.With("replica", true)
	}
	r.blockCond = sync.NewCond(&r.blockMu)
	r.nonces = newNonceTable(cfg.NonceTTL, cfg.NonceTableBytes)
	for _, f := range r.fams {
		r.famNames = append(r.famNames, []byte(f.Name))
	}
	return r, nil
}

// loadFiles reads the manifest, opens its files (taking those p prepared) and archives the others
// (a replica leaves them: they may be the primary's flush in progress).
func (r *Region) loadFiles(p *Prepared) error {
	m, err := r.takeManifest()
	if err != nil {
		return err
	}
	r.handoffHeld.Store(len(m.Handoff) > 0)
	set := &fileSet{byFamily: make([][]*storeFile, len(r.fams))}
	r.files.Store(set)
	if !r.replica {
		r.store.cleanTemp(r.dir)
		for _, f := range r.fams {
			if err := r.store.mkdirs(path.Join(r.dir, f.Name)); err != nil {
				return err
			}
		}
	}
	leftovers, err := r.openFiles(m, set, !r.replica, p)
	if err != nil {
		return err
	}
	for i, f := range r.fams {
		listed := map[string]bool{}
		for _, mf := range m.Families[f.Name] {
			listed[mf.Name] = true
		}
		for _, n := range leftovers[i] {
			if !listed[n] {
				// Left over by an interrupted flush or compaction.
				r.archivePath(path.Join(r.dir, f.Name, n), f.Name, n)
			}
		}
	}
	return nil
}

// droppedFamilies returns the manifest's files of families the region's descriptor does not have.
func (r *Region) droppedFamilies() map[string][]manifestFile {
	var dropped map[string][]manifestFile
	for fam, files := range r.man.Families {
		if r.familyIndex([]byte(fam)) >= 0 {
			continue
		}
		if dropped == nil {
			dropped = map[string][]manifestFile{}
		}
		dropped[fam] = files
	}
	return dropped
}

// takeManifest reads the region's manifest (or takes the read newRegion started) into r.man.
func (r *Region) takeManifest() (*manifest, error) {
	var read manifestRead
	if r.manifestRead != nil {
		read = <-r.manifestRead
		r.manifestRead = nil // read once
	} else {
		read.m, read.version, _, read.err = readManifest(r.store, r.dir)
	}
	if read.err != nil {
		return nil, fmt.Errorf("region %s: %w", r.name, read.err)
	}
	r.man, r.manVersion = read.m, read.version
	return read.m, nil
}

// openFiles opens the store files m names into set (in the manifest's order; what opened is there
// on an error too, for the caller to release) and, with list, lists the family directories
// meanwhile: the names each held. Files p opened ahead are taken from it, and its listings stand
// in for the lists.
func (r *Region) openFiles(m *manifest, set *fileSet, list bool, p *Prepared) ([][]string, error) {
	// The store files open at once, and a primary lists its family directories for leftovers
	// meanwhile: on a bucket each is a few round trips to the store, and nobody serves the
	// region until they are all done (a move, a restart, a failover).
	type opening struct {
		fam int
		mf  manifestFile
		sf  *storeFile // once open
	}
	var jobs []opening
	for i, f := range r.fams {
		for _, mf := range m.Families[f.Name] {
			jobs = append(jobs, opening{fam: i, mf: mf, sf: p.take(r, i, mf)})
		}
	}
	leftovers := make([][]string, len(r.fams))
	// The group's context ends at the first error: the files not opened yet are skipped.
	g, failed := errgroup.WithContext(context.Background())
	g.SetLimit(openParallelism)
	for j := range jobs {
		if jobs[j].sf != nil {
			continue
		}
		g.Go(func() error {
			if failed.Err() != nil {
				return nil
			}
			sf, err := r.openStoreFile(jobs[j].fam, jobs[j].mf, nil)
			jobs[j].sf = sf
			return err
		})
	}
	if list {
		for i, f := range r.fams {
			if names, ok := p.listing(f.Name); ok {
				leftovers[i] = names
				continue
			}
			g.Go(func() error {
				names, err := r.store.list(path.Join(r.dir, f.Name))
				leftovers[i] = names
				return err
			})
		}
	}
	err := g.Wait()
	for _, j := range jobs { // in the manifest's order; what opened is released on an error
		if j.sf != nil {
			set.byFamily[j.fam] = append(set.byFamily[j.fam], j.sf)
		}
	}
	return leftovers, err
}

// manifestRead is the result of reading a region's manifest (readManifest).
type manifestRead struct {
	m       *manifest
	version string
	err     error
}

// recoveredRead is the result of listing a region's recovered edits on a bucket.
type recoveredRead struct {
	keys []string
	err  error
}

// openParallelism bounds the store files a region opens at once.
const openParallelism = 8

func (r *Region) recoveredEditsDir() string { return path.Join(r.dir, "recovered.edits") }

// replay applies edits newer than the flushed sequence id to the memstore: of an edit newer than
// the region's, the cells of the families whose own flushed sequence id is below it (a
// per-family flush left the others in the files).
func (r *Region) replay() (maxSeq uint64, n, handedOff int, recovered []string, err error) {
	// Read from the start: edits already flushed are not applied again,
	// but their nonces are remembered so that a retry after a reopen is
	// still recognised (as long as the WAL still holds the edit).
	from := uint64(0)
	flushed := r.man.FlushedSeq
	famFlushed := make([]uint64, len(r.fams))
	for i, f := range r.fams {
		famFlushed[i] = r.man.familyFlushed(f.Name)
	}
	filter := func(region []byte) bool { return string(region) == r.name }
	seen := map[uint64]bool{}
	sizes := make([]int64, len(r.fams))
	dropped := 0
	defer func() {
		if dropped > 0 {
			r.log.Warn("replay skipped cells of families the table no longer has", "cells", dropped)
		}
	}()
	var cells []cell.KeyValue
	apply := func(e *wal.Edit) error {
		if e.Seq <= flushed {
			if e.HasNonce {
				r.nonces.put(e.NonceGroup, e.Nonce, e.Cells, e.Seq, r.cfg.Clock())
			}
			return nil
		}
		if e.Seq > maxSeq {
			maxSeq = e.Seq
		}
		if seen[e.Seq] {
			// The same edit in recovered edits and a WAL, or handed off by a move's close
			// (without its nonce) and recovered from the closing server's log.
			if e.HasNonce {
				r.nonces.put(e.NonceGroup, e.Nonce, e.Cells, e.Seq, r.cfg.Clock())
			}
			return nil
		}
		seen[e.Seq] = true
		cells = cells[:0]
		for _, kv := range e.Cells {
			i := r.familyIndex(kv.Key().Family())
			if i < 0 {
				// A family the table no longer has (HBase skips these too).
				dropped++
				continue
			}
			if e.Seq > famFlushed[i] {
				cells = append(cells, kv)
			}
		}
		clear(sizes)
		if err := r.memSizes(cells, sizes); err != nil {
			return err
		}
		if r.mem.unflushedDataBytes() >= r.cfg.FlushSize {
			// As HBase's replay: written out at the flush size, so that a backlog larger than
			// the memory there is (an EAGER family's overwrites, compacted away in memory but all
			// in the log) does not keep the region from opening.
			if err := r.replayFlush(maxSeq); err != nil {
				return err
			}
		}
		err := r.reserveMem(sizes)
		if err != nil && r.mem.unflushedDataBytes() > 0 {
			// The server's memstore memory is short: this region's replayed cells go first.
			if ferr := r.replayFlush(maxSeq); ferr != nil {
				return ferr
			}
			err = r.reserveMem(sizes)
		}
		if err != nil {
			return fmt.Errorf("region %s: replaying edit %d: %w", r.name, e.Seq, err)
		}
		err = r.insertMem(cells, e.Seq)
		r.unreserveMem(sizes)
		if err != nil {
			return err
		}
		if e.HasNonce {
			r.nonces.put(e.NonceGroup, e.Nonce, e.Cells, e.Seq, r.cfg.Clock())
		}
		n++
		return nil
	}
	// The edits a move's close handed off in the manifest first; n counts the others.
	if handedOff, err = r.replayHandoff(apply); err != nil {
		return 0, 0, 0, nil, err
	}
	n = 0
	fsys := r.store.fs()
	if fsys == nil {
		// On a bucket: the recovered edits the master split out of a dead server's object log.
		if len(r.cfg.ReplayWALDirs) > 0 {
			return 0, 0, 0, nil, fmt.Errorf("region %s: ReplayWALDirs needs a directory tree, the region is on a bucket", r.name)
		}
		var listed recoveredRead
		if r.recoveredRead != nil {
			listed = <-r.recoveredRead
			r.recoveredRead = nil // read once
		} else {
			listed.keys, listed.err = wal.ListRecoveredEdits(context.Background(), r.cfg.Bucket, r.recoveredEditsDir())
		}
		if listed.err != nil {
			return 0, 0, 0, nil, fmt.Errorf("region %s: replay: %w", r.name, listed.err)
		}
		if err := wal.ReadRecoveredEditObjects(context.Background(), r.cfg.Bucket, listed.keys, apply); err != nil {
			return 0, 0, 0, nil, fmt.Errorf("region %s: replay: %w", r.name, err)
		}
		return maxSeq, n, handedOff, listed.keys, nil
	}
	var readers []*wal.Reader
	rd, err := wal.NewRecoveredEditsReader(fsys, r.recoveredEditsDir(), wal.ReplayOptions{FromSeq: from, Filter: filter})
	if err != nil {
		return 0, 0, 0, nil, err
	}
	readers = append(readers, rd)
	for _, d := range r.cfg.ReplayWALDirs {
		rd, err := wal.NewReader(fsys, d, wal.ReplayOptions{FromSeq: from, Filter: filter})
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, 0, 0, nil, err
		}
		readers = append(readers, rd)
	}
	for _, rd := range readers {
		for rd.Next() {
			if err := apply(rd.Edit()); err != nil {
				rd.Close()
				return 0, 0, 0, nil, err
			}
		}
		err := rd.Err()
		rd.Close()
		if err != nil {
			return 0, 0, 0, nil, fmt.Errorf("region %s: replay: %w", r.name, err)
		}
	}
	return maxSeq, n, handedOff, nil, nil
}

// replayFlush writes what replay put in the memstores so far to store files and commits them,
// leaving the flushed sequence ids as they were: replay reads its sources one after another, not
// in sequence order, so an edit below what was written may still come. A crash before the open
// ends replays everything again (a cell then in a file and in memory is one cell to reads and
// compactions: same key, same sequence id); once replay is done and the rest flushed, the open
// records every replayed edit as flushed (Open). maxSeq is the highest sequence id replayed.
func (r *Region) replayFlush(maxSeq uint64) error {
	snaps := make([]*memstore.Frozen, len(r.fams))
	release := func() {
		for i, s := range snaps {
			if s != nil {
				r.mem[i].ClearSnapshot(s)
			}
		}
	}
	for i, m := range r.mem {
		if m.UnflushedStats().Cells == 0 {
			continue
		}
		snap, err := m.Snapshot()
		if err != nil {
			return fmt.Errorf("region %s: flushing during replay: %w", r.name, err)
		}
		snaps[i] = snap
	}
	written, err := r.writeSegment(snaps)
	if err == nil {
		err = r.commitFiles(written, nil, -1, true, false, func(m *manifest) { m.MaxSeq = max(m.MaxSeq, maxSeq) }, release)
	}
	if err != nil {
		return fmt.Errorf("region %s: flushing during replay: %w", r.name, err)
	}
	r.replayFlushes++
	r.metrics.Flushes.Add(1)
	return nil
}

// removeRecoveredEdits deletes the recovered edits once flushed: on a bucket the objects the
// replay read (it listed them: nothing else writes there while the region opens; none on most
// opens, which then ask the store nothing more), on a directory tree the directory's files.
func (r *Region) removeRecoveredEdits(replayed []string) error {
	d := r.recoveredEditsDir()
	fsys := r.store.fs()
	if fsys == nil {
		_, err := storage.DeleteAll(context.Background(), r.cfg.Bucket, replayed)
		return err
	}
	ok, err := storage.Exists(fsys, d)
	if err != nil || !ok {
		return err
	}
	names, err := fsys.List(d)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := fsys.Remove(path.Join(d, n)); err != nil {
			return err
		}
	}
	return fsys.SyncDir(d)
}

// slowClose is how long a close takes before it is logged with its parts.
const slowClose = 300 * time.Millisecond

// A close whose flush found the object store unavailable (storage.ErrUnavailable) flushes again
// after closeRetry's pauses while the close has taken less than closeRetryFor.
var closeRetry = storage.Backoff{First: 100 * time.Millisecond, Max: 2 * time.Second}

const closeRetryFor = 30 * time.Second

// Close stops the background work, flushes the memstore and releases
// memory and files. Scanners still open keep what they read until they
// close. A broken region is not flushed: Close returns its error, since its
// memstore may hold acknowledged edits that only the WAL has.
// A flush that finds the object store unavailable for now is tried again (closeRetryFor).
func (r *Region) Close() error { return r.close(false) }

// close is Close; handoff: a close for a move (CloseForMove), which may hand a small memstore off
// in the manifest instead of flushing it.
func (r *Region) close(handoff bool) error {
	if r.closed.Swap(true) {
		<-r.closeDone
		if r.closeErr == nil {
			return fmt.Errorf("%w: %s (flushed by another close)", ErrClosed, r.name)
		}
		return r.closeErr
	}
	r.handoffClose.Store(handoff)
	start := time.Now()
	close(r.bgDone)
	r.bgWG.Wait()
	bg := time.Since(start)
	r.compactMu.Lock() // wait for a compaction in flight (it gives up: it sees closed)
	defer r.compactMu.Unlock()
	compaction := time.Since(start) - bg
	var err error
	if !r.replica {
		if err = r.brokenErr(); err == nil {
			var fr FlushResult
			fr, err = r.flush(true, nil)
			// An object store unavailable for now (throttled, a server error, no answer): the
			// close flushes again rather than leave the region to its WAL's recovery (its
			// server aborts when a close cannot flush), within closeRetryFor.
			for attempt := 1; errors.Is(err, storage.ErrUnavailable) && time.Since(start)+closeRetry.Pause(attempt) < closeRetryFor && !r.abortRetries.Load(); attempt++ {
				wait := closeRetry.Pause(attempt)
				r.log.Warn("close: the object store is unavailable for now; flushing again", "region", r.name, "in", wait, "error", err)
				time.Sleep(wait)
				var again FlushResult
				again, err = r.flush(true, nil)
				fr.Write, fr.Commit, fr.Bytes, fr.Handoff = fr.Write+again.Write, fr.Commit+again.Commit, again.Bytes, again.Handoff
			}
			if took := time.Since(start); took > slowClose {
				r.log.Info("slow close", "took", took.Round(time.Millisecond), "background_wait", bg.Round(time.Millisecond),
					"compaction_wait", compaction.Round(time.Millisecond), "flush_wait_writes", fr.WaitWrites.Round(time.Millisecond),
					"flush_write", fr.Write.Round(time.Millisecond), "flush_commit", fr.Commit.Round(time.Millisecond),
					"flushed_bytes", fr.Bytes, "handed_off_edits", fr.Handoff, "error", err)
			}
		}
		// A broken region's memstore holds acknowledged edits that only its WAL has: the error
		// tells the caller so (a region server aborts rather than report the region closed).
	}
	r.readsClosed.Store(true)
	r.blockMu.Lock()
	r.blockCond.Broadcast()
	r.blockMu.Unlock()
	r.releaseAll()
	r.closeErr = err
	close(r.closeDone)
	return err
}

// Abort closes the region without flushing (the WAL keeps its edits). It returns at once when a
// close or abort is already under way (a close then flushes no more against an unavailable object
// store after its current try); a Close after it returns ErrAborted.
func (r *Region) Abort() {
	if r.closed.Swap(true) {
		r.abortRetries.Store(true) // a close under way flushes no more after its current try
		return
	}
	r.readsClosed.Store(true)
	if r.bgDone != nil {
		close(r.bgDone)
		r.bgWG.Wait()
	}
	r.releaseAll()
	r.closeErr = fmt.Errorf("%w: %s", ErrAborted, r.name)
	close(r.closeDone)
}

func (r *Region) releaseAll() {
	if ob := r.observer.Swap(nil); ob != nil {
		if c, ok := ob.o.(interface{ Close() }); ok {
			c.Close()
		}
	}
	r.filesMu.Lock()
	r.filesReleased = true
	r.viewMu.Lock()
	set := r.files.Swap(&fileSet{byFamily: make([][]*storeFile, len(r.fams))})
	r.viewMu.Unlock()
	r.filesMu.Unlock()
	if set != nil {
		for _, fs := range set.byFamily {
			for _, f := range fs {
				f.release()
			}
		}
	}
	if r.mem != nil {
		// Writers (and a replica's applied edits) insert under updatesLock held shared: the
		// memstores' memory goes back only once none is inside.
		r.updatesLock.Lock()
		r.mem.close()
		r.updatesLock.Unlock()
	}
}

// checkReadable is checkOpen for reads: they are served until a close's last flush is done.
func (r *Region) checkReadable() error {
	if r.readsClosed.Load() {
		return fmt.Errorf("%w: %s", ErrClosed, r.name)
	}
	return r.brokenErr()
}

// Readable reports whether the region still serves reads (open, or closing with its last flush
// under way).
func (r *Region) Readable() bool { return r.checkReadable() == nil }

func (r *Region) brokenErr() error {
	if p := r.broken.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Region) markBroken(cause error) {
	err := fmt.Errorf("%w: %w", ErrBroken, cause)
	r.broken.CompareAndSwap(nil, &err)
	r.mvcc.breakWith(err)
	r.log.Error("region broken: a WAL write failed after a memstore insert; reopen the region", "error", cause)
}

func (r *Region) checkOpen() error {
	if r.closed.Load() {
		return fmt.Errorf("%w: %s", ErrClosed, r.name)
	}
	return r.brokenErr()
}

// familyIndex returns the index of a family, or -1.
func (r *Region) familyIndex(name []byte) int {
	for i, f := range r.famNames {
		if bytes.Equal(f, name) {
			return i
		}
	}
	return -1
}

func (r *Region) nowMs() int64 { return r.cfg.Clock().UnixMilli() }

// background runs flushes and compactions when no Requester is set.
func (r *Region) background() {
	defer r.bgWG.Done()
	for {
		select {
		case <-r.bgDone:
			return
		case req := <-r.bgReq:
			if req.flush {
				r.flushRequested.Store(false)
				if r.flushDue() {
					if _, err := r.flush(false, r.chooseFamilies); err != nil && !errors.Is(err, ErrClosed) {
						r.log.Error("flush failed", "error", err)
					}
				}
			}
			if req.compact {
				r.compactRequested.Store(false)
				if _, err := r.Compact(req.major); err != nil && !errors.Is(err, ErrClosed) {
					r.log.Error("compaction failed", "error", err)
				}
			}
		}
	}
}

// flushDue reports whether a flush the region asked for is still needed when it comes to run:
// a write that asked just before the flush under way took its snapshots finds nothing to do
// (flushing then would write every family, none of them being large).
func (r *Region) flushDue() bool {
	return r.mem.unflushedDataBytes() >= r.cfg.FlushSize || r.blockedWriters.Load() > 0 || r.handoffHeld.Load()
}

func (r *Region) requestFlush() {
	if r.cfg.DisableAutoFlush || r.flushRequested.Swap(true) {
		return
	}
	if r.cfg.Requester != nil {
		r.cfg.Requester.RequestFlush(r)
		return
	}
	select {
	case r.bgReq <- bgRequest{flush: true}:
	default:
		r.flushRequested.Store(false)
	}
}

// FlushRequested reports whether a flush was requested and has not started
// (for a region server's flush queue).
func (r *Region) FlushRequested() bool { return r.flushRequested.Load() }

func (r *Region) requestCompaction() {
	if r.cfg.DisableAutoCompaction || r.compactionsHeld.Load() || r.compactRequested.Swap(true) {
		return
	}
	if r.cfg.Requester != nil {
		r.cfg.Requester.RequestCompaction(r, false)
		return
	}
	select {
	case r.bgReq <- bgRequest{compact: true}:
	default:
		r.compactRequested.Store(false)
	}
}

// archivePath moves a file to archive/<same path> (best effort: a failure
// is logged and the file stays; it is retried at the next open).
func (r *Region) archivePath(p, family, name string) {
	switch err := r.store.archive(p); {
	case errors.Is(err, storage.ErrNoObject) || errors.Is(err, fs.ErrNotExist):
		// Gone already: the leftover a move's prepare listed was a compaction's input, which
		// the source archived itself.
		r.log.Debug("store file to archive is gone already", "file", p)
	case err != nil:
		r.log.Warn("archiving store file failed", "file", p, "error", err)
	}
}

func (r *Region) archiveFile(f *storeFile) {
	r.archivePath(f.path, r.fams[f.family].Name, f.name)
}

// Families returns the family descriptors (sorted by name).
func (r *Region) Families() []Family { return slices.Clone(r.fams) }

// validRowRange checks a row against the region's range.
func (r *Region) checkRow(row []byte) error {
	if len(row) == 0 {
		return fmt.Errorf("%w: empty row", ErrInvalid)
	}
	if len(row) > cell.MaxRowLength {
		return fmt.Errorf("%w: row of %d bytes exceeds %d", ErrInvalid, len(row), cell.MaxRowLength)
	}
	if !r.info.ContainsRow(row) {
		return fmt.Errorf("%w: row %q outside [%q, %q) of %s", ErrWrongRegion, row, r.info.StartKey, r.info.EndKey, r.name)
	}
	return nil
}

func famList(fams []Family) string {
	var n []string
	for _, f := range fams {
		n = append(n, f.Name)
	}
	return strings.Join(n, ", ")
}

// SetLabelsInUse says whether the region's cells may carry visibility tags (the region server
// sets it once a visibility label exists). With it, a delete marker that masks a whole column or
// family no longer lets reads skip past the rest of it at once: each cell is checked, since one
// with other visibility tags is not masked.
func (r *Region) SetLabelsInUse(on bool) { r.labelsInUse.Store(on) }

// SetCompaction changes the region's compaction settings (a region server's online setting);
// the next selection uses them. Sleep is kept when cc has none.
func (r *Region) SetCompaction(cc CompactionConfig) error {
	if err := CheckCompaction(cc); err != nil {
		return err
	}
	if cc.Sleep == nil {
		cc.Sleep = r.compaction.Load().Sleep
	}
	r.compaction.Store(&cc)
	return nil
}

// compactionConfig is the region's compaction settings now.
func (r *Region) compactionConfig() CompactionConfig { return *r.compaction.Load() }
