//go:build invariants

package offheap

import "fmt"

// InvariantsEnabled is true in builds with the invariants tag: freed memory is
// poisoned and checked, reference counts are verified, and violations panic.
const InvariantsEnabled = true

// invariantViolation panics: under the invariants tag a broken invariant must
// fail the test that caused it.
func invariantViolation(msg string) {
	panic("offheap invariant violated: " + msg)
}

// poisonChunk fills a chunk that has just been returned to its pool.
func poisonChunk(c *Chunk) { Poison(c.mem) }

// checkChunkPoison verifies that nobody wrote to a chunk while it sat in the
// pool (a use-after-free through a stale view).
func checkChunkPoison(c *Chunk) {
	if off := PoisonIntact(c.mem); off >= 0 {
		panic(fmt.Sprintf("offheap invariant violated: chunk %d was written after it was released "+
			"(use after free): byte %d is %#x, want poison %#x", c.id, off, c.mem[off], PoisonByte))
	}
}

// checkChunkLive panics if c is not currently handed out.
func checkChunkLive(c *Chunk, op string) {
	if r := c.refs.Load(); r <= 0 {
		panic(fmt.Sprintf("offheap invariant violated: %s on chunk %d after it was released (refs %d)", op, c.id, r))
	}
}
