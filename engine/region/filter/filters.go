package filter

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/cellstore/cellstore/engine/cell"
)

// PrefixFilter passes rows whose key starts with Prefix. Forward scans seek
// to the prefix and end once past it.
type PrefixFilter struct {
	Base
	Prefix []byte

	rowState ReturnCode
	passed   bool
}

func (*PrefixFilter) Name() string { return "PrefixFilter" }
func (f *PrefixFilter) Reset()     { f.rowState = Include }
func (f *PrefixFilter) FilterRowKey(row []byte) bool {
	if bytes.HasPrefix(row, f.Prefix) {
		f.rowState = Include
		return false
	}
	c := bytes.Compare(row, f.Prefix)
	switch {
	case !f.reversed && c > 0, f.reversed && c < 0:
		f.passed = true
		f.rowState = NextRow
	case !f.reversed && c < 0:
		f.rowState = SeekNextUsingHint
	default:
		f.rowState = NextRow
	}
	return f.rowState == NextRow
}
func (f *PrefixFilter) FilterAllRemaining() bool { return f.passed }
func (f *PrefixFilter) FilterCell(cell.Key, []byte) ReturnCode {
	return f.rowState
}
func (f *PrefixFilter) NextCellHint(cell.Key) cell.Key {
	return cell.AppendFirstOnRow(nil, f.Prefix)
}

// RowFilter compares row keys.
type RowFilter struct {
	Base
	Op         CompareOp
	Comparator Comparator

	out bool
}

func (*RowFilter) Name() string { return "RowFilter" }
func (f *RowFilter) Reset()     { f.out = false }
func (f *RowFilter) FilterRowKey(row []byte) bool {
	f.out = !Compare(f.Op, f.Comparator, row)
	return f.out
}
func (f *RowFilter) FilterCell(cell.Key, []byte) ReturnCode {
	if f.out {
		return NextRow
	}
	return Include
}
func (f *RowFilter) HasFilterRow() bool { return true }
func (f *RowFilter) FilterRow() bool    { return f.out }

// FamilyFilter compares column families. Like HBase's it answers NextRow
// for a family that fails, which skips the rest of that family in the row.
type FamilyFilter struct {
	Base
	Op         CompareOp
	Comparator Comparator
}

func (*FamilyFilter) Name() string { return "FamilyFilter" }
func (f *FamilyFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	if !Compare(f.Op, f.Comparator, k.Family()) {
		return NextRow
	}
	return Include
}

// QualifierFilter compares column qualifiers.
type QualifierFilter struct {
	Base
	Op         CompareOp
	Comparator Comparator
}

func (*QualifierFilter) Name() string { return "QualifierFilter" }
func (f *QualifierFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	if !Compare(f.Op, f.Comparator, k.Qualifier()) {
		return Skip
	}
	return Include
}

// ValueFilter compares cell values.
type ValueFilter struct {
	Base
	Op         CompareOp
	Comparator Comparator
}

func (*ValueFilter) Name() string { return "ValueFilter" }
func (f *ValueFilter) FilterCell(_ cell.Key, v []byte) ReturnCode {
	if !Compare(f.Op, f.Comparator, v) {
		return Skip
	}
	return Include
}

// SingleColumnValueFilter passes rows whose Family:Qualifier value
// satisfies "value Op Comparator". Rows without the column pass unless
// FilterIfMissing. With LatestVersionOnly (HBase's default: set it) only the
// newest visible version is tested; otherwise any version may match.
type SingleColumnValueFilter struct {
	Base
	Family            []byte
	Qualifier         []byte
	Op                CompareOp
	Comparator        Comparator
	FilterIfMissing   bool
	LatestVersionOnly bool

	foundColumn bool
	matched     bool
}

func (*SingleColumnValueFilter) Name() string { return "SingleColumnValueFilter" }
func (f *SingleColumnValueFilter) Reset()     { f.foundColumn, f.matched = false, false }
func (f *SingleColumnValueFilter) FilterCell(k cell.Key, v []byte) ReturnCode {
	if f.matched {
		return Include
	}
	if f.LatestVersionOnly && f.foundColumn {
		return Include
	}
	if !bytes.Equal(k.Family(), f.Family) || !bytes.Equal(k.Qualifier(), f.Qualifier) {
		return Include
	}
	f.foundColumn = true
	if Compare(f.Op, f.Comparator, v) {
		f.matched = true
	}
	return Include
}
func (f *SingleColumnValueFilter) HasFilterRow() bool { return true }
func (f *SingleColumnValueFilter) FilterRow() bool {
	if !f.foundColumn {
		return f.FilterIfMissing
	}
	return !f.matched
}

// IsFamilyEssential: with FilterIfMissing a row is decided by the tested family alone.
func (f *SingleColumnValueFilter) IsFamilyEssential(family []byte) bool {
	return !f.FilterIfMissing || bytes.Equal(family, f.Family)
}

// SingleColumnValueExcludeFilter is SingleColumnValueFilter that also drops
// the tested column from the returned row.
type SingleColumnValueExcludeFilter struct {
	SingleColumnValueFilter
}

func (*SingleColumnValueExcludeFilter) Name() string { return "SingleColumnValueExcludeFilter" }
func (f *SingleColumnValueExcludeFilter) FilterRowCells(cells []RowCell) []RowCell {
	out := cells[:0]
	for _, c := range cells {
		if bytes.Equal(c.Key.Family(), f.Family) && bytes.Equal(c.Key.Qualifier(), f.Qualifier) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// KeyOnlyFilter returns cells without values (or, with LenAsValue, with
// the value's length as a 4-byte big-endian integer).
type KeyOnlyFilter struct {
	Base
	LenAsValue bool
}

func (*KeyOnlyFilter) Name() string                           { return "KeyOnlyFilter" }
func (*KeyOnlyFilter) FilterCell(cell.Key, []byte) ReturnCode { return Include }
func (f *KeyOnlyFilter) TransformCell(_ cell.Key, v []byte) []byte {
	if f.LenAsValue {
		return binary.BigEndian.AppendUint32(nil, uint32(len(v)))
	}
	return []byte{}
}

// FirstKeyOnlyFilter returns only the first cell of each row (of each
// family, as in HBase, where the filter runs per store).
type FirstKeyOnlyFilter struct {
	Base
	found bool
}

func (*FirstKeyOnlyFilter) Name() string { return "FirstKeyOnlyFilter" }
func (f *FirstKeyOnlyFilter) Reset()     { f.found = false }
func (f *FirstKeyOnlyFilter) FilterCell(cell.Key, []byte) ReturnCode {
	if f.found {
		return NextRow
	}
	f.found = true
	return Include
}

// PageFilter limits a scan to PageSize rows (per region, as in HBase).
type PageFilter struct {
	Base
	PageSize int64

	rows int64
}

func (*PageFilter) Name() string                           { return "PageFilter" }
func (f *PageFilter) FilterAllRemaining() bool             { return f.rows >= f.PageSize }
func (*PageFilter) FilterCell(cell.Key, []byte) ReturnCode { return Include }
func (*PageFilter) HasFilterRow() bool                     { return true }
func (f *PageFilter) FilterRow() bool {
	f.rows++
	return f.rows > f.PageSize
}

// ColumnPrefixFilter passes columns whose qualifier starts with Prefix,
// seeking to the prefix.
type ColumnPrefixFilter struct {
	Base
	Prefix []byte
}

func (*ColumnPrefixFilter) Name() string { return "ColumnPrefixFilter" }
func (f *ColumnPrefixFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	q := k.Qualifier()
	if bytes.HasPrefix(q, f.Prefix) {
		return Include
	}
	if bytes.Compare(q, f.Prefix) < 0 {
		return SeekNextUsingHint
	}
	return NextRow
}
func (f *ColumnPrefixFilter) NextCellHint(k cell.Key) cell.Key {
	return cell.AppendFirstOnColumn(nil, k.Row(), k.Family(), f.Prefix)
}

// MultipleColumnPrefixFilter passes columns whose qualifier starts with one
// of Prefixes, seeking to the next prefix.
type MultipleColumnPrefixFilter struct {
	Base
	Prefixes [][]byte

	sorted [][]byte
	hint   []byte
}

func (*MultipleColumnPrefixFilter) Name() string { return "MultipleColumnPrefixFilter" }
func (f *MultipleColumnPrefixFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	if len(f.Prefixes) == 0 {
		return Include // no prefixes: nothing to filter (HBase)
	}
	if f.sorted == nil {
		f.sorted = slices.Clone(f.Prefixes)
		slices.SortFunc(f.sorted, bytes.Compare)
	}
	q := k.Qualifier()
	for _, p := range f.sorted {
		if bytes.HasPrefix(q, p) {
			return Include
		}
		if bytes.Compare(q, p) < 0 {
			f.hint = p
			return SeekNextUsingHint
		}
	}
	return NextRow
}
func (f *MultipleColumnPrefixFilter) NextCellHint(k cell.Key) cell.Key {
	return cell.AppendFirstOnColumn(nil, k.Row(), k.Family(), f.hint)
}

// ColumnRangeFilter passes qualifiers between MinColumn and MaxColumn (nil
// bounds are open), seeking to MinColumn.
type ColumnRangeFilter struct {
	Base
	MinColumn          []byte
	MinColumnInclusive bool
	MaxColumn          []byte
	MaxColumnInclusive bool
}

func (*ColumnRangeFilter) Name() string { return "ColumnRangeFilter" }
func (f *ColumnRangeFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	q := k.Qualifier()
	if f.MinColumn != nil {
		c := bytes.Compare(q, f.MinColumn)
		if c < 0 || c == 0 && !f.MinColumnInclusive {
			if c < 0 {
				return SeekNextUsingHint
			}
			return Skip
		}
	}
	if f.MaxColumn != nil {
		c := bytes.Compare(q, f.MaxColumn)
		if c > 0 || c == 0 && !f.MaxColumnInclusive {
			return NextRow
		}
	}
	return Include
}
func (f *ColumnRangeFilter) NextCellHint(k cell.Key) cell.Key {
	return cell.AppendFirstOnColumn(nil, k.Row(), k.Family(), f.MinColumn)
}

// ColumnPaginationFilter returns Limit columns of each row starting at
// column Offset (or, when ColumnOffset is set, at the first qualifier >=
// ColumnOffset). Columns are counted across the row's families.
type ColumnPaginationFilter struct {
	Base
	Limit        int
	Offset       int
	ColumnOffset []byte

	count   int
	lastCol []byte
}

func (*ColumnPaginationFilter) Name() string { return "ColumnPaginationFilter" }
func (f *ColumnPaginationFilter) Reset()     { f.count = 0; f.lastCol = f.lastCol[:0] }
func (f *ColumnPaginationFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	if f.ColumnOffset != nil {
		if f.count >= f.Limit {
			return NextRow
		}
		// Only before the row's first column counted (HBase): the offset places the page's start,
		// so a later family's columns below it belong to the page.
		if f.count == 0 && bytes.Compare(k.Qualifier(), f.ColumnOffset) < 0 {
			return SeekNextUsingHint
		}
		f.count++
		return IncludeAndNextCol
	}
	if f.count >= f.Offset+f.Limit {
		return NextRow
	}
	c := f.count
	f.count++
	if c < f.Offset {
		return NextCol
	}
	return IncludeAndNextCol
}
func (f *ColumnPaginationFilter) NextCellHint(k cell.Key) cell.Key {
	return cell.AppendFirstOnColumn(nil, k.Row(), k.Family(), f.ColumnOffset)
}

// ColumnCountGetFilter returns the first Limit columns of each row.
type ColumnCountGetFilter struct {
	Base
	Limit int

	count int
}

func (*ColumnCountGetFilter) Name() string { return "ColumnCountGetFilter" }
func (f *ColumnCountGetFilter) Reset()     { f.count = 0 }
func (f *ColumnCountGetFilter) FilterAllRemaining() bool {
	return false
}
func (f *ColumnCountGetFilter) FilterCell(cell.Key, []byte) ReturnCode {
	f.count++
	if f.count > f.Limit {
		return NextRow
	}
	return IncludeAndNextCol
}

// TimestampsFilter passes cells whose timestamp is one of Timestamps.
// With CanHint it seeks to the next wanted timestamp within a column.
type TimestampsFilter struct {
	Base
	Timestamps []int64
	CanHint    bool

	sorted []int64
	hintTs int64
}

func (*TimestampsFilter) Name() string { return "TimestampsFilter" }
func (f *TimestampsFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	if f.sorted == nil {
		f.sorted = slices.Clone(f.Timestamps)
		slices.Sort(f.sorted)
		if f.sorted == nil {
			f.sorted = []int64{}
		}
	}
	ts := k.Timestamp()
	i, found := slices.BinarySearch(f.sorted, ts)
	if found {
		return Include
	}
	// Versions come newest first: the next wanted timestamp is the largest
	// one below ts.
	if i == 0 {
		return NextCol
	}
	if f.CanHint {
		f.hintTs = f.sorted[i-1]
		return SeekNextUsingHint
	}
	return Skip
}
func (f *TimestampsFilter) NextCellHint(k cell.Key) cell.Key {
	return cell.AppendFirstOnColumnAtTimestamp(nil, k.Row(), k.Family(), k.Qualifier(), f.hintTs)
}

// FuzzyRowFilter passes rows matching one of Rules: a rule is a row key
// template and a mask of the same length in which 0 means "this byte must
// match" and 1 means "any byte". Forward scans seek to the next row that
// can match.
type FuzzyRowFilter struct {
	Base
	Rules []FuzzyRule

	hint []byte
	done bool
}

// FuzzyRule is one template of a FuzzyRowFilter.
type FuzzyRule struct {
	Key  []byte
	Mask []byte
}

func (*FuzzyRowFilter) Name() string               { return "FuzzyRowFilter" }
func (f *FuzzyRowFilter) FilterAllRemaining() bool { return f.done }

func fuzzyMatch(row []byte, r FuzzyRule) bool {
	if len(row) < len(r.Key) {
		return false
	}
	for i := range r.Key {
		if i < len(r.Mask) && r.Mask[i] != 0 {
			continue
		}
		if row[i] != r.Key[i] {
			return false
		}
	}
	return true
}

// fuzzyNext returns the smallest row > row (or == row when it matches)
// that can match r, or nil if none.
func fuzzyNext(row []byte, r FuzzyRule) []byte {
	n := len(r.Key)
	fixed := func(i int) bool { return i >= len(r.Mask) || r.Mask[i] == 0 }
	// Build the candidate: walk the template; find the first position where
	// row's byte differs from a fixed byte.
	cand := make([]byte, n)
	for i := 0; i < n; i++ {
		var b byte
		if i < len(row) {
			b = row[i]
		}
		if fixed(i) {
			if i >= len(row) || b < r.Key[i] {
				// Fill: fixed bytes from the template, free bytes zero.
				cand[i] = r.Key[i]
				for j := i + 1; j < n; j++ {
					if fixed(j) {
						cand[j] = r.Key[j]
					}
				}
				return cand
			}
			if b > r.Key[i] {
				// Need to increment an earlier free byte.
				for j := i - 1; j >= 0; j-- {
					if !fixed(j) && cand[j] < 0xff {
						cand[j]++
						for k := j + 1; k < n; k++ {
							if fixed(k) {
								cand[k] = r.Key[k]
							} else {
								cand[k] = 0
							}
						}
						return cand
					}
				}
				return nil
			}
			cand[i] = b
		} else {
			if i >= len(row) {
				// Free bytes beyond the row: zeros make the smallest key.
				for j := i; j < n; j++ {
					if fixed(j) {
						cand[j] = r.Key[j]
					}
				}
				return cand
			}
			cand[i] = b
		}
	}
	// The first n bytes of row match the template: row itself matches.
	return slices.Clone(row)
}

func (f *FuzzyRowFilter) FilterCell(k cell.Key, _ []byte) ReturnCode {
	row := k.Row()
	for _, r := range f.Rules {
		if fuzzyMatch(row, r) {
			return Include
		}
	}
	if f.reversed {
		return NextRow
	}
	var best []byte
	for _, r := range f.Rules {
		c := fuzzyNext(row, r)
		if c != nil && bytes.Compare(c, row) > 0 && (best == nil || bytes.Compare(c, best) < 0) {
			best = c
		}
	}
	if best == nil {
		f.done = true
		return NextRow
	}
	f.hint = best
	return SeekNextUsingHint
}
func (f *FuzzyRowFilter) NextCellHint(cell.Key) cell.Key {
	return cell.AppendFirstOnRow(nil, f.hint)
}

// RowRange is a row range of a MultiRowRangeFilter; a nil StopRow is
// unbounded.
type RowRange struct {
	StartRow          []byte
	StartRowInclusive bool
	StopRow           []byte
	StopRowInclusive  bool
}

func (r RowRange) contains(row []byte) bool {
	if c := bytes.Compare(row, r.StartRow); c < 0 || c == 0 && !r.StartRowInclusive {
		return false
	}
	if r.StopRow != nil {
		if c := bytes.Compare(row, r.StopRow); c > 0 || c == 0 && !r.StopRowInclusive {
			return false
		}
	}
	return true
}

// MultiRowRangeFilter passes rows inside any of Ranges, seeking to the
// next range in forward scans.
type MultiRowRangeFilter struct {
	Base
	Ranges []RowRange

	rowState ReturnCode
	hint     []byte
	done     bool
}

func (*MultiRowRangeFilter) Name() string               { return "MultiRowRangeFilter" }
func (f *MultiRowRangeFilter) FilterAllRemaining() bool { return f.done }
func (f *MultiRowRangeFilter) FilterRowKey(row []byte) bool {
	f.rowState = Include
	for _, r := range f.Ranges {
		if r.contains(row) {
			return false
		}
	}
	if f.reversed {
		// Done once row is below every range start.
		below := true
		for _, r := range f.Ranges {
			if bytes.Compare(row, r.StartRow) >= 0 {
				below = false
			}
		}
		f.done = below
		f.rowState = NextRow
		return true
	}
	var next []byte
	for _, r := range f.Ranges {
		if c := bytes.Compare(r.StartRow, row); c > 0 || c == 0 && !r.StartRowInclusive {
			start := r.StartRow
			if !r.StartRowInclusive {
				start = append(slices.Clone(start), 0)
			}
			if next == nil || bytes.Compare(start, next) < 0 {
				next = start
			}
		}
	}
	if next == nil {
		f.done = true
		f.rowState = NextRow
		return true
	}
	f.hint = next
	f.rowState = SeekNextUsingHint
	return false
}
func (f *MultiRowRangeFilter) FilterCell(cell.Key, []byte) ReturnCode { return f.rowState }
func (f *MultiRowRangeFilter) NextCellHint(cell.Key) cell.Key {
	return cell.AppendFirstOnRow(nil, f.hint)
}

// InclusiveStopFilter ends the scan after StopRow (inclusive).
type InclusiveStopFilter struct {
	Base
	StopRow []byte

	done bool
}

func (*InclusiveStopFilter) Name() string               { return "InclusiveStopFilter" }
func (f *InclusiveStopFilter) FilterAllRemaining() bool { return f.done }
func (f *InclusiveStopFilter) FilterRowKey(row []byte) bool {
	c := bytes.Compare(row, f.StopRow)
	if f.reversed && c < 0 || !f.reversed && c > 0 {
		f.done = true
	}
	return f.done
}
func (f *InclusiveStopFilter) FilterCell(cell.Key, []byte) ReturnCode { return Include }

// SkipFilter drops a whole row when Filter rejects any of its cells.
type SkipFilter struct {
	Base
	Filter Filter

	skip bool
}

func (*SkipFilter) Name() string { return "SkipFilter" }
func (f *SkipFilter) Reset()     { f.Filter.Reset(); f.skip = false }
func (f *SkipFilter) FilterCell(k cell.Key, v []byte) ReturnCode {
	rc := f.Filter.FilterCell(k, v)
	if rc != Include {
		// As HBase's SkipFilter: anything but a plain include drops the row, an include that
		// skips ahead too (the cells it skips are not known to pass).
		f.skip = true
	}
	return rc
}
func (f *SkipFilter) TransformCell(k cell.Key, v []byte) []byte { return f.Filter.TransformCell(k, v) }
func (f *SkipFilter) HasFilterRow() bool                        { return true }
func (f *SkipFilter) FilterRow() bool                           { return f.skip }
func (f *SkipFilter) SetReversed(r bool)                        { f.Base.SetReversed(r); f.Filter.SetReversed(r) }
func (f *SkipFilter) IsFamilyEssential(family []byte) bool {
	return IsFamilyEssential(f.Filter, family)
}

// WhileMatchFilter ends the scan at the first row or cell that Filter
// rejects.
type WhileMatchFilter struct {
	Base
	Filter Filter

	done bool
}

func (*WhileMatchFilter) Name() string { return "WhileMatchFilter" }
func (f *WhileMatchFilter) Reset()     { f.Filter.Reset() }
func (f *WhileMatchFilter) FilterAllRemaining() bool {
	return f.done || f.Filter.FilterAllRemaining()
}
func (f *WhileMatchFilter) FilterRowKey(row []byte) bool {
	if f.Filter.FilterRowKey(row) {
		f.done = true
	}
	return f.done
}
func (f *WhileMatchFilter) FilterCell(k cell.Key, v []byte) ReturnCode {
	rc := f.Filter.FilterCell(k, v)
	if !rc.Includes() {
		f.done = true
	}
	return rc
}
func (f *WhileMatchFilter) TransformCell(k cell.Key, v []byte) []byte {
	return f.Filter.TransformCell(k, v)
}
func (f *WhileMatchFilter) HasFilterRow() bool { return true }

// FilterRow drops the row only when the wrapped filter does (which also ends the scan); a row
// in which a cell ended the scan keeps the cells before that one (HBase's WhileMatchFilter).
func (f *WhileMatchFilter) FilterRow() bool {
	if f.Filter.HasFilterRow() && f.Filter.FilterRow() {
		f.done = true
		return true
	}
	return false
}
func (f *WhileMatchFilter) NextCellHint(k cell.Key) cell.Key { return f.Filter.NextCellHint(k) }
func (f *WhileMatchFilter) SetReversed(r bool)               { f.Base.SetReversed(r); f.Filter.SetReversed(r) }
func (f *WhileMatchFilter) IsFamilyEssential(family []byte) bool {
	return IsFamilyEssential(f.Filter, family)
}

// DependentColumnFilter returns only the cells whose timestamp equals the
// timestamp of a version of the reference column Family:Qualifier in the
// same row (and, with a comparator, whose reference value passes). With
// DropDependentColumn the reference column itself is not returned. Rows
// without the reference column are dropped.
type DependentColumnFilter struct {
	Base
	Family              []byte
	Qualifier           []byte
	DropDependentColumn bool
	Op                  CompareOp
	Comparator          Comparator // nil: no value check

	stamps []int64
}

func (*DependentColumnFilter) Name() string { return "DependentColumnFilter" }
func (f *DependentColumnFilter) Reset()     { f.stamps = f.stamps[:0] }
func (f *DependentColumnFilter) FilterCell(k cell.Key, v []byte) ReturnCode {
	if !bytes.Equal(k.Family(), f.Family) || !bytes.Equal(k.Qualifier(), f.Qualifier) {
		return Include
	}
	if f.Comparator != nil && !Compare(f.Op, f.Comparator, v) {
		return Skip
	}
	f.stamps = append(f.stamps, k.Timestamp())
	if f.DropDependentColumn {
		return Skip
	}
	return Include
}
func (f *DependentColumnFilter) HasFilterRow() bool { return true }
func (f *DependentColumnFilter) FilterRowCells(cells []RowCell) []RowCell {
	out := cells[:0]
	for _, c := range cells {
		if slices.Contains(f.stamps, c.Key.Timestamp()) {
			out = append(out, c)
		}
	}
	return out
}
func (f *DependentColumnFilter) FilterRow() bool { return len(f.stamps) == 0 }
