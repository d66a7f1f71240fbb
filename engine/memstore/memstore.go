package memstore

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
)

// ErrSnapshotExists is returned by Snapshot while an earlier snapshot has
// not been cleared (a flush is still under way).
var ErrSnapshotExists = errors.New("memstore: a snapshot is already being flushed")

// Memstore is a region's write buffer: an active segment receiving writes, the segments an
// in-memory flush froze (the pipeline of a compacting memstore) and at most one frozen snapshot
// being flushed.
//
// Add and Reserve may be called concurrently with each other and with
// scanners. Snapshot and InMemoryFlush must not run concurrently with Add/Reserve: the region
// serialises them with its updates lock (writers hold it shared, the flush
// exclusively), so that a mutation is either wholly in the snapshot or
// wholly in the new active segment.
type Memstore struct {
	pool *offheap.ChunkPool

	mu     sync.RWMutex
	active atomic.Pointer[Segment]
	// pipeline holds the segments in-memory flushes froze, newest first; pipelineBytes is their
	// data bytes.
	pipeline      []*Segment
	pipelineBytes atomic.Int64
	snapshot      *Frozen
	closed        bool
}

// New returns an empty memstore whose segments take chunks from pool.
func New(pool *offheap.ChunkPool) (*Memstore, error) {
	if pool == nil {
		return nil, errors.New("memstore: a chunk pool is required")
	}
	s, err := newSegment(pool)
	if err != nil {
		return nil, err
	}
	m := &Memstore{pool: pool}
	m.active.Store(s)
	return m, nil
}

// Reserve claims chunk memory for n bytes of cells (sum of EncodedCellSize)
// in the active segment, so that the Adds that follow cannot fail for lack
// of memory. It fails with an error matching ErrFull when the pool's budget
// is exhausted. Every successful Reserve must be followed by Unreserve with
// the same n once the Adds are done.
func (m *Memstore) Reserve(n int64) error {
	s := m.active.Load()
	if s == nil {
		return ErrClosed
	}
	return s.reserve(n)
}

// Unreserve returns a reservation made by Reserve.
func (m *Memstore) Unreserve(n int64) {
	if s := m.active.Load(); s != nil {
		s.unreserve(n)
	}
}

// Add copies a cell into the active segment with sequence id seq.
func (m *Memstore) Add(key cell.Key, value []byte, seq uint64) error {
	return m.AddTagged(key, value, nil, seq)
}

// AddTagged is Add for a cell with tags (none when tags is empty).
func (m *Memstore) AddTagged(key cell.Key, value, tags []byte, seq uint64) error {
	s := m.active.Load()
	if s == nil {
		return ErrClosed
	}
	return s.add(key, value, tags, seq)
}

// Frozen is what a flush writes: the segments Snapshot froze, newest first.
type Frozen struct {
	segs []*Segment
}

// Segments are the frozen segments, newest first.
func (f *Frozen) Segments() []*Segment { return f.segs }

// Stats is the accounting of the segments together.
func (f *Frozen) Stats() Stats {
	st := emptyStats()
	for _, s := range f.segs {
		st = st.Plus(s.Stats())
	}
	return st
}

// Snapshot freezes the active segment, installs a new one and returns the frozen segment and
// the pipeline's for the flush. The memstore keeps its references on them (readers keep seeing
// them) until ClearSnapshot.
func (m *Memstore) Snapshot() (*Frozen, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.snapshot != nil {
		return nil, ErrSnapshotExists
	}
	fresh, err := newSegment(m.pool)
	if err != nil {
		return nil, err
	}
	old := m.active.Load()
	freeze(old)
	m.snapshot = &Frozen{segs: append([]*Segment{old}, m.pipeline...)}
	m.pipeline = nil
	m.pipelineBytes.Store(0)
	m.active.Store(fresh)
	return m.snapshot, nil
}

// freeze makes a segment read-only and gives its spare chunks back.
func freeze(s *Segment) {
	s.frozen.Store(true)
	s.mu.Lock()
	spare := s.spare
	s.spare = nil
	s.pending = 0
	s.mu.Unlock()
	for _, c := range spare {
		c.Release()
		s.chunkBytes.Add(-int64(s.chunkSize))
	}
}

// CurrentSnapshot returns the snapshot being flushed, or nil.
func (m *Memstore) CurrentSnapshot() *Frozen {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapshot
}

// ClearSnapshot drops the memstore's references on a flushed snapshot once
// its store file is committed. The chunks return to the pool when the last
// scanner reading them closes.
func (m *Memstore) ClearSnapshot(f *Frozen) {
	m.mu.Lock()
	if m.snapshot != f || f == nil {
		m.mu.Unlock()
		return
	}
	m.snapshot = nil
	m.mu.Unlock()
	for _, s := range f.segs {
		s.release()
	}
}

// Scanners returns scanners over the snapshot's segments, the pipeline and the active segment
// at readPoint. Empty segments are skipped. The caller closes them.
func (m *Memstore) Scanners(readPoint uint64) ([]*Scanner, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	segs := make([]*Segment, 0, 4)
	if m.snapshot != nil {
		segs = append(segs, m.snapshot.segs...)
	}
	segs = append(append(segs, m.pipeline...), m.active.Load())
	var out []*Scanner
	for _, s := range segs {
		if s == nil || s.Empty() {
			continue
		}
		sc, err := s.NewScanner(readPoint)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// Stats returns the accounting of every segment: active, pipeline and snapshot.
func (m *Memstore) Stats() Stats {
	m.mu.RLock()
	st := m.unflushedLocked()
	if m.snapshot != nil {
		st = st.Plus(m.snapshot.Stats())
	}
	m.mu.RUnlock()
	return st
}

// UnflushedStats returns the accounting of what the next flush would write: the active segment
// and the pipeline.
func (m *Memstore) UnflushedStats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.unflushedLocked()
}

func (m *Memstore) unflushedLocked() Stats {
	st := m.ActiveStats()
	for _, s := range m.pipeline {
		st = st.Plus(s.Stats())
	}
	return st
}

func emptyStats() Stats {
	return Stats{MinTs: math.MaxInt64, MaxTs: math.MinInt64, MinSeq: math.MaxUint64}
}

// Plus adds the accounting of o (a region sums its families' memstores).
func (st Stats) Plus(o Stats) Stats {
	st.DataBytes += o.DataBytes
	st.HeapBytes += o.HeapBytes
	st.ChunkBytes += o.ChunkBytes
	st.Cells += o.Cells
	st.MinTs = min(st.MinTs, o.MinTs)
	st.MaxTs = max(st.MaxTs, o.MaxTs)
	st.MinSeq = min(st.MinSeq, o.MinSeq)
	st.MaxSeq = max(st.MaxSeq, o.MaxSeq)
	return st
}

// ActiveStats returns the accounting of the active segment.
func (m *Memstore) ActiveStats() Stats {
	s := m.active.Load()
	if s == nil {
		return Stats{}
	}
	return s.Stats()
}

// UnflushedDataBytes returns the data size of the active segment and the pipeline (two atomic
// loads: the region checks it against its flush size on every write of a compacting memstore).
func (m *Memstore) UnflushedDataBytes() int64 {
	return m.ActiveDataBytes() + m.pipelineBytes.Load()
}

// ActiveDataBytes returns the data size of the active segment (one atomic
// load; the region checks it against its flush size on every write).
func (m *Memstore) ActiveDataBytes() int64 {
	s := m.active.Load()
	if s == nil {
		return 0
	}
	return s.dataSize.Load()
}

// Close releases the memstore's references on its segments. Scanners still
// open keep their segments until they close.
func (m *Memstore) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.closed = true
	if m.snapshot != nil {
		for _, s := range m.snapshot.segs {
			s.release()
		}
		m.snapshot = nil
	}
	for _, s := range m.pipeline {
		s.release()
	}
	m.pipeline = nil
	m.pipelineBytes.Store(0)
	if s := m.active.Swap(nil); s != nil {
		s.release()
	}
}
