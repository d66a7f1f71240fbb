//go:build !invariants

package blockcache

import (
	"log/slog"
	"sync/atomic"
)

var violations atomic.Int64

// invariantViolation logs a caller bug (such as a double Release) that the
// cache detected and refused to act on.
func invariantViolation(msg string) {
	if violations.Add(1) <= 100 {
		slog.Error("blockcache invariant violated (build with -tags invariants to panic here)", "problem", msg)
	}
}

func blockChecksum([]byte) uint32          { return 0 }
func verifyBlock(*entry, string)           {}
func poisonSlot([]byte)                    {}
func checkSlotPoison([]byte, int32, int32) {}

type refToken struct{}

func newRefToken(*entry) refToken   { return refToken{} }
func (refToken) checkLive(BlockRef) {}
func (refToken) release(BlockRef)   {}
