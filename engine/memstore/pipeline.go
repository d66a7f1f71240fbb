package memstore

import (
	"bytes"
	"sync"

	"github.com/cellstore/cellstore/engine/cell"
)

// A compacting memstore (HBase's Accordion, HBASE-14918): an in-memory flush freezes the active
// segment into the pipeline instead of writing it to a file; MergePipeline then merges the
// pipeline's segments into one, leaving out, for EAGER families, what no read can see any more.
// Fewer, fuller flushes follow, with less to write when rows are overwritten.

// InMemoryFlush freezes the active segment into the pipeline and installs a new one. It does
// nothing to an empty active segment. Like Snapshot it must not run concurrently with
// Add/Reserve. It returns the pipeline's length.
func (m *Memstore) InMemoryFlush() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	old := m.active.Load()
	if old.Empty() {
		return len(m.pipeline), nil
	}
	fresh, err := newSegment(m.pool)
	if err != nil {
		return 0, err
	}
	freeze(old)
	m.pipeline = append([]*Segment{old}, m.pipeline...)
	m.pipelineBytes.Add(old.dataSize.Load())
	m.active.Store(fresh)
	return len(m.pipeline), nil
}

// PipelineLen is the number of segments in the pipeline.
func (m *Memstore) PipelineLen() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.pipeline)
}

// Keep decides, cell by cell in store order (key, then newest sequence first), which cells a
// merge keeps.
type Keep func(key cell.Key, seq uint64, tags []byte) bool

// MergePipeline merges the pipeline's segments into one, keeping the cells keep keeps (nil:
// all). It runs beside writers, readers and in-memory flushes: segments frozen meanwhile stay
// in front of the merged one, and a flush that took the pipeline meanwhile makes the merge a
// no-op. Scanners already open keep reading the old segments. It reports the cells it read and
// kept; a failure (chunk memory refused) leaves the pipeline as it was.
func (m *Memstore) MergePipeline(keep Keep) (read, kept int64, err error) {
	return m.MergePipelineGuarded(keep, nil)
}

// MergePipelineGuarded is MergePipeline whose swap of the merged segment in is made holding guard
// (when not nil): a reader that takes its read point and the memstore's segments under the same
// guard sees either the segments before the swap or the merged one with a read point at least
// the one keep was made for (an EAGER merge drops versions hidden at that point).
func (m *Memstore) MergePipelineGuarded(keep Keep, guard sync.Locker) (read, kept int64, err error) {
	m.mu.RLock()
	segs := append([]*Segment(nil), m.pipeline...)
	m.mu.RUnlock()
	if len(segs) < 2 && keep == nil || len(segs) == 0 {
		return 0, 0, nil
	}
	var scs []*Scanner
	defer func() {
		for _, sc := range scs {
			sc.Close()
		}
	}()
	for _, s := range segs {
		sc, err := s.NewScanner(^uint64(0))
		if err != nil {
			return 0, 0, nil // flushed and released meanwhile
		}
		scs = append(scs, sc)
	}
	merged, err := newSegment(m.pool)
	if err != nil {
		return 0, 0, err
	}
	// A k-way merge in store order: the pipeline holds a handful of segments.
	valid := make([]bool, len(scs))
	for i, sc := range scs {
		valid[i] = sc.Seek(cell.AppendFirstOnRow(nil, nil))
	}
	for {
		best := -1
		for i, sc := range scs {
			if !valid[i] {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := scs[best]
			if c := cell.Compare(sc.Key(), b.Key()); c < 0 || c == 0 && sc.Seq() > b.Seq() {
				best = i
			}
		}
		if best < 0 {
			break
		}
		sc := scs[best]
		read++
		if keep == nil || keep(sc.Key(), sc.Seq(), sc.Tags()) {
			if err := merged.add(sc.Key(), sc.Value(), sc.Tags(), sc.Seq()); err != nil {
				merged.release()
				return 0, 0, err
			}
			kept++
		}
		valid[best] = sc.Next()
	}
	freeze(merged)
	if guard != nil {
		guard.Lock()
	}
	m.mu.Lock()
	n := len(m.pipeline)
	if m.closed || n < len(segs) || !samePointers(m.pipeline[n-len(segs):], segs) {
		m.mu.Unlock()
		if guard != nil {
			guard.Unlock()
		}
		merged.release()
		return read, kept, nil
	}
	m.pipeline = append(m.pipeline[:n-len(segs):n-len(segs)], merged)
	delta := merged.dataSize.Load()
	for _, s := range segs {
		delta -= s.dataSize.Load()
	}
	m.pipelineBytes.Add(delta)
	m.mu.Unlock()
	if guard != nil {
		guard.Unlock()
	}
	for _, s := range segs {
		s.release()
	}
	return read, kept, nil
}

func samePointers(a, b []*Segment) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// VersionKeep is the Keep of an EAGER merge for one family's cells (HBase's in-memory
// compaction): of each column it keeps the newest maxVersions puts that readers at readPoint
// see, and every cell newer than readPoint (a write still completing). Once a row's family or a
// column has a delete marker, it keeps all that follows of it (what a marker hides depends on
// cells the memstore may not hold).
type VersionKeep struct {
	MaxVersions int
	ReadPoint   uint64
	// Now (Unix ms) is the time against which cells' own TTLs expire: an expired put is dropped
	// and not counted (reads skip it before counting versions, so an older version shows).
	Now int64

	row, fam, col []byte
	famDeleted    bool
	colDeleted    bool
	count         int
	lastTs        int64
	counted       bool
}

// Keep decides for one cell of the family.
func (v *VersionKeep) Keep(key cell.Key, seq uint64, tags []byte) bool {
	row, fam, q := key.Row(), key.Family(), key.Qualifier()
	if !bytes.Equal(row, v.row) || !bytes.Equal(fam, v.fam) {
		v.row = append(v.row[:0], row...)
		v.fam = append(v.fam[:0], fam...)
		v.famDeleted = false
		v.col, v.colDeleted, v.count, v.counted = v.col[:0], false, 0, false
		v.col = append(v.col, q...)
	} else if !bytes.Equal(q, v.col) {
		v.col = append(v.col[:0], q...)
		v.colDeleted, v.count, v.counted = false, 0, false
	}
	t := key.Type()
	switch {
	case t == cell.DeleteFamily || t == cell.DeleteFamilyVersion:
		v.famDeleted = true
		return true
	case t.IsDelete():
		v.colDeleted = true
		return true
	case tags != nil && cell.TTLExpired(tags, key.Timestamp(), v.Now):
		return false
	case v.famDeleted || v.colDeleted || seq > v.ReadPoint:
		return true
	}
	ts := key.Timestamp()
	if v.counted && ts == v.lastTs {
		return false // an older write of the same cell: no read sees it
	}
	v.count++
	v.lastTs, v.counted = ts, true
	return v.count <= max(v.MaxVersions, 1)
}
