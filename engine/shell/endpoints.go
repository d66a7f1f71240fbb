package shell

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
)

// prefixEnd is the first row after every row starting with p (empty: no end).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (s *Shell) aggregate(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	col, err := str(args, 1, "column")
	if err != nil {
		return err
	}
	f, q, err := column(col)
	if err != nil {
		return err
	}
	h, err := optHash(args, 2)
	if err != nil {
		return err
	}
	vt, median := pb.ValueType_VALUE_TYPE_LONG, false
	var bad error
	sc, err := scanFromHash(h, "aggregate", func(k string, v Value) bool {
		switch k {
		case "TYPE":
			switch strings.ToLower(v.Text()) {
			case "long":
				vt = pb.ValueType_VALUE_TYPE_LONG
			case "double":
				vt = pb.ValueType_VALUE_TYPE_DOUBLE
			default:
				bad = usage("aggregate TYPE is 'long' or 'double', not %s", v)
			}
			return true
		case "MEDIAN":
			median = boolOf(v)
			return true
		case "COLUMNS", "COLUMN", "LIMIT", "REVERSED", "RAW":
			bad = usage("aggregate reads the one column it is given, forward, with no row limit: it does not take %s", k)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	sc.Columns = []*pb.Column{{Family: []byte(f)}}
	if q != "" || strings.Contains(col, ":") {
		sc.Columns[0].Qualifiers = [][]byte{[]byte(q)}
	}
	tbl := s.Client.Table(t)
	tot, err := tbl.Aggregate(ctx, sc, vt)
	if err != nil {
		return err
	}
	tb := newTable(s.Out, "AGGREGATE", "VALUE")
	tb.row("rows", fmt.Sprint(tot.Rows))
	tb.row("values", fmt.Sprint(tot.Values))
	if tot.Skipped > 0 {
		tb.row("skipped (not 8 bytes)", fmt.Sprint(tot.Skipped))
	}
	tb.row("sum", tot.Sum().String())
	if mn, ok := tot.Min(); ok {
		mx, _ := tot.Max()
		tb.row("min", mn.String())
		tb.row("max", mx.String())
		tb.row("avg", fmt.Sprint(tot.Avg()))
		tb.row("std", fmt.Sprint(tot.Std()))
		if median {
			m, _, err := tbl.Median(ctx, sc, vt)
			if err != nil {
				return err
			}
			tb.row("median", fmt.Sprint(m))
		}
	}
	tb.done()
	return nil
}

func (s *Shell) bulkDelete(ctx context.Context, args []Value) error {
	t, err := str(args, 0, "table")
	if err != nil {
		return err
	}
	if len(args) != 2 || args[1].Kind != Hash {
		return usage("bulk_delete takes a table and a {DELETE_TYPE => ..., scan options} hash")
	}
	typ := pb.BulkDeleteRequest_DELETE_TYPE_ROW
	var o client.BulkDeleteOptions
	var bad error
	sc, err := scanFromHash(args[1], "bulk_delete", func(k string, v Value) bool {
		switch k {
		case "DELETE_TYPE":
			n, ok := pb.BulkDeleteRequest_DeleteType_value["DELETE_TYPE_"+strings.ToUpper(v.Text())]
			if !ok {
				bad = usage("DELETE_TYPE is ROW, FAMILY, COLUMN or VERSION, not %s", v)
			}
			typ = pb.BulkDeleteRequest_DeleteType(n)
			return true
		case "TIMESTAMP":
			if v.Kind != Int || v.Int < 0 {
				bad = usage("TIMESTAMP takes a timestamp in ms, not %s", v)
			}
			ts := v.Int
			o.Timestamp = &ts
			return true
		case "BATCH":
			var n int32
			n, bad = int32Of(v, k)
			o.RowsPerBatch = n
			return true
		case "LIMIT", "REVERSED", "RAW":
			bad = usage("bulk_delete scans forward with no row limit: it does not take %s", k)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	res, err := s.Client.Table(t).BulkDelete(ctx, sc, typ, o)
	if err != nil {
		return err
	}
	if typ == pb.BulkDeleteRequest_DELETE_TYPE_VERSION {
		fmt.Fprintf(s.Out, "%d version(s) deleted in %d row(s)\n", res.Versions, res.Rows)
		return nil
	}
	if typ == pb.BulkDeleteRequest_DELETE_TYPE_ROW {
		fmt.Fprintf(s.Out, "%d row(s) deleted\n", res.Rows)
		return nil
	}
	fmt.Fprintf(s.Out, "deleted the matched %s in %d row(s)\n", map[pb.BulkDeleteRequest_DeleteType]string{
		pb.BulkDeleteRequest_DELETE_TYPE_FAMILY: "families", pb.BulkDeleteRequest_DELETE_TYPE_COLUMN: "columns"}[typ], res.Rows)
	return nil
}

// flushCompact is the flush, compact and major_compact verbs: a table's regions or one region,
// through the master.
func flushCompact(kind pb.FlushCompactRequest_Kind) func(*Shell, context.Context, []Value) error {
	verb := map[pb.FlushCompactRequest_Kind]string{pb.FlushCompactRequest_KIND_FLUSH: "flush",
		pb.FlushCompactRequest_KIND_COMPACT: "compact", pb.FlushCompactRequest_KIND_MAJOR_COMPACT: "major_compact"}[kind]
	return func(s *Shell, ctx context.Context, args []Value) error {
		target, err := str(args, 0, "table or region")
		if err != nil {
			return err
		}
		if len(args) > 1 {
			return usage("%s takes a table or a region (a column family cannot be named: every family is done)", verb)
		}
		req := &pb.FlushCompactRequest{Kind: kind}
		if isRegionName(target) {
			req.Region = target
		} else {
			req.Table = client.ParseTableName(target)
		}
		var resp *pb.FlushCompactResponse
		if err := s.master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			resp, err = m.FlushCompact(ctx, req)
			return err
		}); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "%s: %d region(s) done", verb, resp.GetRegions())
		if n := len(resp.GetSkipped()); n > 0 {
			fmt.Fprintf(s.Out, ", %d not open (in transition): %s", n, strings.Join(resp.GetSkipped(), ", "))
		}
		fmt.Fprintln(s.Out)
		return nil
	}
}
