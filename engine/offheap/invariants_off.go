//go:build !invariants

package offheap

import (
	"log/slog"
	"sync/atomic"
)

// InvariantsEnabled is true in builds with the invariants tag: freed memory is
// poisoned and checked, reference counts are verified, and violations panic.
const InvariantsEnabled = false

var violations atomic.Int64

// invariantViolation logs a broken invariant (a bug in the caller, such as a
// double release) instead of crashing a production process. The operation
// that detected it has already refused to do damage (for example a chunk
// released twice is not pooled twice).
func invariantViolation(msg string) {
	if violations.Add(1) <= 100 {
		slog.Error("offheap invariant violated (build with -tags invariants to panic here)", "problem", msg)
	}
}

func poisonChunk(*Chunk)            {}
func checkChunkPoison(*Chunk)       {}
func checkChunkLive(*Chunk, string) {}
