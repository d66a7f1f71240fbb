package region

import (
	"errors"
	"math"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/wal"
)

// Op is one cell of a mutation: a Put or a delete marker.
type Op struct {
	Type      cell.Type
	Family    []byte
	Qualifier []byte
	// Timestamp in ms; cell.LatestTimestamp means "now" (the region's
	// clock). For a Delete (one version) LatestTimestamp means "the newest
	// version", as in HBase.
	Timestamp int64
	Value     []byte
	// TTL is a Put's per-cell time to live in milliseconds (0: the
	// mutation's TTL, if any). See Mutation.TTL.
	TTL int64
	// Tags are a Put's tags as its client sent them (cell.Tags form; HBase's client with
	// KeyValueCodecWithTags): stored with the cell before the server's own. A client may send a
	// TTL tag (honoured as a per-cell TTL) and tags of its own types (above the system ones,
	// cell.ClientTagType); the system types (ACLs, visibility, ...) come from the mutation's
	// fields only.
	Tags []byte
}

// Mutation is a Put or Delete of one row (HBase's Put/Delete): all its
// cells are applied atomically with one sequence id.
type Mutation struct {
	Row        []byte
	Ops        []Op
	Durability wal.Durability
	// NonceGroup and Nonce, if Nonce != 0, identify the client operation
	// (logged with the edit).
	NonceGroup, Nonce uint64
	// TTL is the per-cell time to live of the mutation's puts in
	// milliseconds (HBase's Mutation.setTTL; 0: none): a cell expires once
	// its timestamp + TTL is before now, for reads and compactions alike.
	// It cannot make a cell outlive its family's TTL. Deletes cannot carry
	// one.
	TTL int64
	// Tags are tags (cell.Tags form) added to every cell the mutation puts: server-side
	// metadata the region stores and hands back but does not interpret (the region server's
	// cell ACLs). No TTL tag (TTL says that); deletes carry none.
	Tags []byte
	// Visibility are cell.TagVisibility tags (made by engine/access from a visibility
	// expression) added to every cell the mutation writes, delete markers included: a delete
	// marker with visibility tags masks only cells with the same ones, one without only cells
	// without (HBase's visibility delete semantics). A delete of the newest version deletes the
	// newest one with the same visibility.
	Visibility []byte
}

// NewMutation returns an empty mutation of row.
func NewMutation(row []byte) *Mutation { return &Mutation{Row: row} }

// Put adds a cell.
func (m *Mutation) Put(family, qualifier []byte, ts int64, value []byte) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.Put, Family: family, Qualifier: qualifier, Timestamp: ts, Value: value})
	return m
}

// DeleteVersion deletes the version of a column at exactly ts
// (LatestTimestamp: the newest version).
func (m *Mutation) DeleteVersion(family, qualifier []byte, ts int64) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.Delete, Family: family, Qualifier: qualifier, Timestamp: ts})
	return m
}

// DeleteColumn deletes all versions of a column with a timestamp <= ts.
func (m *Mutation) DeleteColumn(family, qualifier []byte, ts int64) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.DeleteColumn, Family: family, Qualifier: qualifier, Timestamp: ts})
	return m
}

// DeleteFamily deletes all columns of a family with a timestamp <= ts.
func (m *Mutation) DeleteFamily(family []byte, ts int64) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.DeleteFamily, Family: family, Timestamp: ts})
	return m
}

// DeleteFamilyVersion deletes all columns of a family at exactly ts.
func (m *Mutation) DeleteFamilyVersion(family []byte, ts int64) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.DeleteFamilyVersion, Family: family, Timestamp: ts})
	return m
}

// DeleteRow deletes every family of the row with a timestamp <= ts (a
// DeleteFamily marker per family, added when the mutation is applied).
func (m *Mutation) DeleteRow(ts int64) *Mutation {
	m.Ops = append(m.Ops, Op{Type: cell.DeleteFamily, Family: nil, Timestamp: ts})
	return m
}

// TimeRange is a half-open timestamp range [Min, Max). The zero value is
// "all time"; [t, t) (t > 0) is empty.
type TimeRange struct {
	Min int64
	Max int64 // 0 means unbounded (math.MaxInt64)
}

func (t TimeRange) max() int64 {
	if t.Max == 0 {
		return math.MaxInt64
	}
	return t.Max
}

// Column selects a family, or one column of it when Qualifier is not nil.
type Column struct {
	Family    []byte
	Qualifier []byte // nil: the whole family
}

// Get reads one row (HBase's Get).
type Get struct {
	Row     []byte
	Columns []Column
	// TimeRange restricts versions by timestamp.
	TimeRange TimeRange
	// CellCheck, when set, hides the cells it refuses (from their key and tags), as a filter
	// that skips them: the region server's cell ACLs.
	CellCheck CellCheck
	// MaxVersions per column (0: 1), capped by the family's VERSIONS.
	MaxVersions int
	Filter      filter.Filter
	// NoCache: do not cache the data blocks read.
	NoCache bool
	// StoreLimit and StoreOffset are Scan's, for the row.
	StoreLimit, StoreOffset int
}

// CellCheck decides from a cell's key and tags whether a read may see it.
type CellCheck func(key cell.Key, tags []byte) bool

// Scan reads a range of rows (HBase's Scan).
type Scan struct {
	// StartRow is the first row (inclusive unless ExcludeStartRow); for a
	// reversed scan, the highest row. Empty: the region's start (end).
	StartRow        []byte
	ExcludeStartRow bool
	// StopRow bounds the scan (exclusive unless IncludeStopRow); for a
	// reversed scan, the lowest row. Empty: unbounded.
	StopRow        []byte
	IncludeStopRow bool
	Reversed       bool
	Columns        []Column
	TimeRange      TimeRange
	// CellCheck, when set, hides the cells it refuses (see Get.CellCheck).
	CellCheck CellCheck
	// MaxVersions per column (0: 1), capped by the family's VERSIONS
	// (raw scans are not capped by VERSIONS).
	MaxVersions int
	Filter      filter.Filter
	// StoreLimit returns at most this many cells of each family of a row, versions counted, after
	// skipping the first StoreOffset (HBase's setMaxResultsPerColumnFamily and
	// setRowOffsetPerColumnFamily). 0: no limit, no offset.
	StoreLimit, StoreOffset int
	// Raw returns delete markers and deleted cells.
	Raw bool
	// LoadColumnFamiliesOnDemand (HBase's Scan.setLoadColumnFamiliesOnDemand): when the filter
	// decides rows from some families alone (filter.IsFamilyEssential; SingleColumnValueFilter
	// with FilterIfMissing), a row's other families are read only if the filter keeps the row,
	// so their store files are not read for the rows it drops. Rows with no cell in an
	// essential family are not returned. Forward scans only (reversed scans read every family).
	LoadColumnFamiliesOnDemand bool
	// Limit is the number of rows to return in total (0: unlimited).
	Limit int
	// Caching is the number of rows per batch returned by Next (0: 100).
	Caching int
	// Batch is the maximum number of cells per Result (HBase's setBatch;
	// a row with more cells comes in several Results). 0: unlimited.
	Batch int
	// MaxResultSize bounds the bytes of cells returned per Next call
	// (0: unlimited). With AllowPartialResults a row may be cut into
	// partial Results at this size; otherwise a batch ends after the row
	// that crossed it.
	MaxResultSize       int64
	AllowPartialResults bool
	// TimeLimit bounds the time one Next call spends; when it runs out the
	// call returns what it has, possibly a heartbeat with no rows, and the
	// scan continues on the next call. 0: none.
	TimeLimit time.Duration
	// NoCache: do not cache the data blocks read.
	NoCache bool
	// ReadUncommitted reads every cell in the memstore, including writes
	// still in flight (used by read-modify-write operations under the row
	// lock).
	ReadUncommitted bool
	// ReuseResults lets the scanner reuse the memory of a batch's results
	// for the next batch: the Results returned by Next (rows, cells, keys,
	// values) are valid only until the next call to Next or Close, like a
	// Pebble iterator's key and value. For callers that consume a batch
	// before asking for the next one (the region server encodes it into the
	// RPC answer); it saves allocating and clearing a batch's worth of
	// memory per call.
	ReuseResults bool
	// CellBlock makes Next return the batch's cells serialized in
	// ScanBatch.Block (what the region server sends as the RPC cell block)
	// instead of as Results, without sequence ids. It saves building a
	// Result per row and a KV per cell.
	CellBlock bool
}

// KV is one cell of a result, copied out of the region: its encoded key,
// value, tags and sequence id. The accessors decode the key in place.
type KV struct {
	Key   cell.Key
	Value []byte
	// Tags are the cell's tags (nil without): server-side metadata such as
	// a per-cell TTL, never sent to clients.
	Tags []byte
	Seq  uint64
}

func (c *KV) Row() []byte       { return c.Key.Row() }
func (c *KV) Family() []byte    { return c.Key.Family() }
func (c *KV) Qualifier() []byte { return c.Key.Qualifier() }
func (c *KV) Timestamp() int64  { return c.Key.Timestamp() }
func (c *KV) Type() cell.Type   { return c.Key.Type() }

// Result is the cells of one row (or part of it).
type Result struct {
	Row   []byte
	Cells []KV
	// Partial means more cells of this row follow in the next Result
	// (max result size or Batch reached).
	Partial bool
}

// Value returns the value of the newest cell of family:qualifier, or nil.
func (r *Result) Value(family, qualifier []byte) []byte {
	if r == nil {
		return nil
	}
	for i := range r.Cells {
		c := &r.Cells[i]
		if string(c.Family()) == string(family) && string(c.Qualifier()) == string(qualifier) {
			return c.Value
		}
	}
	return nil
}

// ScanBatch is what one Next call of a RegionScanner returns.
type ScanBatch struct {
	// Results are the rows (or parts of rows) of the batch, unless the scan
	// asked for a CellBlock.
	Results []Result
	// With Scan.CellBlock, Block holds the cells of the batch as
	// serialized cells (cell.KeyValue) back to back, and CellsPerResult and
	// PartialPerResult say how they divide into results: result i is the
	// next CellsPerResult[i] cells, a partial row when PartialPerResult[i].
	Block            []byte
	CellsPerResult   []int32
	PartialPerResult []bool
	// More says the scan has more rows in this region.
	More bool
	// Heartbeat says the call ended on its time limit (Results may be
	// empty); Cursor is then the row the scan was working on.
	Heartbeat bool
	Cursor    []byte
}

// len returns the number of results in the batch, in either form.
func (b *ScanBatch) len() int { return len(b.Results) + len(b.CellsPerResult) }

// Increment adds to 8-byte big-endian counters of one row atomically.
type Increment struct {
	Row        []byte
	Columns    []IncrementColumn
	Durability wal.Durability
	NonceGroup uint64
	Nonce      uint64 // 0: no nonce
	// ReturnResults (default true in HBase) returns the new values.
	NoReturnResults bool
	// TTL of the new cells in milliseconds, as Mutation.TTL; 0 keeps the
	// current cell's TTL, as HBase carries its tags forward.
	TTL int64
	// TimeRange limits the versions the current values are read from (HBase's
	// Increment.setTimeRange): a counter with no version in it counts from 0. Zero: all.
	TimeRange TimeRange
}

// IncrementColumn is one counter of an Increment.
type IncrementColumn struct {
	Family    []byte
	Qualifier []byte
	Amount    int64
}

// Append appends bytes to columns of one row atomically.
type Append struct {
	Row             []byte
	Columns         []AppendColumn
	Durability      wal.Durability
	NonceGroup      uint64
	Nonce           uint64
	NoReturnResults bool
	// TTL of the new cells in milliseconds, as Increment.TTL.
	TTL int64
	// TimeRange limits the versions the current values are read from, as Increment.TimeRange.
	TimeRange TimeRange
}

// AppendColumn is one column of an Append.
type AppendColumn struct {
	Family    []byte
	Qualifier []byte
	Value     []byte
}

// CheckAndMutate applies Mutations to Row only if a condition on the row
// holds, atomically under the row lock. The condition is either a column
// comparison (Family, Qualifier, Op, Value: HBase's semantics "Value Op
// current value", so LESS passes when Value is less than the stored value;
// a nil Value with EQUAL passes when the column is absent, with NOT_EQUAL
// when it is present) or, if Filter is set, "the row read with Filter (and
// TimeRange) is not empty".
type CheckAndMutate struct {
	Row       []byte
	Family    []byte
	Qualifier []byte
	Op        filter.CompareOp
	Value     []byte
	Filter    filter.Filter
	TimeRange TimeRange
	// CellCheck, when set, hides from the check the cells it refuses (see Get.CellCheck): a
	// check sees what a get by the same user would.
	CellCheck CellCheck
	// Mutations of Row, applied as one atomic edit if the check passes.
	Mutations []*Mutation
	// Durability of the edit (the strongest of the mutations' otherwise).
	Durability wal.Durability
}

// ErrFunction is the error of a mutation or read a table's function refused or failed
// (engine/compute/function): not retried.
var ErrFunction = errors.New("table function")

// ErrFunctionBusy marks an ErrFunction that says the function could not run yet — every
// instance stayed busy, or the server's memory for functions was taken — rather than that it
// refused or failed: nothing was written or read, and a retry later can succeed.
var ErrFunctionBusy = errors.New("busy")

// Observer is user code a table runs around its regions' work (engine/compute/function's sandboxed
// WebAssembly functions): before and after writes, on what reads return and on what flushes and
// compactions write. Calls come from many goroutines at once. A region without one pays nothing.
type Observer interface {
	// Hooks says which of the hooks below do something.
	Hooks() ObserverHooks
	// PreMutate runs before a put or delete is applied, outside row locks: it may change m.Ops
	// (of m.Row); an error (wrapping ErrFunction) refuses the mutation.
	PreMutate(m *Mutation) error
	// PostMutate runs after a mutation was applied and is durable.
	PostMutate(m *Mutation)
	// FilterRead sees each row (or part of one: partial) a user read returns: it may hide it
	// (keep false) or return other cells of the row instead (replaced, in any order; they may
	// point into the cells it was handed). An error fails the read.
	FilterRead(row []byte, cells []KV, partial bool) (keep bool, replaced []KV, err error)
	// FilterFile sees the put cells of one row and family (at most a bounded number at a time,
	// continued set for the rest of a row) a flush or compaction writes, with keep all true:
	// it clears keep[i] for the cells to leave out. Delete markers are always written. It
	// cannot fail: on an error of its own it keeps everything.
	FilterFile(kind FileWrite, continued bool, row []byte, cells []KV, keep []bool)
}

// ObserverHooks says which hooks an Observer has.
type ObserverHooks struct {
	PreMutate, PostMutate, FilterRead, FilterFile bool
}

// FileWrite says what writes a store file.
type FileWrite int

const (
	FileFlush FileWrite = iota
	FileMinorCompaction
	FileMajorCompaction
)

// FileRowCells bounds the cells of one FilterFile call.
const FileRowCells = 1024
