package region

import (
	"github.com/cellstore/cellstore/engine/cell"
)

// source is one input of a mergeIter.
type source struct {
	s     cell.Scanner
	cur   cell.Current // s, when it implements it
	valid bool
	// moved (reversed mode): the source left the current row forward and
	// must be repositioned with SeekToPreviousRow.
	moved bool
}

// mergeIter merges sorted sources (memstore segments and store files) into
// one stream, like HBase's KeyValueHeap.
//
// Forward mode yields cells in store order (CompareWithSeq). Seek only
// moves sources positioned before the target (seeks are monotonic), so a
// seek hint costs nothing for sources already past it.
//
// Reversed mode (ReversedKeyValueHeap) works a row at a time: rows in
// descending order, the cells of a row in store order. seekLastRow and
// prevRow position every source on its last row before a bound; next and
// seekInRow move within the current row and report false at its end.
type mergeIter struct {
	srcs     []source
	heap     []*source
	reversed bool
	curRow   []byte
	//lint:ignore U1000 read and written by the checks of invariants builds
	prevKey []byte // invariants builds: the last key returned
	//lint:ignore U1000 read and written by the checks of invariants builds
	prevSeq uint64
	err     error
	scratch []byte
	// The key, value and sequence id of the top source, read once per
	// move (setTop) instead of on every access.
	topKey   cell.Key
	topValue []byte
	topTags  []byte
	topSeq   uint64
}

func newMergeIter(scanners []cell.Scanner, reversed bool) *mergeIter {
	m := &mergeIter{srcs: make([]source, len(scanners)), reversed: reversed, heap: make([]*source, 0, len(scanners))}
	for i, s := range scanners {
		m.srcs[i].s = s
		m.srcs[i].cur, _ = s.(cell.Current)
	}
	return m
}

func (m *mergeIter) less(a, b *source) bool {
	return cell.CompareWithSeq(a.s.Key(), a.s.Seq(), b.s.Key(), b.s.Seq()) < 0
}

func (m *mergeIter) down(i int) {
	h := m.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (m *mergeIter) init() {
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	m.setTop()
}

func (m *mergeIter) noteErr(s *source) {
	if !s.valid && m.err == nil {
		if err := s.s.Err(); err != nil {
			m.err = err
		}
	}
}

// valid reports whether the iterator is positioned on a cell.
func (m *mergeIter) valid() bool { return len(m.heap) > 0 && m.err == nil }

func (m *mergeIter) key() cell.Key { m.checkTop(); return m.topKey }
func (m *mergeIter) value() []byte { m.checkTop(); return m.topValue }
func (m *mergeIter) seq() uint64   { m.checkTop(); return m.topSeq }
func (m *mergeIter) tags() []byte  { m.checkTop(); return m.topTags }

// setTop caches the current cell; every move ends with it.
func (m *mergeIter) setTop() {
	if len(m.heap) == 0 {
		m.topKey, m.topValue, m.topTags, m.topSeq = nil, nil, nil, 0
		return
	}
	if src := m.heap[0]; src.cur != nil {
		m.topKey, m.topValue, m.topTags, m.topSeq = src.cur.Current()
	} else {
		m.topKey, m.topValue, m.topTags, m.topSeq = src.s.Key(), src.s.Value(), src.s.Tags(), src.s.Seq()
	}
}

// seekFirst positions every source at key (forward mode, first seek).
func (m *mergeIter) seekFirst(key cell.Key) {
	m.heap = m.heap[:0]
	for i := range m.srcs {
		s := &m.srcs[i]
		s.valid = s.s.Seek(key)
		m.noteErr(s)
		if s.valid {
			m.heap = append(m.heap, s)
		}
	}
	m.init()
	m.resetOrder()
	m.checkForwardOrder()
}

// seek moves forward to the first cell >= key. Sources already at or past
// key are not touched; exhausted sources stay exhausted.
func (m *mergeIter) seek(key cell.Key) {
	if m.reversed {
		m.seekInRow(key)
		return
	}
	n := 0
	changed := false
	for _, s := range m.heap {
		if cell.Compare(s.s.Key(), key) < 0 {
			changed = true
			s.valid = s.s.Seek(key)
			m.noteErr(s)
		}
		if s.valid {
			m.heap[n] = s
			n++
		}
	}
	clear(m.heap[n:])
	m.heap = m.heap[:n]
	if changed {
		m.init()
	}
	m.setTop()
	m.checkForwardOrder()
}

// next moves to the following cell (in reversed mode: within the row).
func (m *mergeIter) next() {
	if len(m.heap) == 0 {
		return
	}
	s := m.heap[0]
	if s.valid = s.s.Next(); !s.valid {
		m.noteErr(s)
	}
	if m.reversed && s.valid && cell.CompareRow(s.s.Key(), m.curRow) != 0 {
		s.valid = false
		s.moved = true
	} else if m.reversed && !s.valid {
		s.moved = true
	}
	if !s.valid {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap[last] = nil
		m.heap = m.heap[:last]
	}
	if len(m.heap) > 0 {
		m.down(0)
	}
	m.setTop()
	m.checkForwardOrder()
}

// Reversed mode.

// seekInRow moves the sources of the current row to the first cell >=
// key; those that leave the row are parked.
func (m *mergeIter) seekInRow(key cell.Key) {
	n := 0
	changed := false
	for _, s := range m.heap {
		if cell.Compare(s.s.Key(), key) < 0 {
			changed = true
			s.valid = s.s.Seek(key)
			m.noteErr(s)
			if !s.valid || cell.CompareRow(s.s.Key(), m.curRow) != 0 {
				s.valid = false
				s.moved = true
			}
		}
		if s.valid {
			m.heap[n] = s
			n++
		}
	}
	clear(m.heap[n:])
	m.heap = m.heap[:n]
	if changed {
		m.init()
	}
	m.setTop()
}

// startRow collects the sources positioned on the highest row into the heap.
func (m *mergeIter) startRow() {
	m.heap = m.heap[:0]
	var best []byte
	found := false
	for i := range m.srcs {
		s := &m.srcs[i]
		if !s.valid || s.moved {
			continue
		}
		r := s.s.Key().Row()
		if !found || cellRowCompare(r, best) > 0 {
			best = r
			found = true
		}
	}
	if !found {
		m.curRow = m.curRow[:0]
		m.setTop()
		return
	}
	m.curRow = append(m.curRow[:0], best...)
	for i := range m.srcs {
		s := &m.srcs[i]
		if s.valid && !s.moved && cell.CompareRow(s.s.Key(), m.curRow) == 0 {
			m.heap = append(m.heap, s)
		}
	}
	m.init()
}

// seekLastRowAtOrBefore positions every source on its last row <= row (or
// its last row when row is nil) and starts that row.
func (m *mergeIter) seekLastRowAtOrBefore(row []byte, inclusive bool) {
	var bound []byte
	if row != nil {
		if inclusive {
			bound = append(append(m.scratch[:0], row...), 0)
		} else {
			bound = append(m.scratch[:0], row...)
		}
		m.scratch = bound
	}
	var key []byte
	if row != nil {
		key = cell.AppendFirstOnRow(nil, bound)
	}
	for i := range m.srcs {
		s := &m.srcs[i]
		s.moved = false
		if row == nil {
			s.valid = s.s.SeekToLastRow()
		} else {
			s.valid = s.s.SeekToPreviousRow(key)
		}
		m.noteErr(s)
	}
	m.startRow()
}

// prevRow moves to the last row before the current one.
func (m *mergeIter) prevRow() {
	if len(m.curRow) == 0 && len(m.heap) == 0 {
		return
	}
	m.scratch = cell.AppendFirstOnRow(m.scratch[:0], m.curRow)
	for i := range m.srcs {
		s := &m.srcs[i]
		atRow := s.valid && !s.moved && cell.CompareRow(s.s.Key(), m.curRow) == 0
		if s.moved || atRow {
			s.valid = s.s.SeekToPreviousRow(m.scratch)
			s.moved = false
			m.noteErr(s)
		}
	}
	m.startRow()
}

func cellRowCompare(a, b []byte) int {
	switch {
	case string(a) < string(b):
		return -1
	case string(a) > string(b):
		return 1
	}
	return 0
}

// park lets the sources give back what they hold while the scan is idle
// (cell.Parker: a store file's current block); they keep their positions and
// their current cells, which the top is read from again.
func (m *mergeIter) park() {
	for i := range m.srcs {
		if p, ok := m.srcs[i].s.(cell.Parker); ok {
			p.Park()
		}
	}
	m.setTop()
}

func (m *mergeIter) close() {
	for i := range m.srcs {
		m.srcs[i].s.Close()
	}
}

// endRow (reversed mode) parks the sources of the current row: the row is
// finished.
func (m *mergeIter) endRow() {
	for _, s := range m.heap {
		s.valid = false
		s.moved = true
	}
	clear(m.heap)
	m.heap = m.heap[:0]
	m.setTop()
}
