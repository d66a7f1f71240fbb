// Package memstore is the in-memory write buffer of a region (HBase's
// MemStore over an MSLAB).
//
// A memstore holds one active Segment that receives writes and, while a
// flush is under way, one frozen snapshot Segment. A segment is a concurrent
// skiplist whose nodes — the tower of links, the sequence id, the encoded key
// and the value — all live in 2 MiB off-heap chunks taken from an
// offheap.ChunkPool, so the Go garbage collector sees no per-cell objects.
// Links are atomic 64-bit references (chunk id << 32 | offset) in the
// chunks, as in Pebble's arenaskl. Inserts are lock-free (compare-and-swap
// per level); readers never lock. Chunk memory is carved with the chunk's
// bump allocator; a segment takes a new chunk when its current one is full.
// A cell too large for a chunk (more than a quarter of one) keeps its node
// in a chunk and its key and value on the Go heap.
//
// # Order and visibility
//
// Nodes are ordered by cell.CompareWithSeq: key order, and for equal keys
// the higher sequence id first. A Scanner (cell.Scanner) is opened with a
// read point and skips cells whose sequence id is above it, which is how a
// region scan sees a consistent MVCC snapshot.
//
// # Snapshots and memory
//
// Snapshot freezes the active segment and installs a fresh one; the region
// writes the frozen segment to a store file and then calls
// Memstore.ClearSnapshot. A segment is reference counted: the memstore
// holds one reference and every scanner one more, so its chunks return to
// the pool only when the flush is committed and the last scanner reading it
// is closed.
//
// Reserve lets a writer claim chunk memory before it logs a mutation to the
// WAL, so that the insert after the WAL append cannot fail; when the chunk
// pool's budget refuses, Reserve returns an error matching
// offheap.ErrBudgetExceeded (ErrFull) and the region blocks writes until a
// flush frees memory.
//
// Stats reports data bytes (key+value), chunk bytes held, cell count,
// minimum and maximum timestamp and maximum sequence id; they are atomics.
package memstore
