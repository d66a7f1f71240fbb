package memstore

import (
	"unsafe"

	"github.com/cellstore/cellstore/engine/cell"
)

// Scanner iterates over a segment's cells in store order, skipping cells
// with a sequence id above its read point. It implements cell.Scanner; Key
// and Value point into off-heap chunks and are valid until the scanner
// moves or closes. It holds a reference on its segment until Close.
type Scanner struct {
	seg       *Segment
	readPoint uint64
	cur       ref
	key       cell.Key
	val       []byte
	tags      []byte
	seq       uint64
	scratch   []byte
	closed    bool
	prevKey   []byte // invariants builds: the last key returned, for order checks
	prevSeq   uint64
}

var _ cell.Scanner = (*Scanner)(nil)

// settle positions the scanner at the first visible node from n on.
func (s *Scanner) settle(n ref) bool {
	for n != 0 {
		p := s.seg.ptr(n)
		if seq := nodeSeq(p); seq <= s.readPoint {
			s.cur = n
			s.key, s.val, s.tags = s.seg.nodeKV(p)
			s.seq = seq
			return true
		}
		n = nodeLink(p, 0).Load()
	}
	s.cur, s.key, s.val, s.tags, s.seq = 0, nil, nil, nil, 0
	return false
}

func (s *Scanner) Seek(key cell.Key) bool {
	if s.closed {
		return false
	}
	s.resetOrder()
	ok := s.settle(s.seg.seekGE(key))
	s.checkOrder()
	return ok
}

func (s *Scanner) Next() bool {
	if s.closed || s.cur == 0 {
		return false
	}
	ok := s.settle(nodeLink(s.seg.ptr(s.cur), 0).Load())
	s.checkOrder()
	return ok
}

// seekRow positions the scanner at the first visible cell of row; it
// reports false (and leaves the scanner unpositioned) if the row has none.
func (s *Scanner) seekRow(row []byte) bool {
	s.scratch = cell.AppendFirstOnRow(s.scratch[:0], row)
	n := s.seg.seekGE(s.scratch)
	for n != 0 {
		p := s.seg.ptr(n)
		k, _ := s.seg.nodeStored(p)
		if cell.CompareRow(k, row) != 0 {
			break
		}
		if nodeSeq(p) <= s.readPoint {
			return s.settle(n)
		}
		n = nodeLink(p, 0).Load()
	}
	s.cur, s.key, s.val, s.tags, s.seq = 0, nil, nil, nil, 0
	return false
}

// prevRowBefore steps back from row to the last row before it with a
// visible cell.
func (s *Scanner) prevRowBefore(row []byte) bool {
	rowBuf := append([]byte(nil), row...)
	for {
		s.scratch = cell.AppendFirstOnRow(s.scratch[:0], rowBuf)
		n := s.seg.seekLT(s.scratch)
		if n == 0 {
			s.cur, s.key, s.val, s.tags, s.seq = 0, nil, nil, nil, 0
			return false
		}
		k, _ := s.seg.nodeStored(s.seg.ptr(n))
		rowBuf = append(rowBuf[:0], k.Row()...)
		if s.seekRow(rowBuf) {
			return true
		}
	}
}

func (s *Scanner) SeekToPreviousRow(key cell.Key) bool {
	if s.closed {
		return false
	}
	s.resetOrder()
	return s.prevRowBefore(key.Row())
}

func (s *Scanner) SeekToLastRow() bool {
	if s.closed {
		return false
	}
	s.resetOrder()
	n := s.seg.last()
	if n == 0 {
		s.cur = 0
		return false
	}
	k, _ := s.seg.nodeStored(s.seg.ptr(n))
	row := append([]byte(nil), k.Row()...)
	if s.seekRow(row) {
		return true
	}
	return s.prevRowBefore(row)
}

func (s *Scanner) Key() cell.Key { return s.key }
func (s *Scanner) Value() []byte { return s.val }
func (s *Scanner) Tags() []byte  { return s.tags }
func (s *Scanner) Seq() uint64   { return s.seq }

// Current implements cell.Current.
func (s *Scanner) Current() (cell.Key, []byte, []byte, uint64) { return s.key, s.val, s.tags, s.seq }
func (s *Scanner) Err() error                                  { return nil }

// Close releases the scanner's reference on its segment. It is safe to call
// more than once.
func (s *Scanner) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cur, s.key, s.val, s.tags = 0, nil, nil, nil
	checkScannerClosed(s.seg)
	s.seg.release()
	return nil
}

// checkOrder verifies, in invariants builds, that Next moved forward in
// store order.
func (s *Scanner) checkOrder() {
	if !Invariants || s.cur == 0 {
		return
	}
	if s.prevKey != nil && cell.CompareWithSeq(s.prevKey, s.prevSeq, s.key, s.seq) > 0 {
		invariantViolation("memstore scanner moved backwards: " + cell.Key(s.prevKey).String() + " then " + s.key.String())
	}
	s.prevKey = append(s.prevKey[:0], s.key...)
	s.prevSeq = s.seq
}

func (s *Scanner) resetOrder() {
	if s.prevKey != nil {
		s.prevKey = s.prevKey[:0:0]
		s.prevKey = nil
	}
}

var _ = unsafe.Pointer(nil)
