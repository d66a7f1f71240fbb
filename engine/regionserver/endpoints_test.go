package regionserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
)

func longValue(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func putAll(t *testing.T, tbl *client.Table, ms []*client.Mutation) {
	t.Helper()
	ops := make([]client.BatchOp, len(ms))
	for i, m := range ms {
		ops[i] = client.BatchOp{Mutation: m}
	}
	for i, r := range tbl.Batch(context.Background(), ops) {
		if r.Err != nil {
			t.Fatalf("put %d: %v", i, r.Err)
		}
	}
}

// Aggregations over a table of four regions, checked against the same arithmetic done here.
func TestAggregationEndpoint(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "agg", [][]byte{rowKey(2500), rowKey(5000), rowKey(7500)})
	tbl := c.client.Table("agg")
	const rows = 10000
	var ms []*client.Mutation
	longs := map[int]int64{}
	for i := range rows {
		v := int64((i*7919)%10007) - 5000
		longs[i] = v
		m := client.NewPut(rowKey(i)).Add("f", "n", cell.LatestTimestamp, longValue(v)).
			Add("f", "d", cell.LatestTimestamp, binary.BigEndian.AppendUint64(nil, math.Float64bits(float64(v)/4)))
		if i%100 == 0 {
			m.Add("f", "n", 5, []byte("not a long")) // an older version, hidden by the newest
		}
		if i%1000 == 1 {
			m = client.NewPut(rowKey(i)).Add("f", "n", cell.LatestTimestamp, []byte("short"))
			delete(longs, i)
		}
		ms = append(ms, m)
	}
	putAll(t, tbl, ms)
	column := func(q string) []*pb.Column {
		return []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte(q)}}}
	}

	check := func(name string, scan *pb.Scan, in func(i int) bool) {
		t.Helper()
		var want []int64
		var sum int64
		rowsWanted := 0
		for i := range rows {
			if !in(i) {
				continue
			}
			rowsWanted++
			if v, ok := longs[i]; ok {
				want = append(want, v)
				sum += v
			}
		}
		slices.Sort(want)
		tot, err := tbl.Aggregate(ctx, scan, pb.ValueType_VALUE_TYPE_LONG)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tot.Rows != int64(rowsWanted) || tot.Values != int64(len(want)) || tot.Skipped != int64(rowsWanted-len(want)) || tot.Sum().Long != sum {
			t.Fatalf("%s: rows %d values %d skipped %d sum %d; want %d %d %d %d", name, tot.Rows, tot.Values, tot.Skipped, tot.Sum().Long,
				rowsWanted, len(want), rowsWanted-len(want), sum)
		}
		mn, _ := tot.Min()
		mx, _ := tot.Max()
		if mn.Long != want[0] || mx.Long != want[len(want)-1] {
			t.Fatalf("%s: min %d max %d, want %d %d", name, mn.Long, mx.Long, want[0], want[len(want)-1])
		}
		if avg := float64(sum) / float64(len(want)); math.Abs(tot.Avg()-avg) > 1e-9 {
			t.Fatalf("%s: avg %v, want %v", name, tot.Avg(), avg)
		}
		med, ok, err := tbl.Median(ctx, scan, pb.ValueType_VALUE_TYPE_LONG)
		wantMed := float64(want[(len(want)-1)/2])
		if len(want)%2 == 0 {
			wantMed = (float64(want[len(want)/2-1]) + float64(want[len(want)/2])) / 2
		}
		if err != nil || !ok || med != wantMed {
			t.Fatalf("%s: median %v %v %v, want %v", name, med, ok, err, wantMed)
		}
		// Doubles: the same values divided by 4.
		dscan := proto.CloneOf(scan)
		dscan.Columns = column("d")
		dt, err := tbl.Aggregate(ctx, dscan, pb.ValueType_VALUE_TYPE_DOUBLE)
		if err != nil {
			t.Fatalf("%s doubles: %v", name, err)
		}
		wantDoubles := 0
		var dsum float64
		for i := range rows {
			if in(i) && i%1000 != 1 {
				wantDoubles++
				dsum += float64((i*7919)%10007-5000) / 4
			}
		}
		if dt.Values != int64(wantDoubles) || dt.Sum().Double != dsum {
			t.Fatalf("%s doubles: %d values summing to %v, want %d and %v", name, dt.Values, dt.Sum().Double, wantDoubles, dsum)
		}
	}
	check("whole table", &pb.Scan{Columns: column("n")}, func(int) bool { return true })
	check("range across regions", &pb.Scan{Columns: column("n"), StartRow: rowKey(2000), StopRow: rowKey(8000)},
		func(i int) bool { return i >= 2000 && i < 8000 })
	check("range with the stop row included", &pb.Scan{Columns: column("n"), StartRow: rowKey(2400), StopRow: rowKey(5000), IncludeStopRow: true},
		func(i int) bool { return i >= 2400 && i <= 5000 })
	check("filtered", &pb.Scan{Columns: column("n"), Filter: &pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte("row03")}}}},
		func(i int) bool { return i >= 3000 && i < 4000 })

	// Bad requests get clear errors.
	for _, bad := range []*pb.Scan{{}, {Columns: []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte("a"), []byte("b")}}}}} {
		if _, err := tbl.Aggregate(ctx, bad, pb.ValueType_VALUE_TYPE_LONG); err == nil {
			t.Fatalf("aggregation of %v accepted", bad)
		}
	}
	_, conn := locate(t, c, "agg", rowKey(0))
	regionName, _ := locate(t, c, "agg", rowKey(0))
	for _, req := range []*pb.AggregateRequest{
		{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{Columns: column("n"), Reversed: true}},
		{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{Columns: column("n")}, ValueType: 9},
		{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{Columns: column("n")}, Histogram: &pb.Histogram{Lo: 1, Buckets: 1 << 20}},
		{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{Columns: []*pb.Column{{Family: []byte("nope")}}}},
	} {
		_, err := conn.Call(ctx, pb.Method_METHOD_AGGREGATE, req, nil, &pb.AggregateResponse{}, nil)
		d, ok := pb.DetailOf(err)
		if !ok || d.GetRetryable() || (d.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT && d.GetCode() != pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY) {
			t.Fatalf("aggregate %v: %v, want a refusal", req, err)
		}
	}

	// A call whose budget ran out says where to go on, and going on from there reads every row once.
	r := c.regionOnAny(regionName)
	var rowsRead int
	var calls int
	var from []byte
	for {
		rs, err := r.Scanner(&region.Scan{StartRow: from, Columns: []region.Column{{Family: []byte("f"), Qualifier: []byte("n")}}, Caching: 300})
		if err != nil {
			t.Fatal(err)
		}
		resume, d, err := scanFor(rs, from, time.Now().Add(-time.Second), func(res *region.Result) *pb.ErrorDetail {
			rowsRead++
			return nil
		})
		rs.Close()
		if err != nil || d != nil {
			t.Fatal(err, d)
		}
		calls++
		if resume == nil {
			break
		}
		from = resume
	}
	if rowsRead != 2500 || calls < 8 {
		t.Fatalf("resumed scans read %d rows in %d calls, want 2500 rows in at least 8 calls of 300", rowsRead, calls)
	}
}

// regionOnAny is the open region named name, wherever it is.
func (c *cluster) regionOnAny(name string) *region.Region {
	for _, s := range c.servers {
		if r := c.regionOn(s.Name(), name); r != nil {
			return r
		}
	}
	c.t.Fatalf("region %s is open nowhere", name)
	return nil
}

// Bulk deletes of each kind, and one that goes on while its regions move.
func TestBulkDeleteEndpoint(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: client.ParseTableName("bd"), Families: []*pb.ColumnFamilyDescriptor{
		{Name: []byte("f"), MaxVersions: 5}, {Name: []byte("g"), MaxVersions: 5}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{[]byte("m")}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("bd", 2, "", 30*time.Second)
	tbl := c.client.Table("bd")
	var ms []*client.Mutation
	for _, p := range []string{"a", "del", "keep", "x"} {
		for i := range 200 {
			row := fmt.Appendf(nil, "%s%04d", p, i)
			ms = append(ms, client.NewPut(row).Add("f", "a", 10, []byte("a10")).Add("f", "a", 20, []byte("a20")).
				Add("f", "b", 10, []byte("b")).Add("g", "c", 10, []byte("c")))
		}
	}
	putAll(t, tbl, ms)
	prefix := func(p string) *pb.Filter {
		return &pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte(p)}}}
	}
	count := func(s *pb.Scan) (rows, cells int) {
		sc := tbl.Scan(ctx, s)
		defer sc.Close()
		for {
			r, ok := sc.Next()
			if !ok {
				break
			}
			rows++
			cells += len(r.Cells)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return
	}
	// ROW: every row the filter matches, whole, in batches of 7 rows.
	res, err := tbl.BulkDelete(ctx, &pb.Scan{Filter: prefix("del")}, pb.BulkDeleteRequest_DELETE_TYPE_ROW, client.BulkDeleteOptions{RowsPerBatch: 7})
	if err != nil || res.Rows != 200 {
		t.Fatalf("bulk delete of rows: %+v %v", res, err)
	}
	if n, _ := count(&pb.Scan{Filter: prefix("del")}); n != 0 {
		t.Fatalf("%d deleted rows still read", n)
	}
	if n, cells := count(&pb.Scan{MaxVersions: 5}); n != 600 || cells != 600*4 {
		t.Fatalf("other rows: %d rows %d cells, want 600 and 2400", n, cells)
	}
	// COLUMN: f:a (both versions) of the a rows; f:b and g stay.
	res, err = tbl.BulkDelete(ctx, &pb.Scan{StartRow: []byte("a"), StopRow: []byte("b"), Columns: []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte("a")}}}},
		pb.BulkDeleteRequest_DELETE_TYPE_COLUMN, client.BulkDeleteOptions{})
	if err != nil || res.Rows != 200 {
		t.Fatalf("bulk delete of columns: %+v %v", res, err)
	}
	if n, cells := count(&pb.Scan{StartRow: []byte("a"), StopRow: []byte("b"), MaxVersions: 5}); n != 200 || cells != 400 {
		t.Fatalf("after the column delete: %d rows %d cells, want 200 and 400", n, cells)
	}
	// VERSION: the versions a time range reads (f:a@10 of the keep rows), nothing newer.
	res, err = tbl.BulkDelete(ctx, &pb.Scan{StartRow: []byte("keep"), StopRow: []byte("keeq"), MaxVersions: 5, TimeRange: &pb.TimeRange{From: 10, To: 11},
		Columns: []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte("a")}}}}, pb.BulkDeleteRequest_DELETE_TYPE_VERSION, client.BulkDeleteOptions{})
	if err != nil || res.Rows != 200 || res.Versions != 200 {
		t.Fatalf("bulk delete of versions: %+v %v", res, err)
	}
	r, err := tbl.Get(ctx, &pb.Get{Row: []byte("keep0007"), MaxVersions: 5, Columns: []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte("a")}}}})
	if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != "a20" {
		t.Fatalf("keep0007 f:a after the version delete: %v %v", r, err)
	}
	// FAMILY: the families the scan reads (g) of the x rows.
	res, err = tbl.BulkDelete(ctx, &pb.Scan{StartRow: []byte("x"), Columns: []*pb.Column{{Family: []byte("g")}}}, pb.BulkDeleteRequest_DELETE_TYPE_FAMILY, client.BulkDeleteOptions{})
	if err != nil || res.Rows != 200 {
		t.Fatalf("bulk delete of families: %+v %v", res, err)
	}
	if n, cells := count(&pb.Scan{StartRow: []byte("x"), MaxVersions: 5}); n != 200 || cells != 600 {
		t.Fatalf("after the family delete: %d rows %d cells, want 200 and 600", n, cells)
	}

	// While both regions move back and forth, a bulk delete of 4,000 rows in small batches still
	// deletes every one of them and nothing else.
	ms = ms[:0]
	for i := range 4000 {
		p := "bulk"
		if i%2 == 1 {
			p = "stay" // stays on the other side of the split row "m": both regions work
		}
		ms = append(ms, client.NewPut(fmt.Appendf(nil, "%s%05d", p, i)).Add("f", "a", cell.LatestTimestamp, []byte("v")))
	}
	putAll(t, tbl, ms)
	stop := make(chan struct{})
	var moves atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			locs, err := c.fetchRegions("bd")
			open := err == nil && len(locs) == 2
			for _, l := range locs {
				open = open && l.GetState() == pb.RegionState_REGION_STATE_OPEN
			}
			if !open {
				time.Sleep(10 * time.Millisecond) // polling the master until the last move is done
				continue
			}
			l := locs[i%len(locs)]
			dst := c.servers[0]
			if layout.ServerName(l.GetServer()) == dst.Name() {
				dst = c.servers[1]
			}
			if c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
				_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: l.GetRegion().GetName(), Destination: dst.Name()})
				return err
			}) == nil {
				moves.Add(1)
			}
		}
	}()
	var during int64
	for round := 0; ; round++ {
		before := moves.Load()
		// One row per batch: every batch is a WAL sync, so the delete takes long enough for moves.
		res, err = tbl.BulkDelete(ctx, &pb.Scan{Filter: &pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte("bulk")}}}},
			pb.BulkDeleteRequest_DELETE_TYPE_ROW, client.BulkDeleteOptions{RowsPerBatch: 1})
		if err != nil || res.Rows != 2000 {
			t.Fatalf("bulk delete during moves: %+v %v, want 2000 rows (a call a move cut short says what it did)", res, err)
		}
		if during = moves.Load() - before; during >= 1 {
			break
		}
		if round > 20 {
			t.Fatal("no region move completed during 20 bulk deletes")
		}
		// Not enough moves happened during the delete yet: put the rows back and go again.
		putAll(t, tbl, ms)
	}
	close(stop)
	wg.Wait()
	if n, _ := count(&pb.Scan{Filter: prefix("bulk")}); n != 0 {
		t.Fatalf("%d rows the bulk delete matched are still there", n)
	}
	if n, _ := count(&pb.Scan{Filter: prefix("stay")}); n != 2000 {
		t.Fatalf("%d of the 2000 rows it did not match are left", n)
	}
	t.Logf("last bulk delete: %+v, %d moves during it", res, during)
}

// Atomic multi-row mutations, and a table whose split policy keeps a row prefix together while
// readers check that no batch is ever seen half applied, across flushes and splits.
func TestMultiRowMutationsAndKeyPrefixSplits(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: client.ParseTableName("mr"), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}},
		Attributes: map[string]string{region.SplitPolicyAttribute: "org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy",
			region.KeyPrefixLengthAttribute: "4"}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{[]byte("g050")}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("mr", 2, "", 30*time.Second)
	tbl := c.client.Table("mr")
	group := func(g, i int) []byte { return fmt.Appendf(nil, "g%03d-%d", g, i) }
	put := func(row []byte, v string) *client.Mutation {
		return client.NewPut(row).Add("f", "v", cell.LatestTimestamp, []byte(v))
	}
	// Applied together; a failed condition applies nothing; a condition on another row counts.
	if ok, err := tbl.MutateRows(ctx, nil, put(group(1, 0), "x"), put(group(1, 1), "x"), client.NewDelete(group(1, 2))); err != nil || !ok {
		t.Fatalf("MutateRows: %v %v", ok, err)
	}
	cond := &pb.Condition{Row: group(1, 0), Family: []byte("f"), Qualifier: []byte("v"), Op: pb.CompareOp_COMPARE_OP_EQUAL,
		Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte("nope")}}}
	if ok, err := tbl.MutateRows(ctx, []*pb.Condition{cond}, put(group(1, 1), "y"), put(group(1, 3), "y")); err != nil || ok {
		t.Fatalf("MutateRows under a false condition: %v %v", ok, err)
	}
	cond.Comparator = &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte("x")}}
	if ok, err := tbl.MutateRows(ctx, []*pb.Condition{cond}, put(group(1, 1), "z"), put(group(1, 3), "z")); err != nil || !ok {
		t.Fatalf("MutateRows under a true condition: %v %v", ok, err)
	}
	for i, want := range []string{"x", "z", "", "z"} {
		r, err := tbl.Get(ctx, &pb.Get{Row: group(1, i)})
		if err != nil || string(r.Value("f", "v")) != want {
			t.Fatalf("row %s: %v %v, want %q", group(1, i), r, err, want)
		}
	}
	// Rows of two regions, or a mutation the region refuses: nothing is applied.
	_, err := tbl.MutateRows(ctx, nil, put(group(2, 0), "a"), put(group(60, 0), "a"))
	wantCode(t, "rows of two regions", err, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION)
	_, err = tbl.MutateRows(ctx, []*pb.Condition{{Row: group(60, 0), Family: []byte("f"), Qualifier: []byte("v"), Op: pb.CompareOp_COMPARE_OP_EQUAL}},
		put(group(2, 0), "a"))
	wantCode(t, "a condition on a row of another region", err, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION)
	_, err = tbl.MutateRows(ctx, nil, put(group(2, 0), "a"), client.NewPut(group(2, 1)).Add("nofamily", "v", cell.LatestTimestamp, nil))
	wantCode(t, "a mutation of an unknown family", err, pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY)
	if r, err := tbl.Get(ctx, &pb.Get{Row: group(2, 0)}); err != nil || len(r.Cells) != 0 {
		t.Fatalf("a refused batch left %v (%v)", r, err)
	}

	// The model: groups of 4 rows always written together with one value; readers scan a group
	// and must see one value on every row (or none yet).
	const groups, perGroup = 100, 4
	var stop atomic.Bool
	var failed atomic.Value
	var writes, reads atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				g := (n*7 + w*13) % groups
				v := fmt.Sprintf("w%d-%d-%s", w, n, bytes.Repeat([]byte("p"), 200))
				var batch []*client.Mutation
				for i := range perGroup {
					batch = append(batch, put(group(g, i), v))
				}
				if _, err := tbl.MutateRows(ctx, nil, batch...); err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("write group %d: %w", g, err))
					return
				}
				writes.Add(1)
			}
		}()
	}
	for rd := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				g := (n*11 + rd*5) % groups
				sc := tbl.Scan(ctx, &pb.Scan{StartRow: fmt.Appendf(nil, "g%03d-", g), StopRow: fmt.Appendf(nil, "g%03d.", g)})
				var vals []string
				for {
					r, ok := sc.Next()
					if !ok {
						break
					}
					vals = append(vals, string(r.Value("f", "v")))
				}
				err := sc.Err()
				sc.Close()
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("read group %d: %w", g, err))
					return
				}
				if g == 1 || g == 2 {
					continue // written above
				}
				if len(vals) != 0 && (len(vals) != perGroup || len(slices.Compact(slices.Clone(vals))) != 1) {
					failed.CompareAndSwap(nil, fmt.Errorf("group %d read half written: %q", g, vals))
					return
				}
				reads.Add(1)
			}
		}()
	}
	// Flushes and splits (asked at rows inside a group: the policy cuts them to the group's prefix).
	// The last split names no row: the middle row of the region's files, cut the same way.
	splitAt := [][]byte{group(25, 2), group(75, 3), group(12, 1), nil}
	for i, row := range splitAt {
		// A split with no row needs a middle row that is not the first of the region's largest
		// file: while its flushed files are one block each, there is none, and the split is
		// refused. Then more writes and a flush, until a deadline.
		for deadline := time.Now().Add(60 * time.Second); ; {
			writes.Store(0)
			waitFor(t, "some writes between splits", 30*time.Second, func() bool { return writes.Load() > 50 || failed.Load() != nil })
			for _, s := range c.servers {
				for _, name := range s.OnlineRegions() {
					if r := c.regionOn(s.Name(), name); r != nil {
						if _, err := r.Flush(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			at := row
			if at == nil {
				at = group(90, 0)
			}
			regionName, _ := locate(t, c, "mr", at)
			err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
				_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: regionName, SplitKey: row})
				return err
			})
			if err == nil {
				break
			}
			if row != nil || !strings.Contains(err.Error(), "is its first row") || time.Now().After(deadline) {
				t.Fatalf("split %d at %q: %v", i, row, err)
			}
		}
		writes.Store(0)
	}
	waitFor(t, "writes after the last split", 30*time.Second, func() bool { return writes.Load() > 50 || failed.Load() != nil })
	stop.Store(true)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	locs := c.waitOpen("mr", 6, "", 30*time.Second)
	var bounds []string
	for _, l := range locs {
		if k := l.GetRegion().GetStartKey(); len(k) > 0 {
			bounds = append(bounds, string(k))
		}
	}
	slices.Sort(bounds)
	if len(bounds) != 5 || !slices.Equal(bounds[:4], []string{"g012", "g025", "g050", "g075"}) || len(bounds[4]) != 4 || bounds[4] <= "g075" {
		t.Fatalf("region boundaries %q, want g012 g025 g050 g075 and a 4-byte one after (split rows cut to 4-byte prefixes)", bounds)
	}
	t.Logf("%d reads checked", reads.Load())

	// A split policy the master does not know, or without its setting, is refused at creation.
	for _, attrs := range []map[string]string{
		{region.SplitPolicyAttribute: "com.example.MySplitPolicy"},
		{region.SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy"},
		{region.SplitPolicyAttribute: "KeyPrefixRegionSplitPolicy", region.KeyPrefixLengthAttribute: "-1"},
		{region.SplitPolicyAttribute: "DelimitedKeyPrefixRegionSplitPolicy"},
	} {
		td := &pb.TableDescriptor{Name: client.ParseTableName("bad"), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}, Attributes: attrs}
		_, err := c.client.CreateTable(ctx, td, nil)
		wantCode(t, fmt.Sprint("create with ", attrs), err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	}
}

// RowMutations, plain and conditional (a column check or a filter), inside a batch across
// regions: each applied atomically, as its own region action, with Processed telling whether
// its condition held.
func TestBatchWithRowMutations(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "brm", [][]byte{[]byte("m")})
	tbl := c.client.Table("brm")
	putAll(t, tbl, []*client.Mutation{
		client.NewPut([]byte("a")).Add("f", "x", cell.LatestTimestamp, []byte("old")).Add("f", "gone", cell.LatestTimestamp, []byte("1")),
		client.NewPut([]byte("z")).Add("f", "x", cell.LatestTimestamp, []byte("old")),
	})
	rm := func(row, v string) []*client.Mutation {
		return []*client.Mutation{client.NewPut([]byte(row)).Add("f", "x", cell.LatestTimestamp, []byte(v)),
			client.NewDelete([]byte(row)).AddMarker(cell.DeleteColumn, "f", "gone", cell.LatestTimestamp)}
	}
	valueIs := func(v string) *pb.Filter {
		return &pb.Filter{Filter: &pb.Filter_SingleColumnValue{SingleColumnValue: &pb.SingleColumnValueFilter{Family: []byte("f"),
			Qualifier: []byte("x"), Op: pb.CompareOp_COMPARE_OP_EQUAL, Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte(v)}},
			FilterIfMissing: true}}}
	}
	ops := []client.BatchOp{
		{Mutation: client.NewPut([]byte("b")).Add("f", "x", cell.LatestTimestamp, []byte("plain"))},
		{RowMutations: rm("a", "new")},
		{RowMutations: rm("n", "cond"), Condition: &pb.Condition{Family: []byte("f"), Qualifier: []byte("x"), Op: pb.CompareOp_COMPARE_OP_EQUAL}},
		{RowMutations: rm("z", "filtered"), Condition: &pb.Condition{Filter: valueIs("old")}},
		{RowMutations: rm("y", "never"), Condition: &pb.Condition{Filter: valueIs("old")}},
		{Get: &pb.Get{Row: []byte("z")}},
		{RowMutations: []*client.Mutation{client.NewPut([]byte("c")), client.NewPut([]byte("d"))}},
		{Condition: &pb.Condition{Filter: valueIs("x")}},
	}
	ops[6].RowMutations[0].Add("f", "x", cell.LatestTimestamp, nil)
	ops[6].RowMutations[1].Add("f", "x", cell.LatestTimestamp, nil)
	res := tbl.Batch(ctx, ops)
	for i, want := range []bool{false, true, true, true, false} {
		if res[i].Err != nil || (i > 0 && res[i].Processed != want) {
			t.Fatalf("op %d: %+v, want processed %v", i, res[i], want)
		}
	}
	if res[6].Err == nil || res[7].Err == nil {
		t.Fatalf("RowMutations of two rows and a condition without mutations were accepted: %v, %v", res[6].Err, res[7].Err)
	}
	for row, want := range map[string]string{"a": "new", "b": "plain", "n": "cond", "z": "filtered", "y": ""} {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(row)})
		if err != nil || string(r.Value("f", "x")) != want || r.Value("f", "gone") != nil {
			t.Fatalf("row %s: %v %v, want f:x=%q and no f:gone", row, r, err, want)
		}
	}
}

// A user quota follows the tenant's requests: the server holding the tenant's only region gets
// the whole of it from the master, the others none (an even split gave it a third).
func TestQuotaSharesFollowTheTenant(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	createTable(t, c, "qs", nil)
	regionName, _ := locate(t, c, "qs", []byte("a"))
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "tenant"},
			Type: pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER, Limit: 1000, TimeUnitSeconds: 1}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var holder *Server
	for _, s := range c.servers {
		if c.regionOn(s.Name(), regionName) != nil {
			holder = s
		}
	}
	conn, err := rpc.Dial(ctx, holder.DataAddr(), rpc.ClientOptions{User: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	key := quota.ShareKey(quota.SubjectID(quota.SubjectUser, "tenant"), false)
	waitForState(t, "the holder's share of the tenant's quota", 20*time.Second, func() (bool, string) {
		// Keep the tenant writing: its demand is what the shares follow.
		for range 5 {
			_, _ = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
				Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte("a"), CellCount: 1}},
				cell.AppendKeyValue(nil, []byte("a"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte("v")), &pb.MutateResponse{}, nil)
		}
		state := ""
		ok := true
		for _, s := range c.servers {
			f, has := s.limiters.Shares()[key]
			state += fmt.Sprintf(" %s=%.3f(%v)", s.Name(), f, has)
			if s == holder {
				ok = ok && has && f > 0.99
			} else {
				ok = ok && has && f < 0.01
			}
		}
		return ok, state
	})
}

// The master's FlushCompact (the shell's flush, compact and major_compact) flushes or compacts
// every open region of a table through their servers, or one region.
func TestFlushCompactThroughTheMaster(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "fc", [][]byte{[]byte("m")})
	tbl := c.client.Table("fc")
	call := func(req *pb.FlushCompactRequest) (*pb.FlushCompactResponse, error) {
		var resp *pb.FlushCompactResponse
		err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			var err error
			resp, err = m.FlushCompact(ctx, req)
			return err
		})
		return resp, err
	}
	regions := func() []*region.Region {
		var out []*region.Region
		for _, s := range c.servers {
			for _, name := range s.OnlineRegions() {
				out = append(out, c.regionOn(s.Name(), name))
			}
		}
		return out
	}
	for round := range 2 {
		putAll(t, tbl, []*client.Mutation{
			client.NewPut([]byte("a")).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", round)),
			client.NewPut([]byte("z")).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", round)),
		})
		resp, err := call(&pb.FlushCompactRequest{Table: client.ParseTableName("fc")})
		if err != nil || resp.GetRegions() != 2 {
			t.Fatalf("flush round %d: %v %v", round, resp, err)
		}
	}
	for _, r := range regions() {
		if r.MemstoreStats().DataBytes != 0 || r.StoreFileCount()["f"] != 2 {
			t.Fatalf("region %s after two flushes: memstore %d bytes, files %v", r.Name(), r.MemstoreStats().DataBytes, r.StoreFileCount())
		}
	}
	one := regions()[0]
	resp, err := call(&pb.FlushCompactRequest{Region: one.Name(), Kind: pb.FlushCompactRequest_KIND_MAJOR_COMPACT})
	if err != nil || resp.GetRegions() != 1 {
		t.Fatalf("major compaction of %s: %v %v", one.Name(), resp, err)
	}
	for _, r := range regions() {
		want := 2
		if r.Name() == one.Name() {
			want = 1
		}
		if got := r.StoreFileCount()["f"]; got != want {
			t.Fatalf("region %s holds %d files, want %d", r.Name(), got, want)
		}
	}
	if resp, err := call(&pb.FlushCompactRequest{Table: client.ParseTableName("fc"), Kind: pb.FlushCompactRequest_KIND_MAJOR_COMPACT}); err != nil || resp.GetRegions() != 2 {
		t.Fatalf("major compaction of the table: %v %v", resp, err)
	}
	for _, bad := range []*pb.FlushCompactRequest{
		{},
		{Table: client.ParseTableName("fc"), Region: one.Name()},
		{Region: "00000000000000ff"},
		{Table: client.ParseTableName("nope")},
		{Table: client.ParseTableName("fc"), Kind: 7},
	} {
		if _, err := call(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	if r, err := tbl.Get(ctx, &pb.Get{Row: []byte("z")}); err != nil || string(r.Value("f", "q")) != "v1" {
		t.Fatalf("after the compactions: %v %v", r, err)
	}
}

// A row wider than an endpoint call's time budget: the call that could not finish it in time
// reads on rather than answer its own start row as where to resume, which the next call would
// start at and time out in again, for ever (the client gave up: "resume row is not past").
func TestEndpointCallFinishesARowWiderThanItsBudget(t *testing.T) {
	c := startCluster(t, 1)
	createTable(t, c, "wide", nil)
	regionName, _ := locate(t, c, "wide", []byte("w"))
	r := c.regionOnAny(regionName)
	const cells = 20000
	for batch := range cells / 1000 {
		m := region.NewMutation([]byte("w"))
		for i := range 1000 {
			m.Put([]byte("f"), []byte(fmt.Sprintf("q%06d", batch*1000+i)), 1, []byte("v"))
		}
		if err := r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Mutate(region.NewMutation([]byte("x")).Put([]byte("f"), []byte("q"), 1, []byte("v"))); err != nil {
		t.Fatal(err)
	}
	var from []byte = []byte("w")
	var rows []string
	for calls := 0; ; calls++ {
		if calls > 10 {
			t.Fatalf("no end after %d calls (resuming at %q)", calls, from)
		}
		// A budget that runs out within the first row: its scanner stops mid-row with a cursor.
		rs, err := r.Scanner(&region.Scan{StartRow: from, TimeLimit: time.Microsecond, Caching: 1000})
		if err != nil {
			t.Fatal(err)
		}
		resume, d, err := scanFor(rs, from, time.Now().Add(-time.Second), func(res *region.Result) *pb.ErrorDetail {
			rows = append(rows, fmt.Sprintf("%s:%d", res.Row, len(res.Cells)))
			return nil
		})
		rs.Close()
		if err != nil || d != nil {
			t.Fatal(err, d)
		}
		if resume == nil {
			break
		}
		if bytes.Equal(resume, from) {
			t.Fatalf("the call started at %q answers it as where to resume: no progress", from)
		}
		from = resume
	}
	if want := []string{fmt.Sprintf("w:%d", cells), "x:1"}; !slices.Equal(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
}
