package region

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/wal"
)

// Read replicas (HBASE-10070). A primary region with replication enabled
// keeps a queue of its changes in memstore order: every edit (appended
// under the updates lock right after its memstore insert), FLUSH_START when
// a flush freezes the memstore (under the updates lock held exclusively, so
// the edits before it are exactly the frozen ones) and FILES when a flush or
// a compaction commits a manifest (under the manifest lock, so manifests
// follow each other in order). A read replica (OpenReplica) opens over the
// primary's directory read-only and applies the same changes to its own
// memstore and file set, so it serves what the primary served, later.
//
// The region server ships the queue (NextReplicationBatch, AckReplication)
// to each replica in numbered batches within a session. A session starts
// with a FLUSH_START marked SessionStart, followed by the FILES of that
// flush: from there a replica's state is those files plus the edits that
// follow, whatever it held before. A replica that missed a batch, reopened,
// or fell so far behind that the queue dropped it gets a new session
// (StartReplicationSession), which costs the primary a flush.

// ErrReadOnlyReplica is returned for writes, flushes, compactions and splits
// of a read replica.
var ErrReadOnlyReplica = errors.New("region: read replicas refuse writes; write to the primary")

// ReplicationKind says what a ReplicationEntry is.
type ReplicationKind uint8

// Kinds of ReplicationEntry.
const (
	// ReplEdit is one WAL edit.
	ReplEdit ReplicationKind = iota + 1
	// ReplFlushStart: the memstore was frozen for a flush (Seq: its highest
	// sequence id).
	ReplFlushStart
	// ReplFiles: a new manifest was committed (FlushCommit after a flush).
	ReplFiles
)

func (k ReplicationKind) String() string {
	switch k {
	case ReplEdit:
		return "EDIT"
	case ReplFlushStart:
		return "FLUSH_START"
	case ReplFiles:
		return "FILES"
	}
	return fmt.Sprintf("ReplicationKind(%d)", uint8(k))
}

// ReplicationEntry is one change of a primary region.
type ReplicationEntry struct {
	Kind ReplicationKind
	Seq  uint64
	// Edit (ReplEdit) is shared with the queue: read-only.
	Edit *wal.Edit
	// Manifest (ReplFiles) is the committed manifest file's content.
	Manifest    []byte
	FlushCommit bool
	// Families (ReplFlushStart) the primary's flush writes; none: every family.
	Families []string
	// SessionStart marks the ReplFlushStart that begins Session.
	SessionStart bool
	Session      uint64
	// Time the primary made the change.
	Time time.Time

	rpAtAppend uint64 // the primary's read point when the entry was queued
	size       int64
}

// ReplicationBatch is what NextReplicationBatch hands out for one replica.
type ReplicationBatch struct {
	Session uint64
	Entries []*ReplicationEntry
	// ReadPoint: every edit with a sequence id <= ReadPoint is in Entries
	// or was handed out before (or is in the store files).
	ReadPoint uint64
	// NeedSession: the replica has no session (new, or dropped for falling
	// behind): call StartReplicationSession.
	NeedSession bool

	replica int32
	end     uint64 // queue index after the batch
}

// ReplicationOptions configure a primary's queue.
type ReplicationOptions struct {
	// MaxBytes bounds the queued changes; a replica that holds more back is
	// dropped and gets a new session later (default 16 MiB).
	MaxBytes int64
}

// replCursor is where a replica's next batch starts, and the session of
// the entries there.
type replCursor struct {
	at      uint64
	session uint64
}

// replQueue is a primary's change queue with a cursor per replica.
type replQueue struct {
	mu      sync.Mutex
	entries []*ReplicationEntry
	base    uint64 // queue index of entries[0]
	cursors map[int32]*replCursor
	// joining replicas get a cursor at the next session start.
	joining  map[int32]bool
	bytes    int64
	maxBytes int64
	dropped  atomic.Int64 // replicas dropped for falling behind
	// active: some replica has a cursor or is joining (else edits are not
	// even queued: the session start's flush covers them).
	active atomic.Bool

	waitMu sync.Mutex
	wait   chan struct{}
	armed  atomic.Bool
}

var sessionIDs atomic.Uint64

func newSessionID() uint64 {
	// Unique across the region's openings on any server: time-based, and
	// strictly increasing in this process.
	for {
		old := sessionIDs.Load()
		next := max(old+1, uint64(time.Now().UnixNano()))
		if sessionIDs.CompareAndSwap(old, next) {
			return next
		}
	}
}

// EnableReplication makes a primary queue its changes for read replicas.
// Call it once, after Open.
func (r *Region) EnableReplication(opts ReplicationOptions) error {
	if r.replica {
		return ErrReadOnlyReplica
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 16 << 20
	}
	q := &replQueue{cursors: map[int32]*replCursor{}, joining: map[int32]bool{}, maxBytes: opts.MaxBytes,
		wait: make(chan struct{})}
	if !r.repl.CompareAndSwap(nil, q) {
		return errors.New("region: replication already enabled")
	}
	return nil
}

// ReplicationEnabled reports whether EnableReplication was called.
func (r *Region) ReplicationEnabled() bool { return r.repl.Load() != nil }

// appendEntry queues e; the caller holds the lock that orders it (the
// updates lock for edits and flush starts, the manifest lock for files).
func (q *replQueue) appendEntry(r *Region, e *ReplicationEntry) {
	e.Time = r.cfg.Clock()
	q.mu.Lock()
	e.rpAtAppend = r.mvcc.readPoint.Load()
	if e.SessionStart {
		for id := range q.joining {
			q.cursors[id] = &replCursor{at: q.base + uint64(len(q.entries))}
		}
		clear(q.joining)
		q.setActive()
	}
	if len(q.cursors) == 0 {
		// Nobody reads the queue: nothing to keep (a replica that comes
		// later starts with a session).
		q.base++
		q.mu.Unlock()
		return
	}
	q.entries = append(q.entries, e)
	q.bytes += e.size
	if q.bytes > q.maxBytes {
		q.dropSlowest()
	}
	q.mu.Unlock()
	q.notify()
}

// dropSlowest drops the replicas holding the oldest entries until the
// queue fits its budget. Called with q.mu held.
func (q *replQueue) dropSlowest() {
	for q.bytes > q.maxBytes && len(q.entries) > 0 {
		low := q.base + uint64(len(q.entries))
		for _, c := range q.cursors {
			low = min(low, c.at)
		}
		for id, c := range q.cursors {
			if c.at == low {
				delete(q.cursors, id)
				q.dropped.Add(1)
			}
		}
		q.trim()
		if len(q.cursors) == 0 {
			q.clear()
		}
	}
	q.setActive()
}

// setActive updates active. Called with q.mu held.
func (q *replQueue) setActive() { q.active.Store(len(q.cursors)+len(q.joining) > 0) }

// trim drops the entries every cursor has passed. Called with q.mu held.
func (q *replQueue) trim() {
	low := q.base + uint64(len(q.entries))
	for _, c := range q.cursors {
		low = min(low, c.at)
	}
	n := int(low - q.base)
	if n <= 0 {
		return
	}
	for _, e := range q.entries[:n] {
		q.bytes -= e.size
	}
	clear(q.entries[:n])
	q.entries = q.entries[n:]
	q.base = low
}

func (q *replQueue) clear() {
	clear(q.entries)
	q.base += uint64(len(q.entries))
	q.entries = q.entries[:0]
	q.bytes = 0
}

// notify wakes the shippers waiting for entries or a higher read point.
func (q *replQueue) notify() {
	if !q.armed.Swap(false) {
		return
	}
	q.waitMu.Lock()
	close(q.wait)
	q.wait = make(chan struct{})
	q.waitMu.Unlock()
}

func (q *replQueue) waitChan() <-chan struct{} {
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	q.armed.Store(true)
	return q.wait
}

// queueEdit queues a written edit (called under the updates lock).
func (r *Region) queueEdit(edit *wal.Edit, seq uint64) {
	q := r.repl.Load()
	if q == nil || !q.active.Load() {
		return
	}
	e := *edit
	e.Seq = seq
	e.WriteTime = r.cfg.Clock().UnixNano()
	var size int64 = 64
	for _, c := range e.Cells {
		size += int64(len(c)) + 24
	}
	q.appendEntry(r, &ReplicationEntry{Kind: ReplEdit, Seq: seq, Edit: &e, size: size})
}

// queueFlushStart queues a FLUSH_START (called with the updates lock held
// exclusively, right after the memstore froze).
func (r *Region) queueFlushStart(seq uint64, sessionStart bool, session uint64, families []string) {
	if q := r.repl.Load(); q != nil {
		q.appendEntry(r, &ReplicationEntry{Kind: ReplFlushStart, Seq: seq, SessionStart: sessionStart, Session: session,
			Families: families, size: 64})
	}
}

// queueFiles queues a committed manifest (called under filesMu).
func (r *Region) queueFiles(manifest []byte, seq uint64, flushCommit bool) {
	if q := r.repl.Load(); q != nil {
		q.appendEntry(r, &ReplicationEntry{Kind: ReplFiles, Seq: seq, Manifest: manifest, FlushCommit: flushCommit,
			size: int64(len(manifest)) + 64})
	}
}

// replicationCompleted wakes the shippers after a write completed (its edit
// may now be shipped).
func (r *Region) replicationCompleted() {
	if q := r.repl.Load(); q != nil {
		q.notify()
	}
}

// NextReplicationBatch returns the changes replica may be sent next: at
// most maxEntries entries (and about maxBytes), stopping before an edit
// that is not complete yet and before the start of another session. With
// nothing to send it returns an empty batch and a channel closed when there
// may be more. It never blocks.
func (r *Region) NextReplicationBatch(replica int32, maxEntries int, maxBytes int64) (ReplicationBatch, <-chan struct{}) {
	q := r.repl.Load()
	if q == nil {
		return ReplicationBatch{replica: replica}, nil
	}
	wait := q.waitChan() // before looking, so no notification is missed
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.cursors[replica]
	if !ok {
		return ReplicationBatch{NeedSession: !q.joining[replica], replica: replica}, wait
	}
	rp := r.mvcc.readPoint.Load()
	end := q.base + uint64(len(q.entries))
	b := ReplicationBatch{Session: c.session, replica: replica}
	var bytes int64
	i := c.at
	for ; i < end && len(b.Entries) < maxEntries && (bytes < maxBytes || len(b.Entries) == 0); i++ {
		e := q.entries[i-q.base]
		if e.Kind == ReplEdit && e.Seq > rp {
			break // not complete yet
		}
		if e.SessionStart {
			if i != c.at {
				break // a batch holds one session
			}
			b.Session = e.Session
		}
		b.Entries = append(b.Entries, e)
		bytes += e.size
	}
	b.end = i
	if i == end {
		// Every complete edit has been queued, and none is left behind.
		b.ReadPoint = rp
	} else {
		// Every edit complete when the first entry left behind was queued
		// was queued before it.
		b.ReadPoint = min(rp, q.entries[i-q.base].rpAtAppend)
	}
	return b, wait
}

// AckReplication records that b reached its replica.
func (r *Region) AckReplication(b ReplicationBatch) {
	q := r.repl.Load()
	if q == nil || len(b.Entries) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if c, ok := q.cursors[b.replica]; ok && b.end > c.at {
		c.at, c.session = b.end, b.Session
		q.trim()
	}
}

// DropReplication forgets a replica's cursor (its shipper stopped).
func (r *Region) DropReplication(replica int32) {
	q := r.repl.Load()
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.cursors, replica)
	delete(q.joining, replica)
	q.trim()
	if len(q.cursors) == 0 {
		q.clear()
	}
	q.setActive()
}

// ReplicationStats describes a primary's queue for one replica.
type ReplicationStats struct {
	// Pending entries not acknowledged yet; Oldest is when the oldest of
	// them was made (zero with none).
	Pending int
	Oldest  time.Time
	Bytes   int64
	Dropped int64
}

// ReplicationStats returns the queue's state for replica.
func (r *Region) ReplicationStats(replica int32) ReplicationStats {
	q := r.repl.Load()
	if q == nil {
		return ReplicationStats{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st := ReplicationStats{Bytes: q.bytes, Dropped: q.dropped.Load()}
	c, ok := q.cursors[replica]
	if !ok {
		return st
	}
	st.Pending = int(q.base + uint64(len(q.entries)) - c.at)
	if st.Pending > 0 {
		st.Oldest = q.entries[c.at-q.base].Time
	}
	return st
}

// StartReplicationSession begins a new session for replica (and every
// other replica, which see its start in their stream): it flushes the
// memstore with a FLUSH_START marked as the session start and places the
// replica's cursor there. The flush runs even when the memstore is empty,
// so the session always starts with the primary's current files.
func (r *Region) StartReplicationSession(replica int32) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	q := r.repl.Load()
	if q == nil {
		return errors.New("region: replication is not enabled")
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	if r.pending != nil {
		// A failed flush left its snapshots: finish it first, so the session
		// starts from memstores holding only later edits.
		if _, err := r.flushLocked(false, 0, nil); err != nil {
			return err
		}
	}
	q.mu.Lock()
	if c := q.cursors[replica]; c != nil {
		delete(q.cursors, replica)
		q.trim()
	}
	q.joining[replica] = true // its cursor starts at the session start
	q.setActive()
	q.mu.Unlock()
	if _, err := r.flushLocked(false, newSessionID(), nil); err != nil {
		q.mu.Lock()
		if q.joining[replica] { // the start was not queued: let the next attempt ask again
			delete(q.joining, replica)
			q.setActive()
		}
		q.mu.Unlock()
		return err
	}
	return nil
}

// ReplicaState is what a read replica applied.
type ReplicaState struct {
	Session   uint64
	NextBatch uint64
	ReadPoint uint64
}

// ApplyResult says how ApplyReplication went.
type ApplyResult struct {
	// Resync: the batch does not continue this replica's session (or the
	// replica could not apply it); the primary must start a new session.
	Resync bool
	// Duplicate: the batch was applied before (a retry).
	Duplicate bool
	ReadPoint uint64
}

// replicaState is a read replica's session (under applyMu).
type replicaState struct {
	applyMu sync.Mutex
	session uint64
	next    uint64
	// awaitingFiles: a session started and its files have not come yet.
	// Until they do, the edits that follow stay above the read point: the
	// replica shows its old state rather than new edits without the older
	// ones the files hold.
	awaitingFiles bool
}

// ReplicaState returns what the replica applied.
func (r *Region) ReplicaState() ReplicaState {
	if r.rs == nil {
		return ReplicaState{}
	}
	r.rs.applyMu.Lock()
	defer r.rs.applyMu.Unlock()
	return ReplicaState{Session: r.rs.session, NextBatch: r.rs.next, ReadPoint: r.mvcc.readPoint.Load()}
}

// IsReplica reports whether the region is a read replica.
func (r *Region) IsReplica() bool { return r.replica }

// ApplyReplication applies batch number num of session to a read replica.
// Batches of a session apply in order; a batch 1 that starts a session is
// accepted at any time. Any other batch out of order answers Resync, as
// does a batch the replica could not apply whole (its memstore memory ran
// out: ErrFull is returned with it, so the caller can ask for a flush).
func (r *Region) ApplyReplication(session, num uint64, entries []*ReplicationEntry, readPoint uint64) (ApplyResult, error) {
	if !r.replica {
		return ApplyResult{}, errors.New("region: ApplyReplication on a primary")
	}
	if err := r.checkOpen(); err != nil {
		return ApplyResult{}, err
	}
	st := r.rs
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	switch {
	case session == st.session && session != 0 && num < st.next:
		return ApplyResult{Duplicate: true, ReadPoint: r.mvcc.readPoint.Load()}, nil
	case session == st.session && session != 0 && num == st.next:
	case num == 1 && len(entries) > 0 && entries[0].Kind == ReplFlushStart && entries[0].SessionStart && entries[0].Session == session:
		st.session, st.next = session, 1
	default:
		return ApplyResult{Resync: true, ReadPoint: r.mvcc.readPoint.Load()}, nil
	}
	if err := r.applyEntries(entries); err != nil {
		// Part of the batch may be in: only a new session repairs that.
		st.session, st.next = 0, 0
		return ApplyResult{Resync: true, ReadPoint: r.mvcc.readPoint.Load()}, err
	}
	st.next++
	if !st.awaitingFiles {
		r.mvcc.advanceTo(readPoint)
	}
	return ApplyResult{ReadPoint: r.mvcc.readPoint.Load()}, nil
}

func (r *Region) applyEntries(entries []*ReplicationEntry) error {
	for i := 0; i < len(entries); {
		e := entries[i]
		switch e.Kind {
		case ReplEdit:
			j := i
			for j < len(entries) && entries[j].Kind == ReplEdit {
				j++
			}
			if err := r.applyEdits(entries[i:j]); err != nil {
				return err
			}
			i = j
			continue
		case ReplFlushStart:
			if err := r.replicaFlushStart(e.Families); err != nil {
				return err
			}
			if e.SessionStart {
				r.rs.awaitingFiles = true
			}
		case ReplFiles:
			if err := r.applyManifest(e.Manifest, e.FlushCommit); err != nil {
				return err
			}
			if e.FlushCommit {
				r.rs.awaitingFiles = false
			}
		default:
			return fmt.Errorf("%w: replication entry of kind %v", ErrInvalid, e.Kind)
		}
		i++
	}
	return nil
}

// applyEdits adds a run of edits to the replica's memstores.
func (r *Region) applyEdits(entries []*ReplicationEntry) error {
	sizes := make([]int64, len(r.fams))
	// The entries' cells of this replica's families (copies where some are left out: the entries
	// may be shared, with the primary's queue in one process).
	cells := make([][]cell.KeyValue, len(entries))
	for i, e := range entries {
		if e.Edit == nil || string(e.Edit.Region) != r.name {
			return fmt.Errorf("%w: replicated edit for another region", ErrInvalid)
		}
		cells[i] = r.knownFamilies(e.Edit.Cells)
		if err := r.memSizes(cells[i], sizes); err != nil {
			return fmt.Errorf("replicated cell: %w", err)
		}
	}
	// Held shared from the reservation to the last insert, as a primary's writers hold it: a
	// close waits for it before it gives the memstores' memory back.
	r.updatesLock.RLock()
	defer r.updatesLock.RUnlock()
	if err := r.checkOpen(); err != nil {
		return err
	}
	if err := r.reserveMem(sizes); err != nil {
		return err
	}
	defer r.unreserveMem(sizes)
	for i, e := range entries {
		if err := r.insertMem(cells[i], e.Seq); err != nil {
			return err
		}
	}
	r.metrics.WriteRequests.Add(int64(len(entries)))
	return nil
}

// knownFamilies leaves out cells of families this replica's descriptor lacks: an alter reopens the
// replica and its primary one after the other, and until the primary has, it may write a family
// the replica dropped (failing the batch would start a new session, each costing the primary a
// flush, until then).
func (r *Region) knownFamilies(cells []cell.KeyValue) []cell.KeyValue {
	for i := range cells {
		if r.familyIndex(cells[i].Key().Family()) >= 0 {
			continue
		}
		out := slices.Clone(cells[:i])
		for _, c := range cells[i+1:] {
			if r.familyIndex(c.Key().Family()) >= 0 {
				out = append(out, c)
			}
		}
		return out
	}
	return cells
}

// replicaFlushStart freezes the memstores of the families the primary's flush writes (all when
// none is named): they hold exactly the cells the primary froze.
func (r *Region) replicaFlushStart(families []string) error {
	pick := make([]bool, len(r.fams))
	for _, name := range families {
		if i := r.familyIndex([]byte(name)); i >= 0 {
			pick[i] = true
		} // (a family this replica's descriptor dropped: knownFamilies)
	}
	// A session restart while an earlier flush never committed: its cells are in the primary's
	// files by the next FILES.
	r.viewMu.Lock()
	for _, m := range r.mem {
		if snap := m.CurrentSnapshot(); snap != nil {
			m.ClearSnapshot(snap)
		}
	}
	r.viewMu.Unlock()
	for i, m := range r.mem {
		if len(families) > 0 && !pick[i] {
			continue
		}
		if _, err := m.Snapshot(); err != nil {
			return err
		}
	}
	return nil
}

// applyManifest makes the replica's file set the manifest's: files it
// already has stay open, new ones open (from the archive when the primary
// compacted them away meanwhile), the others are released.
func (r *Region) applyManifest(b []byte, flushCommit bool) error {
	m := &manifest{}
	if err := decodeChecked(b, m); err != nil {
		return fmt.Errorf("%w: replicated manifest: %w", ErrCorrupt, err)
	}
	if m.Families == nil {
		m.Families = map[string][]manifestFile{}
	}
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	if r.filesReleased {
		return fmt.Errorf("%w: %s", ErrClosed, r.name)
	}
	cur := r.files.Load()
	have := map[string]*storeFile{}
	for _, fs := range cur.byFamily {
		for _, f := range fs {
			have[f.path] = f
		}
	}
	next := &fileSet{byFamily: make([][]*storeFile, len(r.fams))}
	var opened []*storeFile
	keep := map[*storeFile]bool{}
	for i, f := range r.fams {
		for _, mf := range m.Families[f.Name] {
			p := r.storeFilePath(i, mf.Name)
			if sf := have[p]; sf != nil {
				keep[sf] = true
				next.byFamily[i] = append(next.byFamily[i], sf)
				continue
			}
			sf, err := r.openStoreFile(i, mf, nil)
			if err != nil {
				for _, o := range opened {
					o.release()
				}
				return err
			}
			opened = append(opened, sf)
			next.byFamily[i] = append(next.byFamily[i], sf)
		}
	}
	r.man = m
	r.viewMu.Lock()
	r.files.Store(next)
	if flushCommit {
		for _, m := range r.mem {
			if snap := m.CurrentSnapshot(); snap != nil {
				m.ClearSnapshot(snap)
			}
		}
	}
	r.viewMu.Unlock()
	for _, fs := range cur.byFamily {
		for _, f := range fs {
			if !keep[f] {
				f.release()
			}
		}
	}
	r.updateFileMetrics()
	return nil
}
