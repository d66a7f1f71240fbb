package regionserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// FuzzFilteredReads sends scans and gets carrying any filter a client can encode (the bytes of a
// pb.Filter) to a real region server over a socket, over rows with several columns, versions,
// numeric and text values. Seeded with each kind of filter. A filter the server cannot build is
// refused as INVALID_ARGUMENT; whatever it builds runs to an answer within 5 s, the server logs no
// recovered panic, and after the reads a plain scan still sees every row and a plain get every
// column.
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

	// Production leases: the fuzzing engine keeps both cores busy, and a fenced server would fail
	// an input that does not reproduce.
	f.Setenv("CELLSTORE_TEST_DEFAULT_LEASE", "1")
	var panics atomic.Int64
	c := startClusterWith(f, 1, func(cfg *Config) { cfg.Logger = slog.New(lineCounter{msg: "panic serving a call", n: &panics}) }, nil)
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
	// call runs one request with a deadline; a panic the handler recovered from, or no answer in
	// time, fails the input.
	call := func(t *testing.T, what string, m pb.Method, req, resp proto.Message) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		before := panics.Load()
		_, err := conn.Call(cctx, m, req, nil, resp, nil)
		if handlerPanicked(err) {
			t.Fatalf("%s panicked in the handler", what)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: no answer in 5 s", what)
		}
		if panics.Load() != before {
			t.Fatalf("%s: the server logged a recovered panic", what)
		}
		return err
	}
	closeScanner := func(t *testing.T, id uint64) { // (one left open would hold its lease until it expires)
		if id != 0 {
			_ = call(t, "closing a scanner", pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: id, CloseScanner: true, NextCallSeq: 1}, &pb.ScanResponse{})
		}
	}

	f.Fuzz(func(t *testing.T, filterBytes []byte, reversed bool, batch int32) {
		var flt pb.Filter
		if proto.Unmarshal(filterBytes, &flt) != nil {
			return
		}
		scan := &pb.Scan{Filter: &flt, MaxVersions: 3, Reversed: reversed, Batch: batch % 4}
		var sr pb.ScanResponse
		_ = call(t, fmt.Sprintf("a scan with filter %v", &flt), pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: scan, NumberOfRows: 100}, &sr)
		closeScanner(t, sr.GetScannerId())
		_ = call(t, fmt.Sprintf("a get with filter %v", &flt), pb.Method_METHOD_GET, &pb.GetRequest{Region: region, Get: &pb.Get{Row: []byte("c"), Filter: &flt, MaxVersions: 3}}, &pb.GetResponse{})

		var plain pb.ScanResponse
		if err := call(t, "a plain scan", pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: &pb.Scan{}, NumberOfRows: 100}, &plain); err != nil || len(plain.GetCellsPerResult()) != 8 {
			t.Fatalf("a plain scan after filter %v: %d rows, %v", &flt, len(plain.GetCellsPerResult()), err)
		}
		closeScanner(t, plain.GetScannerId())
		var get pb.GetResponse
		if err := call(t, "a plain get", pb.Method_METHOD_GET, &pb.GetRequest{Region: region, Get: &pb.Get{Row: []byte("c")}}, &get); err != nil || get.GetResult().GetCellCount() != 4 {
			t.Fatalf("a plain get after filter %v: %d cells, %v", &flt, get.GetResult().GetCellCount(), err)
		}
	})
}
