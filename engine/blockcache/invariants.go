//go:build invariants

package blockcache

import (
	"fmt"
	"hash/crc32"
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/offheap"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func invariantViolation(msg string) {
	panic("blockcache invariant violated: " + msg)
}

// blockChecksum is stored with each block; verifyBlock compares it while
// references exist, proving no slot is overwritten under a reader.
func blockChecksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func verifyBlock(e *entry, when string) {
	if got := crc32.Checksum(e.data, castagnoli); got != e.sum {
		panic(fmt.Sprintf("blockcache invariant violated: block %v changed while referenced (at %s): crc %08x, stored %08x",
			e.key, when, got, e.sum))
	}
}

// poisonSlot fills a freed slot; checkSlotPoison verifies it on reuse, so a
// write through a released BlockRef's bytes is caught.
func poisonSlot(b []byte) { offheap.Poison(b) }

func checkSlotPoison(b []byte, bucket, slot int32) {
	if off := offheap.PoisonIntact(b); off >= 0 {
		panic(fmt.Sprintf("blockcache invariant violated: slot %d of bucket %d written after it was freed "+
			"(use after release): byte %d is %#x", slot, bucket, off, b[off]))
	}
}

// refToken tracks one BlockRef, so a double Release or Bytes after Release
// panics instead of silently dropping another reader's reference.
type refToken struct{ t *tokenState }

type tokenState struct{ released atomic.Bool }

func newRefToken(*entry) refToken { return refToken{&tokenState{}} }

func (t refToken) checkLive(r BlockRef) {
	if t.t != nil && t.t.released.Load() {
		panic(fmt.Sprintf("blockcache invariant violated: Bytes of block %v after Release", keyOf(r)))
	}
}

func (t refToken) release(r BlockRef) {
	if t.t != nil && t.t.released.Swap(true) {
		panic(fmt.Sprintf("blockcache invariant violated: block %v released twice through the same BlockRef", keyOf(r)))
	}
}

func keyOf(r BlockRef) any {
	if r.e != nil {
		return r.e.key
	}
	return "(on-heap)"
}
