package region

import (
	"errors"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
)

// The compacting memstore (HBase's Accordion, IN_MEMORY_COMPACTION): a primary region with a
// BASIC or EAGER family freezes its active memstore segment into an in-memory pipeline when it
// reaches InMemoryFlushSize, instead of waiting for a flush to disk; the pipeline is merged into
// one segment (EAGER: at every in-memory flush, leaving out the versions of EAGER families no
// read sees any more; BASIC: once it holds basicMergeSegments). The disk flush still writes
// everything unflushed once active and pipeline together reach FlushSize; the WAL, replicas and
// recovery see no difference.

// basicMergeSegments is the pipeline length at which a BASIC memstore merges it.
const basicMergeSegments = 4

type inMemoryCompaction struct {
	on    bool
	eager bool
	// versions are the VERSIONS of the EAGER families, by name.
	versions map[string]int
	req      chan struct{}
}

func (r *Region) startInMemoryCompaction() {
	if r.replica {
		return // a replica's memstore follows its primary's flushes
	}
	for _, f := range r.fams {
		switch f.InMemoryCompaction {
		case InMemoryBasic:
			r.inMem.on = true
		case InMemoryEager:
			r.inMem.on, r.inMem.eager = true, true
			if r.inMem.versions == nil {
				r.inMem.versions = map[string]int{}
			}
			r.inMem.versions[f.Name] = f.maxVersions()
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

func (r *Region) inMemoryLoop() {
	defer r.bgWG.Done()
	for {
		select {
		case <-r.bgDone:
			return
		case <-r.inMem.req:
			if err := r.InMemoryFlush(); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, memstore.ErrClosed) {
				r.log.Warn("in-memory flush failed (the next flush writes the memstore as it is)", "error", err)
			}
		}
	}
}

// InMemoryFlush freezes the active memstore segment into the pipeline and merges the pipeline
// as the families' policies say. It does nothing to a region without BASIC or EAGER families.
func (r *Region) InMemoryFlush() error {
	if !r.inMem.on {
		return nil
	}
	if err := r.checkOpen(); err != nil {
		return err
	}
	r.updatesLock.Lock()
	n, err := r.ms.InMemoryFlush()
	r.updatesLock.Unlock()
	if err != nil {
		return err
	}
	r.metrics.InMemoryFlushes.Add(1)
	if !r.inMem.eager && n < basicMergeSegments {
		return nil
	}
	var keep memstore.Keep
	if r.inMem.eager {
		keep = r.eagerKeep()
	}
	if _, _, err := r.ms.MergePipeline(keep); err != nil {
		return err
	}
	r.metrics.InMemoryMerges.Add(1)
	return nil
}

// eagerKeep is the Keep of an EAGER merge: versions beyond VERSIONS that readers at the current
// read point do not see go, for the EAGER families; every cell of the others stays.
func (r *Region) eagerKeep() memstore.Keep {
	rp := r.mvcc.readPoint.Load()
	keeps := make(map[string]*memstore.VersionKeep, len(r.inMem.versions))
	for name, v := range r.inMem.versions {
		keeps[name] = &memstore.VersionKeep{MaxVersions: v, ReadPoint: rp}
	}
	var lastFam []byte
	var cur *memstore.VersionKeep
	return func(key cell.Key, seq uint64) bool {
		if fam := key.Family(); string(fam) != string(lastFam) {
			lastFam = append(lastFam[:0], fam...)
			cur = keeps[string(fam)]
		}
		if cur == nil {
			return true
		}
		if !cur.Keep(key, seq) {
			r.metrics.InMemoryDroppedCells.Add(1)
			return false
		}
		return true
	}
}
