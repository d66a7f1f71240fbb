package memstore

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
)

// ErrSnapshotExists is returned by Snapshot while an earlier snapshot has
// not been cleared (a flush is still under way).
var ErrSnapshotExists = errors.New("memstore: a snapshot is already being flushed")

// Memstore is a region's write buffer: an active segment receiving writes
// and at most one frozen snapshot being flushed.
//
// Add and Reserve may be called concurrently with each other and with
// scanners. Snapshot must not run concurrently with Add/Reserve: the region
// serialises them with its updates lock (writers hold it shared, the flush
// exclusively), so that a mutation is either wholly in the snapshot or
// wholly in the new active segment.
type Memstore struct {
	pool *offheap.ChunkPool

	mu       sync.RWMutex
	active   atomic.Pointer[Segment]
	snapshot *Segment
	closed   bool
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

// Snapshot freezes the active segment, installs a new one and returns the
// frozen segment for the flush. The memstore keeps its reference on the
// snapshot (readers keep seeing it) until ClearSnapshot.
func (m *Memstore) Snapshot() (*Segment, error) {
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
	old.frozen.Store(true)
	old.mu.Lock()
	// Spare chunks are not needed by a frozen segment.
	spare := old.spare
	old.spare = nil
	old.pending = 0
	old.mu.Unlock()
	for _, c := range spare {
		c.Release()
		old.chunkBytes.Add(-int64(old.chunkSize))
	}
	m.snapshot = old
	m.active.Store(fresh)
	return old, nil
}

// CurrentSnapshot returns the snapshot being flushed, or nil.
func (m *Memstore) CurrentSnapshot() *Segment {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapshot
}

// ClearSnapshot drops the memstore's reference on a flushed snapshot once
// its store file is committed. The chunks return to the pool when the last
// scanner reading it closes.
func (m *Memstore) ClearSnapshot(s *Segment) {
	m.mu.Lock()
	if m.snapshot != s || s == nil {
		m.mu.Unlock()
		return
	}
	m.snapshot = nil
	m.mu.Unlock()
	s.release()
}

// Scanners returns scanners over the snapshot (if any) and the active
// segment at readPoint. Empty segments are skipped. The caller closes them.
func (m *Memstore) Scanners(readPoint uint64) ([]*Scanner, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	var out []*Scanner
	for _, s := range []*Segment{m.snapshot, m.active.Load()} {
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

// Stats returns the accounting of the active segment and the snapshot
// together.
func (m *Memstore) Stats() Stats {
	m.mu.RLock()
	snap := m.snapshot
	m.mu.RUnlock()
	st := m.ActiveStats()
	if snap != nil {
		ss := snap.Stats()
		st.DataBytes += ss.DataBytes
		st.HeapBytes += ss.HeapBytes
		st.ChunkBytes += ss.ChunkBytes
		st.Cells += ss.Cells
		st.MinTs = min(st.MinTs, ss.MinTs)
		st.MaxTs = max(st.MaxTs, ss.MaxTs)
		st.MinSeq = min(st.MinSeq, ss.MinSeq)
		st.MaxSeq = max(st.MaxSeq, ss.MaxSeq)
	}
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
		m.snapshot.release()
		m.snapshot = nil
	}
	if s := m.active.Swap(nil); s != nil {
		s.release()
	}
}
