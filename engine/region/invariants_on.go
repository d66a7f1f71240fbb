//go:build invariants

package region

import (
	"fmt"

	"github.com/cellstore/cellstore/engine/cell"
)

// invariants builds check the merged scan order and MVCC visibility on
// every cell, and panic on a violation.

// checkForwardOrder verifies that a forward merge moved to a key at or
// after the previous one (CompareWithSeq order).
func (m *mergeIter) checkForwardOrder() {
	if m.reversed || len(m.heap) == 0 {
		return
	}
	k, seq := m.key(), m.seq()
	if m.prevKey != nil && cell.CompareWithSeq(m.prevKey, m.prevSeq, k, seq) > 0 {
		panic(fmt.Sprintf("region: invariant violated: merged scan went backwards: %v/%d after %v/%d", k, seq, cell.Key(m.prevKey), m.prevSeq))
	}
	m.prevKey = append(m.prevKey[:0], k...)
	m.prevSeq = seq
}

// checkTop verifies that the cached current cell is the top source's.
func (m *mergeIter) checkTop() {
	if len(m.heap) == 0 {
		panic("region: invariant violated: merged scan read with no current cell")
	}
	s := m.heap[0].s
	if string(m.topKey) != string(s.Key()) || string(m.topValue) != string(s.Value()) || string(m.topTags) != string(s.Tags()) ||
		m.topSeq != s.Seq() {
		panic(fmt.Sprintf("region: invariant violated: merged scan's cached cell %v/%d is not its top source's %v/%d", m.topKey, m.topSeq, s.Key(), s.Seq()))
	}
}

func (m *mergeIter) resetOrder() { m.prevKey = m.prevKey[:0:0]; m.prevKey = nil }

// checkVisible verifies that an included cell is visible at the read point.
func (s *RegionScanner) checkVisible(seq uint64) {
	if seq > s.readPoint {
		panic(fmt.Sprintf("region: invariant violated: cell with sequence id %d returned at read point %d", seq, s.readPoint))
	}
}

// storeFileOverReleased panics: a store file was released more often than retained (its reader
// would have been closed, or it archived, under a holder).
func storeFileOverReleased(f *storeFile) {
	panic(fmt.Sprintf("region: invariant violated: store file %s released past its last reference", f.path))
}
