package regionserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/storage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type cluster struct {
	t       testing.TB
	fs      storage.FS
	master  *mastertest.Master
	servers []*Server
	client  *client.Client
	tune    func(*Config)
}

func startCluster(t *testing.T, n int) *cluster { return startTunedCluster(t, n, nil) }

func startTunedCluster(t *testing.T, n int, tune func(*Config)) *cluster {
	t.Helper()
	return startClusterWith(t, n, tune, nil)
}

func startClusterWith(t testing.TB, n int, tune func(*Config), mtune func(*master.Config)) *cluster {
	t.Helper()
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lc := lease.Config{Lease: time.Second, HeartbeatInterval: 200 * time.Millisecond,
		SelfFenceMargin: 300 * time.Millisecond, DeadMargin: 300 * time.Millisecond}
	if os.Getenv("CELLSTORE_TEST_DEFAULT_LEASE") != "" { // measure recovery with production timing
		lc = lease.Default
	}
	mcfg := master.Config{FS: fs, Logger: quiet, BalancerInterval: -1, Lease: lc,
		RetryDelay: 100 * time.Millisecond, TickInterval: 50 * time.Millisecond}
	if mtune != nil {
		mtune(&mcfg)
	}
	m, err := mastertest.StartMaster(ctx, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.WaitActive(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, fs: fs, master: m, tune: tune}
	for range n {
		c.startServer()
	}
	cl, err := client.New(client.Config{Masters: []string{m.Addr}, OperationTimeout: 30 * time.Second,
		RPCTimeout: 5 * time.Second, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	c.client = cl
	return c
}

func (c *cluster) startServer() *Server {
	c.t.Helper()
	cfg := Config{FS: c.fs, Masters: []string{c.master.Addr}, DataAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		AdvertiseHost: "127.0.0.1", MemstoreBytes: 96 << 20, BlockCacheOffheap: 8 << 20, BlockCacheOnheap: 8 << 20,
		Logger: quiet, ScannerLease: 2 * time.Second}
	if c.tune != nil {
		c.tune(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { s.Abort() })
	c.servers = append(c.servers, s)
	return s
}

// fetchRegions asks the master for every region (and replica) of a table.
func (c *cluster) fetchRegions(table string) ([]*pb.RegionLocation, error) {
	var locs []*pb.RegionLocation
	err := c.client.Master(context.Background(), func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.GetTableRegions(ctx, &pb.TableRequest{Table: client.ParseTableName(table)})
		if err == nil {
			locs = resp.GetLocations()
		}
		return err
	})
	return locs, err
}

// waitOpen polls the master until every region of table is OPEN on a live server (not dead).
func (c *cluster) waitOpen(table string, want int, not string, timeout time.Duration) []*pb.RegionLocation {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		locs, err := c.fetchRegions(table)
		ok := err == nil && len(locs) == want
		for _, l := range locs {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN || l.GetServer() == nil || (not != "" && layout.ServerName(l.GetServer()) == not) {
				ok = false
			}
		}
		if ok {
			// The server lists it open once the master acknowledged its OPENED report.
			for _, l := range locs {
				if !c.serves(layout.ServerName(l.GetServer()), l.GetRegion().GetName()) {
					ok = false
				}
			}
		}
		if ok {
			return locs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("regions of %s not all open after %v: %v (err %v)", table, timeout, locs, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the master's state, not synchronising on time
	}
}

func rowKey(i int) []byte { return fmt.Appendf(nil, "row%05d", i) }

func TestClusterEndToEnd(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	const rows = 100000
	var splits [][]byte
	for i := 1; i < 8; i++ {
		splits = append(splits, rowKey(i*rows/8))
	}
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 3}}}
	if _, err := c.client.CreateTable(ctx, td, splits); err != nil {
		t.Fatal(err)
	}
	locs := c.waitOpen("t", 8, "", 30*time.Second)
	perServer := map[string]int{}
	for _, l := range locs {
		perServer[layout.ServerName(l.GetServer())]++
	}
	t.Logf("8 regions over servers: %v", perServer)
	tbl := c.client.Table("t")

	// Write 10k rows: batches, plus single puts for the first 100.
	start := time.Now()
	for i := 0; i < 100; i++ {
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for b := 100; b < rows; b += 500 {
		var ops []client.BatchOp
		for i := b; i < min(b+500, rows); i++ {
			ops = append(ops, client.BatchOp{Mutation: client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", i))})
		}
		for i, r := range tbl.Batch(ctx, ops) {
			if r.Err != nil {
				t.Fatalf("batch put %d: %v", b+i, r.Err)
			}
		}
	}
	t.Logf("wrote %d rows in %v", rows, time.Since(start))

	// Gets, single and batched.
	for _, i := range []int{0, 1, 1249, 1250, 5000, 9999} {
		r, err := tbl.Get(ctx, &pb.Get{Row: rowKey(i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Cells) != 1 || string(r.Cells[0].Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("get row %d: %v", i, r.Cells)
		}
	}
	var gets []client.BatchOp
	for i := 0; i < rows; i += 37 {
		gets = append(gets, client.BatchOp{Get: &pb.Get{Row: rowKey(i)}})
	}
	for j, r := range tbl.Batch(ctx, gets) {
		i := j * 37
		if r.Err != nil || r.Result == nil || len(r.Result.Cells) != 1 || string(r.Result.Cells[0].Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("batch get %d: %+v", i, r)
		}
	}

	// A batch mixing writes and reads over every region: a server runs the region actions of
	// such a multi at once, and each get still gets its own row's cells.
	var mixed []client.BatchOp
	for i := 0; i < rows; i += 101 {
		mixed = append(mixed, client.BatchOp{Get: &pb.Get{Row: rowKey(i)}},
			client.BatchOp{Mutation: client.NewPut(rowKey(i+1)).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", i+1))})
	}
	for j, r := range tbl.Batch(ctx, mixed) {
		if r.Err != nil {
			t.Fatalf("mixed batch op %d: %v", j, r.Err)
		}
		if j%2 == 0 {
			i := j / 2 * 101
			if r.Result == nil || len(r.Result.Cells) != 1 || string(r.Result.Cells[0].Value) != fmt.Sprintf("v%d", i) {
				t.Fatalf("mixed batch get of row %d: %+v", i, r.Result)
			}
		}
	}
	for i := 0; i < rows; i += 101 { // the puts wrote a second version of the same value
		if r, err := tbl.Get(ctx, &pb.Get{Row: rowKey(i + 1), MaxVersions: 2}); err != nil || len(r.Cells) != 2 {
			t.Fatalf("row %d after the mixed batch: %v %v", i+1, r, err)
		}
	}

	checkScan(t, tbl, rows, false)
	checkScan(t, tbl, rows, true)

	// A bounded scan with a filter inside one region and across regions.
	sc := tbl.Scan(ctx, &pb.Scan{StartRow: rowKey(1200), StopRow: rowKey(1300), Caching: 7,
		Filter: &pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte("row012")}}}})
	n := 0
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		if string(r.Row) < "row01200" || string(r.Row) >= "row01300" {
			t.Fatalf("filtered scan returned %q", r.Row)
		}
		n++
	}
	if sc.Err() != nil || n != 100 {
		t.Fatalf("filtered scan: %d rows, err %v", n, sc.Err())
	}

	testIncrementNonce(t, c, tbl)
	testCheckAndMutate(t, tbl)
	testRegionOrderInMulti(t, tbl, locs)
	testBadInput(t, c, tbl)

	// Crash one server and read every acknowledged write back.
	victim := c.servers[0]
	name := victim.Name()
	held := len(victim.OnlineRegions())
	killed := time.Now()
	victim.Abort()
	c.waitOpen("t", 8, name, 60*time.Second)
	recovery := time.Since(killed)
	checkScan(t, tbl, rows, false)
	t.Logf("RECOVERY: server %s holding %d regions aborted; all regions open elsewhere after %v; every row readable after %v",
		name, held, recovery, time.Since(killed))
	r, err := tbl.Get(ctx, &pb.Get{Row: []byte("counter")})
	if err != nil || len(r.Cells) != 1 || int64(binary.BigEndian.Uint64(r.Cells[0].Value)) != 5 {
		t.Fatalf("counter after recovery: %v %v", r, err)
	}
}

func checkScan(t *testing.T, tbl *client.Table, rows int, reversed bool) {
	t.Helper()
	s := &pb.Scan{Caching: 333, Reversed: reversed, StartRow: rowKey(0)} // every test row is at or after rowKey(0)
	if reversed {
		s.StartRow, s.StopRow = rowKey(rows-1), nil
	}
	sc := tbl.Scan(context.Background(), s)
	defer sc.Close()
	n := 0
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		want := n
		if reversed {
			want = rows - 1 - n
		}
		if string(r.Row) != string(rowKey(want)) || len(r.Cells) != 1 || string(r.Cells[0].Value) != fmt.Sprintf("v%d", want) {
			t.Fatalf("scan (reversed %v) result %d: row %q cells %v", reversed, n, r.Row, r.Cells)
		}
		n++
	}
	if sc.Err() != nil || n != rows {
		t.Fatalf("scan (reversed %v): %d rows, err %v", reversed, n, sc.Err())
	}
}

// locate returns the region name and data connection of row.
func locate(t testing.TB, c *cluster, table string, row []byte) (string, *rpc.Conn) {
	t.Helper()
	var loc *pb.RegionLocation
	err := c.client.Master(context.Background(), func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.LocateRegion(ctx, &pb.LocateRegionRequest{Table: client.ParseTableName(table), Row: row})
		if err == nil && len(resp.GetLocations()) > 0 {
			loc = resp.GetLocations()[0]
		}
		return err
	})
	if err != nil || loc == nil {
		t.Fatalf("locate: %v", err)
	}
	conn, err := rpc.Dial(context.Background(), layout.ServerName(loc.GetServer()), rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return loc.GetRegion().GetName(), conn
}

func testIncrementNonce(t *testing.T, c *cluster, tbl *client.Table) {
	ctx := context.Background()
	row := []byte("counter")
	regionName, conn := locate(t, c, "t", row)
	block := cell.AppendKeyValue(nil, row, []byte("f"), []byte("n"), cell.LatestTimestamp, cell.Put, binary.BigEndian.AppendUint64(nil, 5))
	req := &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName}, NonceGroup: 77,
		Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_INCREMENT, Row: row, CellCount: 1, Nonce: 4242, ReturnResults: true}}
	for i := 0; i < 2; i++ {
		var resp pb.MutateResponse
		cells, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, req, block, &resp, nil)
		if err != nil {
			t.Fatal(err)
		}
		kv, _, err := cell.ParseKeyValue(cells)
		if err != nil || resp.GetResult().GetCellCount() != 1 || int64(binary.BigEndian.Uint64(kv.Value())) != 5 {
			t.Fatalf("increment %d: %v %v", i, resp.GetResult(), err)
		}
	}
	r, err := tbl.Get(ctx, &pb.Get{Row: row})
	if err != nil || len(r.Cells) != 1 || int64(binary.BigEndian.Uint64(r.Cells[0].Value)) != 5 {
		t.Fatalf("increment with one nonce applied twice: %v %v", r, err)
	}
}

// testRegionOrderInMulti: a batch that writes to several regions has its regions written at once,
// but one region's actions keep their order — here a conditional RowMutations sent after a put of
// the same row (in a region action of its own) sees the put, every time.
func testRegionOrderInMulti(t *testing.T, tbl *client.Table, locs []*pb.RegionLocation) {
	ctx := context.Background()
	// Another region on the first region's server, so that both go in one multi.
	var first, other *pb.RegionLocation
	for _, l := range locs {
		if len(l.GetRegion().GetStartKey()) == 0 {
			first = l
		}
	}
	for _, l := range locs {
		if l != first && layout.ServerName(l.GetServer()) == layout.ServerName(first.GetServer()) {
			other = l
		}
	}
	if other == nil {
		t.Fatalf("no server holds two regions: %v", locs)
	}
	otherRow := other.GetRegion().GetStartKey()
	g, err := tbl.Get(ctx, &pb.Get{Row: otherRow})
	if err != nil || len(g.Cells) != 1 {
		t.Fatalf("row %q: %v %v", otherRow, g, err)
	}
	for i := range 20 {
		row := fmt.Appendf(nil, "order-%02d", i) // before every rowKey: the first region
		want := fmt.Appendf(nil, "x%d", i)
		cond := &pb.Condition{Family: []byte("f"), Qualifier: []byte("c"), Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: want}}}
		ops := []client.BatchOp{
			{Mutation: client.NewPut(row).Add("f", "c", cell.LatestTimestamp, want)},
			{RowMutations: []*client.Mutation{client.NewPut(row).Add("f", "d", cell.LatestTimestamp, []byte("seen"))}, Condition: cond},
			// A write to the other region (its value again), so the multi writes to two regions.
			{Mutation: client.NewPut(otherRow).Add("f", "q", cell.LatestTimestamp, g.Cells[0].Value)},
		}
		res := tbl.Batch(ctx, ops)
		for j, r := range res {
			if r.Err != nil {
				t.Fatalf("round %d op %d: %v", i, j, r.Err)
			}
		}
		if !res[1].Processed {
			t.Fatalf("round %d: the conditional RowMutations did not see the put before it in the batch", i)
		}
	}
}

func testCheckAndMutate(t *testing.T, tbl *client.Table) {
	ctx := context.Background()
	row := rowKey(42)
	cond := func(v string) *pb.Condition {
		return &pb.Condition{Row: row, Family: []byte("f"), Qualifier: []byte("q"), Op: pb.CompareOp_COMPARE_OP_EQUAL,
			Comparator: &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte(v)}}}
	}
	ok, err := tbl.CheckAndMutate(ctx, cond("nope"), client.NewPut(row).Add("f", "c", cell.LatestTimestamp, []byte("x")))
	if err != nil || ok {
		t.Fatalf("check-and-mutate with a false condition: %v %v", ok, err)
	}
	ok, err = tbl.CheckAndMutate(ctx, cond("v42"), client.NewPut(row).Add("f", "c", cell.LatestTimestamp, []byte("y")))
	if err != nil || !ok {
		t.Fatalf("check-and-mutate with a true condition: %v %v", ok, err)
	}
	r, err := tbl.Get(ctx, &pb.Get{Row: row, Columns: []*pb.Column{{Family: []byte("f"), Qualifiers: [][]byte{[]byte("c")}}}})
	if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != "y" {
		t.Fatalf("after check-and-mutate: %v %v", r, err)
	}
	// Ordering conditions read "expected op stored" whatever the comparator, as HBase's: a long
	// comparator used to be applied the other way round.
	ten := binary.BigEndian.AppendUint64(nil, 10)
	if err := tbl.Put(ctx, client.NewPut(row).Add("f", "n", cell.LatestTimestamp, ten)); err != nil {
		t.Fatal(err)
	}
	long := func(v int64) *pb.Comparator { return &pb.Comparator{Kind: &pb.Comparator_Long{Long: v}} }
	bin := func(v int64) *pb.Comparator {
		return &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: binary.BigEndian.AppendUint64(nil, uint64(v))}}
	}
	for _, tc := range []struct {
		op   pb.CompareOp
		cmp  *pb.Comparator
		want bool
	}{
		{pb.CompareOp_COMPARE_OP_LESS, long(5), true}, {pb.CompareOp_COMPARE_OP_GREATER, long(5), false},
		{pb.CompareOp_COMPARE_OP_LESS, bin(5), true}, {pb.CompareOp_COMPARE_OP_GREATER, bin(5), false},
		{pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL, long(10), true}, {pb.CompareOp_COMPARE_OP_LESS, long(10), false},
		{pb.CompareOp_COMPARE_OP_LESS_OR_EQUAL, long(20), false}, {pb.CompareOp_COMPARE_OP_GREATER, long(20), true},
	} {
		c := &pb.Condition{Row: row, Family: []byte("f"), Qualifier: []byte("n"), Op: tc.op, Comparator: tc.cmp}
		ok, err := tbl.CheckAndMutate(ctx, c, client.NewPut(row).Add("f", "m", cell.LatestTimestamp, []byte("z")))
		if err != nil || ok != tc.want {
			t.Errorf("check %v %v against a stored long 10: %v %v, want %v", tc.op, tc.cmp, ok, err, tc.want)
		}
	}
	// A comparator with no value (here an empty substring) checks for no value, as HBase's: EQUAL
	// holds on a missing cell, NOT_EQUAL on one with a value.
	empty := &pb.Comparator{Kind: &pb.Comparator_Substring{Substring: ""}}
	for _, tc := range []struct {
		q    string
		op   pb.CompareOp
		want bool
	}{{"missing", pb.CompareOp_COMPARE_OP_EQUAL, true}, {"q", pb.CompareOp_COMPARE_OP_NOT_EQUAL, true}, {"q", pb.CompareOp_COMPARE_OP_EQUAL, false}} {
		c := &pb.Condition{Row: row, Family: []byte("f"), Qualifier: []byte(tc.q), Op: tc.op, Comparator: empty}
		ok, err := tbl.CheckAndMutate(ctx, c, client.NewPut(row).Add("f", "m", cell.LatestTimestamp, []byte("z")))
		if err != nil || ok != tc.want {
			t.Errorf("check f:%s %v an empty substring: %v %v, want %v", tc.q, tc.op, ok, err, tc.want)
		}
	}
	// Remove the extra columns so scans see one cell per row.
	if err := tbl.Put(ctx, client.NewDelete(row).AddMarker(cell.DeleteColumn, "f", "c", cell.LatestTimestamp).
		AddMarker(cell.DeleteColumn, "f", "n", cell.LatestTimestamp).AddMarker(cell.DeleteColumn, "f", "m", cell.LatestTimestamp)); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code pb.ErrorCode) {
	t.Helper()
	d, ok := pb.DetailOf(err)
	if !ok || d.GetCode() != code {
		t.Fatalf("%s: want %v, got %v", what, code, err)
	}
}

func testBadInput(t *testing.T, c *cluster, tbl *client.Table) {
	ctx := context.Background()
	// Increment of a value that is not 8 bytes.
	_, err := tbl.Mutate(ctx, client.NewIncrement(rowKey(7)).AddAmount("f", "q", 1))
	wantCode(t, "increment of a non-long", err, pb.ErrorCode_ERROR_CODE_BAD_VALUE)
	err = tbl.Put(ctx, client.NewPut(rowKey(7)).Add("nofam", "q", cell.LatestTimestamp, []byte("x")))
	wantCode(t, "unknown family", err, pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY)

	regionName, conn := locate(t, c, "t", rowKey(7))
	call := func(m pb.Method, req proto.Message, block []byte, resp proto.Message) error {
		_, err := conn.Call(ctx, m, req, block, resp, nil)
		return err
	}
	err = call(pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: "ffffffffffffffff"}, Get: &pb.Get{Row: []byte("x")}}, nil, &pb.GetResponse{})
	wantCode(t, "unknown region", err, pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION)
	err = call(pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{}}, nil, &pb.GetResponse{})
	wantCode(t, "empty row", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	err = call(pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Get: &pb.Get{Row: rowKey(7), TimeRange: &pb.TimeRange{From: 10, To: 5}}}, nil, &pb.GetResponse{})
	wantCode(t, "bad time range", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	// A cell block that lies about its cells.
	err = call(pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Mutation: &pb.MutationProto{Row: rowKey(7), CellCount: 3}}, []byte{0, 0, 0, 9, 1, 2}, &pb.MutateResponse{})
	wantCode(t, "truncated cell block", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	// An oversized cell.
	big := make([]byte, cell.DefaultMaxCellSize+1)
	err = call(pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Mutation: &pb.MutationProto{Row: rowKey(7), CellCount: 1}},
		cell.AppendKeyValue(nil, rowKey(7), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, big), &pb.MutateResponse{})
	wantCode(t, "oversized cell", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	// Filters nested too deep.
	f := &pb.Filter{Filter: &pb.Filter_KeyOnly{KeyOnly: &pb.KeyOnlyFilter{}}}
	for range 100 {
		f = &pb.Filter{Filter: &pb.Filter_Skip{Skip: &pb.SkipFilter{Filter: f}}}
	}
	err = call(pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: rowKey(7), Filter: f}}, nil, &pb.GetResponse{})
	wantCode(t, "deep filter", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	// Scanners: unknown id, out-of-order next.
	err = call(pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, ScannerId: 987654}, nil, &pb.ScanResponse{})
	wantCode(t, "unknown scanner", err, pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER)
	var open pb.ScanResponse
	if err := call(pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{}, NumberOfRows: 2}, nil, &open); err != nil {
		t.Fatal(err)
	}
	if open.GetScannerId() == 0 || len(open.GetCellsPerResult()) != 2 || !open.GetMoreResultsInRegion() {
		t.Fatalf("scanner open: %v", &open)
	}
	var next pb.ScanResponse
	if err := call(pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, ScannerId: open.ScannerId, NextCallSeq: 1, NumberOfRows: 2}, nil, &next); err != nil {
		t.Fatal(err)
	}
	err = call(pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, ScannerId: open.ScannerId, NextCallSeq: 1}, nil, &pb.ScanResponse{})
	wantCode(t, "retried next", err, pb.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SCANNER_NEXT)
	// Garbage message bytes.
	_, err = conn.Call(ctx, pb.Method_METHOD_MULTI, &pb.PingRequest{Payload: []byte{0xff, 0xff, 0xff}}, nil, &pb.MultiResponse{}, nil)
	wantCode(t, "garbage request", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
}

func (c *cluster) serves(server, regionName string) bool {
	for _, s := range c.servers {
		if s.Name() == server {
			select {
			case <-s.Done():
				continue
			default:
			}
			for _, r := range s.OnlineRegions() {
				if r == regionName {
					return true
				}
			}
		}
	}
	return false
}

// A process that dropped its regions unflushed to start over under a new start code (its WAL
// failed) answers orders for its old start code as another process would — WRONG_SERVER_PROCESS,
// which makes the master recover its WAL — and not NOT_SERVING_REGION, which the master takes for
// "closed" and would move or split the region without the edits only that WAL holds.
func TestDroppedProcessAnswersAsAnotherProcess(t *testing.T) {
	c := startCluster(t, 1)
	createTable(t, c, "t", nil)
	name, _ := locate(t, c, "t", []byte("a"))
	s := c.servers[0]
	code := s.serverName().GetStartCode()
	s.reopenMu.Lock()
	s.dropEverything() // reincarnate's first step; the new start code comes after the new WAL
	s.reopenMu.Unlock()
	_, err := (&adminService{s: s}).CloseRegion(context.Background(), &pb.CloseRegionRequest{Region: name, ServerStartCode: code, Flush: true})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_WRONG_SERVER_PROCESS {
		t.Fatalf("close order for the dropped process: %v, want WRONG_SERVER_PROCESS", err)
	}
}
