package region

import (
	"sync"
	"sync/atomic"
)

// mvcc hands out write numbers (the WAL's sequence ids) and tracks the read
// point: the highest sequence id such that every write of this region with
// a lower or equal id is complete. Write numbers are assigned under mu, in
// the order of the region's queue, so a write never completes "behind" the
// read point (HBase's MultiVersionConcurrencyControl).
type mvcc struct {
	mu        sync.Mutex
	cond      *sync.Cond
	queue     []*writeEntry
	readPoint atomic.Uint64
	broken    error
}

type writeEntry struct {
	seq  uint64
	done bool
}

func newMVCC(start uint64) *mvcc {
	m := &mvcc{}
	m.cond = sync.NewCond(&m.mu)
	m.readPoint.Store(start)
	return m
}

// begin assigns a write number with assign (which calls the WAL) and
// queues it. assign runs under the mvcc lock.
func (m *mvcc) begin(assign func() (uint64, error)) (*writeEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broken != nil {
		return nil, m.broken
	}
	seq, err := assign()
	if err != nil {
		return nil, err
	}
	e := &writeEntry{seq: seq}
	m.queue = append(m.queue, e)
	return e, nil
}

// complete marks e done, advances the read point over the completed prefix
// of the queue, and waits until the read point covers e (HBase's
// completeAndWait): a write is acknowledged only once every read sees it,
// even when an earlier write (another writer's, still waiting for its WAL
// sync) completes after it. It returns early only when the region broke.
func (m *mvcc) complete(e *writeEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.done = true
	i := 0
	for i < len(m.queue) && m.queue[i].done {
		if m.queue[i].seq > m.readPoint.Load() {
			m.readPoint.Store(m.queue[i].seq)
		}
		i++
	}
	if i > 0 {
		clear(m.queue[:i])
		m.queue = m.queue[i:]
		m.cond.Broadcast()
	}
	for m.readPoint.Load() < e.seq && m.broken == nil {
		m.cond.Wait()
	}
}

// waitBefore waits until every queued write with a sequence id <= seq is
// complete (or the region broke).
func (m *mvcc) waitBefore(seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.queue) > 0 && m.queue[0].seq <= seq && m.broken == nil {
		m.cond.Wait()
	}
	return m.broken
}

// breakWith makes every later begin and wait fail: the region lost a WAL
// write after inserting into the memstore and must be reopened.
func (m *mvcc) breakWith(err error) {
	m.mu.Lock()
	if m.broken == nil {
		m.broken = err
	}
	m.cond.Broadcast()
	m.mu.Unlock()
}

// advanceTo raises the read point (region open).
func (m *mvcc) advanceTo(seq uint64) {
	m.mu.Lock()
	if seq > m.readPoint.Load() {
		m.readPoint.Store(seq)
	}
	m.mu.Unlock()
}

// pending returns the number of incomplete writes.
func (m *mvcc) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}
