package region

import (
	"sync/atomic"

	"github.com/cellstore/cellstore/engine/memstore"
)

// Metrics are the region's counters (HBase's per-region metrics), plain
// atomics: the hot paths never lock or look up maps to count. The region
// server exports them (readRequestCount, writeRequestCount,
// storeFileCount, ...).
type Metrics struct {
	ReadRequests         atomic.Int64 // scanners and gets opened
	WriteRequests        atomic.Int64 // atomic writes applied
	FilteredReadRequests atomic.Int64 // rows dropped by filters
	BlockedWrites        atomic.Int64 // writes that had to wait for a flush
	NonceDuplicates      atomic.Int64 // retried operations answered from the nonce table
	// A compacting memstore's work: in-memory flushes, pipeline merges and the cells EAGER
	// merges left out.
	InMemoryFlushes, InMemoryMerges, InMemoryDroppedCells atomic.Int64

	Flushes      atomic.Int64
	Handoffs     atomic.Int64 // closes for a move that handed the memstore off in the manifest
	FlushedBytes atomic.Int64 // store file bytes written by flushes
	FlushedCells atomic.Int64

	Compactions            atomic.Int64
	MajorCompactions       atomic.Int64
	CompactedFiles         atomic.Int64 // input files
	CompactionBytesRead    atomic.Int64
	CompactionBytesWritten atomic.Int64

	StoreFiles     atomic.Int64
	StoreFileBytes atomic.Int64
}

// Metrics returns the region's counters.
func (r *Region) Metrics() *Metrics { return &r.metrics }

// MemstoreStats returns the memstores' size accounting (every family together) (data bytes, chunk
// bytes, cells, timestamps, sequence ids).
func (r *Region) MemstoreStats() memstore.Stats { return r.mem.stats() }

// WritePressure is how close the region is to blocking writes for lack of memstore room, 0–100:
// 0 while its memstores hold less than the flush size, rising linearly to 100 at the size where
// writes block (FlushSize × BlockingMultiplier, see reserve), and 100 while writers wait for room.
// Write answers carry it so that clients slow down before the region blocks them.
func (r *Region) WritePressure() uint32 {
	if r.blockedWriters.Load() > 0 {
		return 100
	}
	return PressureBetween(r.mem.stats().DataBytes, r.cfg.FlushSize, r.cfg.FlushSize*r.cfg.BlockingMultiplier)
}

// PressureBetween is where held lies between low (0) and high (100), clamped: the percentage of
// the way from where flushing starts to where writes block.
func PressureBetween(held, low, high int64) uint32 {
	switch {
	case held <= low:
		return 0
	case held >= high || high <= low:
		return 100
	}
	return uint32((held - low) * 100 / (high - low))
}

// ReadPoint returns the MVCC read point.
func (r *Region) ReadPoint() uint64 { return r.mvcc.readPoint.Load() }

// FlushedSeq returns the highest sequence id whose edits no WAL is needed for: all in store
// files, or handed off in the manifest by a move's close (what a log split may skip).
func (r *Region) FlushedSeq() uint64 {
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	seq := r.man.FlushedSeq
	if n := len(r.man.Handoff); n > 0 {
		seq = max(seq, r.man.Handoff[n-1].Seq)
	}
	return seq
}

// StoreFileCount returns the number of live store files per family name.
func (r *Region) StoreFileCount() map[string]int {
	set := r.files.Load()
	out := map[string]int{}
	for i, fs := range set.byFamily {
		out[r.fams[i].Name] = len(fs)
	}
	return out
}

// CompactionWanted reports whether a store holds enough files for a minor compaction (HBase
// counts such regions in compactionQueueLength). A daughter's reference files want one too.
func (r *Region) CompactionWanted() bool {
	for _, fs := range r.files.Load().byFamily {
		if len(fs) >= r.compactionConfig().MinFiles {
			return true
		}
	}
	return r.HasReferences()
}

// HasReferences reports whether any store is still made of reference
// files (a daughter not yet compacted).
func (r *Region) HasReferences() bool {
	for _, fs := range r.files.Load().byFamily {
		for _, f := range fs {
			if f.ref != nil {
				return true
			}
		}
	}
	return false
}

func (r *Region) updateFileMetrics() {
	n, size := r.files.Load().count()
	r.metrics.StoreFiles.Store(int64(n))
	r.metrics.StoreFileBytes.Store(size)
}
