package region

import (
	"fmt"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/offheap"
)

// A region keeps one memstore per family (HBase's memstore per store), so that a flush can write
// the families holding the most and leave the small ones in memory (per-family flush,
// HBASE-10201), a compacting family's in-memory flushes touch only its own cells, and a read
// merges only the memstores of the families it reads.

// memstores are a region's memstores, by family index.
type memstores []*memstore.Memstore

func newMemstores(pool *offheap.ChunkPool, n int) (memstores, error) {
	ms := make(memstores, n)
	for i := range ms {
		m, err := memstore.New(pool)
		if err != nil {
			ms.close()
			return nil, err
		}
		ms[i] = m
	}
	return ms, nil
}

// stats is the accounting of every family's memstore together (active, pipeline and snapshot).
func (ms memstores) stats() memstore.Stats {
	st := ms[0].Stats()
	for _, m := range ms[1:] {
		st = st.Plus(m.Stats())
	}
	return st
}

// unflushedDataBytes is what the next flush of every family would write (active segments and
// pipelines), in data bytes: atomic loads only, for the write path's flush check.
func (ms memstores) unflushedDataBytes() int64 {
	var n int64
	for _, m := range ms {
		n += m.UnflushedDataBytes()
	}
	return n
}

func (ms memstores) close() {
	for _, m := range ms {
		if m != nil {
			m.Close()
		}
	}
}

// scanners opens scanners at readPoint over the memstores of the families a scan reads,
// appending them to to.
func (ms memstores) scanners(readPoint uint64, fams []*famScan, to []cell.Scanner) ([]cell.Scanner, error) {
	add := func(m *memstore.Memstore) error {
		scs, err := m.Scanners(readPoint)
		if err != nil {
			return err
		}
		for _, sc := range scs {
			to = append(to, sc)
		}
		return nil
	}
	var err error
	for _, f := range fams {
		if err = add(ms[f.idx]); err != nil {
			break
		}
	}
	if err != nil {
		for _, sc := range to {
			sc.Close()
		}
		return nil, err
	}
	return to, nil
}

// familyOf returns the family index of a cell going into the memstore; a cell of a family the
// table does not have is refused (the memstore must match the WAL and the files).
func (r *Region) familyOf(kv cell.KeyValue) (int, error) {
	if len(r.famNames) == 1 && string(kv.Key().Family()) == string(r.famNames[0]) {
		return 0, nil
	}
	if i := r.familyIndex(kv.Key().Family()); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("%w: %q", ErrNoSuchFamily, kv.Key().Family())
}

// memSizes adds to sizes (by family index, len(r.fams) long) the memstore room cells take.
func (r *Region) memSizes(cells []cell.KeyValue, sizes []int64) error {
	for _, kv := range cells {
		i, err := r.familyOf(kv)
		if err != nil {
			return err
		}
		sizes[i] += memstore.EncodedCellSize(kv.KeyLen(), kv.StoredValueLen())
	}
	return nil
}

// reserveMem reserves room in each family's memstore for sizes; on failure nothing stays
// reserved.
func (r *Region) reserveMem(sizes []int64) error {
	for i, n := range sizes {
		if n == 0 {
			continue
		}
		if err := r.mem[i].Reserve(n); err != nil {
			r.unreserveMem(sizes[:i])
			return err
		}
	}
	return nil
}

func (r *Region) unreserveMem(sizes []int64) {
	for i, n := range sizes {
		if n != 0 {
			r.mem[i].Unreserve(n)
		}
	}
}

// insertMem adds cells with sequence id seq to their families' memstores (room reserved).
func (r *Region) insertMem(cells []cell.KeyValue, seq uint64) error {
	for _, kv := range cells {
		i, err := r.familyOf(kv)
		if err != nil {
			return err
		}
		if err := r.mem[i].AddTagged(kv.Key(), kv.Value(), kv.Tags(), seq); err != nil {
			return err
		}
	}
	return nil
}

// sizeBuf returns a zeroed slice of one int64 per family, in buf when it is long enough (the
// write path's reservations without an allocation).
func (r *Region) sizeBuf(buf []int64) []int64 {
	if len(r.fams) <= len(buf) {
		s := buf[:len(r.fams)]
		clear(s)
		return s
	}
	return make([]int64, len(r.fams))
}
