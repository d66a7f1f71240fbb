// Package filter holds the server-side scan filters of a region, with
// HBase's semantics and return codes.
//
// A region scanner drives a Filter per scan: Reset at the start of every
// row, FilterAllRemaining to end the scan early, FilterRowKey once per row,
// FilterCell for every cell that survived MVCC, time range, delete markers,
// column selection (in that order; version limits are applied after the
// filter, as in HBase), TransformCell for included cells, then
// FilterRowCells and FilterRow once the row is complete (only for filters
// whose HasFilterRow is true).
//
// FilterCell returns a ReturnCode. NextRow means "no other cell of this
// row in this column family": like HBase, whose store scanners are per
// family, the region moves on to the next family of the row, not to the
// next row. SeekNextUsingHint asks the region to seek to NextCellHint.
//
// Every filter and comparator has a stable name (Name) and exported plain
// fields (bytes, numbers, nested filters and comparators), so the RPC layer
// can serialize them; unexported fields only hold per-scan state.
package filter

import (
	"github.com/cellstore/cellstore/engine/cell"
)

// ReturnCode is a filter's verdict on a cell (HBase's Filter.ReturnCode).
type ReturnCode int

const (
	// Include the cell.
	Include ReturnCode = iota
	// IncludeAndNextCol includes the cell and skips the other versions of
	// its column.
	IncludeAndNextCol
	// IncludeAndSeekNextRow includes the cell and skips the rest of the
	// row (in this family).
	IncludeAndSeekNextRow
	// Skip the cell; go on with the next one.
	Skip
	// NextCol skips the rest of the cell's column.
	NextCol
	// NextRow skips the rest of the row in this family.
	NextRow
	// SeekNextUsingHint seeks to the key returned by NextCellHint.
	SeekNextUsingHint
)

func (r ReturnCode) String() string {
	switch r {
	case Include:
		return "INCLUDE"
	case IncludeAndNextCol:
		return "INCLUDE_AND_NEXT_COL"
	case IncludeAndSeekNextRow:
		return "INCLUDE_AND_SEEK_NEXT_ROW"
	case Skip:
		return "SKIP"
	case NextCol:
		return "NEXT_COL"
	case NextRow:
		return "NEXT_ROW"
	case SeekNextUsingHint:
		return "SEEK_NEXT_USING_HINT"
	}
	return "ReturnCode(?)"
}

// Includes reports whether r includes the cell.
func (r ReturnCode) Includes() bool { return r <= IncludeAndSeekNextRow }

// RowCell is one cell of a completed row, as handed to FilterRowCells.
type RowCell struct {
	Key   cell.Key
	Value []byte
}

// Filter is a server-side scan filter. Implementations keep per-scan state
// and are used by one scanner (one goroutine) at a time; use a fresh filter
// (or Unmarshal a serialized one) per scan.
type Filter interface {
	// Name is the filter's stable type name (HBase's class simple name).
	Name() string
	// Reset clears per-row state; called before each row.
	Reset()
	// FilterAllRemaining reports that no further row can pass: the scan
	// ends.
	FilterAllRemaining() bool
	// FilterRowKey reports whether the row must be excluded, from its key
	// alone.
	FilterRowKey(row []byte) bool
	// FilterCell decides on one cell.
	FilterCell(key cell.Key, value []byte) ReturnCode
	// TransformCell returns the value to return for an included cell (for
	// example KeyOnlyFilter empties it). It may return value itself.
	TransformCell(key cell.Key, value []byte) []byte
	// HasFilterRow reports whether FilterRowCells/FilterRow must be called
	// (such filters need whole rows: they disable partial results).
	HasFilterRow() bool
	// FilterRowCells may drop cells of the completed row.
	FilterRowCells(cells []RowCell) []RowCell
	// FilterRow reports whether the completed row must be excluded.
	FilterRow() bool
	// NextCellHint returns the seek key after SeekNextUsingHint (nil:
	// no hint, the region skips the cell).
	NextCellHint(key cell.Key) cell.Key
	// SetReversed tells the filter that the scan runs in reverse row order.
	SetReversed(reversed bool)
}

// FamilySelector is a filter that decides rows from some families alone (HBase's
// Filter.isFamilyEssential): a scan that loads column families on demand reads only the
// essential families of a row first, and the others only for the rows the filter keeps.
type FamilySelector interface {
	IsFamilyEssential(family []byte) bool
}

// IsFamilyEssential says whether f needs the cells of family to decide on a row: true unless f
// says otherwise.
func IsFamilyEssential(f Filter, family []byte) bool {
	if s, ok := f.(FamilySelector); ok {
		return s.IsFamilyEssential(family)
	}
	return true
}

// Base implements every method of Filter but Name and FilterCell with the
// neutral behaviour (include everything); filters embed it.
type Base struct {
	reversed bool
}

func (*Base) Reset()                                        {}
func (*Base) FilterAllRemaining() bool                      { return false }
func (*Base) FilterRowKey([]byte) bool                      { return false }
func (*Base) TransformCell(_ cell.Key, value []byte) []byte { return value }
func (*Base) HasFilterRow() bool                            { return false }
func (*Base) FilterRowCells(cells []RowCell) []RowCell      { return cells }
func (*Base) FilterRow() bool                               { return false }
func (*Base) NextCellHint(cell.Key) cell.Key                { return nil }
func (b *Base) SetReversed(r bool)                          { b.reversed = r }
