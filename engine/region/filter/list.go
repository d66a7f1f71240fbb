package filter

import (
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
}

func (*FilterList) Name() string { return "FilterList" }

func (l *FilterList) Reset() {
	for _, f := range l.Filters {
		f.Reset()
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
	// Every filter sees the key (they keep per-row state from it).
	any, all := false, true
	for _, f := range l.Filters {
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
	// MustPassOne.
	included := false
	allHints, allNextRow, allNextColOrRow := true, true, true
	incNextCol := true
	for _, f := range l.Filters {
		rc := f.FilterCell(k, v)
		switch {
		case rc.Includes():
			included = true
			if rc != IncludeAndNextCol && rc != IncludeAndSeekNextRow {
				incNextCol = false
			}
			allHints, allNextRow, allNextColOrRow = false, false, false
		case rc == SeekNextUsingHint:
			h := f.NextCellHint(k)
			if h == nil {
				allHints = false
			} else if l.hint == nil || cell.Compare(h, l.hint) < 0 {
				l.hint = h
			}
			allNextRow, allNextColOrRow = false, false
		case rc == NextRow:
			allHints = false
		case rc == NextCol:
			allHints, allNextRow = false, false
		default: // Skip
			allHints, allNextRow, allNextColOrRow = false, false, false
			incNextCol = false
		}
	}
	switch {
	case included && incNextCol:
		return IncludeAndNextCol
	case included:
		return Include
	case allHints && l.hint != nil:
		return SeekNextUsingHint
	case allNextRow:
		return NextRow
	case allNextColOrRow:
		return NextCol
	}
	return Skip
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

func (l *FilterList) TransformCell(k cell.Key, v []byte) []byte {
	for _, f := range l.Filters {
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
