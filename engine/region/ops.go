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

// nonceTable remembers the results of recent nonce'd operations so that a
// retried Increment or Append is not applied twice (HBase's
// ServerNonceManager). Entries expire after the TTL; WAL replay restores
// them from the edits' nonces.
type nonceTable struct {
	ttl   time.Duration
	mu    sync.Mutex
	m     map[[2]uint64]nonceEntry
	order [][2]uint64
}

type nonceEntry struct {
	res *Result
	at  time.Time
}

func newNonceTable(ttl time.Duration) *nonceTable {
	return &nonceTable{ttl: ttl, m: map[[2]uint64]nonceEntry{}}
}

func (t *nonceTable) get(group, nonce uint64) (*Result, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[[2]uint64{group, nonce}]
	return e.res, ok
}

func (t *nonceTable) put(group, nonce uint64, res *Result, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]uint64{group, nonce}
	if _, ok := t.m[k]; !ok {
		t.order = append(t.order, k)
	}
	t.m[k] = nonceEntry{res: res, at: now}
	// Expire old entries (amortised).
	for len(t.order) > 0 {
		e, ok := t.m[t.order[0]]
		if ok && now.Sub(e.at) < t.ttl {
			break
		}
		delete(t.m, t.order[0])
		t.order = t.order[1:]
	}
}

// resultFromKVs builds a Result from logged cells (nonce replay).
func resultFromKVs(kvs []cell.KeyValue, seq uint64) *Result {
	res := &Result{}
	for _, kv := range kvs {
		kv = cell.KeyValue(bytes.Clone(kv))
		k := kv.Key()
		if res.Row == nil {
			res.Row = k.Row()
		}
		res.Cells = append(res.Cells, KV{Key: k, Value: kv.Value(), Tags: kv.Tags(), Seq: seq})
	}
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
		if res, ok := r.nonces.get(group, nonce); ok {
			r.metrics.NonceDuplicates.Add(1)
			if noResults {
				return &Result{Row: row}, nil
			}
			return res, nil
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
		r.nonces.put(group, nonce, res, r.cfg.Clock())
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
