package region

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
)

// FlushResult describes a flush.
type FlushResult struct {
	Flushed bool
	Seq     uint64 // the flushed sequence id
	// Families the flush wrote (a per-family flush leaves the others in memory).
	Families []string
	Files    int
	Bytes    int64
	Cells    int64
	// How long the flush waited for the snapshot's writes to be durable, wrote its files, and
	// committed them (opened the files and replaced the manifest).
	WaitWrites, Write, Commit time.Duration
	// Handoff: a move's close handed this many edits off in the manifest instead of writing
	// store files (Bytes then counts their records).
	Handoff int
}

// Flush writes every family's memstore to new store files (one per family with cells) and
// commits them: a snapshot of the memstores is written to new files, and the manifest naming
// them (and the new flushed sequence id) replaces the old one atomically; then the WAL is told
// (MarkFlushed) and the snapshot's memory is released once no scanner reads it.
func (r *Region) Flush() (FlushResult, error) {
	if err := r.checkOpen(); err != nil {
		return FlushResult{}, err
	}
	return r.flush(false, nil)
}

// FlushBySize flushes as the table's flush policy says when the memstores reached the flush
// size: by default only the families holding more than the policy's lower bound (all of them
// when none does). It is the flush a region asks for itself.
func (r *Region) FlushBySize() (FlushResult, error) {
	if err := r.checkOpen(); err != nil {
		return FlushResult{}, err
	}
	return r.flush(false, r.chooseFamilies)
}

// chooser picks the families a flush writes from their unflushed accounting (nil: every family
// holding cells).
type chooser func(unflushed []memstore.Stats) []bool

func (r *Region) flush(closing bool, choose chooser) (FlushResult, error) {
	if r.replica {
		return FlushResult{}, ErrReadOnlyReplica
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	retry := r.pending != nil
	res, err := r.flushLocked(closing, 0, choose)
	if err != nil || !retry || choose != nil {
		return res, err
	}
	// The retry wrote what the failed flush had taken; a flush of every family (a close, an
	// admin's) goes on with the rest.
	more, err := r.flushLocked(closing, 0, nil)
	if err != nil || !more.Flushed {
		return res, err
	}
	more.Files += res.Files
	more.Bytes += res.Bytes
	more.Cells += res.Cells
	more.Handoff = max(more.Handoff, res.Handoff)
	for _, f := range res.Families {
		if !slices.Contains(more.Families, f) {
			more.Families = append(more.Families, f)
		}
	}
	slices.Sort(more.Families)
	return more, nil
}

// pendingFlush is a flush whose snapshots were taken: what it writes and what the manifest
// records once it commits.
type pendingFlush struct {
	// snaps by family index: nil for a family the flush leaves alone.
	snaps []*memstore.Frozen
	// seq: every cell of a flushed family with a sequence id <= seq is in its snapshot (the
	// highest sequence id the region's memstores held when it was taken).
	seq uint64
	// flushed by family index: the family's flushed sequence id once the flush commits — seq
	// for the flushed families and those that held nothing, just below the oldest cell still in
	// memory for the others.
	flushed []uint64
	// handoff: a move's close that hands the snapshots off in the manifest (handoff.go).
	handoff bool
}

// clearSnapshots releases the flush's snapshots from the memstores once its commit swapped them
// out of every reader's view.
func (p *pendingFlush) clearSnapshots(r *Region) {
	for i, snap := range p.snaps {
		if snap != nil {
			r.mem[i].ClearSnapshot(snap)
		}
	}
}

func (p *pendingFlush) cells() int64 {
	var n int64
	for _, s := range p.snaps {
		if s != nil {
			n += s.Stats().Cells
		}
	}
	return n
}

// families names the families the flush writes; all reports whether they are every family that
// held cells (the replicas' FLUSH_START then names none).
func (p *pendingFlush) families(r *Region) (names []string, all bool) {
	all = true
	for i, s := range p.snaps {
		if s != nil {
			names = append(names, r.fams[i].Name)
		} else if p.flushed[i] != p.seq {
			all = false
		}
	}
	return names, all
}

// flushLocked flushes with flushMu held (the families choose picks, all when nil). A non-zero
// session starts a replication session: the FLUSH_START and FILES entries are queued even when
// the memstore is empty.
func (r *Region) flushLocked(closing bool, session uint64, choose chooser) (FlushResult, error) {
	if err := r.brokenErr(); err != nil {
		return FlushResult{}, err
	}
	p := r.pending // a previous attempt failed: retry it
	if p == nil {
		r.updatesLock.Lock()
		unflushed := make([]memstore.Stats, len(r.fams))
		var cells int64
		var top uint64
		for i, m := range r.mem {
			unflushed[i] = m.UnflushedStats()
			cells += unflushed[i].Cells
			top = max(top, unflushed[i].MaxSeq)
		}
		if cells == 0 {
			if session != 0 {
				// Nothing to flush: the session starts from the files as
				// they are.
				r.queueFlushStart(r.mvcc.readPoint.Load(), true, session, nil)
				r.filesMu.Lock()
				b, err := encodeChecked(r.man)
				if err == nil {
					r.queueFiles(b, r.man.MaxSeq, true)
				}
				r.filesMu.Unlock()
				r.updatesLock.Unlock()
				return FlushResult{}, err
			}
			r.updatesLock.Unlock()
			if r.handoffHeld.Load() && !closing {
				// Nothing in memory, yet the manifest holds handed-off edits: their cells are in
				// the files or of families the table no longer has (the open skipped them).
				return FlushResult{}, r.commitFiles(nil, nil, -1, false, true, func(m *manifest) { m.Handoff = nil }, nil)
			}
			return FlushResult{}, nil
		}
		var pick []bool
		if choose != nil && session == 0 {
			pick = choose(unflushed)
		}
		r.filesMu.Lock()
		man := r.man
		r.filesMu.Unlock()
		for _, f := range r.fams {
			// A family an earlier per-family flush wrote further than the others hold.
			top = max(top, man.familyFlushed(f.Name))
		}
		var dataBytes int64
		for _, st := range unflushed {
			dataBytes += st.DataBytes
		}
		p = &pendingFlush{snaps: make([]*memstore.Frozen, len(r.fams)), seq: top, flushed: make([]uint64, len(r.fams)),
			handoff: r.handoffOK(closing, session, choose, dataBytes)}
		var snapErr error
		for i, m := range r.mem {
			st := unflushed[i]
			if st.Cells > 0 && (pick == nil || pick[i]) {
				snap, err := m.Snapshot()
				if err == nil {
					p.snaps[i], p.flushed[i] = snap, top
					continue
				}
				snapErr = err // the family stays in memory; the others flush
			}
			if st.Cells == 0 {
				p.flushed[i] = top
			} else {
				// Every cell of the family below the oldest one in memory is in its files.
				p.flushed[i] = max(man.familyFlushed(r.fams[i].Name), st.MinSeq-1)
			}
		}
		names, all := p.families(r)
		if len(names) == 0 {
			r.updatesLock.Unlock()
			if snapErr != nil {
				return FlushResult{}, fmt.Errorf("region %s: flush: %w", r.name, snapErr)
			}
			return FlushResult{}, nil // the chosen families hold nothing
		}
		if all {
			names = nil
		}
		r.queueFlushStart(top, session != 0, session, names)
		r.pending = p
		r.updatesLock.Unlock()
	}
	cells := p.cells()
	flushSeq := p.seq
	// Every write in the snapshot must be complete (its WAL record
	// durable) before its cells go to a store file.
	t0 := time.Now()
	if err := r.mvcc.waitBefore(flushSeq); err != nil {
		return FlushResult{}, err
	}
	t1 := time.Now()
	if p.handoff {
		res, err := r.commitHandoff(p, FlushResult{Flushed: true, Seq: flushSeq, Cells: cells, WaitWrites: t1.Sub(t0)}, t1)
		if !errors.Is(err, errNoHandoff) {
			return res, err
		}
		r.log.Info("close: writing a store file instead of handing the memstore off", "region", r.name, "reason", err)
		p.handoff = false
		t1 = time.Now()
	}
	written, err := r.writeSegment(p.snaps)
	if err != nil {
		return FlushResult{}, fmt.Errorf("region %s: flush: %w", r.name, err)
	}
	t2 := time.Now()
	res := FlushResult{Flushed: true, Seq: flushSeq, Files: len(written), Cells: cells, WaitWrites: t1.Sub(t0), Write: t2.Sub(t1)}
	res.Families, _ = p.families(r)
	for _, w := range written {
		res.Bytes += w.size
	}
	var regionFlushed uint64
	if err := r.commitFiles(written, nil, -1, true, false, func(m *manifest) {
		m.FlushedSeq = max(m.FlushedSeq, slices.Min(p.flushed))
		m.MaxSeq = max(m.MaxSeq, flushSeq)
		fams := map[string]uint64{}
		for i, f := range r.fams {
			if v := max(p.flushed[i], m.familyFlushed(f.Name)); v > m.FlushedSeq {
				fams[f.Name] = v
			}
		}
		m.FamilyFlushedSeq = nil
		if len(fams) > 0 {
			m.FamilyFlushedSeq = fams
		}
		regionFlushed = m.FlushedSeq
	}, func() { p.clearSnapshots(r) }); err != nil {
		return FlushResult{}, fmt.Errorf("region %s: flush commit: %w", r.name, err)
	}
	r.pending = nil
	res.Commit = time.Since(t2)
	if err := r.wal.MarkFlushed(r.name, regionFlushed); err != nil && !closing {
		r.log.Warn("MarkFlushed failed", "error", err)
	}
	r.metrics.Flushes.Add(1)
	r.metrics.FlushedBytes.Add(res.Bytes)
	r.metrics.FlushedCells.Add(res.Cells)
	r.flushed()
	if !closing {
		set := r.files.Load()
		for _, fs := range set.byFamily {
			if len(fs) >= r.compactionConfig().MinFiles {
				r.requestCompaction()
				break
			}
		}
	}
	return res, nil
}

// newFileName returns a unique store file name.
func newFileName() string {
	return fmt.Sprintf("%016x%08x", time.Now().UnixNano(), rand.Uint32())
}

// fileWriter writes one new store file (regionFiles.newStoreFile).
type fileWriter struct {
	fam     int
	name    string
	file    storage.File // what the store-file writer writes to (openWritten reads it back)
	w       *sfile.Writer
	meta    sfile.Meta
	size    int64
	publish func() error
	abort   func()
}

// drop abandons the file: the writer's work and whatever it left on storage.
func (fw *fileWriter) drop() {
	fw.w.Abort()
	fw.abort()
}

func (r *Region) newFileWriter(fam int, expected int) (*fileWriter, error) {
	f := &r.fams[fam]
	fw := &fileWriter{fam: fam, name: newFileName()}
	file, publish, abort, err := r.store.newStoreFile(r.dir, r.storeFilePath(fam, fw.name))
	if err != nil {
		return nil, err
	}
	fw.file, fw.publish, fw.abort = file, publish, abort
	bloom := f.Bloom
	w, err := sfile.NewWriter(file, sfile.WriterOptions{BlockSize: f.BlockSize, Encoding: f.Encoding,
		Compression: f.Compression, Bloom: bloom, ExpectedEntries: expected, InMemory: f.InMemory})
	if err != nil {
		file.Close()
		abort()
		return nil, err
	}
	fw.w = w
	return fw, nil
}

// finishFile completes the file (written and synced) and publishes it under its name in the
// family directory; it is part of the region once the manifest names it.
func (r *Region) finishFile(fw *fileWriter) error {
	meta, err := fw.w.Finish()
	if err != nil {
		return err
	}
	fw.meta = meta
	fw.size = meta.Size
	return fw.publish()
}

// writeSegment writes the families' memstore snapshots (by family index, their segments merged)
// to one file per family.
func (r *Region) writeSegment(snaps []*memstore.Frozen) ([]*fileWriter, error) {
	var scs []cell.Scanner
	expected := make([]int, len(r.fams)) // cells per family, for the files' blooms
	for i, snap := range snaps {
		if snap == nil {
			continue
		}
		expected[i] = int(snap.Stats().Cells)
		for _, seg := range snap.Segments() {
			sc, err := seg.NewScanner(math.MaxUint64)
			if err != nil {
				for _, o := range scs {
					o.Close()
				}
				return nil, err
			}
			scs = append(scs, sc)
		}
	}
	sc := newMergeIter(scs, false)
	defer sc.close()
	now := r.nowMs()
	writers := make([]*fileWriter, len(r.fams))
	abort := func() {
		for _, w := range writers {
			if w != nil {
				w.drop()
			}
		}
	}
	last := -1
	var lastFam []byte
	// With a table function's file hook, cells go through it on their way to the writers.
	ff := newFileFilter(r.observer.Load(), FileFlush, func(k cell.Key, v, tags []byte, seq uint64) error {
		i := r.familyIndex(k.Family())
		w := writers[i]
		if w == nil {
			var err error
			if w, err = r.newFileWriter(i, expected[i]); err != nil {
				return err
			}
			writers[i] = w
		}
		return w.w.AppendTagged(k, v, tags, seq)
	})
	for sc.seekFirst(cell.AppendFirstOnRow(nil, nil)); sc.valid(); sc.next() {
		k := sc.key()
		fam := k.Family()
		if last < 0 || string(fam) != string(lastFam) {
			last = r.familyIndex(fam)
			lastFam = append(lastFam[:0], fam...)
			if last < 0 {
				abort()
				return nil, fmt.Errorf("%w: memstore cell of unknown family %q", ErrCorrupt, fam)
			}
		}
		f := &r.fams[last]
		if ttl := f.ttlMillis(); ttl > 0 && f.MinVersions == 0 && k.Timestamp() < now-ttl {
			continue // expired: no read can see it
		}
		tags := sc.tags()
		if tags != nil && cell.TTLExpired(tags, k.Timestamp(), now) {
			continue // past its per-cell TTL: no read can see it either
		}
		if ff != nil {
			if err := ff.add(k, sc.value(), tags, sc.seq()); err != nil {
				abort()
				return nil, err
			}
			continue
		}
		w := writers[last]
		if w == nil {
			var err error
			if w, err = r.newFileWriter(last, expected[last]); err != nil {
				abort()
				return nil, err
			}
			writers[last] = w
		}
		if err := w.w.AppendTagged(k, sc.value(), tags, sc.seq()); err != nil {
			abort()
			return nil, err
		}
	}
	if err := sc.err; err != nil {
		abort()
		return nil, err
	}
	if ff != nil {
		if err := ff.flush(); err != nil {
			abort()
			return nil, err
		}
	}
	var out []*fileWriter
	for _, w := range writers {
		if w == nil {
			continue
		}
		if err := r.finishFile(w); err != nil {
			abort()
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// commitFiles opens the new files and commits them to the manifest and the
// live file set, removing the replaced files of family fam (compaction).
// edit adjusts the manifest; swapped runs with the new set in place, under
// the view lock (the flush clears its snapshot there, so no scanner sees
// the cells twice or not at all). handoff: a move's close handing its
// snapshot off in the manifest (no files; the replicas are not told).
func (r *Region) commitFiles(written []*fileWriter, replaced []*storeFile, fam int, flushCommit, handoff bool, edit func(*manifest), swapped func()) error {
	var opened []*storeFile
	closeOpened := func() {
		for _, f := range opened {
			f.release()
		}
	}
	for _, w := range written {
		sf, err := r.openStoreFile(w.fam, manifestFile{Name: w.name}, w.file)
		if err != nil {
			closeOpened()
			return err
		}
		opened = append(opened, sf)
	}
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	if r.filesReleased {
		// Aborted while it wrote (an abort waits for no flush or compaction): what it wrote is
		// in no manifest, left to the cleaner.
		closeOpened()
		return fmt.Errorf("%w: %s", ErrClosed, r.name)
	}
	m := &manifest{Version: 1, FlushedSeq: r.man.FlushedSeq, MaxSeq: r.man.MaxSeq, Families: map[string][]manifestFile{},
		FamilyFlushedSeq: maps.Clone(r.man.FamilyFlushedSeq), Handoff: r.man.Handoff}
	cur := r.files.Load()
	next := &fileSet{byFamily: make([][]*storeFile, len(r.fams))}
	for i := range r.fams {
		for _, f := range cur.byFamily[i] {
			if i == fam && slices.Contains(replaced, f) {
				continue
			}
			next.byFamily[i] = append(next.byFamily[i], f)
		}
	}
	for _, f := range opened {
		next.byFamily[f.family] = append(next.byFamily[f.family], f)
	}
	for i, fs := range next.byFamily {
		slices.SortStableFunc(fs, func(a, b *storeFile) int {
			switch {
			case a.meta.MaxSeq < b.meta.MaxSeq:
				return -1
			case a.meta.MaxSeq > b.meta.MaxSeq:
				return 1
			}
			return 0
		})
		name := r.fams[i].Name
		for _, f := range fs {
			m.Families[name] = append(m.Families[name], manifestFile{Name: f.name, Reference: f.ref != nil,
				Size: f.size, MaxSeq: f.meta.MaxSeq, Entries: f.meta.EntryCount})
		}
	}
	if edit != nil {
		edit(m)
	}
	m.Handoff = pruneHandoff(m.Handoff, m.FlushedSeq)
	b, err := encodeChecked(m)
	var version string
	if err == nil {
		manPath := path.Join(r.dir, manifestName)
		version, err = r.store.commitManifest(manPath, b, r.manVersion)
		if errors.Is(err, ErrFenced) && len(r.unsureManifests) > 0 {
			// Commits since the last known version had unknown outcomes (the store's answer
			// lost): all were conditioned on that version, so at most one landed, and if one did
			// the manifest is its body — this region's own, not another server's. This one
			// replaces it (what that commit added is written again here, or its flush's snapshot
			// would still be in memory).
			if cur, etag, rerr := r.store.readManifest(manPath); rerr == nil && slices.ContainsFunc(r.unsureManifests, func(u []byte) bool { return bytes.Equal(cur, u) }) {
				version, err = r.store.commitManifest(manPath, b, etag)
			}
		}
		switch {
		case err == nil:
			r.unsureManifests = nil
		case errors.Is(err, storage.ErrUnavailable):
			if len(r.unsureManifests) == maxUnsureManifests {
				r.unsureManifests = r.unsureManifests[1:]
			}
			r.unsureManifests = append(r.unsureManifests, b)
		}
	}
	if err != nil {
		closeOpened()
		if errors.Is(err, ErrFenced) {
			// Another server holds the region: nothing more may be acknowledged here.
			r.markBroken(err)
		}
		return err
	}
	r.man, r.manVersion = m, version
	r.handoffHeld.Store(len(m.Handoff) > 0)
	if !handoff {
		// (A handoff changes no files: the replicas keep what they froze until the next
		// primary starts them a session.)
		r.queueFiles(b, m.MaxSeq, flushCommit)
	}
	r.viewMu.Lock()
	r.files.Store(next)
	if swapped != nil {
		swapped()
	}
	r.viewMu.Unlock()
	for _, f := range replaced {
		f.compacted.Store(true)
		f.release() // the live set's reference
	}
	r.updateFileMetrics()
	return nil
}

var _ = storage.Exists

// maxUnsureManifests bounds the manifest bodies of unknown outcome a region remembers (a close
// retries its flush for up to 30 s while the store is unavailable).
const maxUnsureManifests = 64
