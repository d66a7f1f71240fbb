package region

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/sfile"
)

// famScan is the per-family configuration of a scan.
type famScan struct {
	idx         int
	name        []byte
	quals       [][]byte // selected qualifiers, sorted; nil: all
	maxVersions int      // version tracker limit
	afterFilter int      // included cells per column when a filter is set
	minVersions int
	oldest      int64 // oldest unexpired timestamp; math.MinInt64 without TTL
	kdc         KeepDeletedCells
}

func (f *famScan) expired(ts int64) bool { return ts < f.oldest }

// deleteTracker remembers the delete markers seen in the current row and
// family (HBase's ScanDeleteTracker).
type deleteTracker struct {
	hasFamily   bool
	familyTs    int64
	famVersions []int64
	hasCol      bool
	colQual     []byte
	colType     cell.Type
	colTs       int64
	// vis are the markers with visibility tags: each masks only the cells with the same
	// visibility tags (cell.SameVisibility), one by one; the fields above hold the markers
	// without, which mask only cells without.
	vis []visMarker
}

type visMarker struct {
	t          cell.Type
	ts         int64
	qual, tags []byte
}

func (d *deleteTracker) reset() {
	d.hasFamily = false
	d.famVersions = d.famVersions[:0]
	d.hasCol = false
	d.vis = d.vis[:0]
}

func (d *deleteTracker) empty() bool {
	return !d.hasFamily && len(d.famVersions) == 0 && !d.hasCol && len(d.vis) == 0
}

func (d *deleteTracker) add(k cell.Key, tags []byte) {
	ts, t := k.Timestamp(), k.Type()
	if cell.HasVisibility(tags) {
		d.vis = append(d.vis, visMarker{t: t, ts: ts, qual: slices.Clone(k.Qualifier()), tags: slices.Clone(tags)})
		return
	}
	if d.hasFamily && ts <= d.familyTs {
		return
	}
	switch t {
	case cell.DeleteFamily:
		d.hasFamily, d.familyTs = true, ts
		return
	case cell.DeleteFamilyVersion:
		d.famVersions = append(d.famVersions, ts)
		return
	}
	q := k.Qualifier()
	if d.hasCol && t < d.colType && bytes.Equal(q, d.colQual) {
		return // a less specific marker of the same column
	}
	d.hasCol = true
	d.colQual = append(d.colQual[:0], q...)
	d.colType, d.colTs = t, ts
}

type deleteResult int

const (
	notDeleted deleteResult = iota
	familyDeleted
	familyVersionDeleted
	columnDeleted
	versionDeleted
)

func (d *deleteTracker) isDeleted(k cell.Key, tags []byte) deleteResult {
	ts := k.Timestamp()
	if cell.HasVisibility(tags) {
		for _, m := range d.vis {
			if !cell.SameVisibility(m.tags, tags) {
				continue
			}
			switch {
			case m.t == cell.DeleteFamily && ts <= m.ts,
				m.t == cell.DeleteFamilyVersion && ts == m.ts,
				m.t == cell.DeleteColumn && ts <= m.ts && bytes.Equal(k.Qualifier(), m.qual),
				m.t == cell.Delete && ts == m.ts && bytes.Equal(k.Qualifier(), m.qual):
				return versionDeleted // this cell only: others of the column may differ in visibility
			}
		}
		return notDeleted
	}
	if d.hasFamily && ts <= d.familyTs {
		return familyDeleted
	}
	if slices.Contains(d.famVersions, ts) {
		return familyVersionDeleted
	}
	if d.hasCol {
		c := bytes.Compare(k.Qualifier(), d.colQual)
		if c == 0 {
			if d.colType == cell.DeleteColumn {
				return columnDeleted
			}
			if ts == d.colTs {
				return versionDeleted
			}
			d.hasCol = false
		} else if c > 0 {
			d.hasCol = false
		}
	}
	return notDeleted
}

// action is the scanner's next move after matching a cell.
type action int

const (
	actInclude action = iota
	actIncludeNextCol
	actIncludeNextFam
	actSkip
	actNextCol
	actNextFam
	actSeek    // to s.target
	actHint    // filter hint in s.target
	actEndScan // the filter ended the scan: no more cells
)

// RegionScanner reads rows of a region (HBase's RegionScanner). Create it
// with Region.Scanner; call Next until a batch says More is false, then
// Close. It sees the MVCC snapshot of the moment it was opened.
type RegionScanner struct {
	r *Region
	// observer filters what a user read returns (SetObserver); nil without.
	observer *observed
	// expired is set by a timer when a Next call's time limit runs out (with the system clock):
	// the scan checks it at every cell and every skipped row, whatever each costs. gen tells a
	// late timer of an earlier call from the current one's.
	expired   atomic.Bool
	gen       atomic.Uint64
	s         Scan
	fams      []*famScan // selected, sorted by name
	it        *mergeIter
	files     []*storeFile
	readPoint uint64
	filter    filter.Filter
	rowFilter bool // filter has FilterRow (no partial results)
	start     []byte
	stop      []byte // forward: exclusive bound (unless IncludeStopRow); reverse: lower bound
	trMin     int64
	trMax     int64
	versions  int
	now       int64
	labels    bool // Region.SetLabelsInUse

	done     bool
	closed   bool
	needPrev bool // reversed: step to the previous row before the next
	rowsDone int

	// Current row.
	inRow    bool
	row      []byte
	arena    []byte
	kvs      []KV             // results of the batch, then the pending cells of the current row
	rowStart int              // kvs[rowStart:] are the pending cells
	rowCells []filter.RowCell // scratch for FilterRowCells
	keptKVs  []KV             // scratch for FilterRowCells
	// With Scan.CellBlock the arena is the batch's cell block and
	// arena[blockRowStart:] holds the blockPending cells of the row.
	blockRowStart  int
	blockPending   int
	cellCounts     []int32  // the last batch's, with ReuseResults
	partials       []bool   // the last batch's, with ReuseResults
	rowScratch     []byte   // scratch for FilterRowCells in CellBlock mode
	results        []Result // the last batch's, with ReuseResults
	lastArena      int
	lastKVs        int
	partialEmitted bool

	// Current family and column.
	cur         *famScan
	dt          deleteTracker
	colQual     []byte
	colSet      bool
	colCount    int
	colIncluded int
	tsSet       bool
	lastTs      int64
	lastType    cell.Type

	skipEmpty bool // skipping the puts of the empty-qualifier column
	single    bool // a Get: one row, no need to move past it
	pooled    bool // a Get's scanner: recycled by Close (see getScanners)
	rowOver   bool // the current row needs no more cells
	// famIncluded counts the cells of the current row and family that matched (StoreLimit).
	famIncluded int
	rowFresh    bool // the iterator is on the row's first cell, found by startRow

	target  []byte // seek target for actSeek / actHint
	scratch []byte
	cellsN  int
	err     error

	// joined reads the families the filter does not need to decide a row (the scan loads
	// column families on demand): only for the rows the filter keeps.
	joined *joinedFamilies
}

// joinedFamilies are the non-essential families of an on-demand scan (HBase's joined heap):
// their own sources, positioned by seeks to each row the filter keeps.
type joinedFamilies struct {
	fams    []*famScan
	it      *mergeIter
	started bool
}

func (r *Region) resolveFamilies(cols []Column, raw bool, versions int, now int64, filtered bool) ([]*famScan, error) {
	if len(cols) == 0 {
		// Every family: no maps.
		slab := make([]famScan, len(r.fams))
		out := make([]*famScan, len(r.fams))
		for i := range r.fams {
			r.initFamScan(&slab[i], i, raw, versions, now, filtered)
			out[i] = &slab[i]
		}
		return out, nil
	}
	selected := map[int][][]byte{}
	whole := map[int]bool{}
	for _, c := range cols {
		i := r.familyIndex(c.Family)
		if i < 0 {
			return nil, fmt.Errorf("%w: %q (table %s:%s has %s)", ErrNoSuchFamily, c.Family, r.table.Namespace, r.table.Name, famList(r.fams))
		}
		if c.Qualifier == nil {
			whole[i] = true
		} else {
			selected[i] = append(selected[i], c.Qualifier)
		}
	}
	var out []*famScan
	for i, f := range r.fams {
		quals, sel := selected[i]
		if len(cols) > 0 && !sel && !whole[i] {
			continue
		}
		_ = f
		fs := &famScan{}
		r.initFamScan(fs, i, raw, versions, now, filtered)
		if !whole[i] && sel {
			slices.SortFunc(quals, bytes.Compare)
			fs.quals = slices.CompactFunc(quals, bytes.Equal)
		}
		out = append(out, fs)
	}
	return out, nil
}

func (r *Region) initFamScan(fs *famScan, i int, raw bool, versions int, now int64, filtered bool) {
	f := &r.fams[i]
	*fs = famScan{idx: i, name: r.famNames[i], minVersions: f.MinVersions, kdc: f.KeepDeletedCells, oldest: math.MinInt64}
	if raw {
		fs.maxVersions = versions
	} else {
		fs.maxVersions = min(versions, f.maxVersions())
	}
	fs.afterFilter = fs.maxVersions
	if filtered {
		// With a filter the versions counted before it are the family's (every one in a raw
		// scan), and the read's own limit applies to the cells the filter keeps: a filter for an
		// older version finds it (HBase's ScanQueryMatcher.getTrackers).
		if raw {
			fs.maxVersions = math.MaxInt
		} else {
			fs.maxVersions = f.maxVersions()
		}
	}
	if ttl := f.ttlMillis(); ttl > 0 && !raw {
		// A raw scan sees cells past the family's TTL until a compaction drops them (HBase's
		// StoreScanner: oldestUnexpiredTS 0 for raw scans).
		fs.oldest = now - ttl
	}
}

// memstoreReadErr is the error of a read whose memstore refused it: a read that passed its check
// just before a close ended finds the memstore closed, and says the region is (ErrClosed, which
// a region server answers as "not serving here").
func memstoreReadErr(region string, err error) error {
	if errors.Is(err, memstore.ErrClosed) {
		return fmt.Errorf("%w: %s: %w", ErrClosed, region, err)
	}
	return fmt.Errorf("region %s: %w", region, err)
}

// Scanner opens a scanner.
func (r *Region) Scanner(s *Scan) (*RegionScanner, error) {
	if err := r.checkReadable(); err != nil {
		return nil, err
	}
	return r.newScanner(s, nil)
}

// getScanners recycles the scanners of Gets (RegionScanner.pooled): a Get
// makes one per read, closes it exactly once and never touches it after.
var getScanners = sync.Pool{New: func() any { return new(RegionScanner) }}

func (r *Region) newScanner(scan *Scan, getRow []byte) (*RegionScanner, error) {
	var s *RegionScanner
	if getRow != nil {
		s = getScanners.Get().(*RegionScanner)
		s.r, s.s, s.filter, s.pooled = r, *scan, scan.Filter, true
	} else {
		s = &RegionScanner{r: r, s: *scan, filter: scan.Filter}
	}
	s.observer = nil
	if ob := r.observer.Load(); ob != nil && ob.hooks.FilterRead && !scan.Raw && !scan.ReadUncommitted {
		s.observer = ob // internal reads (conditions, increments) and raw scans see the cells as stored
	}
	s.versions = scan.MaxVersions
	if s.versions <= 0 {
		s.versions = 1
	}
	if scan.StoreLimit < 0 || scan.StoreOffset < 0 {
		return nil, fmt.Errorf("%w: store limit %d, offset %d", ErrInvalid, scan.StoreLimit, scan.StoreOffset)
	}
	// [t, t) is empty, not an error (HBase's TimeRange): the scan returns nothing.
	if scan.TimeRange.Min < 0 || scan.TimeRange.max() < scan.TimeRange.Min {
		return nil, fmt.Errorf("%w: time range [%d, %d)", ErrInvalid, scan.TimeRange.Min, scan.TimeRange.Max)
	}
	s.trMin, s.trMax = scan.TimeRange.Min, scan.TimeRange.max()
	s.now = r.nowMs()
	fams, err := r.resolveFamilies(scan.Columns, scan.Raw, s.versions, s.now, s.filter != nil)
	if err != nil {
		return nil, err
	}
	s.fams = fams
	if s.filter != nil {
		s.filter.SetReversed(scan.Reversed)
		s.rowFilter = s.filter.HasFilterRow()
	}
	var joinedFams []*famScan
	if scan.LoadColumnFamiliesOnDemand && s.rowFilter && !scan.Reversed && getRow == nil {
		// The families the filter needs are read first; the others only for rows it keeps
		// (a row filter: it decides once the row is complete, and rows are never cut).
		var essential []*famScan
		for _, fs := range fams {
			if filter.IsFamilyEssential(s.filter, fs.name) {
				essential = append(essential, fs)
			} else {
				joinedFams = append(joinedFams, fs)
			}
		}
		if len(essential) > 0 && len(joinedFams) > 0 {
			s.fams = essential
		} else {
			joinedFams = nil
		}
	}
	// Row bounds.
	lo, hi := r.info.StartKey, r.info.EndKey // region range [lo, hi)
	if !scan.Reversed {
		s.start = scan.StartRow
		if bytes.Compare(s.start, lo) < 0 {
			s.start = lo
			s.s.ExcludeStartRow = false
		}
		s.stop = scan.StopRow
		if len(hi) > 0 && (len(s.stop) == 0 || bytes.Compare(s.stop, hi) > 0 || bytes.Equal(s.stop, hi) && s.s.IncludeStopRow) {
			s.stop = hi
			s.s.IncludeStopRow = false
		}
	} else {
		s.start = scan.StartRow
		if len(hi) > 0 && (len(s.start) == 0 || bytes.Compare(s.start, hi) >= 0) {
			s.start = hi
			s.s.ExcludeStartRow = true
		}
		s.stop = scan.StopRow
		if bytes.Compare(s.stop, lo) < 0 || len(s.stop) == 0 && len(lo) > 0 {
			s.stop = lo
			s.s.IncludeStopRow = true
		}
	}
	s.single = getRow != nil
	s.labels = r.labelsInUse.Load()

	// Sources: the selected families' memstore segments and files. The read point is taken under
	// the view lock, before the segments: an EAGER family's in-memory merge swaps its result in
	// under that lock, and drops only versions hidden at a read point it took before, so segments
	// held from after a swap are read at a point that sees what it kept (taken outside the lock,
	// a merge swapped in meanwhile could leave this scan no version of a column). Taken before
	// the segments, no edit above it is seen in one family and not another (a flush may swap a
	// family's segments between two families' captures).
	r.viewMu.RLock()
	s.readPoint = r.mvcc.readPoint.Load()
	if scan.ReadUncommitted {
		s.readPoint = math.MaxUint64
	}
	scanners, err := r.mem.scanners(s.readPoint, s.fams, make([]cell.Scanner, 0, 8))
	if err != nil {
		r.viewMu.RUnlock()
		return nil, memstoreReadErr(r.name, err)
	}
	var jmem []cell.Scanner
	if joinedFams != nil {
		if jmem, err = r.mem.scanners(s.readPoint, joinedFams, make([]cell.Scanner, 0, 4)); err != nil {
			r.viewMu.RUnlock()
			for _, sc := range scanners {
				sc.Close()
			}
			return nil, memstoreReadErr(r.name, err)
		}
	}
	set := r.files.Load()
	var keyLo, keyHi []byte // row range that can matter
	if scan.Reversed {
		keyLo, keyHi = s.stop, nil
		if len(s.start) > 0 {
			keyHi = append(slices.Clone(s.start), 0)
		}
	} else {
		keyLo, keyHi = s.start, nil
		if len(s.stop) > 0 {
			keyHi = s.stop
			if s.s.IncludeStopRow {
				keyHi = append(slices.Clone(s.stop), 0)
			}
		}
	}
	// The store files of the selected families that can hold cells of the scan: each retained
	// until Close, its scanner added to *to.
	addFiles := func(fams []*famScan, to *[]cell.Scanner) {
		for _, fs := range fams {
			fam := &r.fams[fs.idx]
			for _, f := range set.byFamily[fs.idx] {
				if !f.mayOverlap(keyLo, keyHi) {
					continue
				}
				if f.maxTs() < s.trMin {
					continue // every cell is older than the range
				}
				if fs.minVersions == 0 && f.maxTs() < fs.oldest {
					continue // every cell expired
				}
				if getRow != nil {
					if len(fs.quals) == 1 && fam.Bloom == sfile.BloomRowCol {
						if !f.mayContainRowCol(getRow, fs.name, fs.quals[0]) && !f.mayContainRowCol(getRow, fs.name, nil) {
							continue
						}
					} else if !f.mayContainRow(getRow) {
						continue
					}
				}
				if !f.retain() {
					continue
				}
				s.files = append(s.files, f)
				*to = append(*to, f.newScanner(!scan.NoCache && !fam.NoBlockCache, s.pooled))
			}
		}
	}
	addFiles(s.fams, &scanners)
	if joinedFams != nil {
		// The joined families' own sources: their memstores (at the same read point) and their
		// files.
		jscanners := jmem
		addFiles(joinedFams, &jscanners)
		s.joined = &joinedFamilies{fams: joinedFams, it: newMergeIter(jscanners, false)}
	}
	r.viewMu.RUnlock()

	s.it = newMergeIter(scanners, scan.Reversed)
	if !scan.Reversed {
		if s.s.ExcludeStartRow {
			s.scratch = cell.AppendLastOnRow(s.scratch[:0], s.start)
		} else {
			s.scratch = cell.AppendFirstOnRow(s.scratch[:0], s.start)
		}
		s.it.seekFirst(s.scratch)
	} else {
		if len(s.start) == 0 {
			s.it.seekLastRowAtOrBefore(nil, true)
		} else {
			s.it.seekLastRowAtOrBefore(s.start, !s.s.ExcludeStartRow)
		}
	}
	r.metrics.ReadRequests.Add(1)
	return s, nil
}

// Close releases the scanner's memstore segments and store files.
func (s *RegionScanner) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.it != nil {
		s.it.close()
	}
	if s.joined != nil {
		s.joined.it.close()
	}
	for _, f := range s.files {
		f.release()
	}
	s.files = nil
	if s.pooled {
		// Results point into arena and kvs: a recycled scanner starts from
		// zero (only the seek scratch buffer is kept).
		scratch := s.scratch[:0]
		*s = RegionScanner{scratch: scratch}
		getScanners.Put(s)
	}
	return nil
}

// beyondStop reports whether row is past the scan's end.
func (s *RegionScanner) beyondStop(row []byte) bool {
	if !s.s.Reversed {
		if len(s.stop) == 0 {
			return false
		}
		c := bytes.Compare(row, s.stop)
		return c > 0 || c == 0 && !s.s.IncludeStopRow
	}
	if s.stop == nil {
		return false
	}
	c := bytes.Compare(row, s.stop)
	return c < 0 || c == 0 && !s.s.IncludeStopRow
}

type rowStatus int

const (
	rowEnded rowStatus = iota
	rowTimedOut
	rowSizeLimit
)

// Next returns the next batch of rows.
func (s *RegionScanner) Next() (ScanBatch, error) {
	var b ScanBatch
	if s.closed {
		return b, fmt.Errorf("%w: scanner closed", ErrClosed)
	}
	if err := s.r.checkReadable(); err != nil {
		return b, err
	}
	if s.err != nil {
		return b, s.err
	}
	caching := s.s.Caching
	if caching <= 0 {
		caching = 100
	}
	var deadline time.Time
	if s.s.TimeLimit > 0 {
		deadline = s.r.cfg.Clock().Add(s.s.TimeLimit)
		if s.r.cfg.realClock {
			gen := s.gen.Add(1)
			s.expired.Store(false)
			t := time.AfterFunc(s.s.TimeLimit, func() {
				if s.gen.Load() == gen {
					s.expired.Store(true)
				}
			})
			defer t.Stop()
		}
	}
	var size int64
	// Results of this batch are carved from two slabs (cell bytes and
	// KV headers), sized from the previous batch.
	if s.lastArena == 0 {
		s.lastArena = min(caching*128, 1<<20)
		s.lastKVs = min(caching, 1<<14)
	}
	s.newBatch(&b, caching)
	defer func() {
		s.lastArena, s.lastKVs = cap(s.arena), cap(s.kvs)
		if s.s.ReuseResults {
			s.results, s.cellCounts, s.partials = b.Results, b.CellsPerResult, b.PartialPerResult
		}
	}()
	for !s.done && b.len() < caching {
		if !s.inRow {
			if st := s.startRow(deadline); st == rowTimedOut {
				b.Heartbeat = true
				b.Cursor = slices.Clone(s.row)
				break
			}
			if s.done {
				break
			}
		}
		rowFrom := size
		st := s.processRow(&b, &size, deadline)
		if s.err != nil {
			return ScanBatch{}, s.err
		}
		if st == rowTimedOut {
			b.Heartbeat = true
			b.Cursor = slices.Clone(s.row)
			break
		}
		if st == rowSizeLimit {
			break
		}
		if !s.finishRow(&b, &size) {
			// A row the filter dropped counts for nothing: with its size counted, a filter
			// dropping rows ended batches with no result and no heartbeat, which HBase's client
			// reads as the region's end, skipping the rest of it.
			size = rowFrom
		}
		if s.err != nil {
			return ScanBatch{}, s.err
		}
		if s.s.MaxResultSize > 0 && size >= s.s.MaxResultSize {
			break
		}
	}
	if !s.done && !s.inRow && !b.Heartbeat {
		// Find the next row now, so that More is exact.
		if st := s.startRow(deadline); st == rowTimedOut {
			b.Heartbeat = true
			b.Cursor = slices.Clone(s.row)
		}
	}
	if err := s.it.err; err != nil {
		s.err = fmt.Errorf("region %s: %w", s.r.name, err)
		return ScanBatch{}, s.err
	}
	if s.s.CellBlock {
		b.Block = s.arena[:s.blockRowStart:s.blockRowStart]
	}
	b.More = !s.done
	return b, nil
}

// blockArenas holds the cell-block memory of scanners between calls (see
// ReleaseBatch), so idle scanners hold none.
var blockArenas sync.Pool // *[]byte

// ReleaseBatch says the caller is done with the last batch and the scanner
// may sit idle (a scanner held for a client between calls). Its store-file
// sources give back their current blocks (mergeIter.park), so an idle
// scanner pins no L2 slot; the next Next loads them again. With CellBlock
// and ReuseResults its batch memory goes back to a pool shared by all
// scanners, so open scanners cost memory only while a call uses them. The
// next Next takes memory from the pool. Batch memory stays while cells of
// a row are pending.
func (s *RegionScanner) ReleaseBatch() {
	if s.closed {
		return
	}
	s.it.park()
	if s.joined != nil {
		s.joined.it.park()
	}
	if !s.s.CellBlock || !s.s.ReuseResults || s.arena == nil || len(s.arena) > s.blockRowStart {
		return
	}
	a := s.arena[:0]
	blockArenas.Put(&a)
	s.arena, s.blockRowStart = nil, 0
	s.cellCounts, s.partials = nil, nil
}

// newBatch prepares the memory of a batch: fresh, or the previous batch's
// with ReuseResults. Cells still pending (a row cut by a time limit without
// partial results) move to the start of the new batch.
func (s *RegionScanner) newBatch(b *ScanBatch, caching int) {
	if s.s.CellBlock {
		if s.s.ReuseResults && s.arena == nil {
			if a, ok := blockArenas.Get().(*[]byte); ok {
				s.arena = (*a)[:0]
			}
		}
		pending := s.arena[s.blockRowStart:]
		if s.s.ReuseResults && s.arena != nil && len(pending) == 0 {
			s.arena, b.CellsPerResult, b.PartialPerResult = s.arena[:0], s.cellCounts[:0], s.partials[:0]
		} else {
			s.arena = append(make([]byte, 0, max(s.lastArena, len(pending))), pending...)
			b.CellsPerResult = make([]int32, 0, min(caching, 1<<14))
			b.PartialPerResult = make([]bool, 0, min(caching, 1<<14))
		}
		s.blockRowStart = 0
		return
	}
	pending := s.kvs[s.rowStart:]
	if s.s.ReuseResults && s.arena != nil && len(pending) == 0 {
		// The pending cells point into the arena, so it is reused only
		// without them.
		s.arena, s.kvs, b.Results = s.arena[:0], s.kvs[:0], s.results[:0]
	} else {
		s.arena = make([]byte, 0, s.lastArena)
		s.kvs = append(make([]KV, 0, max(s.lastKVs, len(pending))), pending...)
		b.Results = make([]Result, 0, min(caching, 1<<14))
	}
	s.rowStart = 0
}

// pendingCells returns the number of cells of the current row not yet
// returned.
func (s *RegionScanner) pendingCells() int {
	if s.s.CellBlock {
		return s.blockPending
	}
	return len(s.kvs) - s.rowStart
}

// dropPending forgets the pending cells of the current row.
func (s *RegionScanner) dropPending() {
	if s.s.CellBlock {
		s.arena = s.arena[:s.blockRowStart]
		s.blockPending = 0
		return
	}
	s.kvs = s.kvs[:s.rowStart]
}

// timeUp says whether the Next call's time limit ran out: the timer's flag with the system
// clock (cheap enough for every cell), else a read of the configured clock.
func (s *RegionScanner) timeUp(deadline time.Time) bool {
	if deadline.IsZero() {
		return false
	}
	if s.r.cfg.realClock {
		return s.expired.Load()
	}
	return !s.r.cfg.Clock().Before(deadline)
}

// startRow positions on the next row that may be returned.
func (s *RegionScanner) startRow(deadline time.Time) rowStatus {
	for {
		if s.filter != nil && s.filter.FilterAllRemaining() {
			s.done = true
			return rowEnded
		}
		if s.needPrev {
			s.it.prevRow()
			s.needPrev = false
		}
		if !s.it.valid() {
			s.done = true
			return rowEnded
		}
		row := s.it.key().Row()
		if s.beyondStop(row) {
			s.done = true
			return rowEnded
		}
		s.row = append(s.row[:0], row...)
		// A new row starts with no delete markers and no column; the
		// family found for the last row is kept (most rows start with it).
		s.dt.reset()
		s.colSet, s.skipEmpty = false, false
		s.famIncluded = 0
		s.rowFresh = true
		s.dropPending()
		s.partialEmitted = false
		if s.filter != nil {
			s.filter.Reset()
			if s.filter.FilterRowKey(s.row) {
				s.skipRow()
				s.r.metrics.FilteredReadRequests.Add(1)
				if s.timeUp(deadline) {
					return rowTimedOut
				}
				continue
			}
		}
		s.inRow = true
		return rowEnded
	}
}

func (s *RegionScanner) skipRow() {
	if s.s.Reversed {
		s.needPrev = true
		return
	}
	s.scratch = cell.AppendLastOnRow(s.scratch[:0], s.row)
	s.it.seek(s.scratch)
}

// processRow consumes the cells of the current row.
func (s *RegionScanner) processRow(b *ScanBatch, size *int64, deadline time.Time) rowStatus {
	it := s.it
	s.rowOver = false
	fresh := s.rowFresh // the first cell is known to be in the row
	s.rowFresh = false
	for it.valid() && !s.rowOver {
		k := it.key()
		if !s.s.Reversed && !fresh && !bytes.Equal(k.Row(), s.row) {
			break
		}
		fresh = false
		s.cellsN++
		// Every cell with the system clock (an atomic flag); every 64 with a test's clock, whose
		// reads may advance it.
		if (s.r.cfg.realClock || s.cellsN&63 == 0) && s.timeUp(deadline) {
			if s.pendingCells() > 0 && s.s.AllowPartialResults && !s.rowFilter {
				s.emitPartial(b)
			}
			return rowTimedOut
		}
		v, seq := it.value(), it.seq()
		act := s.match(k, v, it.tags(), seq)
		switch act {
		case actInclude, actIncludeNextCol, actIncludeNextFam:
			s.include(b, k, v, it.tags(), seq, size)
			switch act {
			case actInclude:
				it.next()
			case actIncludeNextCol:
				s.seekNextCol(k)
			default:
				s.seekNextFamily(k)
			}
			// A partial result only when the row has more cells (HBase's moreCellsInRow): a row
			// whose last cell crosses the size ends with a whole result, and the batch ends after it.
			if s.s.MaxResultSize > 0 && *size >= s.s.MaxResultSize && s.s.AllowPartialResults && !s.rowFilter && s.moreInRow() {
				s.emitPartial(b)
				return rowSizeLimit
			}
		case actSkip:
			it.next()
		case actNextCol:
			s.seekNextCol(k)
		case actNextFam:
			s.seekNextFamily(k)
		case actSeek:
			it.seek(s.target)
		case actHint:
			s.seekHint(k)
		case actEndScan:
			s.rowOver = true // startRow ends the scan: the filter filters all that remains
		}
	}
	return rowEnded
}

// moreInRow says whether the iterator is still on the current row (in reversed mode it holds
// only the current row's cells).
func (s *RegionScanner) moreInRow() bool {
	return s.it.valid() && (s.s.Reversed || bytes.Equal(s.it.key().Row(), s.row))
}

func (s *RegionScanner) include(b *ScanBatch, k cell.Key, v, tags []byte, seq uint64, size *int64) {
	s.checkVisible(seq)
	if s.s.Batch > 0 && s.pendingCells() >= s.s.Batch && !s.rowFilter {
		s.emitPartial(b)
	}
	if s.filter != nil {
		v = s.filter.TransformCell(k, v)
	}
	*size += int64(len(k) + len(v) + 16)
	if s.s.CellBlock {
		s.arena = cell.AppendKeyValueFromKey(s.arena, k, v)
		s.blockPending++
		return
	}
	off := len(s.arena)
	s.arena = append(s.arena, k...)
	s.arena = append(s.arena, v...)
	kk := cell.Key(s.arena[off : off+len(k) : off+len(k)])
	ve := off + len(k) + len(v)
	vv := s.arena[off+len(k) : ve : ve]
	var tt []byte
	if len(tags) > 0 {
		s.arena = append(s.arena, tags...)
		tt = s.arena[ve:len(s.arena):len(s.arena)]
	}
	s.kvs = append(s.kvs, KV{Key: kk, Value: vv, Tags: tt, Seq: seq})
}

func (s *RegionScanner) emitPartial(b *ScanBatch) {
	if s.pendingCells() == 0 {
		return
	}
	if s.observer != nil {
		if s.observeRow(true); s.err != nil || s.pendingCells() == 0 {
			return
		}
	}
	s.emit(b, true)
	s.partialEmitted = true
}

// emit returns the pending cells as a result.
func (s *RegionScanner) emit(b *ScanBatch, partial bool) {
	if s.s.CellBlock {
		b.CellsPerResult = append(b.CellsPerResult, int32(s.blockPending))
		b.PartialPerResult = append(b.PartialPerResult, partial)
		s.blockRowStart, s.blockPending = len(s.arena), 0
		return
	}
	b.Results = append(b.Results, s.makeResult(partial))
}

// finishRow ends the current row's result; it says whether the row returned any cell.
func (s *RegionScanner) finishRow(b *ScanBatch, size *int64) bool {
	s.inRow = false
	if s.s.Reversed {
		s.needPrev = true
	}
	if s.filter != nil && s.rowFilter {
		s.filterRowCells()
		switch {
		case s.pendingCells() == 0:
			// A row left with no cells is neither offered to FilterRow, so row-counting filters
			// (Page) count only rows that are returned, nor completed from its joined families
			// (HBase's FilterWrapper and RegionScanner).
		case s.filter.FilterRow():
			s.dropPending()
			s.r.metrics.FilteredReadRequests.Add(1)
		case s.joined != nil:
			s.addJoined(b, size)
		}
	}
	if s.observer != nil {
		if s.observeRow(false); s.err != nil {
			return false
		}
	}
	emitted := s.pendingCells() > 0
	if emitted {
		s.emit(b, false)
	}
	if s.single {
		s.done = true
	}
	if emitted || s.partialEmitted {
		s.rowsDone++
		if s.s.Limit > 0 && s.rowsDone >= s.s.Limit {
			s.done = true
		}
		return true
	}
	return false
}

// RowsDone is the number of rows the scanner has returned cells of (whole or in part).
func (s *RegionScanner) RowsDone() int64 { return int64(s.rowsDone) }

// addJoined adds the cells of the non-essential families to the row the filter kept (HBase's
// populateFromJoinedHeap): the joined sources seek to the row and the row's cells go through
// the same matching (versions, deletes, time range, the filter's FilterCell); then the row's
// cells are put back in store order, the joined families may sort before the essential ones.
func (s *RegionScanner) addJoined(b *ScanBatch, size *int64) {
	j := s.joined
	s.scratch = cell.AppendFirstOnRow(s.scratch[:0], s.row)
	if !j.started {
		j.it.seekFirst(s.scratch)
		j.started = true
	} else {
		j.it.seek(s.scratch)
	}
	before := s.pendingCells()
	it, fams := s.it, s.fams
	s.it, s.fams, s.cur = j.it, j.fams, nil
	s.dt.reset()
	s.colSet, s.skipEmpty, s.rowFresh = false, false, false
	s.processRow(b, size, time.Time{})
	s.it, s.fams, s.cur = it, fams, nil
	if err := j.it.err; err != nil && s.err == nil {
		s.err = fmt.Errorf("region %s: %w", s.r.name, err)
	}
	if s.pendingCells() > before && before > 0 {
		s.sortPending()
	}
}

// sortPending puts the pending cells of the row in store order.
func (s *RegionScanner) sortPending() {
	if !s.s.CellBlock {
		slices.SortStableFunc(s.kvs[s.rowStart:], func(a, b KV) int { return cell.Compare(a.Key, b.Key) })
		return
	}
	cells := s.blockRowCells()
	slices.SortStableFunc(cells, func(a, b filter.RowCell) int { return cell.Compare(a.Key, b.Key) })
	s.setBlockRowCells(cells)
}

// blockRowCells lists the pending cells of the row in CellBlock mode (serialized at the end of
// the block).
func (s *RegionScanner) blockRowCells() []filter.RowCell {
	s.rowCells = s.rowCells[:0]
	for b := s.arena[s.blockRowStart:]; len(b) > 0; {
		n := cell.KeyValue(b).Len()
		kv := cell.KeyValue(b[:n:n])
		s.rowCells = append(s.rowCells, filter.RowCell{Key: kv.Key(), Value: kv.Value()})
		b = b[n:]
	}
	return s.rowCells
}

// setBlockRowCells replaces the pending cells of the row in CellBlock mode.
func (s *RegionScanner) setBlockRowCells(cells []filter.RowCell) {
	s.rowScratch = s.rowScratch[:0]
	for _, c := range cells {
		s.rowScratch = cell.AppendKeyValueFromKey(s.rowScratch, c.Key, c.Value)
	}
	s.arena = append(s.arena[:s.blockRowStart], s.rowScratch...)
	s.blockPending = len(cells)
}

// filterRowCells hands the pending cells of the row to the filter's
// FilterRowCells and keeps, in order, the cells it returns.
func (s *RegionScanner) filterRowCells() {
	if s.s.CellBlock {
		s.filterBlockRowCells()
		return
	}
	pending := s.kvs[s.rowStart:]
	s.rowCells = s.rowCells[:0]
	for i := range pending {
		s.rowCells = append(s.rowCells, filter.RowCell{Key: pending[i].Key, Value: pending[i].Value})
	}
	kept := s.filter.FilterRowCells(s.rowCells)
	if len(kept) == len(pending) {
		return
	}
	// Filters drop cells and keep the order: find each kept cell among the
	// pending ones (by the address of its key) to keep its sequence id.
	s.keptKVs = s.keptKVs[:0]
	j := 0
	for _, c := range kept {
		for j < len(pending) && (len(c.Key) == 0 || &pending[j].Key[0] != &c.Key[0]) {
			j++
		}
		if j < len(pending) {
			s.keptKVs = append(s.keptKVs, pending[j])
			j++
		} else {
			s.keptKVs = append(s.keptKVs, KV{Key: c.Key, Value: c.Value})
		}
	}
	s.kvs = append(s.kvs[:s.rowStart], s.keptKVs...)
}

// filterBlockRowCells is filterRowCells in CellBlock mode: the pending
// cells are the serialized cells at the end of the block.
func (s *RegionScanner) filterBlockRowCells() {
	kept := s.filter.FilterRowCells(s.blockRowCells())
	if len(kept) == s.blockPending {
		return
	}
	s.setBlockRowCells(kept)
}

// makeResult turns the pending cells into a Result.
func (s *RegionScanner) makeResult(partial bool) Result {
	res := Result{Cells: s.kvs[s.rowStart:len(s.kvs):len(s.kvs)], Partial: partial}
	s.rowStart = len(s.kvs)
	if len(res.Cells) > 0 {
		res.Row = res.Cells[0].Row()
	} else {
		res.Row = slices.Clone(s.row)
	}
	return res
}

// match decides what to do with a cell (HBase's UserScanQueryMatcher,
// RawScanQueryMatcher and ScanWildcard/ExplicitColumnTracker).
func (s *RegionScanner) match(k cell.Key, v, tags []byte, seq uint64) action {
	if seq > s.readPoint {
		return actSkip
	}
	fam := k.Family()
	if s.cur == nil || !bytes.Equal(fam, s.cur.name) {
		s.cur = nil
		for _, f := range s.fams {
			if bytes.Equal(f.name, fam) {
				s.cur = f
				break
			}
		}
		s.dt.reset()
		s.colSet = false
		s.skipEmpty = false
		s.famIncluded = 0
		if s.cur == nil {
			// Not a selected family: go to the next selected one.
			for _, f := range s.fams {
				if bytes.Compare(f.name, fam) > 0 {
					s.target = cell.AppendFirstOnRowFamily(s.target[:0], s.row, f.name)
					return actSeek
				}
			}
			return s.endOfRow()
		}
	}
	f := s.cur
	ts := k.Timestamp()
	t := k.Type()
	if s.skipEmpty {
		if len(k.Qualifier()) == 0 {
			if !t.IsDelete() {
				return actSkip
			}
		} else {
			s.skipEmpty = false
		}
	}
	if f.minVersions == 0 && f.expired(ts) {
		return actNextCol
	}
	if tags != nil && cell.TTLExpired(tags, ts, s.now) {
		// Past its per-cell TTL: skipped like HBase's preCheck, for every
		// scan (raw too) and whatever MIN_VERSIONS says; older versions of
		// the column may still be visible.
		return actSkip
	}
	if t.IsDelete() && !s.s.Raw {
		var use bool
		if f.kdc != KeepDeletedFalse {
			use = ts >= s.trMin && ts < s.trMax
		} else {
			use = ts >= s.trMin
		}
		if use {
			s.dt.add(k, tags)
		}
		return actSkip
	}
	if !s.s.Raw && !s.dt.empty() {
		switch s.dt.isDeleted(k, tags) {
		case familyDeleted, columnDeleted:
			if s.labels {
				return actSkip // the next cell may have other visibility tags
			}
			return actNextCol
		case versionDeleted, familyVersionDeleted:
			return actSkip
		}
	}
	if ts >= s.trMax {
		return actSkip
	}
	if ts < s.trMin {
		return actNextCol
	}
	q := k.Qualifier()
	if f.quals != nil {
		i, found := slices.BinarySearchFunc(f.quals, q, bytes.Compare)
		if !found {
			if len(q) == 0 && !s.s.Raw {
				// Step through the empty-qualifier column: it holds the
				// family markers.
				s.skipEmpty = true
				return actSkip
			}
			if i < len(f.quals) {
				s.target = cell.AppendFirstOnColumn(s.target[:0], s.row, f.name, f.quals[i])
				return actSeek
			}
			return actNextFam
		}
	}
	// A cell the read may not see is skipped before the versions are counted, so an older
	// version it may see takes its place (HBase 2 filters before checking versions).
	// A raw scan returns delete markers: those too only when the read may see them (HBase's raw
	// matcher runs markers through its visibility and ACL filters). Elsewhere a marker the read
	// may not see still deletes (visibility deletes are matched by their labels).
	if s.s.CellCheck != nil && (!t.IsDelete() || s.s.Raw) && !s.s.CellCheck(k, tags) {
		return actSkip
	}
	// Versions.
	if !s.colSet || !bytes.Equal(q, s.colQual) {
		s.colQual = append(s.colQual[:0], q...)
		s.colSet = true
		s.colCount, s.colIncluded, s.tsSet = 0, 0, false
	} else if s.tsSet && ts == s.lastTs && t == s.lastType {
		return actSkip // an older write of the same cell
	}
	if !t.IsDelete() {
		s.colCount++
	}
	if s.colCount > f.maxVersions {
		return actNextCol
	}
	if !(s.colCount <= f.minVersions || !f.expired(ts)) {
		return actNextCol
	}
	s.tsSet, s.lastTs, s.lastType = true, ts, t
	act := actInclude
	if s.filter != nil {
		rc := s.filter.FilterCell(k, v)
		if !rc.Includes() && s.filter.FilterAllRemaining() {
			// The filter has ended the scan at this cell (WhileMatchFilter): the row ends here
			// with the cells before it, and no later cell is matched (HBase's DONE_SCAN).
			return actEndScan
		}
		switch rc {
		case filter.Skip:
			return actSkip
		case filter.NextCol:
			return actNextCol
		case filter.NextRow:
			return actNextFam
		case filter.SeekNextUsingHint:
			return actHint
		case filter.IncludeAndNextCol:
			act = actIncludeNextCol
		case filter.IncludeAndSeekNextRow:
			act = actIncludeNextFam
		}
		if s.colIncluded >= f.afterFilter {
			return actNextCol
		}
		s.colIncluded++
	}
	if act == actInclude && !s.s.Raw && s.colCount >= f.maxVersions && f.quals != nil && !s.skipEmpty &&
		bytes.Equal(q, f.quals[len(f.quals)-1]) {
		act = actIncludeNextFam // the last wanted column is complete
	}
	if s.s.StoreLimit > 0 || s.s.StoreOffset > 0 {
		// Cells per row and family, versions counted (HBase's StoreScanner countPerRow).
		s.famIncluded++
		if s.s.StoreLimit > 0 && s.famIncluded > s.s.StoreLimit+s.s.StoreOffset {
			return actNextFam
		}
		if s.famIncluded <= s.s.StoreOffset {
			switch act { // not returned, but the move it asked for stands
			case actIncludeNextCol:
				return actNextCol
			case actIncludeNextFam:
				return actNextFam
			}
			return actSkip
		}
	}
	return act
}

// endOfRow finishes the row: forward by seeking past it, reversed by
// parking the row's sources.
func (s *RegionScanner) endOfRow() action {
	if s.s.Reversed {
		s.it.endRow()
		return actSkipNone
	}
	s.target = cell.AppendLastOnRow(s.target[:0], s.row)
	return actSeek
}

// actSkipNone: the iterator already moved (nothing to do).
const actSkipNone action = -1

func (s *RegionScanner) seekNextCol(k cell.Key) {
	if len(k.Qualifier()) == 0 && !s.s.Raw {
		// The empty-qualifier column also holds the family's
		// DeleteFamily(Version) markers, which must still be seen: step
		// through it, skipping its puts.
		s.skipEmpty = true
		s.it.next()
		return
	}
	s.scratch = cell.AppendLastOnColumn(s.scratch[:0], k.Row(), k.Family(), k.Qualifier())
	s.it.seek(s.scratch)
}

// nextFamilyKey returns the first key of the next selected family of the
// row after fam, or nil.
func (s *RegionScanner) nextFamilyKey(fam []byte) []byte {
	for _, f := range s.fams {
		if bytes.Compare(f.name, fam) > 0 {
			s.scratch = cell.AppendFirstOnRowFamily(s.scratch[:0], s.row, f.name)
			return s.scratch
		}
	}
	return nil
}

func (s *RegionScanner) seekNextFamily(k cell.Key) {
	if nk := s.nextFamilyKey(k.Family()); nk != nil {
		s.it.seek(nk)
		return
	}
	if s.single {
		s.rowOver = true // a Get is done with its row: no seek needed
		return
	}
	if s.s.Reversed {
		s.it.endRow()
		return
	}
	s.scratch = cell.AppendLastOnRow(s.scratch[:0], s.row)
	s.it.seek(s.scratch)
}

func (s *RegionScanner) seekHint(k cell.Key) {
	h := s.filter.NextCellHint(k)
	if h == nil || cell.Compare(h, k) <= 0 {
		s.it.next()
		return
	}
	h = slices.Clone(h)
	if len(k.Qualifier()) == 0 && !s.s.Raw && !cell.SameColumn(h, k) {
		// Do not jump over the family markers of the empty-qualifier
		// column: step through it; the filter hints again afterwards.
		s.skipEmpty = true
		s.it.next()
		return
	}
	if nk := s.nextFamilyKey(k.Family()); nk != nil {
		if cell.Compare(h, nk) > 0 {
			s.it.seek(nk)
			return
		}
		s.it.seek(h)
		return
	}
	if s.s.Reversed && !cell.SameRow(h, k) {
		s.it.endRow()
		return
	}
	s.it.seek(h)
}

// Get reads one row.
func (r *Region) Get(g *Get) (*Result, error) {
	if err := r.checkReadable(); err != nil {
		return nil, err
	}
	return r.get(g, false)
}

func (r *Region) get(g *Get, uncommitted bool) (*Result, error) {
	if err := r.checkRow(g.Row); err != nil {
		return nil, err
	}
	sc, err := r.newScanner(&Scan{StartRow: g.Row, StopRow: g.Row, IncludeStopRow: true, Columns: g.Columns,
		TimeRange: g.TimeRange, MaxVersions: g.MaxVersions, Filter: g.Filter, CellCheck: g.CellCheck, Caching: 1, NoCache: g.NoCache,
		ReadUncommitted: uncommitted, StoreLimit: g.StoreLimit, StoreOffset: g.StoreOffset}, g.Row)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	res := &Result{Row: g.Row}
	for {
		b, err := sc.Next()
		if err != nil {
			return nil, err
		}
		for _, rr := range b.Results {
			if res.Cells == nil {
				res.Cells = rr.Cells
			} else {
				res.Cells = append(res.Cells, rr.Cells...)
			}
		}
		if !b.More {
			return res, nil
		}
	}
}
