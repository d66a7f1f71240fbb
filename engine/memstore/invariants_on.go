//go:build invariants

package memstore

import "sync/atomic"

// Invariants reports whether the package was built with the invariants tag.
const Invariants = true

var openScanners atomic.Int64

func invariantViolation(msg string) { panic("memstore: invariant violated: " + msg) }

func checkScannerOpened(*Segment) { openScanners.Add(1) }
func checkScannerClosed(*Segment) { openScanners.Add(-1) }

// OpenScanners returns the number of memstore scanners not yet closed
// (tracked in invariants builds only; 0 otherwise). Tests use it to check
// that every scanner a read opened was closed.
func OpenScanners() int64 { return openScanners.Load() }
