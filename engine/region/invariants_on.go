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

func (m *mergeIter) resetOrder() { m.prevKey = m.prevKey[:0:0]; m.prevKey = nil }

// checkVisible verifies that an included cell is visible at the read point.
func (s *RegionScanner) checkVisible(seq uint64) {
	if seq > s.readPoint {
		panic(fmt.Sprintf("region: invariant violated: cell with sequence id %d returned at read point %d", seq, s.readPoint))
	}
}
