package regionserver

import (
	"encoding/binary"
	"fmt"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/wal"
)

// maxFilterDepth bounds nested filters (SkipFilter, WhileMatchFilter, FilterList) so that a
// malicious request cannot exhaust the stack.
const maxFilterDepth = 32

// invalid makes an INVALID_ARGUMENT error.
func invalid(format string, args ...any) *pb.ErrorDetail {
	return &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: fmt.Sprintf(format, args...)}
}

func convertOp(op pb.CompareOp) (filter.CompareOp, error) {
	switch op {
	case pb.CompareOp_COMPARE_OP_LESS:
		return filter.Less, nil
	case pb.CompareOp_COMPARE_OP_LESS_OR_EQUAL:
		return filter.LessOrEqual, nil
	case pb.CompareOp_COMPARE_OP_EQUAL:
		return filter.Equal, nil
	case pb.CompareOp_COMPARE_OP_NOT_EQUAL:
		return filter.NotEqual, nil
	case pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL:
		return filter.GreaterOrEqual, nil
	case pb.CompareOp_COMPARE_OP_GREATER:
		return filter.Greater, nil
	case pb.CompareOp_COMPARE_OP_NO_OP:
		return filter.NoOp, nil
	}
	return 0, invalid("unknown compare operator %d", int32(op))
}

func convertComparator(c *pb.Comparator) (filter.Comparator, error) {
	if c == nil {
		return nil, invalid("a comparator is required")
	}
	switch k := c.Kind.(type) {
	case *pb.Comparator_Binary:
		return &filter.BinaryComparator{Value: k.Binary}, nil
	case *pb.Comparator_BinaryPrefix:
		return &filter.BinaryPrefixComparator{Value: k.BinaryPrefix}, nil
	case *pb.Comparator_Substring:
		return &filter.SubstringComparator{Substr: k.Substring}, nil
	case *pb.Comparator_Regex:
		rc, err := filter.NewRegexStringComparator(k.Regex)
		if err != nil {
			return nil, invalid("%v", err) // (it quotes the expression, at most its first 100 bytes)
		}
		return rc, nil
	case *pb.Comparator_Null:
		return filter.NullComparator{}, nil
	case *pb.Comparator_Long:
		return &filter.LongComparator{Value: k.Long}, nil
	}
	return nil, invalid("comparator of no known kind")
}

func compareParts(op pb.CompareOp, c *pb.Comparator) (filter.CompareOp, filter.Comparator, error) {
	o, err := convertOp(op)
	if err != nil {
		return 0, nil, err
	}
	cmp, err := convertComparator(c)
	if err != nil {
		return 0, nil, err
	}
	return o, cmp, nil
}

// convertFilter maps a pb.Filter to the region's filter; nil stays nil.
func convertFilter(f *pb.Filter) (filter.Filter, error) { return convertFilterDepth(f, 0) }

func convertFilterDepth(f *pb.Filter, depth int) (filter.Filter, error) {
	if f == nil {
		return nil, nil
	}
	if depth > maxFilterDepth {
		return nil, invalid("filters nested deeper than %d", maxFilterDepth)
	}
	switch k := f.Filter.(type) {
	case *pb.Filter_Prefix:
		return &filter.PrefixFilter{Prefix: k.Prefix.GetPrefix()}, nil
	case *pb.Filter_Row:
		op, c, err := compareParts(k.Row.GetOp(), k.Row.GetComparator())
		if err != nil {
			return nil, err
		}
		return &filter.RowFilter{Op: op, Comparator: c}, nil
	case *pb.Filter_Family:
		op, c, err := compareParts(k.Family.GetOp(), k.Family.GetComparator())
		if err != nil {
			return nil, err
		}
		return &filter.FamilyFilter{Op: op, Comparator: c}, nil
	case *pb.Filter_Qualifier:
		op, c, err := compareParts(k.Qualifier.GetOp(), k.Qualifier.GetComparator())
		if err != nil {
			return nil, err
		}
		return &filter.QualifierFilter{Op: op, Comparator: c}, nil
	case *pb.Filter_Value:
		op, c, err := compareParts(k.Value.GetOp(), k.Value.GetComparator())
		if err != nil {
			return nil, err
		}
		return &filter.ValueFilter{Op: op, Comparator: c}, nil
	case *pb.Filter_SingleColumnValue:
		s := k.SingleColumnValue
		op, c, err := compareParts(s.GetOp(), s.GetComparator())
		if err != nil {
			return nil, err
		}
		if len(s.GetFamily()) == 0 {
			return nil, invalid("SingleColumnValueFilter needs a family")
		}
		scv := filter.SingleColumnValueFilter{Family: s.GetFamily(), Qualifier: s.GetQualifier(), Op: op, Comparator: c,
			FilterIfMissing: s.GetFilterIfMissing(), LatestVersionOnly: !s.GetAllVersions()}
		if s.GetExclude() {
			return &filter.SingleColumnValueExcludeFilter{SingleColumnValueFilter: scv}, nil
		}
		return &scv, nil
	case *pb.Filter_KeyOnly:
		return &filter.KeyOnlyFilter{LenAsValue: k.KeyOnly.GetLengthAsValue()}, nil
	case *pb.Filter_FirstKeyOnly:
		return &filter.FirstKeyOnlyFilter{}, nil
	case *pb.Filter_Page:
		if k.Page.GetPageSize() < 0 {
			return nil, invalid("PageFilter page size %d is negative", k.Page.GetPageSize())
		}
		return &filter.PageFilter{PageSize: k.Page.GetPageSize()}, nil
	case *pb.Filter_ColumnPrefix:
		return &filter.ColumnPrefixFilter{Prefix: k.ColumnPrefix.GetPrefix()}, nil
	case *pb.Filter_MultipleColumnPrefix:
		return &filter.MultipleColumnPrefixFilter{Prefixes: k.MultipleColumnPrefix.GetPrefixes()}, nil
	case *pb.Filter_ColumnRange:
		c := k.ColumnRange
		return &filter.ColumnRangeFilter{MinColumn: c.GetMinColumn(), MinColumnInclusive: c.GetMinColumnInclusive(),
			MaxColumn: c.GetMaxColumn(), MaxColumnInclusive: c.GetMaxColumnInclusive()}, nil
	case *pb.Filter_ColumnPagination:
		c := k.ColumnPagination
		if c.GetLimit() < 0 || c.GetOffset() < 0 {
			return nil, invalid("ColumnPaginationFilter limit and offset must not be negative")
		}
		return &filter.ColumnPaginationFilter{Limit: int(c.GetLimit()), Offset: int(c.GetOffset()), ColumnOffset: c.GetColumnOffset()}, nil
	case *pb.Filter_ColumnCountGet:
		if k.ColumnCountGet.GetLimit() < 0 {
			return nil, invalid("ColumnCountGetFilter limit must not be negative")
		}
		return &filter.ColumnCountGetFilter{Limit: int(k.ColumnCountGet.GetLimit())}, nil
	case *pb.Filter_Timestamps:
		return &filter.TimestampsFilter{Timestamps: k.Timestamps.GetTimestamps(), CanHint: k.Timestamps.GetCanHint()}, nil
	case *pb.Filter_FuzzyRow:
		var rules []filter.FuzzyRule
		for _, fk := range k.FuzzyRow.GetKeys() {
			if len(fk.GetKey()) != len(fk.GetMask()) {
				return nil, invalid("FuzzyRowFilter key and mask lengths differ (%d, %d)", len(fk.GetKey()), len(fk.GetMask()))
			}
			for _, m := range fk.GetMask() {
				if m > 1 {
					return nil, invalid("FuzzyRowFilter mask bytes must be 0 or 1")
				}
			}
			rules = append(rules, filter.FuzzyRule{Key: fk.GetKey(), Mask: fk.GetMask()})
		}
		return &filter.FuzzyRowFilter{Rules: rules}, nil
	case *pb.Filter_MultiRowRange:
		var rs []filter.RowRange
		for _, r := range k.MultiRowRange.GetRanges() {
			rs = append(rs, filter.RowRange{StartRow: r.GetStartRow(), StartRowInclusive: r.GetStartRowInclusive(),
				StopRow: r.GetStopRow(), StopRowInclusive: r.GetStopRowInclusive()})
		}
		return &filter.MultiRowRangeFilter{Ranges: rs}, nil
	case *pb.Filter_InclusiveStop:
		return &filter.InclusiveStopFilter{StopRow: k.InclusiveStop.GetStopRow()}, nil
	case *pb.Filter_Skip:
		inner, err := convertFilterDepth(k.Skip.GetFilter(), depth+1)
		if err != nil {
			return nil, err
		}
		if inner == nil {
			return nil, invalid("SkipFilter needs a filter")
		}
		return &filter.SkipFilter{Filter: inner}, nil
	case *pb.Filter_WhileMatch:
		inner, err := convertFilterDepth(k.WhileMatch.GetFilter(), depth+1)
		if err != nil {
			return nil, err
		}
		if inner == nil {
			return nil, invalid("WhileMatchFilter needs a filter")
		}
		return &filter.WhileMatchFilter{Filter: inner}, nil
	case *pb.Filter_DependentColumn:
		d := k.DependentColumn
		df := &filter.DependentColumnFilter{Family: d.GetFamily(), Qualifier: d.GetQualifier(), DropDependentColumn: d.GetDropDependentColumn()}
		if d.GetComparator() != nil {
			op, c, err := compareParts(d.GetOp(), d.GetComparator())
			if err != nil {
				return nil, err
			}
			df.Op, df.Comparator = op, c
		}
		return df, nil
	case *pb.Filter_List:
		l := &filter.FilterList{}
		switch k.List.GetOperator() {
		case pb.FilterList_OPERATOR_MUST_PASS_ALL:
			l.Operator = filter.MustPassAll
		case pb.FilterList_OPERATOR_MUST_PASS_ONE:
			l.Operator = filter.MustPassOne
		default:
			return nil, invalid("unknown FilterList operator %d", int32(k.List.GetOperator()))
		}
		for _, sub := range k.List.GetFilters() {
			ff, err := convertFilterDepth(sub, depth+1)
			if err != nil {
				return nil, err
			}
			if ff != nil {
				l.Filters = append(l.Filters, ff)
			}
		}
		return l, nil
	}
	return nil, invalid("filter of no known kind")
}

func convertTimeRange(t *pb.TimeRange) (region.TimeRange, error) {
	if t == nil {
		return region.TimeRange{}, nil
	}
	if t.GetFrom() < 0 || t.GetTo() < 0 {
		return region.TimeRange{}, invalid("time range [%d, %d) has a negative bound", t.GetFrom(), t.GetTo())
	}
	if t.GetTo() != 0 && t.GetTo() < t.GetFrom() {
		return region.TimeRange{}, invalid("time range [%d, %d) ends before it starts", t.GetFrom(), t.GetTo())
	}
	return region.TimeRange{Min: t.GetFrom(), Max: t.GetTo()}, nil
}

func convertColumns(cols []*pb.Column) ([]region.Column, error) {
	var out []region.Column
	for _, c := range cols {
		if len(c.GetFamily()) == 0 {
			return nil, invalid("a column names no family")
		}
		if len(c.GetQualifiers()) == 0 {
			out = append(out, region.Column{Family: c.GetFamily()})
			continue
		}
		for _, q := range c.GetQualifiers() {
			if q == nil {
				q = []byte{}
			}
			out = append(out, region.Column{Family: c.GetFamily(), Qualifier: q})
		}
	}
	return out, nil
}

func convertDurability(d pb.Durability) (wal.Durability, error) {
	switch d {
	case pb.Durability_DURABILITY_USE_DEFAULT:
		return wal.DurabilityDefault, nil
	case pb.Durability_DURABILITY_SKIP_WAL:
		return wal.SkipWAL, nil
	case pb.Durability_DURABILITY_ASYNC_WAL:
		return wal.AsyncWAL, nil
	case pb.Durability_DURABILITY_SYNC_WAL:
		return wal.SyncWAL, nil
	case pb.Durability_DURABILITY_FSYNC_WAL:
		return wal.FsyncWAL, nil
	}
	return 0, invalid("unknown durability %d", int32(d))
}

func convertGet(g *pb.Get) (*region.Get, error) {
	if g == nil {
		return nil, invalid("request has no Get")
	}
	if len(g.GetRow()) == 0 {
		return nil, invalid("Get of an empty row")
	}
	if len(g.GetRow()) > cell.MaxRowLength {
		return nil, invalid("row of %d bytes exceeds %d", len(g.GetRow()), cell.MaxRowLength)
	}
	if g.GetMaxVersions() < 0 || g.GetStoreLimit() < 0 || g.GetStoreOffset() < 0 {
		return nil, invalid("Get has a negative max_versions, store_limit or store_offset")
	}
	tr, err := convertTimeRange(g.GetTimeRange())
	if err != nil {
		return nil, err
	}
	cols, err := convertColumns(g.GetColumns())
	if err != nil {
		return nil, err
	}
	f, err := convertFilter(g.GetFilter())
	if err != nil {
		return nil, err
	}
	return &region.Get{Row: g.GetRow(), Columns: cols, TimeRange: tr, MaxVersions: int(g.GetMaxVersions()),
		Filter: f, NoCache: g.GetNoCacheBlocks(), StoreLimit: int(g.GetStoreLimit()), StoreOffset: int(g.GetStoreOffset())}, nil
}

func convertScan(s *pb.Scan) (*region.Scan, error) {
	if s == nil {
		return nil, invalid("scanner open request has no Scan")
	}
	if s.GetMaxVersions() < 0 || s.GetBatch() < 0 || s.GetMaxResultSize() < 0 || s.GetCaching() < 0 || s.GetLimit() < 0 ||
		s.GetStoreLimit() < 0 || s.GetStoreOffset() < 0 {
		return nil, invalid("Scan has a negative max_versions, batch, max_result_size, caching, limit, store_limit or store_offset")
	}
	// A start row may have one byte more: an endpoint's resume row is the last row read and a 0.
	if len(s.GetStartRow()) > cell.MaxRowLength+1 || len(s.GetStopRow()) > cell.MaxRowLength+1 {
		return nil, invalid("Scan's start row (%d bytes) or stop row (%d bytes) exceeds %d", len(s.GetStartRow()), len(s.GetStopRow()), cell.MaxRowLength+1)
	}
	tr, err := convertTimeRange(s.GetTimeRange())
	if err != nil {
		return nil, err
	}
	cols, err := convertColumns(s.GetColumns())
	if err != nil {
		return nil, err
	}
	f, err := convertFilter(s.GetFilter())
	if err != nil {
		return nil, err
	}
	return &region.Scan{StoreLimit: int(s.GetStoreLimit()), StoreOffset: int(s.GetStoreOffset()), StartRow: s.GetStartRow(), ExcludeStartRow: s.GetExcludeStartRow(), StopRow: s.GetStopRow(),
		IncludeStopRow: s.GetIncludeStopRow(), Reversed: s.GetReversed(), Columns: cols, TimeRange: tr,
		MaxVersions: int(s.GetMaxVersions()), Filter: f, Raw: s.GetRaw(), Limit: int(s.GetLimit()),
		Caching: int(s.GetCaching()), Batch: int(s.GetBatch()), MaxResultSize: s.GetMaxResultSize(),
		AllowPartialResults: s.GetAllowPartialResults(), NoCache: s.GetNoCacheBlocks(),
		LoadColumnFamiliesOnDemand: s.GetLoadColumnFamiliesOnDemand()}, nil
}

// TTLAttribute is the mutation attribute that carries a per-cell TTL, an
// 8-byte big-endian count of milliseconds (HBase's Mutation.setTTL, which
// uses the same attribute name).
const TTLAttribute = "_ttl"

// mutationTTL returns the per-cell TTL of m in milliseconds (0: none).
func mutationTTL(m *pb.MutationProto) (int64, error) {
	v, ok := m.GetAttributes()[TTLAttribute]
	if !ok {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, invalid("mutation attribute %q holds %d bytes; it must be an 8-byte big-endian count of milliseconds", TTLAttribute, len(v))
	}
	ttl := int64(binary.BigEndian.Uint64(v))
	if ttl < 0 {
		return 0, invalid("mutation attribute %q is negative (%d ms)", TTLAttribute, ttl)
	}
	if ttl == 0 {
		// HBase would write cells that expire at once; 0 means "no TTL" in
		// the region, so refuse rather than store them forever.
		return 0, invalid("mutation attribute %q is 0 ms: its cells would expire at once; leave the attribute out for no TTL", TTLAttribute)
	}
	return ttl, nil
}

// mutationACL is the cell ACL tag a put carries (its access.ACLAttribute), nil without.
func mutationACL(m *pb.MutationProto) ([]byte, error) {
	v, ok := m.GetAttributes()[access.ACLAttribute]
	if !ok {
		return nil, nil
	}
	if m.GetType() != pb.MutationProto_TYPE_PUT {
		return nil, invalid("a cell ACL (mutation attribute %q) goes on puts, not on a %v (cells written by increments and appends keep the ACL of the cell they change)",
			access.ACLAttribute, m.GetType())
	}
	if _, err := access.DecodeCellACL(v); err != nil || len(v) == 0 {
		return nil, invalid("mutation attribute %q is not a cell ACL: set it with the client's SetACL", access.ACLAttribute)
	}
	return cell.AppendTag(nil, cell.TagACL, v), nil
}

// mutationVisibility is the visibility tags of a put or delete (its access.VisibilityAttribute,
// an expression over the labels defined), nil without.
func mutationVisibility(m *pb.MutationProto, labels *access.Labels) ([]byte, error) {
	v, ok := m.GetAttributes()[access.VisibilityAttribute]
	if !ok || len(v) == 0 {
		return nil, nil
	}
	if m.GetType() != pb.MutationProto_TYPE_PUT && m.GetType() != pb.MutationProto_TYPE_DELETE {
		return nil, invalid("a visibility expression (mutation attribute %q) goes on puts and deletes, not on a %v (cells written by increments and appends keep the visibility of the cell they change)",
			access.VisibilityAttribute, m.GetType())
	}
	e, err := access.ParseVisibility(string(v))
	if err != nil {
		return nil, invalid("%v", err)
	}
	tags, err := access.EncodeVisibility(e, labels.Ordinal)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return tags, nil
}

// takeCells reads n cells of row from the request's cell block and returns the rest.
func takeCells(block []byte, n int32, row []byte) ([]cell.Cell, []byte, error) {
	if n < 0 {
		return nil, nil, invalid("negative cell count %d", n)
	}
	// Every cell repeats the row: the block holds at most len(block)/smallest of them (checked
	// before the slice is sized by n, which a hostile request sets).
	if smallest := int64(cell.KeyValueLen(len(row), 0, 0, 0)); int64(n)*smallest > int64(len(block)) {
		return nil, nil, invalid("cell count %d exceeds the cell block (%d bytes; a cell of this row takes at least %d)", n, len(block), smallest)
	}
	cells := make([]cell.Cell, 0, n)
	for range n {
		kv, used, err := cell.ParseKeyValue(block)
		if err != nil {
			return nil, nil, invalid("bad cell block: %v", err)
		}
		c := kv.Decode() // its tags, if any, are checked by the region (region.Op.Tags)
		if string(c.Row) != string(row) {
			return nil, nil, invalid("cell of row %q in a mutation of row %q", c.Row, row)
		}
		cells = append(cells, c)
		block = block[used:]
	}
	return cells, block, nil
}

// mutationOf converts a put or delete.
func mutationOf(m *pb.MutationProto, cells []cell.Cell, nonceGroup uint64, tableDefault pb.Durability, labels *access.Labels) (*region.Mutation, error) {
	d, err := convertDurability(effectiveDurability(m.GetDurability(), tableDefault))
	if err != nil {
		return nil, err
	}
	ttl, err := mutationTTL(m)
	if err != nil {
		return nil, err
	}
	mu := &region.Mutation{Row: m.GetRow(), Durability: d, TTL: ttl}
	if mu.Tags, err = mutationACL(m); err != nil {
		return nil, err
	}
	if mu.Visibility, err = mutationVisibility(m, labels); err != nil {
		return nil, err
	}
	if m.GetNonce() != 0 {
		mu.NonceGroup, mu.Nonce = nonceGroup, m.GetNonce()
	}
	switch m.GetType() {
	case pb.MutationProto_TYPE_PUT:
		if len(cells) == 0 {
			return nil, invalid("Put of row %q has no cells", m.GetRow())
		}
		for _, c := range cells {
			if c.Type != cell.Put {
				return nil, invalid("Put of row %q carries a %v cell", m.GetRow(), c.Type)
			}
			mu.Ops = append(mu.Ops, region.Op{Type: cell.Put, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value, Tags: c.Tags})
		}
	case pb.MutationProto_TYPE_DELETE:
		if len(cells) == 0 {
			mu.DeleteRow(cell.LatestTimestamp)
		}
		for _, c := range cells {
			switch c.Type {
			case cell.DeleteFamily, cell.DeleteFamilyVersion:
				mu.Ops = append(mu.Ops, region.Op{Type: c.Type, Family: c.Family, Timestamp: c.Timestamp, Tags: c.Tags})
			case cell.Delete, cell.DeleteColumn:
				mu.Ops = append(mu.Ops, region.Op{Type: c.Type, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Tags: c.Tags})
			default:
				return nil, invalid("Delete of row %q carries a %v cell", m.GetRow(), c.Type)
			}
		}
	default:
		return nil, invalid("%v is not a put or delete", m.GetType())
	}
	return mu, nil
}

// effectiveDurability is the mutation's durability, or the table's when the mutation uses the
// default.
func effectiveDurability(d, tableDefault pb.Durability) pb.Durability {
	if d == pb.Durability_DURABILITY_USE_DEFAULT {
		return tableDefault
	}
	return d
}
