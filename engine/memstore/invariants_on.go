//go:build invariants

package memstore

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cellstore/cellstore/engine/offheap"
)

// Invariants reports whether the package was built with the invariants tag.
const Invariants = true

var openScanners atomic.Int64

func invariantViolation(msg string) { panic("memstore: invariant violated: " + msg) }

func checkScannerOpened(*Segment) { openScanners.Add(1) }

// checkRef verifies that node reference r resolved to p through the
// segment's base table is where the pool's live chunk r names holds it.
func (s *Segment) checkRef(r ref, p unsafe.Pointer) {
	if r>>32 == 0 { // the head node's own block
		if r != headOffset || p != unsafe.Add(unsafe.Pointer(unsafe.SliceData(s.headMem)), headOffset) {
			invariantViolation(fmt.Sprintf("node %#x in block 0 is not the head (resolved to %p)", r, p))
		}
		return
	}
	mem := s.chunkOf(r).Bytes() // panics on a released chunk
	if want := unsafe.Pointer(unsafe.SliceData(mem[uint32(r):])); want != p {
		invariantViolation(fmt.Sprintf("node %#x resolved to %p, its chunk holds it at %p", r, p, want))
	}
}
func checkScannerClosed(*Segment) { openScanners.Add(-1) }

// OpenScanners returns the number of memstore scanners not yet closed
// (tracked in invariants builds only; 0 otherwise). Tests use it to check
// that every scanner a read opened was closed.
func OpenScanners() int64 { return openScanners.Load() }

// chunkOf resolves the chunk holding r.
func (s *Segment) chunkOf(r ref) *offheap.Chunk {
	c := s.pool.Chunk(uint32(r >> 32))
	if c == nil {
		panic(fmt.Sprintf("memstore: dangling node reference %#x", r))
	}
	return c
}
