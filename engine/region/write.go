package region

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/wal"
)

// rowEdit is the resolved cells of one row of a write.
type rowEdit struct {
	row   []byte
	cells []cell.KeyValue
}

// writeReq is one atomic write: the cells of one or more rows applied with
// one sequence id (one WAL edit).
type writeReq struct {
	rows       []rowEdit
	durability wal.Durability
	nonceGroup uint64
	nonce      uint64
	hasNonce   bool
}

// editDurability is the durability of one edit of several mutations: the strongest of theirs
// (HBase's batchMutate), DurabilityDefault (the table's, SyncWAL) counting as SyncWAL.
func editDurability(ms []*Mutation) wal.Durability {
	if len(ms) == 0 {
		return wal.DurabilityDefault
	}
	d := ms[0].Durability
	for _, m := range ms[1:] {
		d = strongest(d, m.Durability)
	}
	return d
}

func strongest(a, b wal.Durability) wal.Durability {
	rank := func(d wal.Durability) int {
		switch d {
		case wal.SkipWAL:
			return 0
		case wal.AsyncWAL:
			return 1
		}
		return 2 // default, sync, fsync
	}
	if rank(a) >= rank(b) {
		return a
	}
	return b
}

// Mutate applies one Put/Delete mutation atomically.
func (r *Region) Mutate(m *Mutation) error {
	errs := r.Batch([]*Mutation{m})
	return errs[0]
}

// Put is Mutate for a mutation of Put ops.
func (r *Region) Put(m *Mutation) error { return r.Mutate(m) }

// Delete is Mutate for a mutation of delete ops.
func (r *Region) Delete(m *Mutation) error { return r.Mutate(m) }

// MutateRow applies several mutations of one row as one atomic edit
// (HBase's RowMutations).
func (r *Region) MutateRow(ms []*Mutation) error {
	if len(ms) == 0 {
		return nil
	}
	row := ms[0].Row
	for _, m := range ms[1:] {
		if !bytes.Equal(m.Row, row) {
			return fmt.Errorf("%w: RowMutations for different rows %q and %q", ErrInvalid, row, m.Row)
		}
	}
	if err := r.checkOpen(); err != nil {
		return err
	}
	// One edit of every mutation, each keeping its own TTL, tags (cell ACLs) and visibility.
	ob := r.observer.Load()
	for _, m := range ms {
		if err := r.validateMutation(m); err != nil {
			return err
		}
		if err := ob.preMutate(r, m); err != nil {
			return err
		}
	}
	if err := r.applyMutations(ms); err != nil {
		return err
	}
	ob.postMutate(ms...)
	return nil
}

// Batch applies mutations of possibly many rows (HBase's multi). The
// mutations that validate are applied together as one atomic edit (so each
// row is atomic, and so is the batch); the returned slice has one error per
// mutation (nil for applied ones).
func (r *Region) Batch(ms []*Mutation) []error {
	errs := make([]error, len(ms))
	if err := r.checkOpen(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	var valid []*Mutation
	var idx []int
	ob := r.observer.Load()
	for i, m := range ms {
		if err := r.validateMutation(m); err != nil {
			errs[i] = err
			continue
		}
		if err := ob.preMutate(r, m); err != nil {
			errs[i] = err
			continue
		}
		valid = append(valid, m)
		idx = append(idx, i)
	}
	if len(valid) == 0 {
		return errs
	}
	err := r.applyMutations(valid)
	for _, i := range idx {
		errs[i] = err
	}
	if err == nil {
		ob.postMutate(valid...)
	}
	return errs
}

func (r *Region) validateMutation(m *Mutation) error {
	if m == nil {
		return fmt.Errorf("%w: nil mutation", ErrInvalid)
	}
	if err := r.checkRow(m.Row); err != nil {
		return err
	}
	if len(m.Ops) == 0 {
		return fmt.Errorf("%w: mutation of row %q has no cells", ErrInvalid, m.Row)
	}
	if err := checkTTL(m.TTL); err != nil {
		return err
	}
	if len(m.Tags) > 0 {
		if err := cell.ParseTags(m.Tags); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if _, ok := cell.TTLOf(m.Tags); ok {
			return fmt.Errorf("%w: a mutation's tags cannot hold a TTL (set Mutation.TTL)", ErrInvalid)
		}
		if len(m.Tags)+len(cell.AppendTTLTag(nil, 1)) > cell.MaxTagsLength {
			return fmt.Errorf("%w: %d bytes of tags, limit %d", ErrInvalid, len(m.Tags), cell.MaxTagsLength-len(cell.AppendTTLTag(nil, 1)))
		}
	}
	if len(m.Visibility) > 0 {
		if err := cell.ParseTags(m.Visibility); err != nil {
			return fmt.Errorf("%w: visibility: %w", ErrInvalid, err)
		}
		if !cell.OnlyTagsOf(m.Visibility, cell.TagVisibility) {
			return fmt.Errorf("%w: Mutation.Visibility holds tags other than visibility tags", ErrInvalid)
		}
		if len(m.Tags)+len(m.Visibility)+len(cell.AppendTTLTag(nil, 1)) > cell.MaxTagsLength {
			return fmt.Errorf("%w: %d bytes of tags, limit %d", ErrInvalid, len(m.Tags)+len(m.Visibility), cell.MaxTagsLength-len(cell.AppendTTLTag(nil, 1)))
		}
	}
	for _, op := range m.Ops {
		if !op.Type.IsCellType() {
			return fmt.Errorf("%w: cell type %v", ErrInvalid, op.Type)
		}
		if err := checkTTL(op.TTL); err != nil {
			return err
		}
		if op.Type != cell.Put && (op.TTL != 0 || m.TTL != 0) {
			return fmt.Errorf("%w: a TTL applies to puts; a %v cannot carry one (HBase refuses TTLs on deletes)", ErrInvalid, op.Type)
		}
		if len(op.Tags) > 0 {
			if err := checkClientTags(op, m); err != nil {
				return err
			}
		}
		if len(op.Family) == 0 && op.Type == cell.DeleteFamily {
			continue // delete row
		}
		if r.familyIndex(op.Family) < 0 {
			return fmt.Errorf("%w: %q (table %s:%s has %s)", ErrNoSuchFamily, op.Family, r.table.Namespace, r.table.Name, famList(r.fams))
		}
		if op.Timestamp < 0 {
			return fmt.Errorf("%w: negative timestamp %d", ErrInvalid, op.Timestamp)
		}
		if (op.Type == cell.DeleteFamily || op.Type == cell.DeleteFamilyVersion) && len(op.Qualifier) > 0 {
			return fmt.Errorf("%w: %v marker with a qualifier", ErrInvalid, op.Type)
		}
		if err := cell.Validate(m.Row, op.Family, op.Qualifier, 0, op.Type, op.Value, r.table.MaxCellSize); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// checkClientTags checks the tags a client sent with a cell: on a put, well formed, of types a
// client may send, one TTL at most, and room for the server's tags beside them.
func checkClientTags(op Op, m *Mutation) error {
	if op.Type != cell.Put {
		return fmt.Errorf("%w: a %v cannot carry tags (only puts do)", ErrInvalid, op.Type)
	}
	if err := cell.ParseTags(op.Tags); err != nil {
		return fmt.Errorf("%w: a cell's tags: %w", ErrInvalid, err)
	}
	var bad error
	ttls := 0
	cell.ForEachTag(op.Tags, func(typ byte, _ []byte) bool {
		switch {
		case typ == cell.TagTTL:
			ttls++
		case !cell.ClientTagType(typ):
			bad = fmt.Errorf("%w: a cell carries a tag of type %d, which only the server writes (ACLs, visibility and such come from the mutation's attributes); a client's own tags have types from %d", ErrInvalid, typ, cell.FirstClientTagType)
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	if ttls > 1 || ttls == 1 && (op.TTL != 0 || m.TTL != 0) {
		return fmt.Errorf("%w: a cell carries two TTLs (a TTL tag and the mutation's TTL): send one", ErrInvalid)
	}
	if n := len(op.Tags) + len(m.Tags) + len(m.Visibility) + len(cell.AppendTTLTag(nil, 1)); n > cell.MaxTagsLength {
		return fmt.Errorf("%w: %d bytes of tags with the server's, limit %d", ErrInvalid, n, cell.MaxTagsLength)
	}
	return nil
}

// checkTTL refuses a negative per-cell TTL.
func checkTTL(ttl int64) error {
	if ttl < 0 {
		return fmt.Errorf("%w: negative TTL %d ms", ErrInvalid, ttl)
	}
	return nil
}

// ttlTaggedExtra is what a TTL tag adds to a cell: the tag and the tags
// length after it.
var ttlTaggedExtra = cell.TaggedLen(0, len(cell.AppendTTLTag(nil, 1)))

// applyMutations resolves and applies valid mutations as one edit.
func (r *Region) applyMutations(ms []*Mutation) error {
	rows := make([][]byte, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, m.Row)
	}
	locks, err := r.lockRows(rows)
	if err != nil {
		return err
	}
	defer r.unlockRows(locks)
	req, err := r.resolveMutations(ms)
	if err != nil {
		return err
	}
	_, err = r.write(req, true)
	return err
}

// resolveMutations makes the write of valid mutations (cells of one row together), under their
// row locks.
func (r *Region) resolveMutations(ms []*Mutation) (*writeReq, error) {
	now := r.nowMs()
	req := &writeReq{rows: make([]rowEdit, 0, len(ms)), durability: editDurability(ms)}
	var byRow map[string]int // row -> index in req.rows, when a batch may repeat a row
	if len(ms) > 1 {
		byRow = make(map[string]int, len(ms))
	}
	sl := newCellSlab(ms...)
	for _, m := range ms {
		if m.Nonce != 0 && !req.hasNonce {
			req.hasNonce, req.nonceGroup, req.nonce = true, m.NonceGroup, m.Nonce
		}
		i, ok := len(req.rows), false
		if byRow != nil && len(m.Row) > 0 {
			// The map lives only for this call, in which m.Row does not change: its key need not
			// be a copy.
			k := unsafe.String(&m.Row[0], len(m.Row))
			if i, ok = byRow[k]; !ok {
				i = len(req.rows)
				byRow[k] = i
			}
		}
		if !ok {
			req.rows = append(req.rows, rowEdit{row: m.Row})
		}
		cells, err := r.resolveOps(sl, m.Row, m.Ops, m.TTL, m.Tags, m.Visibility, now, now)
		if err != nil {
			return nil, err
		}
		if req.rows[i].cells == nil {
			req.rows[i].cells = cells
		} else {
			req.rows[i].cells = append(req.rows[i].cells, cells...)
		}
	}
	return req, nil
}

// cellSlab holds the cells a write resolves: one buffer for their bytes and one for their
// headers, sized for every mutation of the write, so that a batch costs two allocations rather
// than two per mutation. A cell slice handed out stays valid when the slab grows.
type cellSlab struct {
	buf []byte
	out []cell.KeyValue
}

// newCellSlab sizes a slab for the cells of ms (a slab of nil size grows as needed).
func newCellSlab(ms ...*Mutation) *cellSlab {
	size, cells := 0, 0
	for _, m := range ms {
		size += opsSize(m.Row, m.Ops, m.TTL, m.Tags, m.Visibility)
		cells += len(m.Ops)
	}
	return &cellSlab{buf: make([]byte, 0, size), out: make([]cell.KeyValue, 0, cells)}
}

// opsSize is the bytes of the cells resolveOps makes of ops (a delete of every family adds its
// own).
func opsSize(row []byte, ops []Op, ttl int64, extra, vis []byte) int {
	size := 0
	for _, op := range ops {
		size += cell.KeyValueLen(len(row), len(op.Family)+cell.MaxFamilyLength*boolInt(len(op.Family) == 0), len(op.Qualifier), len(op.Value))
		if op.Type == cell.Put && (op.TTL != 0 || ttl != 0 || len(extra) > 0 || len(op.Tags) > 0) || len(vis) > 0 {
			size += ttlTaggedExtra + len(extra) + len(vis) + len(op.Tags)
		}
	}
	return size
}

// resolveOps turns ops into cells: "now" timestamps (putTs for puts: now but where a
// check-and-mutate raises it), delete-row expansion, Delete-latest-version lookups, TTL tags
// (ttl: the mutation's) and the mutation's extra tags on puts. Called under the row lock.
func (r *Region) resolveOps(sl *cellSlab, row []byte, ops []Op, ttl int64, extra, vis []byte, now, putTs int64) ([]cell.KeyValue, error) {
	buf, first := sl.buf, len(sl.out)
	out := sl.out
	defer func() { sl.buf, sl.out = buf, out }()
	var tags, key []byte
	add := func(fam, q []byte, ts int64, t cell.Type, v []byte, cellTTL int64, sent []byte) {
		start := len(buf)
		if cellTTL == 0 {
			cellTTL = ttl
		}
		if (t != cell.Put || (cellTTL == 0 && len(extra) == 0 && len(sent) == 0)) && len(vis) == 0 {
			buf = cell.AppendKeyValue(buf, row, fam, q, ts, t, v)
		} else {
			tags = tags[:0]
			if t == cell.Put {
				tags = append(tags, sent...)
				if cellTTL != 0 {
					tags = cell.AppendTTLTag(tags, cellTTL)
				}
				tags = append(tags, extra...)
			}
			tags = append(tags, vis...)
			key = cell.AppendKey(key[:0], row, fam, q, ts, t)
			buf = cell.AppendTaggedKeyValue(buf, key, v, tags)
		}
		out = append(out, cell.KeyValue(buf[start:len(buf):len(buf)]))
	}
	// latestDeletes counts the deletes of the newest version per column so far: the nth of a
	// column deletes its nth newest version.
	var latestDeletes map[string]int
	for _, op := range ops {
		ts := op.Timestamp
		if op.Type == cell.DeleteFamily && len(op.Family) == 0 {
			if ts == cell.LatestTimestamp {
				ts = now
			}
			for _, f := range r.famNames {
				if len(vis) > 0 {
					out = append(out, cell.KeyValue(cell.AppendTaggedKeyValue(nil, cell.AppendKey(nil, row, f, nil, ts, cell.DeleteFamily), nil, vis)))
					continue
				}
				out = append(out, cell.KeyValue(cell.AppendKeyValue(nil, row, f, nil, ts, cell.DeleteFamily, nil)))
			}
			continue
		}
		if ts == cell.LatestTimestamp {
			ts = now
			switch op.Type {
			case cell.Put:
				ts = putTs
			case cell.Delete:
				// Delete the newest visible version (HBase's prepareDeleteTimestamps): the nth
				// such delete of a column in the mutation deletes its nth newest version, and
				// one beyond the versions there are gets now (deleting nothing).
				if latestDeletes == nil {
					latestDeletes = map[string]int{}
				}
				col := string(cell.AppendKey(nil, nil, op.Family, op.Qualifier, 0, cell.Delete))
				latestDeletes[col]++
				if nth, ok, err := r.nthLatestTimestamp(row, op.Family, op.Qualifier, vis, latestDeletes[col]); err != nil {
					return nil, err
				} else if ok {
					ts = nth
				}
			}
		}
		add(op.Family, op.Qualifier, ts, op.Type, op.Value, op.TTL, op.Tags)
	}
	return out[first:len(out):len(out)], nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nthLatestTimestamp returns the timestamp of the nth (from 1) newest visible version of a
// column (of the same visibility as vis), reading n versions as HBase's
// updateDeleteLatestVersionTimestamp does; false when there are fewer.
func (r *Region) nthLatestTimestamp(row, fam, q, vis []byte, n int) (int64, bool, error) {
	g := &Get{Row: row, Columns: []Column{{Family: fam, Qualifier: nonNil(q)}}, MaxVersions: n}
	if len(vis) > 0 || r.labelsInUse.Load() {
		g.CellCheck = func(_ cell.Key, tags []byte) bool { return cell.SameVisibility(tags, vis) }
	}
	res, err := r.get(g, true)
	if err != nil {
		return 0, false, err
	}
	if len(res.Cells) < n {
		return 0, false, nil
	}
	return res.Cells[n-1].Timestamp(), true, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (r *Region) lockRows(rows [][]byte) ([]*rowLock, error) {
	sorted := rows
	if len(rows) > 1 { // one order for everyone: no deadlock between batches
		sorted = slices.Clone(rows)
		slices.SortFunc(sorted, bytes.Compare)
		sorted = slices.CompactFunc(sorted, bytes.Equal)
	}
	locks := make([]*rowLock, 0, len(sorted))
	for _, row := range sorted {
		l, err := r.locks.lock(row, r.cfg.RowLockTimeout)
		if err != nil {
			r.unlockRows(locks)
			return nil, err
		}
		locks = append(locks, l)
	}
	return locks, nil
}

func (r *Region) unlockRows(locks []*rowLock) {
	for _, l := range locks {
		r.locks.unlock(l)
	}
}

// write logs req to the WAL and inserts it into the memstore, with the
// region's MVCC. The caller holds the row locks. It returns the sequence
// id. Unless wait is false the durable wait happens here too (callers
// holding row locks pass wait=true; the WAL sync wait itself does not need
// the locks but keeping the code simple costs little with group commit).
func (r *Region) write(req *writeReq, wait bool) (uint64, error) {
	var n int
	for _, re := range req.rows {
		n += len(re.cells)
	}
	if n == 0 {
		return 0, nil
	}
	if r.replica {
		return 0, ErrReadOnlyReplica
	}
	var buf [8]int64
	sizes := r.sizeBuf(buf[:])
	for _, re := range req.rows {
		if err := r.memSizes(re.cells, sizes); err != nil {
			return 0, err
		}
	}
	if err := r.reserve(sizes); err != nil {
		return 0, err
	}
	// r.updatesLock is held shared from here to the last insert.
	var edit wal.Edit
	edit.Region = []byte(r.name)
	edit.Cells = make([]cell.KeyValue, 0, n)
	for _, re := range req.rows {
		edit.Cells = append(edit.Cells, re.cells...)
	}
	if len(edit.Cells) > 1 && (len(req.rows) != len(edit.Cells)) {
		// Some row has several cells: a mutation may write one cell twice.
		edit.Cells = dedupeCells(edit.Cells)
	}
	if req.hasNonce {
		edit.HasNonce, edit.NonceGroup, edit.Nonce = true, req.nonceGroup, req.nonce
	}
	d := req.durability
	if d == wal.DurabilityDefault {
		d = wal.SyncWAL
	}
	we, err := r.mvcc.begin(func() (uint64, error) {
		if d == wal.SkipWAL {
			return r.wal.NextSeq()
		}
		return r.wal.AppendNoWait(&edit)
	})
	if err != nil {
		r.unreserveMem(sizes)
		r.updatesLock.RUnlock()
		return 0, fmt.Errorf("region %s: wal: %w", r.name, err)
	}
	seq := we.seq
	if err := r.insertMem(edit.Cells, seq); err != nil {
		// Cannot happen after a successful Reserve; if it does the
		// memstore no longer matches the WAL.
		r.unreserveMem(sizes)
		r.updatesLock.RUnlock()
		r.markBroken(err)
		return 0, r.brokenErr()
	}
	r.unreserveMem(sizes)
	r.queueEdit(&edit, seq)
	r.updatesLock.RUnlock()
	if d == wal.SyncWAL || d == wal.FsyncWAL {
		if err := r.wal.WaitDurable(seq); err != nil {
			r.markBroken(err)
			return 0, fmt.Errorf("%w: region %s: %w", ErrUnsynced, r.name, err)
		}
	}
	r.mvcc.complete(we)
	r.replicationCompleted()
	r.metrics.WriteRequests.Add(1)
	if r.inMem.on && r.inMemoryFlushDue() {
		r.requestInMemoryFlush()
	}
	if r.mem.unflushedDataBytes() >= r.cfg.FlushSize {
		r.requestFlush()
	}
	return seq, nil
}

// reserve waits for memstore room and reserves sizes (by family); on success the updates lock
// is held shared.
func (r *Region) reserve(sizes []int64) error {
	deadline := time.Time{}
	defer func() {
		if !deadline.IsZero() {
			r.blockedWriters.Add(-1)
		}
	}()
	for {
		if err := r.checkOpen(); err != nil {
			return err
		}
		blocking := r.cfg.FlushSize * r.cfg.BlockingMultiplier
		var err error
		if r.mem.stats().DataBytes < blocking {
			r.updatesLock.RLock()
			// Again under the lock: a close may have begun since the check above, and its flush
			// takes the lock exclusively; a write let in after that flush would be acknowledged
			// and then dropped with the memstore (HBase's startRegionOperation checks in this order).
			if err := r.checkOpen(); err != nil {
				r.updatesLock.RUnlock()
				return err
			}
			err = r.reserveMem(sizes)
			if err == nil {
				return nil
			}
			r.updatesLock.RUnlock()
			if !errors.Is(err, memstore.ErrFull) {
				return err
			}
		}
		// Blocked: ask for a flush and wait for one to finish.
		if deadline.IsZero() {
			// Counted once however many flushes it waits for (HBase's blockedRequestsCount).
			r.metrics.BlockedWrites.Add(1)
			if r.cfg.BlockedWrites != nil {
				r.cfg.BlockedWrites.Add(1)
			}
			deadline = time.Now().Add(r.cfg.BlockingWait)
			r.blockedWriters.Add(1) // before the request: the flush must not find it unneeded
		}
		r.requestFlush()
		if !time.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("%w: region %s: %w", ErrWritesBlocked, r.name, err)
			}
			return fmt.Errorf("%w: region %s holds %d bytes (blocking at %d)", ErrWritesBlocked, r.name, r.mem.stats().DataBytes, blocking)
		}
		r.waitForFlush(time.Until(deadline))
	}
}

// waitForFlush waits until a flush completes or d passes.
func (r *Region) waitForFlush(d time.Duration) {
	gen := r.flushGen.Load()
	t := time.AfterFunc(d, func() {
		r.blockMu.Lock()
		r.blockCond.Broadcast()
		r.blockMu.Unlock()
	})
	defer t.Stop()
	start := time.Now()
	r.blockMu.Lock()
	for r.flushGen.Load() == gen && time.Since(start) < d && !r.closed.Load() {
		r.blockCond.Wait()
	}
	r.blockMu.Unlock()
}

// flushed wakes writers waiting for memstore room.
func (r *Region) flushed() {
	r.blockMu.Lock()
	r.flushGen.Add(1)
	r.blockCond.Broadcast()
	r.blockMu.Unlock()
}

// dedupeCells keeps the last of cells with equal keys (a mutation that
// writes the same cell twice: the later one wins, as in HBase).
func dedupeCells(cells []cell.KeyValue) []cell.KeyValue {
	if len(cells) < 8 {
		for i := 0; i < len(cells); i++ {
			for j := i + 1; j < len(cells); j++ {
				if bytes.Equal(cells[i].Key(), cells[j].Key()) {
					out := slices.Delete(slices.Clone(cells), i, i+1)
					return dedupeCells(out)
				}
			}
		}
		return cells
	}
	last := make(map[string]int, len(cells))
	for i, c := range cells {
		last[string(c.Key())] = i
	}
	if len(last) == len(cells) {
		return cells
	}
	out := make([]cell.KeyValue, 0, len(last))
	for i, c := range cells {
		if last[string(c.Key())] == i {
			out = append(out, c)
		}
	}
	return out
}

// MutateRows applies mutations of several rows of the region as one atomic edit, all or none
// (HBase's MultiRowMutationEndpoint): readers see every row changed or none. With conditions
// (check-and-mutate conditions without mutations of their own, each on a row of the region) it
// applies them only when every one holds, checked under the same row locks; it reports whether it
// applied them. Any invalid mutation or condition fails the whole call.
func (r *Region) MutateRows(ms []*Mutation, conds []*CheckAndMutate) (bool, error) {
	if err := r.checkOpen(); err != nil {
		return false, err
	}
	if len(ms) == 0 {
		return false, fmt.Errorf("%w: MutateRows without mutations", ErrInvalid)
	}
	rows := make([][]byte, 0, len(ms)+len(conds))
	ob := r.observer.Load()
	for _, m := range ms {
		if err := r.validateMutation(m); err != nil {
			return false, err
		}
		if err := ob.preMutate(r, m); err != nil {
			return false, err
		}
		rows = append(rows, m.Row)
	}
	for _, c := range conds {
		if c == nil || len(c.Mutations) > 0 {
			return false, fmt.Errorf("%w: a MutateRows condition carries mutations of its own", ErrInvalid)
		}
		if err := r.checkRow(c.Row); err != nil {
			return false, err
		}
		if c.Filter == nil && r.familyIndex(c.Family) < 0 {
			return false, fmt.Errorf("%w: %q", ErrNoSuchFamily, c.Family)
		}
		rows = append(rows, c.Row)
	}
	locks, err := r.lockRows(rows)
	if err != nil {
		return false, err
	}
	defer func() { r.unlockRows(locks) }() // locks is cleared once they are released early
	for _, c := range conds {
		// As HBase's MultiRowMutationEndpoint, the conditions do not raise the puts' timestamps.
		ok, _, err := r.checkCondition(c)
		if err != nil || !ok {
			return false, err
		}
	}
	req, err := r.resolveMutations(ms)
	if err != nil {
		return false, err
	}
	if _, err := r.write(req, true); err != nil {
		return false, err
	}
	r.unlockRows(locks)
	locks = nil
	ob.postMutate(ms...)
	return true, nil
}
