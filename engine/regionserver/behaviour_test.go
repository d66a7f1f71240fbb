package regionserver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/access"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/rpc"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

func createTable(t testing.TB, c *cluster, name string, splits [][]byte) {
	t.Helper()
	td := &pb.TableDescriptor{Name: client.ParseTableName(name), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(context.Background(), td, splits); err != nil {
		t.Fatal(err)
	}
	c.waitOpen(name, len(splits)+1, "", 30*time.Second)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	waitForState(t, what, timeout, func() (bool, string) { return cond(), "" })
}

// waitForState polls cond until it holds; on timeout it fails with the state cond described last.
func waitForState(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				state = ": " + state
			}
			t.Fatalf("%s: not after %v%s", what, timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}

func TestMovedRegionAnswersRegionMoved(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "mv", nil)
	tbl := c.client.Table("mv")
	if err := tbl.Put(ctx, client.NewPut([]byte("a")).Add("f", "q", cell.LatestTimestamp, []byte("1"))); err != nil {
		t.Fatal(err)
	}
	regionName, conn := locate(t, c, "mv", []byte("a"))
	var src, dst *Server
	for _, s := range c.servers {
		if len(s.OnlineRegions()) == 1 {
			src = s
		} else {
			dst = s
		}
	}
	before := c.waitOpen("mv", 1, "", 30*time.Second)
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: regionName, Destination: dst.Name()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	after := c.waitOpen("mv", 1, src.Name(), 30*time.Second)
	_, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: []byte("a")}}, nil, &pb.GetResponse{}, nil)
	wantCode(t, "get from the old server", err, pb.ErrorCode_ERROR_CODE_REGION_MOVED)
	d, _ := pb.DetailOf(err)
	if layout.ServerName(d.GetNewLocation()) != dst.Name() {
		t.Fatalf("REGION_MOVED names %v, want %s", d.GetNewLocation(), dst.Name())
	}
	// With the location's sequence number there, above the old one: HBase's clients ignore a
	// moved hint whose number is not above the location they hold.
	if got, old, now := d.GetNewLocationSeq(), before[0].GetSeq(), after[0].GetSeq(); got != now || got <= old {
		t.Fatalf("REGION_MOVED gives location seq %d; the region was at %d and is now at %d", got, old, now)
	}
	// The client follows it; the write before the move (flushed on close) is there.
	r, err := tbl.Get(ctx, &pb.Get{Row: []byte("a")})
	if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != "1" {
		t.Fatalf("get after move: %v %v", r, err)
	}
}

// heldOpen is a move whose destination serves the region while the master's catalog writes are
// held (so its OPENED report is not taken yet).
type heldOpen struct {
	c        *cluster
	src, dst *Server
	region   string
	conn     *rpc.Conn // to the destination's data port
	moved    chan error
	release  func()
}

// moveWithOpenedReportHeld makes a one-region table with row a=1 and moves its region to the
// other server, holding every catalog write of the master from when the destination serves the
// region unreported until release.
func moveWithOpenedReportHeld(t *testing.T, table string) *heldOpen {
	var (
		dstP     atomic.Pointer[Server]
		regionP  atomic.Pointer[string]
		held     atomic.Bool
		released atomic.Bool
		gate     = make(chan struct{})
	)
	release := func() {
		if released.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	t.Cleanup(release) // before the master's Close, which runs after (cleanups run last first)
	// Holds the master's catalog writes while the destination serves the region unreported.
	hold := func() {
		s, name := dstP.Load(), regionP.Load()
		if s == nil || name == nil || released.Load() {
			return
		}
		if v, ok := s.regions.Load(*name); ok {
			if or := v.(*onlineRegion); or.serving.Load() && or.state.Load() == stateOpening {
				held.Store(true)
				<-gate
			}
		}
	}
	c := startClusterWith(t, 2, nil, func(mc *master.Config) {
		// Heartbeats wait while the catalog writes are held: a lease long enough for the
		// requests of the tests keeps the servers from fencing themselves meanwhile.
		mc.Lease = lease.Config{Lease: 20 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
			SelfFenceMargin: 300 * time.Millisecond, DeadMargin: 300 * time.Millisecond}
		f := faultfs.New(mc.FS)
		f.AddRule(faultfs.Rule{Ops: faultfs.OpWrite | faultfs.OpSync, Action: faultfs.Call, Fn: hold})
		mc.FS = f
	})
	ctx := context.Background()
	createTable(t, c, table, nil)
	if err := c.client.Table(table).Put(ctx, client.NewPut([]byte("a")).Add("f", "q", cell.LatestTimestamp, []byte("1"))); err != nil {
		t.Fatal(err)
	}
	regionName, _ := locate(t, c, table, []byte("a"))
	src, dst := c.servers[0], c.servers[1]
	if len(src.OnlineRegions()) != 1 {
		src, dst = dst, src
	}
	regionP.Store(&regionName)
	dstP.Store(dst)
	h := &heldOpen{c: c, src: src, dst: dst, region: regionName, moved: make(chan error, 1), release: release}
	go func() {
		h.moved <- c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: regionName, Destination: dst.Name()})
			return err
		})
	}()
	waitFor(t, "the destination serving the region with the master's catalog writes held", 30*time.Second, held.Load)
	conn, err := rpc.Dial(ctx, dst.DataAddr(), rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn = conn
	return h
}

// put writes row=value to the destination directly.
func (h *heldOpen) put(t *testing.T, row, value string) {
	t.Helper()
	block := cell.AppendKeyValue(nil, []byte(row), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte(value))
	if _, err := h.conn.Call(context.Background(), pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: h.region},
		Mutation: &pb.MutationProto{Row: []byte(row), CellCount: 1}}, block, &pb.MutateResponse{}, nil); err != nil {
		t.Fatalf("put %s at the destination before the OPENED report was written: %v", row, err)
	}
}

// A region serves at its destination as soon as it is open there, while the master's catalog
// write of its OPENED report is still under way: a put and gets sent to the destination with
// every catalog write held are answered, and the put is there after the region's next move.
func TestOpenedRegionServesBeforeItsReportIsWritten(t *testing.T) {
	h := moveWithOpenedReportHeld(t, "early")
	ctx := context.Background()
	h.put(t, "b", "2")
	for row, want := range map[string]string{"a": "1", "b": "2"} {
		var resp pb.GetResponse
		cells, err := h.conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: h.region}, Get: &pb.Get{Row: []byte(row)}}, nil, &resp, nil)
		if err != nil {
			t.Fatalf("get %s at the destination before the OPENED report was written: %v", row, err)
		}
		if kv, _, err := cell.ParseKeyValue(cells); err != nil || string(kv.Value()) != want {
			t.Fatalf("get %s at the destination before the OPENED report was written: %q, %v; want %s", row, cells, err, want)
		}
	}
	v, _ := h.dst.regions.Load(h.region)
	if st := v.(*onlineRegion).state.Load(); st != stateOpening {
		t.Fatalf("the region's state at the destination is %d: the master took the OPENED report while its catalog writes were held", st)
	}

	h.release()
	if err := <-h.moved; err != nil {
		t.Fatal(err)
	}
	h.c.waitOpen("early", 1, h.src.Name(), 30*time.Second)
	if err := h.c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: h.region, Destination: h.src.Name()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.c.waitOpen("early", 1, h.dst.Name(), 30*time.Second)
	r, err := h.c.client.Table("early").Get(ctx, &pb.Get{Row: []byte("b")})
	if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != "2" {
		t.Fatalf("the put taken before the OPENED report, after the next move: %v %v", r, err)
	}
}

// A close ordered while a region serves with its OPENED report on its way stops it serving at
// once; once the report is answered the region is closed with a flush and reported CLOSED, so
// the master opens it again with the write it took.
func TestCloseWhileOpenedIsReportedKeepsTheWrites(t *testing.T) {
	h := moveWithOpenedReportHeld(t, "closing")
	ctx := context.Background()
	h.put(t, "b", "2")
	a := &adminService{s: h.dst}
	if _, err := a.CloseRegion(ctx, &pb.CloseRegionRequest{Region: h.region, Flush: true, ServerStartCode: h.dst.serverName().GetStartCode()}); err != nil {
		t.Fatalf("close order while the OPENED report is held: %v", err)
	}
	block := cell.AppendKeyValue(nil, []byte("c"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte("3"))
	_, err := h.conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: h.region},
		Mutation: &pb.MutationProto{Row: []byte("c"), CellCount: 1}}, block, &pb.MutateResponse{}, nil)
	if d, ok := pb.DetailOf(err); !ok || !d.GetRetryable() {
		t.Fatalf("a put after the close order: %v, want a retryable refusal", err)
	}
	opened, _ := h.dst.regions.Load(h.region)
	h.release()
	if err := <-h.moved; err != nil {
		t.Fatal(err)
	}
	// The master took OPENED, then the CLOSED report of a close it did not order: it opens the
	// region again (anywhere, the destination too), and the put taken before the close is there.
	waitFor(t, "the destination to close the region it opened", 30*time.Second, func() bool {
		v, ok := h.dst.regions.Load(h.region)
		return !ok || v != opened
	})
	h.c.waitOpen("closing", 1, "", 30*time.Second)
	r, err := h.c.client.Table("closing").Get(ctx, &pb.Get{Row: []byte("b")})
	if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != "2" {
		t.Fatalf("the put taken before the close, after the region opened again: %v %v", r, err)
	}
}

// A stopping server refuses an open as stopping only for a region it does not have: one it serves
// (an order sent again after a masters' handover) is answered as usual, and one its stop is
// closing is answered with a retry, so that the master places neither elsewhere before this
// server has flushed it.
func TestStoppingServerAnswersOpensOfItsOwnRegions(t *testing.T) {
	c := startCluster(t, 1)
	s := c.servers[0]
	a := &adminService{s: s}
	ctx := context.Background()
	createTable(t, c, "st", nil)
	name, _ := locate(t, c, "st", []byte("a"))
	v, _ := s.regions.Load(name)
	or := v.(*onlineRegion)
	open := func(info *pb.RegionInfo) error {
		_, err := a.OpenRegion(ctx, &pb.OpenRegionRequest{Region: info, Table: or.table, ServerStartCode: s.serverName().GetStartCode()})
		return err
	}
	s.stopping.Store(true)
	if err := open(or.info); err != nil {
		t.Fatalf("open of a region the stopping server serves: %v", err)
	}
	other := proto.CloneOf(or.info)
	other.Name = "0000000000000042"
	wantCode(t, "open of a region the stopping server does not have", open(other), pb.ErrorCode_ERROR_CODE_SERVER_STOPPING)
	or.state.Store(stateClosing) // as the stop does before it flushes the region
	if err := open(or.info); status.Code(err) != codes.Unavailable {
		t.Fatalf("open of a region the stop is closing: %v, want Unavailable (send it again)", err)
	}
}

// openScannerOfThreeRows makes table name of rows a, b and c on a one-server cluster and opens a
// scanner of its region over the wire, one row read.
func openScannerOfThreeRows(t *testing.T, name string) (c *cluster, regionName string, conn *rpc.Conn, open *pb.ScanResponse) {
	t.Helper()
	c = startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, name, nil)
	tbl := c.client.Table(name)
	for _, r := range []string{"a", "b", "c"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(r)).Add("f", "q", cell.LatestTimestamp, []byte(r))); err != nil {
			t.Fatal(err)
		}
	}
	regionName, conn = locate(t, c, name, []byte("a"))
	open = &pb.ScanResponse{}
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{}, NumberOfRows: 1}, nil, open, nil); err != nil {
		t.Fatal(err)
	}
	return c, regionName, conn, open
}

func TestScannerLeaseExpires(t *testing.T) {
	c, regionName, conn, open := openScannerOfThreeRows(t, "sl")
	ctx := context.Background()
	s := c.servers[0]
	waitFor(t, "scanner lease expiry", 10*time.Second, func() bool { _, ok := s.scanners.Load(open.GetScannerId()); return !ok })
	_, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, ScannerId: open.GetScannerId(), NextCallSeq: 1}, nil, &pb.ScanResponse{}, nil)
	wantCode(t, "next on an expired scanner", err, pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER)
}

// A renew is a call of the scanner: it uses up its call number, as in HBase, whose client counts
// it; the next call after it carries the number after (it used to be refused as out of order, and
// the scanner closed, after every renewal of a Java client's scan).
func TestScannerRenewUsesACallNumber(t *testing.T) {
	_, regionName, conn, open := openScannerOfThreeRows(t, "sr")
	ctx := context.Background()
	region := &pb.RegionSpecifier{Name: regionName}
	id := open.GetScannerId()
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: id, NextCallSeq: 1, Renew: true}, nil, &pb.ScanResponse{}, nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	var next pb.ScanResponse
	cells, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: id, NextCallSeq: 2, NumberOfRows: 1}, nil, &next, nil)
	if err != nil {
		t.Fatalf("next after a renew: %v", err)
	}
	if len(next.GetCellsPerResult()) != 1 || len(cells) == 0 {
		t.Fatalf("next after a renew returned %d rows, want 1", len(next.GetCellsPerResult()))
	}
}

func TestWritesRefusedWhenFenceCloses(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "fe", nil)
	regionName, conn := locate(t, c, "fe", []byte("a"))
	c.master.Close() // no more heartbeats are acknowledged
	s := c.servers[0]
	waitFor(t, "fence closing", 10*time.Second, func() bool { return !s.fence.Load().Open() })
	block := cell.AppendKeyValue(nil, []byte("a"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte("x"))
	_, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Mutation: &pb.MutationProto{Row: []byte("a"), CellCount: 1}}, block, &pb.MutateResponse{}, nil)
	wantCode(t, "write with the fence closed", err, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED)
	// Reads of a primary are refused too: past its lease the region may be open elsewhere, taking
	// writes this server does not see (a server paused past its lease served stale reads in the
	// chaos run). Clients retry LEASE_EXPIRED.
	_, err = conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: []byte("a")}}, nil, &pb.GetResponse{}, nil)
	wantCode(t, "get with the fence closed", err, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED)
	_, err = conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{}, NumberOfRows: 1}, nil, &pb.ScanResponse{}, nil)
	wantCode(t, "scan with the fence closed", err, pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED)
	var mr pb.MultiResponse
	_, err = conn.Call(ctx, pb.Method_METHOD_MULTI, &pb.MultiRequest{RegionActions: []*pb.RegionAction{{Region: &pb.RegionSpecifier{Name: regionName},
		Actions: []*pb.Action{{Get: &pb.Get{Row: []byte("a")}}}}}}, nil, &mr, nil)
	if err != nil || mr.GetResults()[0].GetException().GetCode() != pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED {
		t.Fatalf("multi get with the fence closed: %v %v", err, mr.GetResults())
	}
}

// TestFilterConversion maps every pb.Filter kind.
func TestFilterConversion(t *testing.T) {
	bin := &pb.Comparator{Kind: &pb.Comparator_Binary{Binary: []byte("x")}}
	cf := &pb.CompareFilter{Op: pb.CompareOp_COMPARE_OP_EQUAL, Comparator: bin}
	kf := &pb.Filter{Filter: &pb.Filter_KeyOnly{KeyOnly: &pb.KeyOnlyFilter{}}}
	cases := []struct {
		f    *pb.Filter
		want string
	}{
		{&pb.Filter{Filter: &pb.Filter_Prefix{Prefix: &pb.PrefixFilter{Prefix: []byte("p")}}}, "*filter.PrefixFilter"},
		{&pb.Filter{Filter: &pb.Filter_Row{Row: cf}}, "*filter.RowFilter"},
		{&pb.Filter{Filter: &pb.Filter_Family{Family: cf}}, "*filter.FamilyFilter"},
		{&pb.Filter{Filter: &pb.Filter_Qualifier{Qualifier: cf}}, "*filter.QualifierFilter"},
		{&pb.Filter{Filter: &pb.Filter_Value{Value: cf}}, "*filter.ValueFilter"},
		{&pb.Filter{Filter: &pb.Filter_SingleColumnValue{SingleColumnValue: &pb.SingleColumnValueFilter{Family: []byte("f"), Comparator: bin}}}, "*filter.SingleColumnValueFilter"},
		{&pb.Filter{Filter: &pb.Filter_SingleColumnValue{SingleColumnValue: &pb.SingleColumnValueFilter{Family: []byte("f"), Comparator: bin, Exclude: true}}}, "*filter.SingleColumnValueExcludeFilter"},
		{kf, "*filter.KeyOnlyFilter"},
		{&pb.Filter{Filter: &pb.Filter_FirstKeyOnly{FirstKeyOnly: &pb.FirstKeyOnlyFilter{}}}, "*filter.FirstKeyOnlyFilter"},
		{&pb.Filter{Filter: &pb.Filter_Page{Page: &pb.PageFilter{PageSize: 3}}}, "*filter.PageFilter"},
		{&pb.Filter{Filter: &pb.Filter_ColumnPrefix{ColumnPrefix: &pb.ColumnPrefixFilter{Prefix: []byte("c")}}}, "*filter.ColumnPrefixFilter"},
		{&pb.Filter{Filter: &pb.Filter_MultipleColumnPrefix{MultipleColumnPrefix: &pb.MultipleColumnPrefixFilter{Prefixes: [][]byte{[]byte("a")}}}}, "*filter.MultipleColumnPrefixFilter"},
		{&pb.Filter{Filter: &pb.Filter_ColumnRange{ColumnRange: &pb.ColumnRangeFilter{MinColumn: []byte("a")}}}, "*filter.ColumnRangeFilter"},
		{&pb.Filter{Filter: &pb.Filter_ColumnPagination{ColumnPagination: &pb.ColumnPaginationFilter{Limit: 2}}}, "*filter.ColumnPaginationFilter"},
		{&pb.Filter{Filter: &pb.Filter_ColumnCountGet{ColumnCountGet: &pb.ColumnCountGetFilter{Limit: 2}}}, "*filter.ColumnCountGetFilter"},
		{&pb.Filter{Filter: &pb.Filter_Timestamps{Timestamps: &pb.TimestampsFilter{Timestamps: []int64{1}}}}, "*filter.TimestampsFilter"},
		{&pb.Filter{Filter: &pb.Filter_FuzzyRow{FuzzyRow: &pb.FuzzyRowFilter{Keys: []*pb.FuzzyKey{{Key: []byte("ab"), Mask: []byte{0, 1}}}}}}, "*filter.FuzzyRowFilter"},
		{&pb.Filter{Filter: &pb.Filter_MultiRowRange{MultiRowRange: &pb.MultiRowRangeFilter{Ranges: []*pb.RowRange{{StartRow: []byte("a")}}}}}, "*filter.MultiRowRangeFilter"},
		{&pb.Filter{Filter: &pb.Filter_InclusiveStop{InclusiveStop: &pb.InclusiveStopFilter{StopRow: []byte("z")}}}, "*filter.InclusiveStopFilter"},
		{&pb.Filter{Filter: &pb.Filter_Skip{Skip: &pb.SkipFilter{Filter: kf}}}, "*filter.SkipFilter"},
		{&pb.Filter{Filter: &pb.Filter_WhileMatch{WhileMatch: &pb.WhileMatchFilter{Filter: kf}}}, "*filter.WhileMatchFilter"},
		{&pb.Filter{Filter: &pb.Filter_DependentColumn{DependentColumn: &pb.DependentColumnFilter{Family: []byte("f"), Qualifier: []byte("q")}}}, "*filter.DependentColumnFilter"},
		{&pb.Filter{Filter: &pb.Filter_List{List: &pb.FilterList{Operator: pb.FilterList_OPERATOR_MUST_PASS_ONE, Filters: []*pb.Filter{kf}}}}, "*filter.FilterList"},
	}
	for _, tc := range cases {
		f, err := convertFilter(tc.f)
		if err != nil {
			t.Fatalf("%v: %v", tc.f, err)
		}
		if got := typeName(f); got != tc.want {
			t.Fatalf("%v: got %s, want %s", tc.f, got, tc.want)
		}
	}
	// Malformed ones are INVALID_ARGUMENT, never a panic.
	for _, bad := range []*pb.Filter{
		{},
		{Filter: &pb.Filter_Row{Row: &pb.CompareFilter{}}},
		{Filter: &pb.Filter_Row{Row: &pb.CompareFilter{Op: 99, Comparator: bin}}},
		{Filter: &pb.Filter_Value{Value: &pb.CompareFilter{Comparator: &pb.Comparator{Kind: &pb.Comparator_Regex{Regex: "("}}}}},
		{Filter: &pb.Filter_FuzzyRow{FuzzyRow: &pb.FuzzyRowFilter{Keys: []*pb.FuzzyKey{{Key: []byte("ab"), Mask: []byte{0}}}}}},
		{Filter: &pb.Filter_Skip{Skip: &pb.SkipFilter{}}},
		{Filter: &pb.Filter_List{List: &pb.FilterList{Operator: 7}}},
		{Filter: &pb.Filter_Page{Page: &pb.PageFilter{PageSize: -1}}},
	} {
		if _, err := convertFilter(bad); err == nil {
			t.Fatalf("%v: accepted", bad)
		} else if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}

func typeName(f filter.Filter) string {
	switch f.(type) {
	case *filter.PrefixFilter:
		return "*filter.PrefixFilter"
	case *filter.RowFilter:
		return "*filter.RowFilter"
	case *filter.FamilyFilter:
		return "*filter.FamilyFilter"
	case *filter.QualifierFilter:
		return "*filter.QualifierFilter"
	case *filter.ValueFilter:
		return "*filter.ValueFilter"
	case *filter.SingleColumnValueFilter:
		return "*filter.SingleColumnValueFilter"
	case *filter.SingleColumnValueExcludeFilter:
		return "*filter.SingleColumnValueExcludeFilter"
	case *filter.KeyOnlyFilter:
		return "*filter.KeyOnlyFilter"
	case *filter.FirstKeyOnlyFilter:
		return "*filter.FirstKeyOnlyFilter"
	case *filter.PageFilter:
		return "*filter.PageFilter"
	case *filter.ColumnPrefixFilter:
		return "*filter.ColumnPrefixFilter"
	case *filter.MultipleColumnPrefixFilter:
		return "*filter.MultipleColumnPrefixFilter"
	case *filter.ColumnRangeFilter:
		return "*filter.ColumnRangeFilter"
	case *filter.ColumnPaginationFilter:
		return "*filter.ColumnPaginationFilter"
	case *filter.ColumnCountGetFilter:
		return "*filter.ColumnCountGetFilter"
	case *filter.TimestampsFilter:
		return "*filter.TimestampsFilter"
	case *filter.FuzzyRowFilter:
		return "*filter.FuzzyRowFilter"
	case *filter.MultiRowRangeFilter:
		return "*filter.MultiRowRangeFilter"
	case *filter.InclusiveStopFilter:
		return "*filter.InclusiveStopFilter"
	case *filter.SkipFilter:
		return "*filter.SkipFilter"
	case *filter.WhileMatchFilter:
		return "*filter.WhileMatchFilter"
	case *filter.DependentColumnFilter:
		return "*filter.DependentColumnFilter"
	case *filter.FilterList:
		return "*filter.FilterList"
	}
	return "?"
}

func TestQuotaThrottles(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "q", nil)
	regionName, _ := locate(t, c, "q", []byte("a"))
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "alice"},
			Type: pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER, Limit: 3, TimeUnitSeconds: 3600}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := c.servers[0]
	waitFor(t, "quota refresh from a heartbeat", 10*time.Second, func() bool { return s.limiters.Version() > 0 })
	conn, err := rpc.Dial(ctx, s.DataAddr(), rpc.ClientOptions{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get := func() error {
		_, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: []byte("a")}}, nil, &pb.GetResponse{}, nil)
		return err
	}
	var last error
	for range 10 {
		if last = get(); last != nil {
			break
		}
	}
	wantCode(t, "get over the quota", last, pb.ErrorCode_ERROR_CODE_THROTTLED)
	if d, _ := pb.DetailOf(last); d.GetRetryAfterMs() <= 0 {
		t.Fatalf("THROTTLED without retry_after_ms: %v", d)
	}

	// Quotas turned off cluster-wide take effect at the next heartbeat, and on again too (with no
	// change to the quotas themselves).
	setEnabled := func(on string) {
		if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.SetClusterConfig(ctx, &pb.SetClusterConfigRequest{Config: map[string]string{layout.ConfigQuotasEnabled: on}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	setEnabled("false")
	waitFor(t, "quotas turned off", 10*time.Second, func() bool { return get() == nil })
	setEnabled("true")
	waitFor(t, "quotas turned on again", 10*time.Second, func() bool { return get() != nil })
	wantCode(t, "get over the quota once quotas are on again", get(), pb.ErrorCode_ERROR_CODE_THROTTLED)

	// Removing the quota takes effect within the refresh period (the next heartbeat).
	version := s.limiters.Version()
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: "alice"},
			Type: pb.ThrottleType_THROTTLE_TYPE_REQUEST_NUMBER}, Remove: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitFor(t, "quota removal refreshed", 10*time.Second, func() bool { return s.limiters.Version() > version })
	t.Logf("quota removal applied %v after SetQuota (heartbeat every 200 ms)", time.Since(removed))
	for i := range 20 {
		if err := get(); err != nil {
			t.Fatalf("get %d after the quota was removed: %v", i, err)
		}
	}
}

// TestQuotaCountsEveryOperation: a scanner's every next, each mutation of a multi and each row a
// bulk delete deletes count against the number quotas, as HBase counts them.
func TestQuotaCountsEveryOperation(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "qc", nil)
	tbl := c.client.Table("qc")
	for i := range 20 {
		if err := tbl.Put(ctx, client.NewPut([]byte(fmt.Sprintf("r%02d", i))).Add("f", "q", cell.LatestTimestamp, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	regionName, _ := locate(t, c, "qc", []byte("a"))
	region := &pb.RegionSpecifier{Name: regionName}
	setQuota := func(user string, tt pb.ThrottleType, limit int64) {
		if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Quota: &pb.Quota{Subject: &pb.Quota_User{User: user}, Type: tt, Limit: limit, TimeUnitSeconds: 3600}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	s := c.servers[0]
	setQuota("bob", pb.ThrottleType_THROTTLE_TYPE_READ_NUMBER, 3)
	setQuota("carol", pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER, 5)
	setQuota("dave", pb.ThrottleType_THROTTLE_TYPE_WRITE_NUMBER, 5)
	var version uint64
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		list, err := m.ListQuotas(ctx, &pb.ListQuotasRequest{})
		version = list.GetVersion()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "quota refresh from a heartbeat", 10*time.Second, func() bool { return s.limiters.Version() >= version })
	dial := func(user string) *rpc.Conn {
		conn, err := rpc.Dial(ctx, s.DataAddr(), rpc.ClientOptions{User: user})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	// bob: an open and two nexts use the three reads; the next one waits, and the scanner stays.
	bob := dial("bob")
	var open pb.ScanResponse
	if _, err := bob.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: &pb.Scan{}, NumberOfRows: 1}, nil, &open, nil); err != nil {
		t.Fatal(err)
	}
	var last error
	seq := uint64(1)
	for range 10 {
		var resp pb.ScanResponse
		if _, last = bob.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{ScannerId: open.ScannerId, NextCallSeq: seq, NumberOfRows: 1}, nil, &resp, nil); last != nil {
			break
		}
		seq++
	}
	wantCode(t, "a scanner's next over the read quota", last, pb.ErrorCode_ERROR_CODE_THROTTLED)
	if seq != 3 {
		t.Errorf("throttled at next %d, want the third (the open and two nexts take the three reads)", seq)
	}
	if _, err := bob.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{ScannerId: open.ScannerId, NextCallSeq: seq, Renew: true}, nil, &pb.ScanResponse{}, nil); err != nil {
		t.Fatalf("the throttled scanner is gone: %v", err)
	}

	// carol: a multi of ten puts takes ten writes (the first may overdraw a full bucket); the next
	// write waits.
	carol := dial("carol")
	multi := func(n int) error {
		ra := &pb.RegionAction{Region: region}
		var block []byte
		for i := range n {
			cl := cell.Cell{Row: []byte(fmt.Sprintf("m%02d", i)), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: cell.LatestTimestamp, Type: cell.Put, Value: []byte("v")}
			block = cl.AppendKeyValue(block)
			ra.Actions = append(ra.Actions, &pb.Action{Index: uint32(i), Mutation: &pb.MutationProto{Row: cl.Row, Type: pb.MutationProto_TYPE_PUT, CellCount: 1}})
		}
		var resp pb.MultiResponse
		if _, err := carol.Call(ctx, pb.Method_METHOD_MULTI, &pb.MultiRequest{RegionActions: []*pb.RegionAction{ra}}, block, &resp, nil); err != nil {
			return err
		}
		if e := resp.GetResults()[0].GetException(); e != nil {
			return e
		}
		return nil
	}
	if err := multi(10); err != nil {
		t.Fatalf("the first multi: %v", err)
	}
	wantCode(t, "a multi after one of ten puts over a quota of five", multi(1), pb.ErrorCode_ERROR_CODE_THROTTLED)

	// dave: a bulk delete of twenty rows in batches of two takes a write per row, so it stops
	// after the quota's rows, answering how far it got.
	dave := dial("dave")
	var bd pb.BulkDeleteResponse
	if _, err := dave.Call(ctx, pb.Method_METHOD_BULK_DELETE, &pb.BulkDeleteRequest{Region: region, Scan: &pb.Scan{StartRow: []byte("r")},
		DeleteType: pb.BulkDeleteRequest_DELETE_TYPE_ROW, RowsPerBatch: 2}, nil, &bd, nil); err != nil {
		t.Fatal(err)
	}
	if bd.RowsDeleted >= 20 || len(bd.ResumeRow) == 0 {
		t.Fatalf("a bulk delete over a write quota of five deleted %d rows (resume %q): want it stopped early with a resume row", bd.RowsDeleted, bd.ResumeRow)
	}
}

// TestLabelsBeforeTheFirstFetch: a server that has not loaded the labels yet (a region can serve
// before the first heartbeat brings them) fetches them before a read, and while it cannot, shows
// a cell with a visibility expression to no one.
func TestLabelsBeforeTheFirstFetch(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "lv", nil)
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.AddLabels(ctx, &pb.AddLabelsRequest{Labels: []string{"secret"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tbl := c.client.Table("lv")
	put := client.NewPut([]byte("r")).Add("f", "q", cell.LatestTimestamp, []byte("hidden"))
	put.Visibility = "secret"
	if err := tbl.Put(ctx, put); err != nil {
		t.Fatal(err)
	}
	s := c.servers[0]
	regionName, _ := locate(t, c, "lv", []byte("r"))
	conn, err := rpc.Dial(ctx, s.DataAddr(), rpc.ClientOptions{User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cellsSeen := func() int {
		var resp pb.GetResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: []byte("r")}}, nil, &resp, nil); err != nil {
			t.Fatal(err)
		}
		return int(resp.GetResult().GetCellCount())
	}
	if n := cellsSeen(); n != 0 {
		t.Fatalf("bob, without the label, sees %d cells", n)
	}
	// As a server that has not loaded the labels, whose last load failed just now (so none starts
	// for a second): the permissions' version is the master's, so no heartbeat loads them either.
	version := s.acl.Load().Version()
	s.acl.Store(access.NewChecker(version, nil, nil))
	s.aclLoaded.Store(false)
	s.aclLoadMu.Lock()
	s.aclLoadTried = time.Now()
	s.aclLoadMu.Unlock()
	if n := cellsSeen(); n != 0 || s.aclLoaded.Load() {
		t.Fatalf("before the labels could be loaded, bob sees %d cells (loaded: %v): want none (fail closed)", n, s.aclLoaded.Load())
	}
	// A server just started: the read loads them.
	s.acl.Store(access.NewChecker(0, nil, nil))
	s.aclLoadMu.Lock()
	s.aclLoadTried = time.Time{}
	s.aclLoadMu.Unlock()
	if n := cellsSeen(); n != 0 || !s.aclLoaded.Load() {
		t.Fatalf("on a server that had not loaded the labels, bob sees %d cells (loaded since: %v)", n, s.aclLoaded.Load())
	}
}

// TestReincarnation: when the master no longer knows the process (unknown_server), the server
// drops its regions unflushed and registers again under a new start code and WAL directory; the
// master recovers the old process's log and every acknowledged write is back.
func TestReincarnation(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "re", [][]byte{[]byte("m")})
	tbl := c.client.Table("re")
	for _, r := range []string{"a", "n", "z"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(r)).Add("f", "q", cell.LatestTimestamp, []byte(r))); err != nil {
			t.Fatal(err)
		}
	}
	s := c.servers[0]
	oldCode := s.serverName().GetStartCode()
	s.reincarnate()
	if s.serverName().GetStartCode() == oldCode || !s.registered.Load() {
		t.Fatalf("not re-registered under a new start code")
	}
	c.waitOpen("re", 2, "", 30*time.Second)
	for _, r := range []string{"a", "n", "z"} {
		res, err := tbl.Get(ctx, &pb.Get{Row: []byte(r)})
		if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != r {
			t.Fatalf("row %s after reincarnation: %v %v", r, res, err)
		}
	}
}

func TestScanPartialResults(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "pr", nil)
	tbl := c.client.Table("pr")
	for _, r := range []string{"a", "b"} {
		m := client.NewPut([]byte(r))
		for _, q := range []string{"1", "2", "3", "4", "5"} {
			m.Add("f", q, cell.LatestTimestamp, []byte(q))
		}
		if err := tbl.Put(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	regionName, conn := locate(t, c, "pr", []byte("a"))
	var resp pb.ScanResponse
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Scan: &pb.Scan{Batch: 2}, NumberOfRows: 100, ClientHandlesPartials: true}, nil, &resp, nil); err != nil {
		t.Fatal(err)
	}
	want := []int32{2, 2, 1, 2, 2, 1}
	wantPartial := []bool{true, true, false, true, true, false}
	if len(resp.CellsPerResult) != len(want) {
		t.Fatalf("cells per result %v, want %v", resp.CellsPerResult, want)
	}
	for i := range want {
		if resp.CellsPerResult[i] != want[i] || resp.PartialFlagPerResult[i] != wantPartial[i] {
			t.Fatalf("result %d: %d cells partial %v; want %v %v", i, resp.CellsPerResult[i], resp.PartialFlagPerResult[i], want, wantPartial)
		}
	}
	if resp.MoreResultsInRegion || resp.MoreResults || resp.ScannerId != 0 {
		t.Fatalf("the only region is done: %v", &resp)
	}
	// The client reassembles the rows.
	sc := tbl.Scan(ctx, &pb.Scan{Batch: 2})
	n := 0
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		if len(r.Cells) != 5 {
			t.Fatalf("row %q: %d cells", r.Row, len(r.Cells))
		}
		n++
	}
	if sc.Err() != nil || n != 2 {
		t.Fatalf("client scan: %d rows, %v", n, sc.Err())
	}
}

// TestScanStopRowAtRegionEnd: a forward scan whose inclusive stop row is its region's end key goes
// on into the next region (that row is its first); an exclusive one ends at the region.
func TestScanStopRowAtRegionEnd(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "se", [][]byte{[]byte("h")})
	tbl := c.client.Table("se")
	for _, r := range []string{"a", "h"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(r)).Add("f", "q", cell.LatestTimestamp, []byte(r))); err != nil {
			t.Fatal(err)
		}
	}
	regionName, conn := locate(t, c, "se", []byte("a"))
	for _, incl := range []bool{true, false} {
		var resp pb.ScanResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Scan: &pb.Scan{StopRow: []byte("h"), IncludeStopRow: incl}, NumberOfRows: 100, CloseScanner: false}, nil, &resp, nil); err != nil {
			t.Fatal(err)
		}
		if resp.MoreResultsInRegion || resp.MoreResults != incl {
			t.Errorf("stop row h (inclusive %v) at the region's end: more in region %v, more results %v; want false, %v",
				incl, resp.MoreResultsInRegion, resp.MoreResults, incl)
		}
	}
	var rows []string
	sc := tbl.Scan(ctx, &pb.Scan{StopRow: []byte("h"), IncludeStopRow: true})
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		rows = append(rows, string(r.Row))
	}
	if sc.Err() != nil || fmt.Sprint(rows) != "[a h]" {
		t.Fatalf("scan to inclusive stop row h = %v, %v", rows, sc.Err())
	}
}

// TestScanOpenAndClose: an open that also closes (HBase 1.x's small scans) answers its first
// batch and leaves no scanner open.
func TestScanOpenAndClose(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "oc", nil)
	tbl := c.client.Table("oc")
	for _, r := range []string{"a", "b"} {
		if err := tbl.Put(ctx, client.NewPut([]byte(r)).Add("f", "q", cell.LatestTimestamp, []byte(r))); err != nil {
			t.Fatal(err)
		}
	}
	regionName, conn := locate(t, c, "oc", []byte("a"))
	open := func(rows int32) *pb.ScanResponse {
		var resp pb.ScanResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Scan: &pb.Scan{}, NumberOfRows: rows, CloseScanner: true}, nil, &resp, nil); err != nil {
			t.Fatal(err)
		}
		return &resp
	}
	if resp := open(1); len(resp.CellsPerResult) != 1 || resp.ScannerId != 0 || !resp.MoreResultsInRegion {
		t.Fatalf("open and close for one row: %v", resp)
	}
	if resp := open(10); len(resp.CellsPerResult) != 2 || resp.ScannerId != 0 || resp.MoreResultsInRegion {
		t.Fatalf("open and close for every row: %v", resp)
	}
	if n := c.servers[0].openScanners.Load(); n != 0 {
		t.Fatalf("%d scanners left open", n)
	}
}

// handlerPanicked reports whether err is the answer of a handler that panicked (Server.safe).
func handlerPanicked(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && d.GetCode() == pb.ErrorCode_ERROR_CODE_UNKNOWN && d.GetMessage() == "internal error serving the request"
}

// TestMalformedRequestsNeverPanic sends random messages and cell blocks (valid region names,
// random everything else) to every method; no call may hit the panic guard.
func TestMalformedRequestsNeverPanic(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "fz", nil)
	regionName, conn := locate(t, c, "fz", []byte("a"))
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) []byte {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	region := &pb.RegionSpecifier{Name: regionName}
	block := func() []byte {
		if rng.IntN(2) == 0 {
			return randBytes(64)
		}
		return cell.AppendKeyValue(nil, randBytes(4), []byte("f"), randBytes(3), int64(rng.Uint64()), cell.Type(rng.UintN(256)), randBytes(9))
	}
	msgs := func() (pb.Method, proto.Message) {
		row := randBytes(4)
		switch rng.IntN(5) {
		case 0:
			return pb.Method_METHOD_GET, &pb.GetRequest{Region: region, Get: &pb.Get{Row: row, MaxVersions: int32(rng.Uint32()),
				StoreLimit: int32(rng.Uint32()), TimeRange: &pb.TimeRange{From: int64(rng.Uint64()), To: int64(rng.Uint64())}}}
		case 1:
			return pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region, Mutation: &pb.MutationProto{Type: pb.MutationProto_Type(rng.IntN(6)),
				Row: row, CellCount: int32(rng.IntN(4)) - 1, Durability: pb.Durability(rng.IntN(6)), Nonce: rng.Uint64()},
				Condition: []*pb.Condition{nil, {Row: row, Family: randBytes(2), Op: pb.CompareOp(rng.IntN(9))}}[rng.IntN(2)]}
		case 2:
			return pb.Method_METHOD_MULTI, &pb.MultiRequest{RegionActions: []*pb.RegionAction{{Region: region, Atomic: rng.IntN(2) == 0,
				Actions: []*pb.Action{{Mutation: &pb.MutationProto{Row: row, CellCount: int32(rng.IntN(3))}}, {Get: &pb.Get{Row: row}}, {}}}}}
		case 3:
			return pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: uint64(rng.IntN(3)), NextCallSeq: uint64(rng.IntN(3)),
				Scan: &pb.Scan{StartRow: row, StopRow: randBytes(4), Reversed: rng.IntN(2) == 0, Batch: int32(rng.IntN(5)) - 1,
					MaxResultSize: int64(rng.IntN(100)) - 1, Limit: int32(rng.IntN(5)) - 1}, NumberOfRows: int32(rng.IntN(5)) - 1}
		default:
			return pb.Method(rng.IntN(8)), &pb.PingRequest{Payload: randBytes(32)}
		}
	}
	for i := 0; i < 3000; i++ {
		m, req := msgs()
		_, err := conn.Call(ctx, m, req, block(), &pb.PingResponse{}, nil)
		if handlerPanicked(err) {
			t.Fatalf("call %d (%v %v) panicked in the handler", i, m, req)
		}
	}
	var pong pb.PingResponse
	if _, err := conn.Call(ctx, pb.Method_METHOD_PING, &pb.PingRequest{Payload: []byte("ok")}, nil, &pong, nil); err != nil || string(pong.Payload) != "ok" {
		t.Fatalf("ping after the fuzzing: %v", err)
	}
}

// TestScanHeartbeats: a scan whose filter drops every row answers heartbeats (no rows, a cursor)
// within its time limit instead of running through the region in one call.
func TestScanHeartbeats(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "hb", nil)
	tbl := c.client.Table("hb")
	var ops []client.BatchOp
	// 1 KiB values and a regular expression the filter runs over each: the region takes far
	// longer to read (tens of ms) than the 1 ms limit, however fast the machine.
	value := bytes.Repeat([]byte("v"), 1024)
	for i := range 20000 {
		ops = append(ops, client.BatchOp{Mutation: client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, value)})
	}
	for _, r := range tbl.Batch(ctx, ops) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	regionName, conn := locate(t, c, "hb", []byte("a"))
	none := &pb.Filter{Filter: &pb.Filter_Value{Value: &pb.CompareFilter{Op: pb.CompareOp_COMPARE_OP_EQUAL,
		Comparator: &pb.Comparator{Kind: &pb.Comparator_Regex{Regex: "(v|w)*x"}}}}}
	req := &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName}, Scan: &pb.Scan{Filter: none}, NumberOfRows: 100,
		ClientHandlesHeartbeats: true, ClientHandlesPartials: true, TimeLimitMs: 1}
	heartbeats, calls := 0, 0
	for {
		var resp pb.ScanResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, req, nil, &resp, nil); err != nil {
			t.Fatal(err)
		}
		calls++
		if len(resp.CellsPerResult) != 0 {
			t.Fatalf("filtered scan returned %d results", len(resp.CellsPerResult))
		}
		if resp.Heartbeat {
			heartbeats++
			if len(resp.CursorRow) == 0 {
				t.Fatalf("heartbeat without a cursor row")
			}
		}
		if !resp.MoreResultsInRegion {
			break
		}
		req = &pb.ScanRequest{Region: req.Region, ScannerId: resp.ScannerId, NextCallSeq: uint64(calls), NumberOfRows: 100}
	}
	if heartbeats == 0 {
		t.Fatalf("no heartbeat in %d calls", calls)
	}
	t.Logf("%d calls, %d heartbeats", calls, heartbeats)
}

// TestCellTTLOverRPC: a per-cell TTL set on a client mutation (the "_ttl" attribute) reaches the
// region as a TTL tag; expired cells disappear from gets and scans, live ones and cells without a
// TTL stay, and bad TTLs are refused with INVALID_ARGUMENT.
func TestCellTTLOverRPC(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "ttl", nil)
	tbl := c.client.Table("ttl")
	now := time.Now().UnixMilli()
	put := func(row string, ts int64, ttl time.Duration) {
		t.Helper()
		m := client.NewPut([]byte(row)).Add("f", "q", ts, []byte(row))
		m.TTL = ttl
		if err := tbl.Put(ctx, m); err != nil {
			t.Fatalf("put %s: %v", row, err)
		}
	}
	put("expired", now-60_000, 30*time.Second) // ts + TTL is 30 s ago
	put("alive", now, time.Hour)
	put("plain", now-60_000, 0)
	rows := func() []string {
		var out []string
		sc := tbl.Scan(ctx, &pb.Scan{})
		defer sc.Close()
		for r, ok := sc.Next(); ok; r, ok = sc.Next() {
			out = append(out, string(r.Row))
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := rows(); len(got) != 2 || got[0] != "alive" || got[1] != "plain" {
		t.Fatalf("scan returned %v, want [alive plain]", got)
	}
	if r, err := tbl.Get(ctx, &pb.Get{Row: []byte("expired")}); err != nil || len(r.Cells) != 0 {
		t.Fatalf("get of the expired row: %v, %v", r, err)
	}

	// An increment's new cell carries the operation's TTL.
	inc := client.NewIncrement([]byte("counter")).AddAmount("f", "n", 1)
	inc.TTL = time.Millisecond
	if _, err := tbl.Mutate(ctx, inc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the counter to expire", 10*time.Second, func() bool {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte("counter")})
		return err == nil && len(r.Cells) == 0
	})

	// Refusals: a delete with a TTL, a malformed or zero attribute, a client cell with a system
	// tag (an ACL; clients may send TTL tags and their own types: TestClientSentTags).
	regionName, conn := locate(t, c, "ttl", []byte("a"))
	region := &pb.RegionSpecifier{Name: regionName}
	ttlAttr := map[string][]byte{TTLAttribute: {0, 0, 0, 0, 0, 0, 0, 10}}
	del := cell.AppendKeyValue(nil, []byte("plain"), []byte("f"), []byte("q"), now, cell.DeleteColumn, nil)
	_, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region, Mutation: &pb.MutationProto{
		Type: pb.MutationProto_TYPE_DELETE, Row: []byte("plain"), CellCount: 1, Attributes: ttlAttr}}, del, &pb.MutateResponse{}, nil)
	wantCode(t, "delete with a TTL", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	p := cell.AppendKeyValue(nil, []byte("x"), []byte("f"), []byte("q"), now, cell.Put, []byte("v"))
	_, err = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region, Mutation: &pb.MutationProto{
		Type: pb.MutationProto_TYPE_PUT, Row: []byte("x"), CellCount: 1, Attributes: map[string][]byte{TTLAttribute: {1, 2, 3}}}}, p, &pb.MutateResponse{}, nil)
	wantCode(t, "a 3-byte TTL attribute", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	_, err = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region, Mutation: &pb.MutationProto{
		Type: pb.MutationProto_TYPE_PUT, Row: []byte("x"), CellCount: 1, Attributes: map[string][]byte{TTLAttribute: make([]byte, 8)}}}, p, &pb.MutateResponse{}, nil)
	wantCode(t, "a 0 ms TTL attribute", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	tagged := cell.AppendTaggedKeyValue(nil, cell.AppendKey(nil, []byte("x"), []byte("f"), []byte("q"), now, cell.Put), []byte("v"),
		cell.AppendTag(nil, cell.TagACL, []byte("x")))
	_, err = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region, Mutation: &pb.MutationProto{
		Type: pb.MutationProto_TYPE_PUT, Row: []byte("x"), CellCount: 1}}, tagged, &pb.MutateResponse{}, nil)
	wantCode(t, "a client cell with an ACL tag", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	if r, err := tbl.Get(ctx, &pb.Get{Row: []byte("plain")}); err != nil || len(r.Cells) != 1 {
		t.Fatalf("the refused delete changed row plain: %v, %v", r, err)
	}
	bad := client.NewDelete([]byte("plain"))
	bad.TTL = time.Second
	if err := tbl.Put(ctx, bad); err == nil {
		t.Fatal("the client sent a delete with a TTL")
	}
}

// capBytes is the MaxScanResultSize of cappedAnswers' server.
const capBytes = 256 << 10

// cappedAnswers starts a one-server cluster whose answers are capped at capBytes and makes table
// name in it.
func cappedAnswers(t *testing.T, name string) (*cluster, *client.Table) {
	t.Helper()
	c := startTunedCluster(t, 1, func(cfg *Config) { cfg.MaxScanResultSize = capBytes })
	createTable(t, c, name, nil)
	return c, c.client.Table(name)
}

// TestScanAnswerCappedWhateverTheCaching: a scan that asks for every row in one answer (caching
// 2^31-1, no max result size) gets at most the server's MaxScanResultSize per answer and the
// whole table over several calls.
func TestScanAnswerCappedWhateverTheCaching(t *testing.T) {
	c, tbl := cappedAnswers(t, "big")
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 4<<10)
	const rows = 500 // 2 MB
	var ops []client.BatchOp
	for i := range rows {
		ops = append(ops, client.BatchOp{Mutation: client.NewPut(rowKey(i)).Add("f", "q", 0, value)})
	}
	for i, r := range tbl.Batch(ctx, ops) {
		if r.Err != nil {
			t.Fatalf("put %d: %v", i, r.Err)
		}
	}
	regionName, conn := locate(t, c, "big", rowKey(0))
	var resp pb.ScanResponse
	block, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Scan: &pb.Scan{Caching: math.MaxInt32}, NumberOfRows: math.MaxInt32}, nil, &resp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(block) > capBytes+len(value)+1024 || len(resp.GetCellsPerResult()) >= rows || !resp.GetMoreResultsInRegion() {
		t.Fatalf("first answer: %d bytes, %d rows, more %v; want at most about %d bytes and more to come",
			len(block), len(resp.GetCellsPerResult()), resp.GetMoreResultsInRegion(), capBytes)
	}
	_, _ = conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{ScannerId: resp.GetScannerId(), CloseScanner: true}, nil, &pb.ScanResponse{}, nil)
	// The client's scan, asking for everything at once too, still sees every row.
	sc := tbl.Scan(ctx, &pb.Scan{Caching: math.MaxInt32})
	defer sc.Close()
	n := 0
	for r, ok := sc.Next(); ok; r, ok = sc.Next() {
		if string(r.Row) != string(rowKey(n)) || len(r.Cells) != 1 || !bytes.Equal(r.Cells[0].Value, value) {
			t.Fatalf("scan result %d: row %q, %d cells", n, r.Row, len(r.Cells))
		}
		n++
	}
	if sc.Err() != nil || n != rows {
		t.Fatalf("scan: %d rows, err %v", n, sc.Err())
	}
}

// TestMultiAnswerCapped: a multi of gets whose answer would pass MaxScanResultSize (a small
// request of many gets of one large row) is answered up to about the cap; the actions after it are
// answered RESULT_TOO_LARGE, and the client sends them again until all are answered.
func TestMultiAnswerCapped(t *testing.T) {
	c, tbl := cappedAnswers(t, "wide")
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 64<<10)
	if err := tbl.Put(ctx, client.NewPut([]byte("big")).Add("f", "q", 0, value)); err != nil {
		t.Fatal(err)
	}
	const gets = 40 // 2.5 MiB of answer from a request of a few hundred bytes
	regionName, conn := locate(t, c, "wide", []byte("big"))
	ra := &pb.RegionAction{Region: &pb.RegionSpecifier{Name: regionName}}
	for i := range gets {
		ra.Actions = append(ra.Actions, &pb.Action{Index: uint32(i), Get: &pb.Get{Row: []byte("big")}})
	}
	var resp pb.MultiResponse
	block, err := conn.Call(ctx, pb.Method_METHOD_MULTI, &pb.MultiRequest{RegionActions: []*pb.RegionAction{ra}}, nil, &resp, nil)
	if err != nil {
		t.Fatal(err)
	}
	served, tooLarge := 0, 0
	for _, roe := range resp.GetResults()[0].GetResults() {
		switch {
		case roe.GetException().GetCode() == pb.ErrorCode_ERROR_CODE_RESULT_TOO_LARGE && roe.GetException().GetRetryable():
			tooLarge++
		case roe.GetException() == nil && roe.GetResult().GetCellCount() == 1:
			served++
		default:
			t.Fatalf("action %d: %v", roe.GetIndex(), roe)
		}
	}
	if served == 0 || tooLarge == 0 || served+tooLarge != gets || len(block) > capBytes+len(value)+1024 {
		t.Fatalf("%d served and %d left out in an answer of %d bytes; want some of each and at most about %d bytes", served, tooLarge, len(block), capBytes)
	}
	// The client's batch of the same gets sees every one.
	ops := make([]client.BatchOp, gets)
	for i := range ops {
		ops[i] = client.BatchOp{Get: &pb.Get{Row: []byte("big")}}
	}
	for i, r := range tbl.Batch(ctx, ops) {
		if r.Err != nil || r.Result == nil || len(r.Result.Cells) != 1 || !bytes.Equal(r.Result.Cells[0].Value, value) {
			t.Fatalf("get %d of the batch: %v", i, r.Err)
		}
	}
}

// scannerOpener makes table "sc" of ten rows in c, and answers a function that opens a scanner
// of its region with one row in its first answer (left open: more rows follow), answering its id,
// and the connection it uses.
func scannerOpener(t *testing.T, c *cluster) (func(*pb.Scan) (uint64, error), *rpc.Conn) {
	t.Helper()
	ctx := context.Background()
	createTable(t, c, "sc", nil)
	tbl := c.client.Table("sc")
	for i := range 10 {
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", 0, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	regionName, conn := locate(t, c, "sc", rowKey(0))
	return func(scan *pb.Scan) (uint64, error) {
		var resp pb.ScanResponse
		_, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Scan: scan, NumberOfRows: 1}, nil, &resp, nil)
		return resp.GetScannerId(), err
	}, conn
}

// TestOpenScannersKeepNotTheirRequest: a scanner kept open holds what it needs of its Scan, not
// the Scan (whose attributes a client may make large); rows over HBase's limit are refused.
func TestOpenScannersKeepNotTheirRequest(t *testing.T) {
	open, _ := scannerOpener(t, startCluster(t, 1))
	openScan := func(scan *pb.Scan) error {
		_, err := open(scan)
		return err
	}
	if err := openScan(&pb.Scan{StopRow: bytes.Repeat([]byte("r"), cell.MaxRowLength+2)}); err == nil || !strings.Contains(err.Error(), "stop row") {
		t.Fatalf("a stop row over the limit: %v", err)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	const scanners = 32
	for range scanners { // each left open after its first row, with 1 MiB of attributes
		if err := openScan(&pb.Scan{Attributes: map[string][]byte{"pad": make([]byte, 1<<20)}}); err != nil {
			t.Fatal(err)
		}
	}
	if grew := int64(heap()) - int64(before); grew > scanners<<20/3 {
		t.Fatalf("%d open scanners hold %d MiB", scanners, grew>>20)
	}
}

// TestOpenScannersAreBounded: scanners opened and never closed stop at MaxScanners (TOO_BUSY);
// closing one makes room.
func TestOpenScannersAreBounded(t *testing.T) {
	c := startTunedCluster(t, 1, func(cfg *Config) { cfg.MaxScanners = 2 })
	ctx := context.Background()
	openScan, conn := scannerOpener(t, c)
	open := func() (uint64, error) { return openScan(&pb.Scan{}) }
	first, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(); err != nil {
		t.Fatal(err)
	}
	_, err = open()
	wantCode(t, "a third open scanner", err, pb.ErrorCode_ERROR_CODE_TOO_BUSY)
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{ScannerId: first, CloseScanner: true}, nil, &pb.ScanResponse{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := open(); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	// The limit changes while the server runs (an online setting): one more fits, then no more.
	s := c.servers[0]
	if err := s.SetMaxScanners(3); err != nil {
		t.Fatal(err)
	}
	if _, err := open(); err != nil {
		t.Fatalf("with the limit raised to 3: %v", err)
	}
	_, err = open()
	wantCode(t, "a fourth open scanner", err, pb.ErrorCode_ERROR_CODE_TOO_BUSY)
	if err := s.SetMaxScanners(0); err == nil {
		t.Fatal("a limit of 0 scanners was accepted")
	}
	// UpdateConfiguration without a configuration file changes nothing.
	if r, err := s.UpdateConfiguration(); err != nil || len(r.GetApplied())+len(r.GetNeedsRestart()) > 0 || r.GetError() != "" {
		t.Fatalf("UpdateConfiguration without a file: %v, %v", r, err)
	}
}

// A WAL that keeps more units than WALMaxBacklog for unflushed edits gets the regions pinning its
// oldest flushed (HBase's maxlogs): a region written to once and then left alone would otherwise
// keep every later segment — all of which a recovery reads — alive for ever.
func TestWALBacklogForcesFlushes(t *testing.T) {
	c := startTunedCluster(t, 1, func(cfg *Config) {
		cfg.WALSegmentSize = 8 << 10 // rolls every few writes
		cfg.WALMaxBacklog = 3
	})
	ctx := context.Background()
	createTable(t, c, "quiet", nil)
	createTable(t, c, "busy", nil)
	// One write to "quiet" pins the oldest segment; "busy" then fills many more.
	if err := c.client.Table("quiet").Put(ctx, client.NewPut([]byte("q")).Add("f", "q", cell.LatestTimestamp, []byte("1"))); err != nil {
		t.Fatal(err)
	}
	busy := c.client.Table("busy")
	val := make([]byte, 1000)
	for i := range 200 {
		row := []byte(fmt.Sprintf("row%04d", i))
		if err := busy.Put(ctx, client.NewPut(row).Add("f", "q", cell.LatestTimestamp, val)); err != nil {
			t.Fatal(err)
		}
	}
	s := c.servers[0]
	deadline := time.Now().Add(30 * time.Second)
	for {
		units, _ := s.currentWAL().Backlog()
		if units <= 3 && s.m.backlogFlushes.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL still keeps %d closed segments (limit 3) after %d backlog flushes", units, s.m.backlogFlushes.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The quiet region was among those flushed: its write is in a store file.
	for _, name := range s.OnlineRegions() {
		v, _ := s.regions.Load(name)
		r := v.(*onlineRegion).r.Load()
		if r.Table().Name == "quiet" && r.Metrics().StoreFiles.Load() == 0 {
			t.Fatal("the region pinning the oldest segment was never flushed")
		}
	}
}

// A move flushes the region while it still serves (HBase's pre-close flush): with that flush held,
// the source still answers reads and writes; once it ends, the destination prepares the region
// (opens its files) and the region closes with what was written meanwhile and opens at the
// destination, from what it prepared, with every write.
func TestMoveFlushesBeforeTheRegionStopsServing(t *testing.T) {
	var ffs []*faultfs.FS
	c := startTunedCluster(t, 2, func(cfg *Config) { f := faultfs.New(cfg.FS); cfg.FS = f; ffs = append(ffs, f) })
	ctx := context.Background()
	createTable(t, c, "pf", nil)
	tbl := c.client.Table("pf")
	put := func(row, v string) {
		t.Helper()
		if err := tbl.Put(ctx, client.NewPut([]byte(row)).Add("f", "q", cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	regionName, conn := locate(t, c, "pf", []byte("a"))
	src := 0
	if len(c.servers[1].OnlineRegions()) == 1 {
		src = 1
	}
	entered, release := make(chan struct{}), make(chan struct{})
	ffs[src].AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Path: "data/default/pf/*/.tmp/*", Nth: 1, Action: faultfs.Call,
		Fn: func() { close(entered); <-release }})
	moved := make(chan error, 1)
	go func() {
		moved <- c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: regionName, Destination: c.servers[1-src].Name()})
			return err
		})
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the move flushed nothing")
	}
	// The first flush is held: the region still serves where it is.
	resp := &pb.GetResponse{}
	_, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: regionName}, Get: &pb.Get{Row: []byte("a")}}, nil, resp, nil)
	if err != nil || resp.GetResult().GetCellCount() != 1 {
		close(release)
		t.Fatalf("get from the source during the pre-close flush: %v %v, want the row", resp, err)
	}
	put("b", "2") // a write during the pre-close flush, flushed by the close
	// A scanner opened before the close, one of the two rows read.
	region := &pb.RegionSpecifier{Name: regionName}
	open := &pb.ScanResponse{}
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, Scan: &pb.Scan{}, NumberOfRows: 1}, nil, open, nil); err != nil || open.GetScannerId() == 0 {
		close(release)
		t.Fatalf("a scan of the region's two rows, one read: %v %v", open, err)
	}
	// Then hold the close's own (last) write: the manifest, which for a move holds the few edits
	// written since the pre-close flush (its own manifest write is the first one here).
	lastEntered, lastRelease := make(chan struct{}), make(chan struct{})
	ffs[src].AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Path: "data/default/pf/*/MANIFEST.tmp", Nth: 2, Action: faultfs.Call,
		Fn: func() { close(lastEntered); <-lastRelease }})
	close(release)
	select {
	case <-lastEntered:
	case <-time.After(30 * time.Second):
		close(lastRelease)
		t.Fatal("the close did not write what was written during the pre-close flush")
	}
	// The destination prepared the region (opened its store files) before the close began.
	dst := c.servers[1-src]
	dst.preparedMu.Lock()
	prepared := dst.prepared[regionName] != nil
	dst.preparedMu.Unlock()
	if !prepared {
		close(lastRelease)
		t.Fatal("the close began before the destination prepared the region")
	}
	// The region is closed for writes and still serves reads: a get, the scanner's next.
	resp = &pb.GetResponse{}
	if _, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: region, Get: &pb.Get{Row: []byte("b")}}, nil, resp, nil); err != nil || resp.GetResult().GetCellCount() != 1 {
		close(lastRelease)
		t.Fatalf("get from the source during the close's flush: %v %v, want the row", resp, err)
	}
	next := &pb.ScanResponse{}
	if _, err := conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: region, ScannerId: open.GetScannerId(), NextCallSeq: 1, NumberOfRows: 1}, nil, next, nil); err != nil || len(next.GetCellsPerResult()) != 1 {
		close(lastRelease)
		t.Fatalf("the scanner's next during the close's flush: %v %v, want a row", next, err)
	}
	// An order to open the region here again while it closes is not taken as accepted (the
	// master would wait for an OPENED report that never comes): Unavailable, so it is resent.
	srv := c.servers[src]
	octx, ocancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, oerr := (&adminService{s: srv}).OpenRegion(octx, &pb.OpenRegionRequest{Region: &pb.RegionInfo{Name: regionName,
		Table: &pb.TableName{Namespace: "default", Name: "pf"}}, Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "pf"}}})
	ocancel()
	if status.Code(oerr) != codes.Unavailable {
		close(lastRelease)
		t.Fatalf("an open order for the region while it closes here answered %v; want Unavailable", oerr)
	}
	// A write waits for the close to be reported (1 s at most) rather than being sent at once
	// to a destination that does not know of the region yet.
	wrote := make(chan error, 1)
	go func() {
		p := cell.AppendKeyValue(nil, []byte("c"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, []byte("3"))
		_, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: region,
			Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte("c"), CellCount: 1}}, p, &pb.MutateResponse{}, nil)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		close(lastRelease)
		t.Fatalf("a write during the close's flush was answered at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(lastRelease)
	if err := <-wrote; err != nil {
		wantCode(t, "a write that waited for the close", err, pb.ErrorCode_ERROR_CODE_REGION_MOVED)
	} else {
		t.Fatal("the source took a write after its close began")
	}
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	c.waitOpen("pf", 1, c.servers[src].Name(), 30*time.Second)
	// The close wrote no store file: "b" reached the destination in the manifest, which the
	// destination replayed without flushing.
	if _, r, _ := c.servers[1-src].lookup(regionName); r == nil {
		t.Fatal("the region is not at the destination")
	} else if n := r.StoreFileCount()["f"]; n != 1 || r.Metrics().Flushes.Load() != 0 {
		t.Fatalf("after the move the region has %d store files and its destination flushed %d times; want the pre-close flush's file alone",
			n, r.Metrics().Flushes.Load())
	}
	if n := dst.m.preparedOpens.Load(); n != 1 {
		t.Fatalf("the destination's open took %d prepared regions; want the move's", n)
	}
	for row, want := range map[string]string{"a": "1", "b": "2"} {
		r, err := tbl.Get(ctx, &pb.Get{Row: []byte(row)})
		if err != nil || len(r.Cells) != 1 || string(r.Cells[0].Value) != want {
			t.Fatalf("get %s after the move: %v %v, want %s", row, r, err, want)
		}
	}
}

// TestClientSentTags: tags a client sends with its cells cross the data path and are stored
// before the server's (a TTL tag is honoured, an application's own type kept for server-side
// code); a tag of a system type sent around the client's own check is refused by the server.
func TestClientSentTags(t *testing.T) {
	c := startTunedCluster(t, 1, nil)
	ctx := context.Background()
	createTable(t, c, "tags", nil)
	tbl := c.client.Table("tags")
	mine := cell.AppendTag(nil, 70, []byte("app"))
	old := time.Now().Add(-time.Hour).UnixMilli()
	if err := tbl.Put(ctx, client.NewPut([]byte("kept")).AddTagged("f", "q", cell.LatestTimestamp, []byte("v"), mine)); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Put(ctx, client.NewPut([]byte("expired")).AddTagged("f", "q", old, []byte("v"), cell.AppendTTLTag(nil, 1000))); err != nil {
		t.Fatal(err)
	}
	if res, err := tbl.Get(ctx, &pb.Get{Row: []byte("expired")}); err != nil || len(res.Cells) != 0 {
		t.Fatalf("a cell past its TTL tag: %v %v", res, err)
	}
	name, conn := locate(t, c, "tags", []byte("kept"))
	_, r, d := c.servers[0].lookup(name)
	if d != nil {
		t.Fatal(d)
	}
	res, err := r.Get(&region.Get{Row: []byte("kept")})
	if err != nil || len(res.Cells) != 1 || !bytes.Equal(res.Cells[0].Tags, mine) {
		t.Fatalf("the stored cell: %v %v", res, err)
	}
	if err := tbl.Put(ctx, client.NewPut([]byte("acl")).AddTagged("f", "q", cell.LatestTimestamp, []byte("v"), cell.AppendTag(nil, cell.TagACL, []byte("x")))); err == nil {
		t.Fatal("the client sent an ACL tag")
	}
	block := cell.AppendTaggedKeyValue(nil, cell.AppendKey(nil, []byte("acl"), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put),
		[]byte("v"), cell.AppendTag(nil, cell.TagACL, []byte("x")))
	_, err = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: name},
		Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte("acl"), CellCount: 1}}, block, &pb.MutateResponse{}, nil)
	wantCode(t, "a put with an ACL tag", err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
}

// fenceAfterWrite closes its server's fence for good (a fence whose clock runs a day ahead stays
// closed whatever heartbeats renew) once an armed mutation is applied: the lease lapsing between
// a write and its answer.
type fenceAfterWrite struct {
	s     *Server
	armed atomic.Bool
}

func (o *fenceAfterWrite) Hooks() region.ObserverHooks      { return region.ObserverHooks{PostMutate: true} }
func (o *fenceAfterWrite) PreMutate(*region.Mutation) error { return nil }
func (o *fenceAfterWrite) PostMutate(*region.Mutation) {
	if o.armed.CompareAndSwap(true, false) {
		o.s.fence.Store(lease.NewFence(lease.Config{Lease: time.Second}, func() time.Time { return time.Now().Add(24 * time.Hour) }))
	}
}
func (o *fenceAfterWrite) FilterRead([]byte, []region.KV, bool) (bool, []region.KV, error) {
	return true, nil, nil
}
func (o *fenceAfterWrite) FilterFile(region.FileWrite, bool, []byte, []region.KV, []bool) {}

// A conditional write applied while the lease lapsed is answered OUTCOME_UNKNOWN, not retried: it
// was answered LEASE_EXPIRED (retryable), the client sent it again once the lease was renewed,
// and the retry found the write's own effect and answered "condition failed" — a client that
// took a lock by check-and-put was told someone else held it.
func TestAppliedConditionalWriteAfterTheFenceClosedIsNotRetried(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	createTable(t, c, "oc", nil)
	s := c.servers[0]
	regionName, conn := locate(t, c, "oc", []byte("lock"))
	_, r, d := s.lookup(regionName)
	if d != nil {
		t.Fatal(d)
	}
	obs := &fenceAfterWrite{s: s}
	r.SetObserver(obs)
	tbl := c.client.Table("oc")
	absent := &pb.Condition{Row: []byte("lock"), Family: []byte("f"), Qualifier: []byte("owner"), Op: pb.CompareOp_COMPARE_OP_EQUAL}
	take := func(who string) *client.Mutation {
		return client.NewPut([]byte("lock")).Add("f", "owner", cell.LatestTimestamp, []byte(who))
	}
	// With the defect the client retries until the deadline: a short one.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	// One check-and-mutate.
	saved := s.fence.Load()
	obs.armed.Store(true)
	ok, err := tbl.CheckAndMutate(ctx, absent, take("a"))
	s.fence.Store(saved)
	if d, _ := pb.DetailOf(err); ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN {
		t.Fatalf("check-and-mutate applied while the fence closed: processed %v, error %v; want OUTCOME_UNKNOWN", ok, err)
	}

	// A conditional RowMutations in a batch.
	obs.armed.Store(true)
	absentB := &pb.Condition{Row: []byte("lock2"), Family: []byte("f"), Qualifier: []byte("owner"), Op: pb.CompareOp_COMPARE_OP_EQUAL}
	res := tbl.Batch(ctx, []client.BatchOp{
		{RowMutations: []*client.Mutation{client.NewPut([]byte("lock2")).Add("f", "owner", cell.LatestTimestamp, []byte("b"))}, Condition: absentB},
	})
	s.fence.Store(saved)
	if d, _ := pb.DetailOf(res[0].Err); d.GetCode() != pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN {
		t.Fatalf("conditional RowMutations applied while the fence closed: %+v; want OUTCOME_UNKNOWN", res[0])
	}
	// A check-and-mutate by MUTATE (as HBase's client sends checkAndPut).
	obs.armed.Store(true)
	block := cell.AppendKeyValue(nil, []byte("lock3"), []byte("f"), []byte("owner"), cell.LatestTimestamp, cell.Put, []byte("c"))
	_, err = conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
		Mutation:  &pb.MutationProto{Row: []byte("lock3"), CellCount: 1},
		Condition: &pb.Condition{Row: []byte("lock3"), Family: []byte("f"), Qualifier: []byte("owner"), Op: pb.CompareOp_COMPARE_OP_EQUAL}},
		block, &pb.MutateResponse{}, nil)
	s.fence.Store(saved)
	wantCode(t, "a conditional MUTATE applied while the fence closed", err, pb.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN)
	// The writes were applied once.
	for _, row := range []string{"lock", "lock2", "lock3"} {
		got, err := tbl.Get(ctx, &pb.Get{Row: []byte(row), MaxVersions: 10})
		if err != nil || len(got.Cells) != 1 {
			t.Fatalf("%s after the unknown outcome: %v %v; want one version", row, got, err)
		}
	}
}
