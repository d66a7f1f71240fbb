package region

import (
	"errors"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
)

// The compacting memstore (HBase's Accordion, IN_MEMORY_COMPACTION): a BASIC or EAGER family of
// a primary region freezes its active memstore segment into an in-memory pipeline when it
// reaches InMemoryFlushSize, instead of waiting for a flush to disk; the pipeline is merged into
// one segment (EAGER: at every in-memory flush, leaving out the versions no read sees any more;
// BASIC: once it holds basicMergeSegments). The disk flush still writes everything unflushed of
// the families it picks once the memstores together reach FlushSize; the WAL, replicas and
// recovery see no difference. Each family has its own memstore: the others are untouched.

// basicMergeSegments is the pipeline length at which a BASIC memstore merges it.
const basicMergeSegments = 4

type inMemoryCompaction struct {
	on bool
	// fams are the indexes of the BASIC and EAGER families.
	fams []int
	req  chan struct{}
}

func (r *Region) startInMemoryCompaction() {
	if r.replica {
		return // a replica's memstore follows its primary's flushes
	}
	for i, f := range r.fams {
		if f.InMemoryCompaction != InMemoryNone {
			r.inMem.on = true
			r.inMem.fams = append(r.inMem.fams, i)
		}
	}
	if !r.inMem.on {
		return
	}
	r.inMem.req = make(chan struct{}, 1)
	r.bgWG.Add(1)
	go r.inMemoryLoop()
}

func (r *Region) requestInMemoryFlush() {
	select {
	case r.inMem.req <- struct{}{}:
	default:
	}
}

// inMemoryFlushDue reports whether a compacting family's active segment reached the in-memory
// flush size.
func (r *Region) inMemoryFlushDue() bool {
	for _, i := range r.inMem.fams {
		if r.mem[i].ActiveDataBytes() >= r.cfg.InMemoryFlushSize {
			return true
		}
	}
	return false
}

func (r *Region) inMemoryLoop() {
	defer r.bgWG.Done()
	for {
		select {
		case <-r.bgDone:
			return
		case <-r.inMem.req:
			if err := r.inMemoryFlush(false); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, memstore.ErrClosed) {
				r.log.Warn("in-memory flush failed (the next flush writes the memstore as it is)", "error", err)
			}
		}
	}
}

// InMemoryFlush freezes the active memstore segment of every BASIC or EAGER family into its
// pipeline and merges the pipeline as the family's policy says. It does nothing to a region
// without such families.
func (r *Region) InMemoryFlush() error { return r.inMemoryFlush(true) }

// inMemoryFlush freezes the compacting families' active segments (only those that reached the
// in-memory flush size unless all).
func (r *Region) inMemoryFlush(all bool) error {
	if !r.inMem.on {
		return nil
	}
	if err := r.checkOpen(); err != nil {
		return err
	}
	for _, i := range r.inMem.fams {
		m := r.mem[i]
		if !all && m.ActiveDataBytes() < r.cfg.InMemoryFlushSize {
			continue
		}
		r.updatesLock.Lock()
		n, err := m.InMemoryFlush()
		r.updatesLock.Unlock()
		if err != nil {
			return err
		}
		r.metrics.InMemoryFlushes.Add(1)
		f := &r.fams[i]
		eager := f.InMemoryCompaction == InMemoryEager
		if !eager && n < basicMergeSegments {
			continue
		}
		var keep memstore.Keep
		if eager {
			keep = r.eagerKeep(f.maxVersions())
		}
		// Swapped in under the view lock, under which a scan takes its read point and the
		// memstores' segments: no scan reads the merged segment at a point below keep's.
		if _, _, err := m.MergePipelineGuarded(keep, &r.viewMu); err != nil {
			return err
		}
		r.metrics.InMemoryMerges.Add(1)
	}
	return nil
}

// eagerKeep is the Keep of an EAGER family's merge: versions beyond VERSIONS that readers at the
// current read point do not see go.
func (r *Region) eagerKeep(versions int) memstore.Keep {
	vk := &memstore.VersionKeep{MaxVersions: versions, ReadPoint: r.mvcc.readPoint.Load(), Now: r.nowMs()}
	return func(key cell.Key, seq uint64, tags []byte) bool {
		if !vk.Keep(key, seq, tags) {
			r.metrics.InMemoryDroppedCells.Add(1)
			return false
		}
		return true
	}
}
