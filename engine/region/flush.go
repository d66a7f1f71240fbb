package region

import (
	"errors"
	"fmt"
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
	Files   int
	Bytes   int64
	Cells   int64
	// How long the flush waited for the snapshot's writes to be durable, wrote its files, and
	// committed them (opened the files and replaced the manifest).
	WaitWrites, Write, Commit time.Duration
}

// Flush writes the memstore to new store files (one per family with
// cells) and commits them: a snapshot of the memstore is written to
// temporary files, synced, renamed into the family directories, and the
// manifest naming them (and the new flushed sequence id) replaces the old
// one atomically; then the WAL is told (MarkFlushed) and the snapshot's
// memory is released once no scanner reads it.
func (r *Region) Flush() (FlushResult, error) {
	if err := r.checkOpen(); err != nil {
		return FlushResult{}, err
	}
	return r.flush(false)
}

func (r *Region) flush(closing bool) (FlushResult, error) {
	if r.replica {
		return FlushResult{}, ErrReadOnlyReplica
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	return r.flushLocked(closing, 0)
}

// flushLocked flushes with flushMu held. A non-zero session starts a
// replication session: the FLUSH_START and FILES entries are queued even
// when the memstore is empty.
func (r *Region) flushLocked(closing bool, session uint64) (FlushResult, error) {
	if err := r.brokenErr(); err != nil {
		return FlushResult{}, err
	}
	snap := r.ms.CurrentSnapshot() // a previous attempt failed: retry it
	if snap == nil {
		r.updatesLock.Lock()
		if r.ms.UnflushedStats().Cells == 0 {
			if session != 0 {
				// Nothing to flush: the session starts from the files as
				// they are.
				r.queueFlushStart(r.mvcc.readPoint.Load(), true, session)
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
			return FlushResult{}, nil
		}
		var err error
		snap, err = r.ms.Snapshot()
		if err == nil {
			r.queueFlushStart(snap.Stats().MaxSeq, session != 0, session)
		}
		r.updatesLock.Unlock()
		if err != nil {
			return FlushResult{}, err
		}
	}
	st := snap.Stats()
	flushSeq := st.MaxSeq
	// Every write in the snapshot must be complete (its WAL record
	// durable) before its cells go to a store file.
	t0 := time.Now()
	if err := r.mvcc.waitBefore(flushSeq); err != nil {
		return FlushResult{}, err
	}
	t1 := time.Now()
	written, err := r.writeSegment(snap)
	if err != nil {
		return FlushResult{}, fmt.Errorf("region %s: flush: %w", r.name, err)
	}
	t2 := time.Now()
	res := FlushResult{Flushed: true, Seq: flushSeq, Files: len(written), Cells: st.Cells, WaitWrites: t1.Sub(t0), Write: t2.Sub(t1)}
	for _, w := range written {
		res.Bytes += w.size
	}
	if err := r.commitFiles(written, nil, -1, true, func(m *manifest) {
		m.FlushedSeq = max(m.FlushedSeq, flushSeq)
		m.MaxSeq = max(m.MaxSeq, flushSeq)
	}, func() { r.ms.ClearSnapshot(snap) }); err != nil {
		return FlushResult{}, fmt.Errorf("region %s: flush commit: %w", r.name, err)
	}
	res.Commit = time.Since(t2)
	if err := r.wal.MarkFlushed(r.name, flushSeq); err != nil && !closing {
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
	fw.publish, fw.abort = publish, abort
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

// writeSegment writes a memstore snapshot (its segments merged) to one file per family.
func (r *Region) writeSegment(snap *memstore.Frozen) ([]*fileWriter, error) {
	var scs []cell.Scanner
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
	expected := int(snap.Stats().Cells)
	last := -1
	var lastFam []byte
	// With a table function's file hook, cells go through it on their way to the writers.
	ff := newFileFilter(r.observer.Load(), FileFlush, func(k cell.Key, v, tags []byte, seq uint64) error {
		i := r.familyIndex(k.Family())
		w := writers[i]
		if w == nil {
			var err error
			if w, err = r.newFileWriter(i, expected); err != nil {
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
			if w, err = r.newFileWriter(last, expected); err != nil {
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
// the cells twice or not at all).
func (r *Region) commitFiles(written []*fileWriter, replaced []*storeFile, fam int, flushCommit bool, edit func(*manifest), swapped func()) error {
	var opened []*storeFile
	closeOpened := func() {
		for _, f := range opened {
			f.release()
		}
	}
	for _, w := range written {
		sf, err := r.openStoreFile(w.fam, manifestFile{Name: w.name})
		if err != nil {
			closeOpened()
			return err
		}
		opened = append(opened, sf)
	}
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	m := &manifest{Version: 1, FlushedSeq: r.man.FlushedSeq, MaxSeq: r.man.MaxSeq, Families: map[string][]manifestFile{}}
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
	b, err := encodeChecked(m)
	var version string
	if err == nil {
		version, err = r.store.commitManifest(path.Join(r.dir, manifestName), b, r.manVersion)
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
	r.queueFiles(b, m.MaxSeq, flushCommit)
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
