package region

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/schema"
	"github.com/cellstore/cellstore/engine/wal"
)

// nonceTable remembers the cells written by recent nonce'd operations so that a retried
// Increment or Append is not applied twice (HBase's ServerNonceManager). Entries expire after the
// TTL, and the oldest go first while the table holds more than maxBytes — but none younger than
// nonceMinAge, within which a client retries; WAL replay restores them from the edits' nonces.
// An entry keeps the cells as one encoded buffer; a large result (an Append's growing value) keeps
// only the cells' keys, and a retry is then answered with the columns' current values, as HBase's
// server answers every retry.
type nonceTable struct {
	ttl      time.Duration
	maxBytes int
	mu       sync.Mutex
	m        map[[2]uint64]*nonceEntry
	order    [][2]uint64 // oldest first
	bytes    int
}

type nonceEntry struct {
	kvs    []byte // each written cell: a uvarint length, then the KeyValue
	seq    uint64
	at     time.Time
	values bool // kvs holds the values (else the keys only)
}

// nonceEntryOverhead is what an entry costs besides its buffer: the map slot, the order slot and
// the entry itself.
const nonceEntryOverhead = 96

// nonceValueBytes is the most value bytes an entry keeps; a larger result keeps its keys only.
const nonceValueBytes = 512

func newNonceTable(ttl time.Duration, maxBytes int) *nonceTable {
	return &nonceTable{ttl: ttl, maxBytes: maxBytes, m: map[[2]uint64]*nonceEntry{}}
}

// get returns the cells the operation wrote (their values when values), and its sequence id.
func (t *nonceTable) get(group, nonce uint64, now time.Time) (kvs []cell.KeyValue, seq uint64, values, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	e, ok := t.m[[2]uint64{group, nonce}]
	if !ok {
		return nil, 0, false, false
	}
	for b := e.kvs; len(b) > 0; {
		n, w := binary.Uvarint(b)
		b = b[w:]
		kvs = append(kvs, cell.KeyValue(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return kvs, e.seq, e.values, true
}

func (t *nonceTable) put(group, nonce uint64, kvs []cell.KeyValue, seq uint64, now time.Time) {
	valueBytes := 0
	for _, kv := range kvs {
		valueBytes += len(kv.Value())
	}
	e := &nonceEntry{seq: seq, at: now, values: valueBytes <= nonceValueBytes}
	for _, kv := range kvs {
		if !e.values {
			kv = cell.KeyValue(cell.AppendKeyValueFromKey(nil, kv.Key(), nil))
		}
		e.kvs = binary.AppendUvarint(e.kvs, uint64(len(kv)))
		e.kvs = append(e.kvs, kv...)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]uint64{group, nonce}
	if old, ok := t.m[k]; ok {
		t.bytes -= len(old.kvs) + nonceEntryOverhead
	} else {
		t.order = append(t.order, k)
	}
	t.m[k] = e
	t.bytes += len(e.kvs) + nonceEntryOverhead
	t.expireLocked(now)
}

// nonceMinAge is how long an entry is kept whatever the table's size: a retry comes within the
// client's RPC timeout and backoff (HBase's client: 60 s), and applying an increment twice is
// worse than the memory of a few minutes' increments.
const nonceMinAge = 5 * time.Minute

// expireLocked drops the oldest entries while they are past the TTL, or the table is too large
// and they are older than nonceMinAge.
func (t *nonceTable) expireLocked(now time.Time) {
	for len(t.order) > 0 {
		k := t.order[0]
		e, ok := t.m[k]
		if ok && now.Sub(e.at) < t.ttl && (t.bytes <= t.maxBytes || now.Sub(e.at) < nonceMinAge) {
			break
		}
		if ok {
			t.bytes -= len(e.kvs) + nonceEntryOverhead
			delete(t.m, k)
		}
		t.order = t.order[1:]
	}
	if len(t.order) == 0 {
		t.order = nil // let the drained array go
	}
}

// size returns the entries and the bytes they are counted at.
func (t *nonceTable) size() (entries, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m), t.bytes
}

// nonceResult is the Result of the cells a nonce'd operation wrote (kvs are the caller's).
func nonceResult(kvs []cell.KeyValue, seq uint64) *Result {
	res := &Result{}
	for _, kv := range kvs {
		k := kv.Key()
		if res.Row == nil {
			res.Row = k.Row()
		}
		res.Cells = append(res.Cells, KV{Key: k, Value: kv.Value(), Tags: kv.Tags(), Seq: seq})
	}
	slices.SortFunc(res.Cells, func(a, b KV) int { return cell.Compare(a.Key, b.Key) })
	return res
}

// Increment adds amounts to 8-byte big-endian counters (a missing column
// counts as 0) atomically under the row lock and returns the new values.
// The new cells get timestamp max(now, old timestamp + 1). A retry with the
// same nonce returns the first attempt's result without applying again.
func (r *Region) Increment(inc *Increment) (*Result, error) {
	cols := make([]rmwColumn, len(inc.Columns))
	for i, c := range inc.Columns {
		cols[i] = rmwColumn{family: c.Family, qualifier: c.Qualifier, amount: c.Amount}
	}
	return r.readModifyWrite(inc.Row, cols, true, rmwOptions{d: inc.Durability, group: inc.NonceGroup, nonce: inc.Nonce,
		noResults: inc.NoReturnResults, ttl: inc.TTL, tr: inc.TimeRange})
}

// Append appends bytes to columns atomically and returns the new values.
func (r *Region) Append(app *Append) (*Result, error) {
	cols := make([]rmwColumn, len(app.Columns))
	for i, c := range app.Columns {
		cols[i] = rmwColumn{family: c.Family, qualifier: c.Qualifier, suffix: c.Value}
	}
	return r.readModifyWrite(app.Row, cols, false, rmwOptions{d: app.Durability, group: app.NonceGroup, nonce: app.Nonce,
		noResults: app.NoReturnResults, ttl: app.TTL, tr: app.TimeRange})
}

type rmwColumn struct {
	family, qualifier []byte
	amount            int64
	suffix            []byte
}

// rmwOptions are the options an Increment or Append shares.
type rmwOptions struct {
	d            wal.Durability
	group, nonce uint64
	noResults    bool
	ttl          int64
	tr           TimeRange // the versions the current value is read from
}

func (r *Region) readModifyWrite(row []byte, cols []rmwColumn, increment bool, o rmwOptions) (*Result, error) {
	d, group, nonce, noResults := o.d, o.group, o.nonce, o.noResults
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	if err := r.checkRow(row); err != nil {
		return nil, err
	}
	if err := checkTTL(o.ttl); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: no columns", ErrInvalid)
	}
	for _, c := range cols {
		if r.familyIndex(c.family) < 0 {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchFamily, c.family)
		}
	}
	locks, err := r.lockRows([][]byte{row})
	if err != nil {
		return nil, err
	}
	defer r.unlockRows(locks)
	if nonce != 0 {
		if kvs, seq, values, ok := r.nonces.get(group, nonce, r.cfg.Clock()); ok {
			r.metrics.NonceDuplicates.Add(1)
			switch {
			case noResults:
				return &Result{Row: row}, nil
			case values:
				return nonceResult(kvs, seq), nil
			}
			// Too large to keep: the columns' current values (HBase answers every retry so).
			var columns []Column
			for _, kv := range kvs {
				columns = append(columns, Column{Family: kv.Key().Family(), Qualifier: nonNil(kv.Key().Qualifier())})
			}
			return r.get(&Get{Row: row, Columns: columns}, true)
		}
	}
	// Current values, reading uncommitted cells (we hold the row lock).
	var columns []Column
	for _, c := range cols {
		columns = append(columns, Column{Family: c.family, Qualifier: nonNil(c.qualifier)})
	}
	cur, err := r.get(&Get{Row: row, Columns: columns, TimeRange: o.tr}, true)
	if err != nil {
		return nil, err
	}
	now := r.nowMs()
	req := &writeReq{durability: d, rows: []rowEdit{{row: row}}}
	if nonce != 0 {
		req.hasNonce, req.nonceGroup, req.nonce = true, group, nonce
	}
	// Several ops on the same column accumulate.
	type acc struct {
		fam, q []byte
		val    []byte
		tags   []byte // the current cell's, carried forward
		ts     int64
	}
	var out []*acc
	find := func(fam, q []byte) *acc {
		for _, a := range out {
			if bytes.Equal(a.fam, fam) && bytes.Equal(a.q, q) {
				return a
			}
		}
		return nil
	}
	for _, c := range cols {
		a := find(c.family, c.qualifier)
		if a == nil {
			a = &acc{fam: c.family, q: c.qualifier, ts: now}
			for _, kv := range cur.Cells {
				if bytes.Equal(kv.Family(), c.family) && bytes.Equal(kv.Qualifier(), c.qualifier) {
					a.val = bytes.Clone(kv.Value)
					a.tags = kv.Tags
					a.ts = max(now, kv.Timestamp()+1)
					if increment && len(a.val) != 8 {
						return nil, fmt.Errorf("%w: %s:%s of row %s holds %d bytes, not 8", ErrNotALong, schema.Key(c.family), schema.Key(c.qualifier), schema.Key(row), len(a.val))
					}
					break
				}
			}
			out = append(out, a)
		}
		if increment {
			var v int64
			if a.val != nil {
				v = int64(binary.BigEndian.Uint64(a.val))
			}
			a.val = binary.BigEndian.AppendUint64(nil, uint64(v+c.amount))
		} else {
			a.val = append(a.val, c.suffix...)
		}
	}
	res := &Result{Row: row}
	for _, a := range out {
		if err := cell.Validate(row, a.fam, a.q, a.ts, cell.Put, a.val, r.table.MaxCellSize); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		key := cell.AppendKey(nil, row, a.fam, a.q, a.ts, cell.Put)
		kv := cell.KeyValue(cell.AppendTaggedKeyValue(nil, key, a.val, cell.WithTTL(a.tags, o.ttl)))
		req.rows[0].cells = append(req.rows[0].cells, kv)
	}
	seq, err := r.write(req, true)
	if err != nil {
		return nil, err
	}
	for _, kv := range req.rows[0].cells {
		k := kv.Key()
		res.Cells = append(res.Cells, KV{Key: k, Value: kv.Value(), Tags: kv.Tags(), Seq: seq})
	}
	// In cell order, whatever the order of the columns asked for, as HBase returns them (its
	// client's Result finds a column by binary search).
	slices.SortFunc(res.Cells, func(a, b KV) int { return cell.Compare(a.Key, b.Key) })
	if nonce != 0 {
		r.nonces.put(group, nonce, req.rows[0].cells, seq, r.cfg.Clock())
	}
	if noResults {
		return &Result{Row: row}, nil
	}
	return res, nil
}

// CheckAndMutate applies cm.Mutations if the condition holds; it reports
// whether it did.
func (r *Region) CheckAndMutate(cm *CheckAndMutate) (bool, error) {
	if err := r.checkOpen(); err != nil {
		return false, err
	}
	if err := r.checkRow(cm.Row); err != nil {
		return false, err
	}
	ob := r.observer.Load()
	for _, m := range cm.Mutations {
		if !bytes.Equal(m.Row, cm.Row) {
			return false, fmt.Errorf("%w: check-and-mutate of row %q with a mutation of row %q", ErrInvalid, cm.Row, m.Row)
		}
		if err := r.validateMutation(m); err != nil {
			return false, err
		}
		if err := ob.preMutate(r, m); err != nil {
			return false, err
		}
	}
	if cm.Filter == nil && r.familyIndex(cm.Family) < 0 {
		return false, fmt.Errorf("%w: %q", ErrNoSuchFamily, cm.Family)
	}
	locks, err := r.lockRows([][]byte{cm.Row})
	if err != nil {
		return false, err
	}
	defer func() { r.unlockRows(locks) }() // locks is cleared once they are released early
	ok, cellTs, err := r.checkCondition(cm)
	if err != nil || !ok {
		return false, err
	}
	if len(cm.Mutations) == 0 {
		return true, nil
	}
	req := &writeReq{durability: cm.Durability, rows: []rowEdit{{row: cm.Row}}}
	if req.durability == wal.DurabilityDefault {
		req.durability = editDurability(cm.Mutations)
	}
	now := r.nowMs()
	// The puts the server stamps get max(now, the checked cell's timestamp), so that they are
	// not hidden behind the cell the condition read when the clock is behind it (HBase's
	// checkAndMutateInternal, HBASE-14054). Puts with a client timestamp keep theirs; deletes
	// are stamped as any delete is.
	putTs := max(now, cellTs)
	sl := newCellSlab(cm.Mutations...)
	for _, m := range cm.Mutations {
		cells, err := r.resolveOps(sl, m.Row, m.Ops, m.TTL, m.Tags, m.Visibility, now, putTs)
		if err != nil {
			return false, err
		}
		req.rows[0].cells = append(req.rows[0].cells, cells...)
	}
	if _, err := r.write(req, true); err != nil {
		return false, err
	}
	r.unlockRows(locks)
	locks = nil
	ob.postMutate(cm.Mutations...)
	return true, nil
}

// checkCondition evaluates cm's condition under the row lock. With it, it returns the timestamp
// of the cell the condition read (the first one a filter let through, or the checked column's
// newest version; 0 when there is none), which the mutation's puts must not fall behind.
func (r *Region) checkCondition(cm *CheckAndMutate) (bool, int64, error) {
	if cm.Filter != nil {
		res, err := r.get(&Get{Row: cm.Row, Filter: cm.Filter, TimeRange: cm.TimeRange, CellCheck: cm.CellCheck}, true)
		if err != nil {
			return false, 0, err
		}
		if len(res.Cells) == 0 {
			return false, 0, nil
		}
		return true, res.Cells[0].Timestamp(), nil
	}
	res, err := r.get(&Get{Row: cm.Row, Columns: []Column{{Family: cm.Family, Qualifier: nonNil(cm.Qualifier)}}, TimeRange: cm.TimeRange, CellCheck: cm.CellCheck}, true)
	if err != nil {
		return false, 0, err
	}
	var cellTs int64
	if len(res.Cells) > 0 {
		cellTs = res.Cells[0].Timestamp()
	}
	// No expected value (nil or empty, as in HBase): any operator but NOT_EQUAL holds when the
	// cell is missing or its value is empty, NOT_EQUAL when it holds a non-empty value.
	if len(cm.Value) == 0 {
		empty := len(res.Cells) == 0 || len(res.Cells[0].Value) == 0
		return empty == (cm.Op != filter.NotEqual), cellTs, nil
	}
	if len(res.Cells) == 0 || cm.Op == filter.NoOp {
		return false, 0, nil
	}
	// HBase compares the expected value with the stored one: "Value Op
	// stored", so LESS passes when Value < stored.
	c := bytes.Compare(cm.Value, res.Cells[0].Value)
	switch cm.Op {
	case filter.Less:
		return c < 0, cellTs, nil
	case filter.LessOrEqual:
		return c <= 0, cellTs, nil
	case filter.Equal:
		return c == 0, cellTs, nil
	case filter.NotEqual:
		return c != 0, cellTs, nil
	case filter.GreaterOrEqual:
		return c >= 0, cellTs, nil
	case filter.Greater:
		return c > 0, cellTs, nil
	}
	return false, 0, fmt.Errorf("%w: compare operator %v", ErrInvalid, cm.Op)
}
