//go:build !invariants

package memstore

import (
	"log/slog"
	"sync/atomic"
	"unsafe"
)

// Invariants reports whether the package was built with the invariants tag.
const Invariants = false

var violations atomic.Int64

func invariantViolation(msg string) {
	if violations.Add(1) <= 100 {
		slog.Error("memstore invariant violated (build with -tags invariants to panic here)", "problem", msg)
	}
}

func checkScannerOpened(*Segment) {}
func checkScannerClosed(*Segment) {}

// OpenScanners returns the number of memstore scanners not yet closed
// (tracked in invariants builds only; 0 otherwise).
func OpenScanners() int64 { return 0 }

func (*Segment) checkRef(ref, unsafe.Pointer) {}
