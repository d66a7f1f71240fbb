package region

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
)

// CompactionResult describes a compaction.
type CompactionResult struct {
	Families int // families compacted
	FilesIn  int
	FilesOut int
	BytesIn  int64
	BytesOut int64
	Major    bool
}

// Compact compacts every family: major compacts all of a family's files
// into one and drops what HBase's rules allow (deleted cells and delete
// markers when KEEP_DELETED_CELLS is FALSE, expired cells beyond
// MIN_VERSIONS, versions beyond VERSIONS); a minor compaction merges a
// selection of files (exploring policy) and keeps every cell a read could
// see. A family holding reference files (a daughter of a split) is always
// compacted whole. Reads and writes continue meanwhile; the replaced files
// are archived once the last scanner reading them closes.
func (r *Region) Compact(major bool) (CompactionResult, error) {
	if r.replica {
		return CompactionResult{}, ErrReadOnlyReplica
	}
	if err := r.checkOpen(); err != nil {
		return CompactionResult{}, err
	}
	if r.compactionsHeld.Load() {
		return CompactionResult{}, fmt.Errorf("%w: region %s is about to close (its next server compacts it)", ErrClosed, r.name)
	}
	r.compactMu.Lock()
	defer r.compactMu.Unlock()
	var total CompactionResult
	total.Major = major
	for i := range r.fams {
		res, err := r.compactFamily(i, major)
		if err != nil {
			return total, fmt.Errorf("region %s: compacting %s: %w", r.name, r.fams[i].Name, err)
		}
		if res.FilesIn > 0 {
			total.Families++
			total.FilesIn += res.FilesIn
			total.FilesOut += res.FilesOut
			total.BytesIn += res.BytesIn
			total.BytesOut += res.BytesOut
		}
	}
	return total, nil
}

// selectMinor picks files with HBase's exploring compaction policy: among
// every window of consecutive files (oldest first) with MinFiles..MaxFiles
// files, all within the size ratio (each file at most Ratio times the sum
// of the others), take the one with the most files, then the smallest.
func selectMinor(files []*storeFile, cc CompactionConfig) []*storeFile {
	var cand []*storeFile
	for _, f := range files {
		if f.ref != nil {
			return nil
		}
		if cc.MaxFileSize > 0 && f.size > cc.MaxFileSize {
			continue
		}
		cand = append(cand, f)
	}
	var best []*storeFile
	var bestSize int64
	for start := 0; start < len(cand); start++ {
		for end := start + cc.MinFiles; end <= len(cand) && end-start <= cc.MaxFiles; end++ {
			w := cand[start:end]
			var total int64
			for _, f := range w {
				total += f.size
			}
			ok := true
			for _, f := range w {
				if float64(f.size) > cc.Ratio*float64(total-f.size) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			if len(w) > len(best) || len(w) == len(best) && total < bestSize {
				best, bestSize = w, total
			}
		}
	}
	return slices.Clone(best)
}

func (r *Region) compactFamily(fi int, major bool) (CompactionResult, error) {
	files := r.files.Load().byFamily[fi]
	hasRefs := slices.ContainsFunc(files, func(f *storeFile) bool { return f.ref != nil })
	var sel []*storeFile
	isMajor := major || hasRefs
	if isMajor {
		sel = slices.Clone(files)
	} else {
		sel = selectMinor(files, r.compactionConfig())
	}
	if len(sel) == 0 || !isMajor && len(sel) < 2 {
		return CompactionResult{}, nil
	}
	for i, f := range sel {
		if !f.retain() {
			for _, g := range sel[:i] {
				g.release()
			}
			return CompactionResult{}, nil
		}
	}
	defer func() {
		for _, f := range sel {
			f.release()
		}
	}()
	res := CompactionResult{FilesIn: len(sel), Major: isMajor}
	scanners := make([]cell.Scanner, 0, len(sel))
	var expected int64
	// The earliest put of the files compacted (HBase's earliestPutTs): a major compaction
	// keeping deleted cells drops a delete marker older than it, which has nothing left to
	// mask. A file that does not record it (an older one) may hold puts as old as any.
	earliestPut := int64(math.MaxInt64)
	for _, f := range sel {
		scanners = append(scanners, f.newScanner(false, false))
		res.BytesIn += f.size
		expected += f.meta.EntryCount
		earliestPut = min(earliestPut, f.meta.EarliestPutTimestamp)
	}
	it := newMergeIter(scanners, false)
	defer it.close()
	fam := &r.fams[fi]
	c := newCompactor(fam, isMajor, r.nowMs(), earliestPut)
	fw, err := r.newFileWriter(fi, int(expected))
	if err != nil {
		return res, err
	}
	fw.w.SetMajorCompacted(isMajor)
	cc := r.compactionConfig()
	limiter := newThrottle(cc.ThroughputLimit, cc.Sleep)
	var n, seen int64
	write := func(k cell.Key, v, tags []byte, seq uint64) error {
		if err := fw.w.AppendTagged(k, v, tags, seq); err != nil {
			return err
		}
		n++
		limiter.wrote(int64(len(k) + len(v)))
		return nil
	}
	kind := FileMinorCompaction
	if isMajor {
		kind = FileMajorCompaction
	}
	ff := newFileFilter(r.observer.Load(), kind, write)
	for it.seekFirst(cell.AppendFirstOnRow(nil, nil)); it.valid(); it.next() {
		if seen++; seen%closeCheckCells == 0 && (r.closed.Load() || r.compactionsHeld.Load()) {
			// The region is closing (a move, a split, a stop), or about to: give the compaction
			// up rather than keep the region unavailable until it ends, as HBase interrupts it.
			// Its partial file is dropped; the next opener compacts again.
			fw.drop()
			return res, fmt.Errorf("region %s: compaction given up: %w", r.name, ErrClosed)
		}
		k, tags := it.key(), it.tags()
		if !c.keep(k, tags) {
			continue
		}
		var err error
		if ff != nil {
			err = ff.add(k, it.value(), tags, it.seq())
		} else {
			err = write(k, it.value(), tags, it.seq())
		}
		if err != nil {
			fw.drop()
			return res, err
		}
	}
	if err := it.err; err != nil {
		fw.drop()
		return res, err
	}
	if ff != nil {
		if err := ff.flush(); err != nil {
			fw.drop()
			return res, err
		}
	}
	written := []*fileWriter{fw}
	if n == 0 {
		fw.drop()
		written = nil
	} else if err := r.finishFile(fw); err != nil {
		fw.drop()
		return res, err
	}
	if err := r.commitFiles(written, sel, fi, false, false, nil, nil); err != nil {
		return res, err
	}
	res.FilesOut = len(written)
	if n > 0 {
		res.BytesOut = fw.size
	}
	r.metrics.Compactions.Add(1)
	if isMajor {
		r.metrics.MajorCompactions.Add(1)
	}
	r.metrics.CompactedFiles.Add(int64(len(sel)))
	r.metrics.CompactionBytesRead.Add(res.BytesIn)
	r.metrics.CompactionBytesWritten.Add(res.BytesOut)
	return res, nil
}

// closeCheckCells is how often (in cells read) a compaction checks whether its region is closing.
const closeCheckCells = 512

// compactor decides which cells a compaction keeps (HBase's
// MinorCompactionScanQueryMatcher and MajorCompactionScanQueryMatcher).
// Minor compactions (and flushes) drop only cells that no read can see:
// TTL-expired cells of families without MIN_VERSIONS, and cells past their
// per-cell TTL (which reads skip whatever MIN_VERSIONS says).
type compactor struct {
	major      bool
	maxV, minV int
	oldest     int64
	now        int64
	kdc        KeepDeletedCells
	// earliestPut is the earliest timestamp of a put in the files compacted.
	earliestPut int64

	row, fam []byte
	dt       deleteTracker
	col      []byte
	colSet   bool
	count    int
	tsSet    bool
	lastTs   int64
	lastType cell.Type
}

func newCompactor(f *Family, major bool, now, earliestPut int64) *compactor {
	c := &compactor{major: major, maxV: f.maxVersions(), minV: f.MinVersions, kdc: f.KeepDeletedCells,
		oldest: math.MinInt64, earliestPut: earliestPut, now: now}
	if ttl := f.ttlMillis(); ttl > 0 {
		c.oldest = now - ttl
	}
	return c
}

func (c *compactor) keep(k cell.Key, tags []byte) bool {
	if !bytes.Equal(k.Row(), c.row) || !bytes.Equal(k.Family(), c.fam) {
		c.row = append(c.row[:0], k.Row()...)
		c.fam = append(c.fam[:0], k.Family()...)
		c.dt.reset()
		c.colSet = false
	}
	ts, t := k.Timestamp(), k.Type()
	expired := ts < c.oldest
	if c.minV == 0 && expired {
		return false
	}
	if tags != nil && cell.TTLExpired(tags, ts, c.now) {
		return false // reads skip it (before counting versions): so can we
	}
	if !c.major {
		return true
	}
	if t.IsDelete() {
		if c.kdc == KeepDeletedFalse || c.kdc == KeepDeletedTTL && expired {
			c.dt.add(k, tags)
			return false
		}
		// Kept deleted cells (TRUE, or TTL before the marker expires): the marker goes only
		// when older than every put of the files, masking nothing (HBase's
		// DropDeletesCompactionScanQueryMatcher.tryDropDelete; its later cells in the column
		// are markers as old, dropped alike).
		if ts < c.earliestPut {
			return false
		}
		// Kept; markers do not count as versions. A column's marker goes with the column's
		// versions past VERSIONS (it hides only older ones); a family marker, in the empty
		// qualifier's column, hides cells of every column and stays whatever that column holds.
		c.column(k.Qualifier())
		return c.count <= c.maxV || t == cell.DeleteFamily || t == cell.DeleteFamilyVersion
	}
	switch c.dt.isDeleted(k, tags) {
	case familyDeleted, columnDeleted, versionDeleted, familyVersionDeleted:
		return false
	}
	if c.column(k.Qualifier()) && c.tsSet && ts == c.lastTs && t == c.lastType {
		return false // an older write of the same cell
	}
	c.count++
	if c.count > c.maxV {
		return false
	}
	if c.count <= c.minV || !expired {
		c.tsSet, c.lastTs, c.lastType = true, ts, t
		return true
	}
	return false
}

// column switches the version tracking to qualifier q; it reports whether
// q is the current column.
func (c *compactor) column(q []byte) bool {
	if c.colSet && bytes.Equal(q, c.col) {
		return true
	}
	c.col = append(c.col[:0], q...)
	c.colSet = true
	c.count = 0
	c.tsSet = false
	return false
}

// throttle limits a compaction's write throughput.
type throttle struct {
	limit   int64
	sleep   func(time.Duration)
	start   time.Time
	written int64
	last    int64
}

func newThrottle(limit int64, sleep func(time.Duration)) *throttle {
	return &throttle{limit: limit, sleep: sleep, start: time.Now()}
}

func (t *throttle) wrote(n int64) {
	if t.limit <= 0 {
		return
	}
	t.written += n
	if t.written-t.last < 64<<10 {
		return
	}
	t.last = t.written
	want := time.Duration(float64(t.written) / float64(t.limit) * float64(time.Second))
	if elapsed := time.Since(t.start); elapsed < want {
		t.sleep(want - elapsed)
	}
}
