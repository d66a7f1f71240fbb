package regionserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// FuzzFilteredReads sends scans and gets carrying any filter a client can encode (the bytes of a
// pb.Filter) to a real region server over a socket, over rows with several columns, versions,
// numeric and text values. Seeded with each kind of filter. A filter the server cannot build is
// refused as INVALID_ARGUMENT; whatever it builds runs to an answer: no panic (the handler's
// recovery would answer "internal error serving the request") and, after the reads, the server
// still answers a plain scan.
func FuzzFilteredReads(f *testing.F) {
	bin := func(v string) *pb.Comparator { return &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte(v)}} }
	cf := func(op pb.CompareOp, c *pb.Comparator) *pb.CompareFilter {
		return &pb.CompareFilter{Op: op, Comparator: c}
	}
	keyOnly := &pb.Filter{Filter: &pb.Filter_KeyOnly{KeyOnly: &pb.KeyOnlyFilter{}}}
	page := &pb.Filter{Filter: &pb.Filter_Page{Page: &pb.PageFilter{PageSize: 2}}}
	scv := &pb.Filter{Filter: &pb.Filter_SingleColumnValue{SingleColumnValue: &pb.SingleColumnValueFilter{Family: []byte("f"), Qualifier: []byte("q1"),
		Op: pb.CompareOp_COMPARE_OP_GREATER, Comparator: bin("1")}}}
	for _, s := range []*pb.Filter{
		{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte("c")}}},
		{Filter: &pb.Filter_Row{Row: cf(pb.CompareOp_COMPARE_OP_LESS, bin("d"))}},
		{Filter: &pb.Filter_Family{Family: cf(pb.CompareOp_COMPARE_OP_EQUAL, bin("f"))}},
		{Filter: &pb.Filter_Qualifier{Qualifier: cf(pb.CompareOp_COMPARE_OP_NOT_EQUAL, &pb.Comparator{Kind: &pb.Comparator_Regex{Regex: "q[12]"}})}},
		{Filter: &pb.Filter_Value{Value: cf(pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL, &pb.Comparator{Kind: &pb.Comparator_Substring{Substring: "b"}})}},
		{Filter: &pb.Filter_Value{Value: cf(pb.CompareOp_COMPARE_OP_EQUAL, &pb.Comparator{Kind: &pb.Comparator_BinaryPrefix{BinaryPrefix: []byte("v")}})}},
		{Filter: &pb.Filter_Value{Value: cf(pb.CompareOp_COMPARE_OP_EQUAL, &pb.Comparator{Kind: &pb.Comparator_Long{Long: 7}})}},
		scv, keyOnly, page,
		{Filter: &pb.Filter_FirstKeyOnly{FirstKeyOnly: &pb.FirstKeyOnlyFilter{}}},
		{Filter: &pb.Filter_ColumnPrefix{ColumnPrefix: &pb.ColumnPrefixFilter{Prefix: []byte("q")}}},
		{Filter: &pb.Filter_MultipleColumnPrefix{MultipleColumnPrefix: &pb.MultipleColumnPrefixFilter{Prefixes: [][]byte{[]byte("q0"), []byte("q3")}}}},
		{Filter: &pb.Filter_ColumnRange{ColumnRange: &pb.ColumnRangeFilter{MinColumn: []byte("q1"), MaxColumn: []byte("q2"), MaxColumnInclusive: true}}},
		{Filter: &pb.Filter_ColumnPagination{ColumnPagination: &pb.ColumnPaginationFilter{Limit: 2, Offset: 1}}},
		{Filter: &pb.Filter_ColumnCountGet{ColumnCountGet: &pb.ColumnCountGetFilter{Limit: 2}}},
		{Filter: &pb.Filter_Timestamps{Timestamps: &pb.TimestampsFilter{Timestamps: []int64{1, 3}}}},
		{Filter: &pb.Filter_FuzzyRow{FuzzyRow: &pb.FuzzyRowFilter{Keys: []*pb.FuzzyKey{{Key: []byte("r?"), Mask: []byte{0, 1}}}}}},
		{Filter: &pb.Filter_MultiRowRange{MultiRowRange: &pb.MultiRowRangeFilter{Ranges: []*pb.RowRange{{StartRow: []byte("b"), StopRow: []byte("d")}, {StartRow: []byte("f")}}}}},
		{Filter: &pb.Filter_InclusiveStop{InclusiveStop: &pb.InclusiveStopFilter{StopRow: []byte("e")}}},
		{Filter: &pb.Filter_Skip{Skip: &pb.SkipFilter{Filter: scv}}},
		{Filter: &pb.Filter_WhileMatch{WhileMatch: &pb.WhileMatchFilter{Filter: page}}},
		{Filter: &pb.Filter_DependentColumn{DependentColumn: &pb.DependentColumnFilter{Family: []byte("f"), Qualifier: []byte("q0"), DropDependentColumn: true}}},
		{Filter: &pb.Filter_List{List: &pb.FilterList{Operator: pb.FilterList_OPERATOR_MUST_PASS_ONE, Filters: []*pb.Filter{keyOnly, scv, page}}}},
		{Filter: &pb.Filter_List{List: &pb.FilterList{Operator: pb.FilterList_OPERATOR_MUST_PASS_ALL, Filters: []*pb.Filter{page, {Filter: &pb.Filter_List{List: &pb.FilterList{Filters: []*pb.Filter{keyOnly}}}}}}}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false, int32(0))
		f.Add(b, true, int32(2))
	}

	c := startClusterWith(f, 1, nil, nil)
	ctx := context.Background()
	createTable(f, c, "filtered", nil)
	tbl := c.client.Table("filtered")
	long := binary.BigEndian.AppendUint64(nil, 7)
	for i, row := range []string{"a", "b", "c", "d", "e", "r1", "r2", "z"} {
		m := client.NewPut([]byte(row))
		for q := range 4 {
			for ts := int64(1); ts <= 3; ts++ {
				v := []byte(fmt.Sprintf("v%d-%d-%d", i, q, ts))
				if q == 3 {
					v = long
				}
				m.Add("f", fmt.Sprintf("q%d", q), ts, v)
			}
		}
		if err := tbl.Put(ctx, m); err != nil {
			f.Fatal(err)
		}
	}
	regionName, conn := locate(f, c, "filtered", []byte("a"))
	region := &pb.RegionSpecifier{Name: regionName}
	internal := func(err error) bool {
		d, ok := pb.DetailOf(err)
		return ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_UNKNOWN && d.GetMessage() == "internal error serving the request"
	}

	closeScanner := func(id uint64) { // (one left open would hold its lease until it expires)
		if id != 0 {
			var closed pb.ScanResponse
			_, _ = conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: id, CloseScanner: true, NextCallSeq: 1}, nil, &closed, nil)
		}
	}

	f.Fuzz(func(t *testing.T, filterBytes []byte, reversed bool, batch int32) {
		var flt pb.Filter
		if proto.Unmarshal(filterBytes, &flt) != nil {
			return
		}
		scan := &pb.Scan{Filter: &flt, MaxVersions: 3, Reversed: reversed, Batch: batch % 4}
		var sr pb.ScanResponse
		_, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: scan, NumberOfRows: 100}, nil, &sr, nil)
		if internal(err) {
			t.Fatalf("a scan with filter %v panicked in the handler", &flt)
		}
		closeScanner(sr.GetScannerId())
		var gr pb.GetResponse
		_, err = conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: region, Get: &pb.Get{Row: []byte("c"), Filter: &flt, MaxVersions: 3}}, nil, &gr, nil)
		if internal(err) {
			t.Fatalf("a get with filter %v panicked in the handler", &flt)
		}
		var plain pb.ScanResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: &pb.Scan{}, NumberOfRows: 100}, nil, &plain, nil); err != nil || len(plain.GetCellsPerResult()) != 8 {
			t.Fatalf("a plain scan after filter %v: %d rows, %v", &flt, len(plain.GetCellsPerResult()), err)
		}
		closeScanner(plain.GetScannerId())
	})
}
