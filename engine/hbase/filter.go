package hbase

import (
	"encoding/binary"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	hb "github.com/cellstore/cellstore/engine/api/hbase/v2"
)

// Filters arrive as a Java class name and that class's protobuf; each one Cellstore implements
// becomes its own filter message. Others are refused with a DoNotRetryIOException naming them.

const filterPackage = "org.apache.hadoop.hbase.filter."

// maxFilterDepth bounds nested filter lists (a hostile request must not exhaust the stack).
const maxFilterDepth = 32

func convertFilter(f *hb.Filter) (*pb.Filter, error) { return convertFilterDepth(f, 0) }

func convertFilterDepth(f *hb.Filter, depth int) (*pb.Filter, error) {
	if f == nil {
		return nil, nil
	}
	if depth > maxFilterDepth {
		return nil, doNotRetry("filters nested more than %d deep", maxFilterDepth)
	}
	name := strings.TrimPrefix(f.GetName(), filterPackage)
	data := f.GetSerializedFilter()
	bad := func(err error) (*pb.Filter, error) {
		return nil, doNotRetry("bad %s: %v", f.GetName(), err)
	}
	compare := func(cf *hb.CompareFilter) (*pb.CompareFilter, error) {
		c, err := convertComparator(cf.GetComparator())
		if err != nil {
			return nil, err
		}
		return &pb.CompareFilter{Op: pb.CompareOp(cf.GetCompareOp()), Comparator: c}, nil
	}
	switch name {
	case "FilterList":
		var m hb.FilterList
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		out := &pb.FilterList{Operator: pb.FilterList_OPERATOR_MUST_PASS_ALL}
		if m.GetOperator() == hb.FilterList_MUST_PASS_ONE {
			out.Operator = pb.FilterList_OPERATOR_MUST_PASS_ONE
		}
		for _, sub := range m.GetFilters() {
			c, err := convertFilterDepth(sub, depth+1)
			if err != nil {
				return nil, err
			}
			out.Filters = append(out.Filters, c)
		}
		return &pb.Filter{Filter: &pb.Filter_List{List: out}}, nil
	case "PrefixFilter":
		var m hb.PrefixFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: m.GetPrefix()}}}, nil
	case "RowFilter", "FamilyFilter", "QualifierFilter", "ValueFilter":
		var m hb.RowFilter // the four share one layout: compare_filter = 1
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		cf, err := compare(m.GetCompareFilter())
		if err != nil {
			return nil, err
		}
		switch name {
		case "RowFilter":
			return &pb.Filter{Filter: &pb.Filter_Row{Row: cf}}, nil
		case "FamilyFilter":
			return &pb.Filter{Filter: &pb.Filter_Family{Family: cf}}, nil
		case "QualifierFilter":
			return &pb.Filter{Filter: &pb.Filter_Qualifier{Qualifier: cf}}, nil
		}
		return &pb.Filter{Filter: &pb.Filter_Value{Value: cf}}, nil
	case "SingleColumnValueFilter", "SingleColumnValueExcludeFilter":
		var m *hb.SingleColumnValueFilter
		if name == "SingleColumnValueExcludeFilter" {
			var x hb.SingleColumnValueExcludeFilter
			if err := proto.Unmarshal(data, &x); err != nil {
				return bad(err)
			}
			m = x.GetSingleColumnValueFilter()
		} else {
			m = &hb.SingleColumnValueFilter{}
			if err := proto.Unmarshal(data, m); err != nil {
				return bad(err)
			}
		}
		c, err := convertComparator(m.GetComparator())
		if err != nil {
			return nil, err
		}
		latest := m.LatestVersionOnly == nil || m.GetLatestVersionOnly()
		return &pb.Filter{Filter: &pb.Filter_SingleColumnValue{SingleColumnValue: &pb.SingleColumnValueFilter{
			Family: m.GetColumnFamily(), Qualifier: m.GetColumnQualifier(), Op: pb.CompareOp(m.GetCompareOp()), Comparator: c,
			FilterIfMissing: m.GetFilterIfMissing(), AllVersions: !latest, Exclude: name == "SingleColumnValueExcludeFilter"}}}, nil
	case "KeyOnlyFilter":
		var m hb.KeyOnlyFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_KeyOnly{KeyOnly: &pb.KeyOnlyFilter{LengthAsValue: m.GetLenAsVal()}}}, nil
	case "FirstKeyOnlyFilter":
		return &pb.Filter{Filter: &pb.Filter_FirstKeyOnly{FirstKeyOnly: &pb.FirstKeyOnlyFilter{}}}, nil
	case "PageFilter":
		var m hb.PageFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_Page{Page: &pb.PageFilter{PageSize: m.GetPageSize()}}}, nil
	case "ColumnPrefixFilter":
		var m hb.ColumnPrefixFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_ColumnPrefix{ColumnPrefix: &pb.ColumnPrefixFilter{Prefix: m.GetPrefix()}}}, nil
	case "MultipleColumnPrefixFilter":
		var m hb.MultipleColumnPrefixFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_MultipleColumnPrefix{MultipleColumnPrefix: &pb.MultipleColumnPrefixFilter{Prefixes: m.GetSortedPrefixes()}}}, nil
	case "ColumnRangeFilter":
		var m hb.ColumnRangeFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_ColumnRange{ColumnRange: &pb.ColumnRangeFilter{MinColumn: m.GetMinColumn(),
			MinColumnInclusive: m.GetMinColumnInclusive(), MaxColumn: m.GetMaxColumn(), MaxColumnInclusive: m.GetMaxColumnInclusive()}}}, nil
	case "ColumnPaginationFilter":
		var m hb.ColumnPaginationFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_ColumnPagination{ColumnPagination: &pb.ColumnPaginationFilter{Limit: m.GetLimit(),
			Offset: m.GetOffset(), ColumnOffset: m.GetColumnOffset()}}}, nil
	case "ColumnCountGetFilter":
		var m hb.ColumnCountGetFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_ColumnCountGet{ColumnCountGet: &pb.ColumnCountGetFilter{Limit: m.GetLimit()}}}, nil
	case "TimestampsFilter":
		var m hb.TimestampsFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_Timestamps{Timestamps: &pb.TimestampsFilter{Timestamps: m.GetTimestamps(), CanHint: m.GetCanHint()}}}, nil
	case "FuzzyRowFilter":
		var m hb.FuzzyRowFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		out := &pb.FuzzyRowFilter{}
		for _, k := range m.GetFuzzyKeysData() {
			mask, err := fuzzyMask(k.GetSecond())
			if err != nil {
				return nil, err
			}
			out.Keys = append(out.Keys, &pb.FuzzyKey{Key: k.GetFirst(), Mask: mask})
		}
		return &pb.Filter{Filter: &pb.Filter_FuzzyRow{FuzzyRow: out}}, nil
	case "MultiRowRangeFilter":
		var m hb.MultiRowRangeFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		out := &pb.MultiRowRangeFilter{}
		for _, r := range m.GetRowRangeList() {
			out.Ranges = append(out.Ranges, &pb.RowRange{StartRow: r.GetStartRow(), StartRowInclusive: r.GetStartRowInclusive(),
				StopRow: r.GetStopRow(), StopRowInclusive: r.GetStopRowInclusive()})
		}
		return &pb.Filter{Filter: &pb.Filter_MultiRowRange{MultiRowRange: out}}, nil
	case "InclusiveStopFilter":
		var m hb.InclusiveStopFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Filter{Filter: &pb.Filter_InclusiveStop{InclusiveStop: &pb.InclusiveStopFilter{StopRow: m.GetStopRowKey()}}}, nil
	case "SkipFilter", "WhileMatchFilter":
		var m hb.SkipFilter // both: filter = 1
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		sub, err := convertFilterDepth(m.GetFilter(), depth+1)
		if err != nil {
			return nil, err
		}
		if name == "SkipFilter" {
			return &pb.Filter{Filter: &pb.Filter_Skip{Skip: &pb.SkipFilter{Filter: sub}}}, nil
		}
		return &pb.Filter{Filter: &pb.Filter_WhileMatch{WhileMatch: &pb.WhileMatchFilter{Filter: sub}}}, nil
	case "DependentColumnFilter":
		var m hb.DependentColumnFilter
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		out := &pb.DependentColumnFilter{Family: m.GetColumnFamily(), Qualifier: m.GetColumnQualifier(), DropDependentColumn: m.GetDropDependentColumn(),
			Op: pb.CompareOp(m.GetCompareFilter().GetCompareOp())}
		if m.GetCompareFilter().GetComparator() != nil {
			c, err := convertComparator(m.GetCompareFilter().GetComparator())
			if err != nil {
				return nil, err
			}
			out.Comparator = c
		}
		return &pb.Filter{Filter: &pb.Filter_DependentColumn{DependentColumn: out}}, nil
	case "FilterAllFilter":
		// Nothing passes: a row filter no row matches.
		return &pb.Filter{Filter: &pb.Filter_Row{Row: &pb.CompareFilter{Op: pb.CompareOp_COMPARE_OP_LESS,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte{}}}}}}, nil
	}
	return nil, doNotRetry("filter %s is not supported by Cellstore (docs/hbase-clients.md lists the supported filters)", f.GetName())
}

func convertComparator(c *hb.Comparator) (*pb.Comparator, error) {
	if c == nil {
		return nil, doNotRetry("a comparator is missing")
	}
	name := strings.TrimPrefix(c.GetName(), filterPackage)
	data := c.GetSerializedComparator()
	bad := func(err error) (*pb.Comparator, error) { return nil, doNotRetry("bad %s: %v", c.GetName(), err) }
	switch name {
	case "BinaryComparator", "BinaryPrefixComparator", "LongComparator":
		var m hb.BinaryComparator // comparable = 1 in all three
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		v := m.GetComparable().GetValue()
		switch name {
		case "BinaryComparator":
			return &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: nonNil(v)}}, nil
		case "BinaryPrefixComparator":
			return &pb.Comparator{Kind: &pb.Comparator_BinaryPrefix{BinaryPrefix: nonNil(v)}}, nil
		}
		if len(v) != 8 {
			return nil, doNotRetry("LongComparator needs an 8-byte value, got %d bytes", len(v))
		}
		return &pb.Comparator{Kind: &pb.Comparator_Long{Long: int64(binary.BigEndian.Uint64(v))}}, nil
	case "SubstringComparator":
		var m hb.SubstringComparator
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		return &pb.Comparator{Kind: &pb.Comparator_Substring{Substring: m.GetSubstr()}}, nil
	case "RegexStringComparator":
		var m hb.RegexStringComparator
		if err := proto.Unmarshal(data, &m); err != nil {
			return bad(err)
		}
		p, err := javaPattern(m.GetPattern(), m.GetPatternFlags())
		if err != nil {
			return nil, err
		}
		return &pb.Comparator{Kind: &pb.Comparator_Regex{Regex: p}}, nil
	case "NullComparator":
		return &pb.Comparator{Kind: &pb.Comparator_Null{Null: true}}, nil
	}
	return nil, doNotRetry("comparator %s is not supported by Cellstore", c.GetName())
}

// fuzzyMask turns a FuzzyRowFilter mask as HBase's client sends it into Cellstore's (0: the byte
// must match, 1: any byte). The client preprocesses its masks where the JVM reads unaligned words
// (x86-64, aarch64: every common one): 0 becomes -1 (0xff) and 1 becomes 2, and that form is what
// it serializes; an older client or another JVM sends 0 and 1.
func fuzzyMask(mask []byte) ([]byte, error) {
	out := make([]byte, len(mask))
	for i, b := range mask {
		switch b {
		case 0, 0xff:
			out[i] = 0
		case 1, 2:
			out[i] = 1
		default:
			return nil, doNotRetry("FuzzyRowFilter mask byte %d is %d: want 0 or -1 (fixed), 1 or 2 (any)", i, int8(b))
		}
	}
	return out, nil
}

// Java's java.util.regex.Pattern flags a RegexStringComparator carries.
const (
	javaCaseInsensitive = 2
	javaComments        = 4
	javaMultiline       = 8
	javaLiteral         = 16
	javaDotall          = 32
)

// javaPattern is the Go (RE2) form of a Java pattern with its flags: CASE_INSENSITIVE, MULTILINE
// and DOTALL become (?i), (?m) and (?s) — HBase's RegexStringComparator sets DOTALL by default —,
// LITERAL quotes the pattern; COMMENTS has no RE2 equivalent and is refused. The flags that only
// refine these (UNIX_LINES, UNICODE_CASE: RE2's matching is already Unicode-aware) are ignored.
func javaPattern(p string, flags int32) (string, error) {
	if flags&javaComments != 0 {
		return "", doNotRetry("RegexStringComparator: the COMMENTS flag is not supported by Cellstore (write the pattern without comments and whitespace)")
	}
	if flags&javaLiteral != 0 {
		p = regexp.QuoteMeta(p)
	}
	var mods string
	if flags&javaCaseInsensitive != 0 {
		mods += "i"
	}
	if flags&javaMultiline != 0 {
		mods += "m"
	}
	if flags&javaDotall != 0 {
		mods += "s"
	}
	if mods != "" {
		p = "(?" + mods + ")" + p
	}
	return p, nil
}
