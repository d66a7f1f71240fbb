// Package offheap manages the memory Cellstore keeps outside the Go heap:
// mmap'd arenas (with hugepages when available), budgets that bound them, the
// memstore chunk pool, and the region server's memory configuration.
//
// # Why off-heap
//
// The Go garbage collector scans and counts everything on the heap. Bulk data
// (memstore cells, the L2 block cache) is kept in anonymous private mappings
// instead, so the heap holds only metadata and request state: the heap stays
// small, GC cycles stay short and cheap, and GOMEMLIMIT bounds what it is
// meant to bound. This follows HBase's off-heap read path (HBASE-11425) and
// write path (HBASE-15179).
//
// # Arenas
//
// NewArena maps memory with mmap(MAP_PRIVATE|MAP_ANONYMOUS) through
// golang.org/x/sys/unix. HugepageMode selects the backing:
//
//   - auto: MAP_HUGETLB with 2 MiB pages; if the kernel refuses (no free
//     hugepages), a 2 MiB-aligned mapping advised MADV_HUGEPAGE (transparent
//     hugepages); if THP is disabled or madvise fails, base pages.
//   - 2Mi, 1Gi: MAP_HUGETLB with MAP_HUGE_2MB or MAP_HUGE_1GB, required: a
//     refusal is an error matching ErrHugepagesUnavailable, never a silent
//     fallback, because the memory budget check (MemoryConfig.Validate)
//     counted these bytes as hugetlb memory outside the memory cgroup.
//   - off: base pages, advised MADV_NOHUGEPAGE.
//
// The backing actually obtained is logged (log/slog; a warning with the
// reasons when auto fell back) and exported by Collector as
// cellstore_offheap_hugepage_mode{mode="none|thp|hugetlb-2Mi|hugetlb-1Gi"}
// (1 while a live arena has that backing) and cellstore_offheap_arena_bytes.
// Sizes are rounded up to the page size of the mode. Close unmaps the arena;
// Slice and Bytes on a closed arena return ErrClosed. Views taken before Close
// must not be used after it: owners (ChunkPool, the bucket cache) refuse to
// unmap, or defer unmapping, while their views are referenced.
//
// # Budgets
//
// A Budget bounds reservations with a lock-free counter and an optional
// parent (a process-wide "offheap" budget above "memstore" and
// "blockcache"). An arena reserves its size before mapping; a refusal is a
// *BudgetError matching ErrBudgetExceeded, for the caller to handle (flush,
// block writers, decline to cache), never a crash.
//
// # Chunk pool (MSLAB)
//
// ChunkPool hands out fixed-size chunks (DefaultChunkSize, 2 MiB) carved from
// arenas mapped a slab at a time and bounded by a Budget. A Chunk has a
// lock-free bump allocator (Alloc returns a []byte view of off-heap memory to
// copy a cell into) and a reference count: Get returns it with the owner's
// reference, readers Retain and Release, and the last Release returns it to
// the pool for reuse by the next memstore segment. Chunks are never unmapped
// while the pool lives. Chunk ids are stable, so a memstore index can refer to
// a cell by (chunk id, offset) and resolve it with ChunkPool.Chunk.
// ChunkPool.Stats separates data (bytes allocated in chunks) from the chunk
// memory held (chunks in use times chunk size); the difference is overhead.
//
// # Invariant checks
//
// Builds with the invariants tag (go test -tags invariants) poison released
// chunks with PoisonByte and verify the poison when a chunk is handed out
// again, so a write through a stale view fails the test that made it; a
// double release, or Alloc/Retain/Bytes on a released chunk, panics. The
// checks live in invariants.go; invariants_off.go holds no-op twins, and in
// normal builds detected misuse (a double release) is logged and refused
// rather than acted on.
//
// # Memory configuration
//
// MemoryConfig registers --heap-limit, --memstore-offheap-size,
// --blockcache-offheap-size, --blockcache-onheap-size, --memory-overhead and
// --hugepages (sizes are Kubernetes quantities: 512Mi, 2Gi, or plain bytes;
// see ParseQuantity). Validate reads the cgroup memory limit (v1 or v2, from
// /proc/self/cgroup and /proc/self/mountinfo under an injectable root, taking
// the smallest limit of the cgroup and its ancestors; "max" is unlimited; the
// machine's MemTotal when there is no limit) and refuses budgets where
//
//	heap limit + off-heap on ordinary pages + overhead > limit
//
// with a message naming each number. The on-heap L1 cache lives inside the
// heap limit. Off-heap memory on hugetlb pages (2Mi/1Gi modes) is outside the
// memory cgroup unless cgroup v2 is mounted with memory_hugetlb_accounting;
// in auto mode it is counted, since the hugetlb attempt may fall back.
// Separately, Validate checks that enough hugepages of the requested size are
// available (free minus reserved pages in the kernel pool, and the hugetlb
// cgroup limit) and says how to reserve them. DefaultMemoryOverhead documents
// what the overhead covers. MemoryPlan.Apply sets GOMEMLIMIT; NewBudgets
// returns the off-heap budgets.
package offheap
