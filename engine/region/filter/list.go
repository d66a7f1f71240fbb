package filter

import (
	"bytes"
	"slices"

	"github.com/cellstore/cellstore/engine/cell"
)

// ListOperator combines the filters of a FilterList.
type ListOperator int

const (
	// MustPassAll includes a cell only if every filter includes it.
	MustPassAll ListOperator = iota
	// MustPassOne includes a cell if any filter includes it.
	MustPassOne
)

// FilterList combines filters with MustPassAll (AND) or MustPassOne (OR),
// merging return codes and seek hints as HBase does: with AND the most
// restrictive verdict wins and the furthest hint is used; with OR the least
// restrictive verdict wins and a hint is used only when every filter asked
// for one (the nearest).
type FilterList struct {
	Base
	Operator ListOperator
	Filters  []Filter

	hint cell.Key
	// MustPassOne keeps, per filter, what it last answered in the row (HBase's FilterListWithOR
	// prevFilterRCList and prevCellList): a filter that asked to pass over a column, a family or
	// up to its hint is not asked again before the scan gets there, so its state (counts,
	// offsets) sees what it would see alone. prevKey is kept for those verdicts only, prevHint
	// for SeekNextUsingHint; included says which filters included the last cell (only their
	// TransformCell applies).
	prevRC   []ReturnCode
	prevKey  [][]byte
	prevHint []cell.Key
	included []bool
}

func (*FilterList) Name() string { return "FilterList" }

func (l *FilterList) Reset() {
	for _, f := range l.Filters {
		f.Reset()
	}
	for i := range l.prevKey {
		l.prevKey[i], l.prevHint[i] = l.prevKey[i][:0], nil
	}
}

func (l *FilterList) SetReversed(r bool) {
	l.Base.SetReversed(r)
	for _, f := range l.Filters {
		f.SetReversed(r)
	}
}

// IsFamilyEssential: a family is essential when any filter of the list needs it (an empty list
// needs every family).
func (l *FilterList) IsFamilyEssential(family []byte) bool {
	if len(l.Filters) == 0 {
		return true
	}
	for _, f := range l.Filters {
		if IsFamilyEssential(f, family) {
			return true
		}
	}
	return false
}

func (l *FilterList) FilterAllRemaining() bool {
	if len(l.Filters) == 0 {
		return false
	}
	if l.Operator == MustPassAll {
		for _, f := range l.Filters {
			if f.FilterAllRemaining() {
				return true
			}
		}
		return false
	}
	for _, f := range l.Filters {
		if !f.FilterAllRemaining() {
			return false
		}
	}
	return true
}

func (l *FilterList) FilterRowKey(row []byte) bool {
	if len(l.Filters) == 0 {
		return false
	}
	// Every filter sees the key (they keep per-row state from it); with MustPassOne a filter
	// done with the scan has no say (HBase's FilterListWithOR.filterRowKey).
	any, all := false, true
	for _, f := range l.Filters {
		if l.Operator == MustPassOne && f.FilterAllRemaining() {
			continue
		}
		if f.FilterRowKey(row) {
			any = true
		} else {
			all = false
		}
	}
	if l.Operator == MustPassAll {
		return any
	}
	return all
}

// restrictiveness orders exclusion codes for merging.
func rank(rc ReturnCode) int {
	switch rc {
	case Include:
		return 0
	case IncludeAndNextCol:
		return 1
	case IncludeAndSeekNextRow:
		return 2
	case Skip:
		return 3
	case NextCol:
		return 4
	case SeekNextUsingHint:
		return 5
	case NextRow:
		return 6
	}
	return 0
}

func (l *FilterList) FilterCell(k cell.Key, v []byte) ReturnCode {
	if len(l.Filters) == 0 {
		return Include
	}
	l.hint = nil
	if l.Operator == MustPassAll {
		res := Include
		for _, f := range l.Filters {
			rc := f.FilterCell(k, v)
			if rc == SeekNextUsingHint {
				h := f.NextCellHint(k)
				if h == nil {
					rc = Skip
				} else if l.hint == nil || cell.Compare(h, l.hint) > 0 {
					l.hint = h
				}
			}
			res = mergeAnd(res, rc)
			if !res.Includes() {
				// The later filters never see a cell the list already refuses, so their state
				// (counts, offsets) is as if it was not there (HBase's FilterListWithAND,
				// HBASE-20565).
				break
			}
		}
		if res == SeekNextUsingHint && l.hint == nil {
			res = Skip
		}
		return res
	}
	return l.filterCellOr(k, v)
}

// filterCellOr is MustPassOne as HBase's FilterListWithOR: a filter whose last verdict in the row
// still covers this cell (passed tells) is not asked again and counts with that verdict; the
// verdicts merge into the least restrictive (mergeOr); the list seeks by hint when every filter
// asks for one (to the nearest).
func (l *FilterList) filterCellOr(k cell.Key, v []byte) ReturnCode {
	if len(l.prevRC) != len(l.Filters) {
		l.prevRC = make([]ReturnCode, len(l.Filters))
		l.prevKey = make([][]byte, len(l.Filters))
		l.prevHint = make([]cell.Key, len(l.Filters))
		l.included = make([]bool, len(l.Filters))
	}
	var rc ReturnCode
	merged := false
	for i, f := range l.Filters {
		l.included[i] = false
		if f.FilterAllRemaining() {
			continue
		}
		local, covered := l.passed(i, k)
		if !covered {
			local = f.FilterCell(k, v)
			l.prevRC[i], l.prevKey[i], l.prevHint[i] = local, l.prevKey[i][:0], nil
			if local != Include && local != Skip { // (after those the next cell is asked anyway)
				l.prevKey[i] = append(l.prevKey[i], k...)
			}
			if local == SeekNextUsingHint {
				if h := f.NextCellHint(k); h != nil {
					l.prevHint[i] = append(cell.Key(nil), h...)
				}
			}
		}
		if !merged {
			rc, merged = local, true
		} else {
			rc = mergeOr(rc, local)
		}
		l.included[i] = local.Includes()
	}
	if !merged {
		return Skip // every filter is done with the scan
	}
	if rc == SeekNextUsingHint {
		// The nearest hint; a filter without one means none (the region steps to the next cell).
		for i, f := range l.Filters {
			if f.FilterAllRemaining() {
				continue
			}
			h := l.prevHint[i]
			if h == nil {
				l.hint = nil
				return Skip
			}
			if l.hint == nil || l.before(h, l.hint) {
				l.hint = h
			}
		}
	}
	return rc
}

// passed gives the verdict filter i's last one in the row implies for k, without asking it
// (covered): after NextCol (or IncludeAndNextCol) NextCol until the next column, after NextRow
// (or IncludeAndSeekNextRow) NextRow until the next family (they act per family), after a hint
// the hint until it is reached.
func (l *FilterList) passed(i int, k cell.Key) (rc ReturnCode, covered bool) {
	prev := cell.Key(l.prevKey[i])
	if len(prev) == 0 {
		return 0, false
	}
	switch l.prevRC[i] {
	case SeekNextUsingHint:
		if h := l.prevHint[i]; h != nil && l.before(k, h) {
			return SeekNextUsingHint, true
		}
	case NextCol, IncludeAndNextCol:
		if cell.SameColumn(prev, k) {
			return NextCol, true
		}
	case NextRow, IncludeAndSeekNextRow:
		if bytes.Equal(prev.Family(), k.Family()) {
			return NextRow, true
		}
	}
	return 0, false
}

// before says whether a sorts before b in the scan's order (rows in reverse for reversed scans).
func (l *FilterList) before(a, b cell.Key) bool {
	if l.reversed {
		if c := bytes.Compare(a.Row(), b.Row()); c != 0 {
			return c > 0
		}
	}
	return cell.Compare(a, b) < 0
}

// mergeOr merges the verdict of one more filter into a MustPassOne list's (HBase's
// FilterListWithOR.mergeReturnCode): the least restrictive wins, and a skip-ahead survives only
// as far as every verdict allows.
func mergeOr(rc, local ReturnCode) ReturnCode {
	in := func(codes ...ReturnCode) bool { return slices.Contains(codes, rc) }
	switch local {
	case Include:
		return Include
	case IncludeAndNextCol:
		if in(IncludeAndNextCol, IncludeAndSeekNextRow, NextCol, NextRow) {
			return IncludeAndNextCol
		}
		return Include
	case IncludeAndSeekNextRow:
		switch {
		case in(IncludeAndNextCol, NextCol):
			return IncludeAndNextCol
		case in(IncludeAndSeekNextRow, NextRow):
			return IncludeAndSeekNextRow
		}
		return Include
	case Skip:
		if in(Include, IncludeAndNextCol, IncludeAndSeekNextRow) {
			return Include
		}
		return Skip
	case NextCol:
		switch {
		case in(Include):
			return Include
		case in(NextCol, NextRow):
			return NextCol
		case in(IncludeAndNextCol, IncludeAndSeekNextRow):
			return IncludeAndNextCol
		}
		return Skip
	case NextRow:
		switch rc {
		case Skip, SeekNextUsingHint:
			return Skip
		}
		return rc
	case SeekNextUsingHint:
		switch {
		case in(Include, IncludeAndNextCol, IncludeAndSeekNextRow):
			return Include
		case in(SeekNextUsingHint):
			return SeekNextUsingHint
		}
		return Skip
	}
	return rc
}

func mergeAnd(a, b ReturnCode) ReturnCode {
	if a.Includes() && b.Includes() {
		// Both include: the stronger skip-ahead.
		if a == IncludeAndSeekNextRow || b == IncludeAndSeekNextRow {
			return IncludeAndSeekNextRow
		}
		if a == IncludeAndNextCol || b == IncludeAndNextCol {
			return IncludeAndNextCol
		}
		return Include
	}
	// One excludes. An include-and-skip-ahead combined with an exclusion
	// still allows the skip-ahead.
	ex, in := a, b
	if a.Includes() {
		ex, in = b, a
	} else if !b.Includes() {
		if rank(a) >= rank(b) {
			return a
		}
		return b
	}
	switch in {
	case IncludeAndSeekNextRow:
		return NextRow
	case IncludeAndNextCol:
		if ex == Skip {
			return NextCol
		}
	}
	return ex
}

// TransformCell applies the transforms of the filters that included the cell: all of them with
// MustPassAll, with MustPassOne only those that did (HBase's subFiltersIncludedCell).
func (l *FilterList) TransformCell(k cell.Key, v []byte) []byte {
	for i, f := range l.Filters {
		if l.Operator == MustPassOne && (i >= len(l.included) || !l.included[i]) {
			continue
		}
		v = f.TransformCell(k, v)
	}
	return v
}

func (l *FilterList) HasFilterRow() bool {
	for _, f := range l.Filters {
		if f.HasFilterRow() {
			return true
		}
	}
	return false
}

func (l *FilterList) FilterRowCells(cells []RowCell) []RowCell {
	for _, f := range l.Filters {
		if f.HasFilterRow() {
			cells = f.FilterRowCells(cells)
		}
	}
	return cells
}

func (l *FilterList) FilterRow() bool {
	if len(l.Filters) == 0 {
		return false
	}
	if l.Operator == MustPassAll {
		for _, f := range l.Filters {
			if f.FilterRow() {
				return true // the later filters do not count a row the list drops (HBase)
			}
		}
		return false
	}
	for _, f := range l.Filters {
		if !f.FilterRow() {
			return false
		}
	}
	return true
}

func (l *FilterList) NextCellHint(cell.Key) cell.Key { return l.hint }
