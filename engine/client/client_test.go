package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/rpc"
)

// The client's retry and routing logic is tested against small fake servers over real sockets: they
// produce, on demand, the answers (moved, not serving, throttled, a dead primary) that real servers
// give only in failure scenarios. End-to-end tests against real servers live with the cluster.

type fakeRegion struct {
	info   *pb.RegionInfo
	server *fakeServer
}

type fakeMaster struct {
	pb.UnimplementedMasterServer
	mu      sync.Mutex
	regions []*fakeRegion // sorted by start key; replicas have ReplicaId > 0
	locates atomic.Int64
}

func (m *fakeMaster) LocateRegion(_ context.Context, req *pb.LocateRegionRequest) (*pb.LocateRegionResponse, error) {
	m.locates.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	var primary *fakeRegion
	for _, r := range m.regions {
		if r.info.ReplicaId != 0 {
			continue
		}
		in := bytes.Compare(req.Row, r.info.StartKey) >= 0 && (len(r.info.EndKey) == 0 || bytes.Compare(req.Row, r.info.EndKey) < 0)
		if req.Before {
			in = (len(req.Row) == 0 && len(r.info.EndKey) == 0) ||
				(len(req.Row) > 0 && bytes.Compare(r.info.StartKey, req.Row) < 0 && (len(r.info.EndKey) == 0 || bytes.Compare(req.Row, r.info.EndKey) <= 0))
		}
		if in {
			primary = r
		}
	}
	if primary == nil {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND, Message: "no region"}).Status()
	}
	resp := &pb.LocateRegionResponse{}
	for _, r := range m.regions {
		if bytes.Equal(r.info.StartKey, primary.info.StartKey) {
			resp.Locations = append(resp.Locations, &pb.RegionLocation{Region: r.info, Server: r.server.name()})
		}
	}
	return resp, nil
}

func (m *fakeMaster) setServer(region string, s *fakeServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.regions {
		if r.info.Name == region {
			r.server = s
		}
	}
}

// fakeServer is a region server holding rows in memory (latest value per column only).
type fakeServer struct {
	addr  string
	srv   *rpc.Server
	stale bool // a replica: answers are marked stale

	mu      sync.Mutex
	rows    map[string][]cell.Cell // by row
	regions map[string]*pb.RegionInfo
	// fail answers the next calls with this error (count in failN).
	fail  *pb.ErrorDetail
	failN int
	block chan struct{} // when set, GETs wait on it (a hung server)
	// nextBlock, when set, makes nexts of open scanners wait on it (closes do not); openBlock
	// the same for scanner opens.
	nextBlock, openBlock chan struct{}
	// multiGate, when set, makes multis wait on it; multis counts them, and inMulti and
	// maxInMulti how many were under way at once.
	multiGate                   chan struct{}
	multis, inMulti, maxInMulti atomic.Int64
	// dropResult makes the next multi leave its last region action's last action (a mutation,
	// applied) unanswered: a faulty server.
	dropResult atomic.Bool
	// partialRows sends each scanned row as two partial results; cutRows sends them in two
	// answers.
	partialRows, cutRows bool
	// throttleNexts answers that many nexts of open scanners THROTTLED; opens counts scanners
	// opened.
	throttleNexts, opens int
	// heartbeats: each scanner answers this many heartbeats before each batch of rows (a filter
	// that skips rows for longer than the call's time limit); timeLimits records what clients
	// asked for.
	heartbeats int
	timeLimits []int64
	scanners   map[uint64]*fakeScanner
	nextID     uint64
	calls      atomic.Int64
	increments atomic.Int64
	nonces     map[uint64]bool
}

type fakeScanner struct {
	region *pb.RegionInfo
	rows   []string
	pos    int
	beats  int
	half   bool // cutRows: the row at pos had its first cell sent
}

func (s *fakeServer) name() *pb.ServerName {
	host, port, _ := net.SplitHostPort(s.addr)
	p, _ := strconv.Atoi(port)
	return &pb.ServerName{Host: host, Port: int32(p)}
}

func newFakeServer(t *testing.T) *fakeServer {
	s := &fakeServer{rows: map[string][]cell.Cell{}, regions: map[string]*pb.RegionInfo{}, scanners: map[uint64]*fakeScanner{}, nonces: map[uint64]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.srv = rpc.NewServer(map[uint32]rpc.Handler{
		uint32(pb.Method_METHOD_GET):    s.get,
		uint32(pb.Method_METHOD_MUTATE): s.mutate,
		uint32(pb.Method_METHOD_MULTI):  s.multi,
		uint32(pb.Method_METHOD_SCAN):   s.scan,
	}, rpc.ServerOptions{})
	go s.srv.Serve(lis)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *fakeServer) failNext(n int, d *pb.ErrorDetail) {
	s.mu.Lock()
	s.fail, s.failN = d, n
	s.mu.Unlock()
}

// check answers for the region or returns the injected/not-serving error.
func (s *fakeServer) check(region string) (*pb.RegionInfo, *pb.ErrorDetail) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failN > 0 {
		s.failN--
		return nil, s.fail
	}
	ri := s.regions[region]
	if ri == nil {
		return nil, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Region: region, Message: "not here"}
	}
	return ri, nil
}

func (s *fakeServer) get(_ context.Context, c *rpc.Call) {
	var req pb.GetRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	if _, d := s.check(req.Region.Name); d != nil {
		c.Fail(d)
		return
	}
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	cells := s.rows[string(req.Get.Row)]
	var block []byte
	for i := range cells {
		block = cells[i].AppendKeyValue(block)
	}
	s.mu.Unlock()
	c.Reply(&pb.GetResponse{Result: &pb.Result{CellCount: int32(len(cells)), Stale: s.stale}}, block)
}

func (s *fakeServer) apply(m *pb.MutationProto, block []byte, nonceGroup uint64) ([]cell.Cell, []byte, error) {
	cells, rest, err := decodeCells(block, int(m.CellCount))
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := string(m.Row)
	if m.Type == pb.MutationProto_TYPE_INCREMENT && m.Nonce != 0 {
		if s.nonces[nonceGroup^m.Nonce] {
			return nil, rest, nil // a retry of an applied increment
		}
		s.nonces[nonceGroup^m.Nonce] = true
	}
	for _, nc := range cells {
		nc.Row, nc.Family, nc.Qualifier, nc.Value = bytes.Clone(nc.Row), bytes.Clone(nc.Family), bytes.Clone(nc.Qualifier), bytes.Clone(nc.Value)
		if m.Type == pb.MutationProto_TYPE_INCREMENT {
			s.increments.Add(1)
		}
		replaced := false
		for i, old := range s.rows[row] {
			if bytes.Equal(old.Family, nc.Family) && bytes.Equal(old.Qualifier, nc.Qualifier) {
				s.rows[row][i], replaced = nc, true
			}
		}
		if !replaced {
			s.rows[row] = append(s.rows[row], nc)
		}
	}
	if m.Type == pb.MutationProto_TYPE_DELETE {
		delete(s.rows, row)
	}
	return s.rows[row], rest, nil
}

func (s *fakeServer) mutate(_ context.Context, c *rpc.Call) {
	var req pb.MutateRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	if _, d := s.check(req.Region.Name); d != nil {
		c.Fail(d)
		return
	}
	if _, _, err := s.apply(req.Mutation, c.Cells, req.NonceGroup); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	c.Reply(&pb.MutateResponse{Result: &pb.Result{}})
}

func (s *fakeServer) multi(_ context.Context, c *rpc.Call) {
	s.multis.Add(1)
	n := s.inMulti.Add(1)
	answered := false
	defer func() { // before the answer leaves, so the client's next batch cannot overlap this one here
		if !answered {
			s.inMulti.Add(-1)
		}
	}()
	for m := s.maxInMulti.Load(); n > m && !s.maxInMulti.CompareAndSwap(m, n); m = s.maxInMulti.Load() {
	}
	s.mu.Lock()
	gate := s.multiGate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	var req pb.MultiRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	block := c.Cells
	resp := &pb.MultiResponse{}
	var out []byte
	for _, ra := range req.RegionActions {
		rr := &pb.RegionActionResult{Processed: true}
		resp.Results = append(resp.Results, rr)
		_, d := s.check(ra.Region.Name)
		for _, a := range ra.Actions {
			if a.Mutation != nil {
				_, rest, _ := decodeCells(block, int(a.Mutation.CellCount))
				if d == nil {
					_, _, _ = s.apply(a.Mutation, block, req.NonceGroup)
				}
				block = rest
			}
			if d != nil {
				continue
			}
			roe := &pb.ResultOrException{Index: a.Index, Result: &pb.Result{}}
			if a.Get != nil {
				s.mu.Lock()
				cells := s.rows[string(a.Get.Row)]
				for i := range cells {
					out = cells[i].AppendKeyValue(out)
				}
				roe.Result.CellCount = int32(len(cells))
				s.mu.Unlock()
			}
			rr.Results = append(rr.Results, roe)
		}
		if d != nil {
			rr.Exception = d
		}
	}
	if n := len(resp.Results); n > 0 && len(resp.Results[n-1].Results) > 0 && s.dropResult.CompareAndSwap(true, false) {
		last := resp.Results[n-1]
		last.Results = last.Results[:len(last.Results)-1]
	}
	answered = true
	s.inMulti.Add(-1)
	c.Reply(resp, out)
}

func (s *fakeServer) scan(_ context.Context, c *rpc.Call) {
	var req pb.ScanRequest
	if err := proto.Unmarshal(c.Message, &req); err != nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: err.Error()})
		return
	}
	s.mu.Lock()
	sc := s.scanners[req.ScannerId]
	s.mu.Unlock()
	if req.ScannerId != 0 && sc == nil {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER, Message: "no such scanner"})
		return
	}
	s.mu.Lock()
	throttle := req.ScannerId != 0 && !req.CloseScanner && s.throttleNexts > 0
	if throttle {
		s.throttleNexts--
	}
	if req.ScannerId == 0 {
		s.opens++
	}
	s.mu.Unlock()
	if throttle {
		c.Fail(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED, Message: "over quota", Retryable: true, RetryAfterMs: 1})
		return
	}
	if req.CloseScanner {
		s.mu.Lock()
		delete(s.scanners, req.ScannerId)
		s.mu.Unlock()
		c.Reply(&pb.ScanResponse{})
		return
	}
	if req.ScannerId != 0 && s.nextBlock != nil {
		<-s.nextBlock
	}
	if req.ScannerId == 0 && s.openBlock != nil {
		<-s.openBlock
	}
	ri, d := s.check(req.Region.Name)
	if d != nil {
		c.Fail(d)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc == nil {
		var rows []string
		for r := range s.rows {
			in := r >= string(ri.StartKey) && (len(ri.EndKey) == 0 || r < string(ri.EndKey))
			sr := string(req.Scan.StartRow)
			if req.Scan.Reversed {
				in = in && (sr == "" || r < sr || (r == sr && !req.Scan.ExcludeStartRow))
				in = in && (len(req.Scan.StopRow) == 0 || r > string(req.Scan.StopRow) || r == string(req.Scan.StopRow) && req.Scan.IncludeStopRow)
			} else {
				in = in && (r > sr || (r == sr && !req.Scan.ExcludeStartRow))
				in = in && (len(req.Scan.StopRow) == 0 || r < string(req.Scan.StopRow) || r == string(req.Scan.StopRow) && req.Scan.IncludeStopRow)
			}
			if in {
				rows = append(rows, r)
			}
		}
		sort.Strings(rows)
		if req.Scan.Reversed {
			sort.Sort(sort.Reverse(sort.StringSlice(rows)))
		}
		s.nextID++
		sc = &fakeScanner{region: ri, rows: rows}
		s.scanners[s.nextID] = sc
		req.ScannerId = s.nextID
	}
	s.timeLimits = append(s.timeLimits, req.TimeLimitMs)
	resp := &pb.ScanResponse{ScannerId: req.ScannerId, MoreResults: true, Stale: s.stale}
	if sc.beats < s.heartbeats && sc.pos < len(sc.rows) {
		sc.beats++
		resp.Heartbeat, resp.MoreResultsInRegion, resp.CursorRow = true, true, []byte(sc.rows[sc.pos])
		c.Reply(resp)
		return
	}
	sc.beats = 0
	var out []byte
	for n := 0; n < int(req.NumberOfRows) && sc.pos < len(sc.rows); n++ {
		cells := s.rows[sc.rows[sc.pos]]
		if s.cutRows && len(cells) > 1 {
			first := !sc.half
			part := cells[1:]
			if first {
				part = cells[:1]
			} else {
				sc.pos++
			}
			sc.half = first
			for j := range part {
				out = part[j].AppendKeyValue(out)
			}
			resp.CellsPerResult = append(resp.CellsPerResult, int32(len(part)))
			resp.PartialFlagPerResult = append(resp.PartialFlagPerResult, first)
			if first {
				break
			}
			continue
		}
		sc.pos++
		parts := [][]cell.Cell{cells}
		if s.partialRows && len(cells) > 1 {
			parts = [][]cell.Cell{cells[:1], cells[1:]}
		}
		for i, p := range parts {
			for j := range p {
				out = p[j].AppendKeyValue(out)
			}
			resp.CellsPerResult = append(resp.CellsPerResult, int32(len(p)))
			resp.PartialFlagPerResult = append(resp.PartialFlagPerResult, i < len(parts)-1)
		}
	}
	resp.MoreResultsInRegion = sc.pos < len(sc.rows)
	if !resp.MoreResultsInRegion {
		delete(s.scanners, req.ScannerId)
		resp.ScannerId = 0
	}
	c.Reply(resp, out)
}

// cluster: a master and servers; regions split at "m" (and "t" when three regions are asked for).
func newCluster(t *testing.T, servers int, splits ...string) (*fakeMaster, []*fakeServer, *Client) {
	t.Helper()
	m := &fakeMaster{}
	var ss []*fakeServer
	for range servers {
		ss = append(ss, newFakeServer(t))
	}
	bounds := append(append([]string{""}, splits...), "")
	for i := 0; i+1 < len(bounds); i++ {
		info := &pb.RegionInfo{RegionId: uint64(i + 1), Name: fmt.Sprintf("r%d", i+1), StartKey: []byte(bounds[i]), EndKey: []byte(bounds[i+1])}
		s := ss[i%len(ss)]
		s.regions[info.Name] = info
		m.regions = append(m.regions, &fakeRegion{info: info, server: s})
	}
	return m, ss, clientOf(t, m)
}

// clientOf serves m as the master and returns a client of it.
func clientOf(t *testing.T, m pb.MasterServer) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterMasterServer(gs, m)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	c, err := New(Config{Masters: []string{lis.Addr().String()}, Pause: 5 * time.Millisecond, RPCTimeout: 2 * time.Second, OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(t *testing.T, tb *Table, row, value string) {
	t.Helper()
	if err := tb.Put(context.Background(), NewPut([]byte(row)).Add("f", "q", 1, []byte(value))); err != nil {
		t.Fatalf("put %s: %v", row, err)
	}
}

func get(t *testing.T, tb *Table, row string) string {
	t.Helper()
	r, err := tb.Get(context.Background(), &pb.Get{Row: []byte(row)})
	if err != nil {
		t.Fatalf("get %s: %v", row, err)
	}
	return string(r.Value("f", "q"))
}

func TestPutGetAcrossRegions(t *testing.T) {
	m, ss, c := newCluster(t, 2, "m")
	tb := c.Table("t")
	put(t, tb, "apple", "1")
	put(t, tb, "zebra", "2")
	if got := get(t, tb, "apple"); got != "1" {
		t.Errorf("apple = %q", got)
	}
	if got := get(t, tb, "zebra"); got != "2" {
		t.Errorf("zebra = %q", got)
	}
	if len(ss[0].rows) != 1 || len(ss[1].rows) != 1 {
		t.Errorf("rows not routed by region: server0 %d rows, server1 %d rows", len(ss[0].rows), len(ss[1].rows))
	}
	if n := m.locates.Load(); n != 2 {
		t.Errorf("master asked %d times, want 2 (one per region, then cached)", n)
	}
}

func TestRegionMovedIsFollowedWithoutTheMaster(t *testing.T) {
	m, ss, c := newCluster(t, 2, "m")
	tb := c.Table("t")
	put(t, tb, "apple", "1")
	// r1 moves from server 0 to server 1; server 0 answers REGION_MOVED with the new place.
	ss[1].regions["r1"] = ss[0].regions["r1"]
	ss[1].rows["apple"] = ss[0].rows["apple"]
	ss[0].failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_MOVED, Region: "r1", NewLocation: ss[1].name()})
	before := m.locates.Load()
	if got := get(t, tb, "apple"); got != "1" {
		t.Fatalf("apple = %q", got)
	}
	if m.locates.Load() != before {
		t.Error("the client asked the master although the answer said where the region went")
	}
	put(t, tb, "banana", "2")
	if ss[1].rows["banana"] == nil {
		t.Error("the write after the move did not go to the new server")
	}
}

func TestNotServingRegionRelocates(t *testing.T) {
	m, ss, c := newCluster(t, 2, "m")
	tb := c.Table("t")
	put(t, tb, "apple", "1")
	// The region moves without a forwarding answer: server 0 forgets it, the master knows.
	ss[1].regions["r1"] = ss[0].regions["r1"]
	ss[1].rows["apple"] = ss[0].rows["apple"]
	delete(ss[0].regions, "r1")
	m.setServer("r1", ss[1])
	if got := get(t, tb, "apple"); got != "1" {
		t.Fatalf("apple = %q", got)
	}
}

func TestRetryAfterAndPermanentErrors(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	tb := c.Table("t")
	ss[0].failNext(2, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_THROTTLED, RetryAfterMs: 30, Message: "over quota"})
	start := time.Now()
	put(t, tb, "a", "1")
	if waited := time.Since(start); waited < 60*time.Millisecond {
		t.Errorf("two THROTTLED answers with retry-after 30 ms took only %v", waited)
	}
	ss[0].failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY, Message: "no family x"})
	calls := ss[0].calls.Load()
	err := tb.Put(context.Background(), NewPut([]byte("a")).Add("x", "q", 1, nil))
	var d *pb.ErrorDetail
	if !errors.As(err, &d) || d.Code != pb.ErrorCode_ERROR_CODE_NO_SUCH_FAMILY {
		t.Fatalf("want NO_SUCH_FAMILY, got %v", err)
	}
	if n := ss[0].calls.Load() - calls; n != 1 {
		t.Errorf("a permanent error was retried: %d calls", n)
	}
	if err := tb.Put(context.Background(), NewPut(nil).Add("f", "q", 1, nil)); err == nil {
		t.Error("a put of an empty row was accepted")
	}
}

func TestOperationDeadline(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	ss[0].failNext(1<<30, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_OPENING, Message: "opening"})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err := c.Table("t").Put(ctx, NewPut([]byte("a")).Add("f", "q", 1, nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
}

func TestIncrementRetryAppliesOnce(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	tb := c.Table("t")
	inc := NewIncrement([]byte("ctr")).AddAmount("f", "q", 5)
	msg, block := inc.encode(nil, c.nonce(inc))
	// The same request twice, as after a lost answer: applied once.
	for range 2 {
		if _, _, err := ss[0].apply(msg, block, c.nonceGroup); err != nil {
			t.Fatal(err)
		}
	}
	if n := ss[0].increments.Load(); n != 1 {
		t.Errorf("increment applied %d times", n)
	}
	if msg.Nonce == 0 {
		t.Error("increment sent without a nonce")
	}
	if _, err := tb.Mutate(context.Background(), NewIncrement([]byte("ctr")).AddAmount("f", "q", 1)); err != nil {
		t.Fatal(err)
	}
}

func TestBatchAcrossRegionsWithRetries(t *testing.T) {
	_, ss, c := newCluster(t, 2, "h", "p")
	tb := c.Table("t")
	var ops []BatchOp
	for _, r := range []string{"a", "i", "q", "b", "z"} {
		ops = append(ops, BatchOp{Mutation: NewPut([]byte(r)).Add("f", "q", 1, []byte("v-"+r))})
	}
	ss[1].failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_TOO_BUSY, Message: "busy"})
	for i, r := range tb.Batch(context.Background(), ops) {
		if r.Err != nil {
			t.Errorf("op %d: %v", i, r.Err)
		}
	}
	gets := []BatchOp{{Get: &pb.Get{Row: []byte("z")}}, {Get: &pb.Get{Row: []byte("a")}}, {Get: &pb.Get{Row: []byte("i")}}}
	for i, r := range tb.Batch(context.Background(), gets) {
		if r.Err != nil {
			t.Fatalf("get %d: %v", i, r.Err)
		}
		want := "v-" + string(gets[i].Get.Row)
		if got := string(r.Result.Value("f", "q")); got != want {
			t.Errorf("get %d = %q, want %q", i, got, want)
		}
	}
}

// An action a server leaves unanswered fails (it may or may not have been applied); the others
// of its batch succeed.
func TestBatchActionLeftUnanswered(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	tb := c.Table("t")
	var ops []BatchOp
	for _, r := range []string{"a", "b", "c"} {
		ops = append(ops, BatchOp{Mutation: NewPut([]byte(r)).Add("f", "q", 1, []byte("v-"+r))})
	}
	ss[0].dropResult.Store(true)
	res := tb.Batch(context.Background(), ops)
	for i, r := range res[:2] {
		if r.Err != nil {
			t.Errorf("op %d: %v", i, r.Err)
		}
	}
	if err := res[2].Err; err == nil || !strings.Contains(err.Error(), "no result for action 2") {
		t.Fatalf("the unanswered put: %v, want an error saying it got no result", err)
	}
}

func scanRows(t *testing.T, tb *Table, s *pb.Scan) []string {
	t.Helper()
	sc := tb.Scan(context.Background(), s)
	defer sc.Close()
	var rows []string
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		rows = append(rows, fmt.Sprintf("%s:%d", r.Row, len(r.Cells)))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestScanAcrossRegions(t *testing.T) {
	_, ss, c := newCluster(t, 2, "h", "p")
	tb := c.Table("t")
	for _, r := range []string{"a", "c", "i", "k", "q", "z"} {
		if err := tb.Put(context.Background(), NewPut([]byte(r)).Add("f", "q1", 1, []byte("1")).Add("f", "q2", 1, []byte("2"))); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a:2", "c:2", "i:2", "k:2", "q:2", "z:2"}
	if got := scanRows(t, tb, &pb.Scan{Caching: 1}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan = %v, want %v", got, want)
	}
	rev := []string{"z:2", "q:2", "k:2", "i:2", "c:2", "a:2"}
	if got := scanRows(t, tb, &pb.Scan{Reversed: true, Caching: 2}); fmt.Sprint(got) != fmt.Sprint(rev) {
		t.Errorf("reversed scan = %v, want %v", got, rev)
	}
	if got := scanRows(t, tb, &pb.Scan{StartRow: []byte("c"), StopRow: []byte("q"), Limit: 2}); fmt.Sprint(got) != "[c:2 i:2]" {
		t.Errorf("ranged scan with limit = %v", got)
	}
	// Partial results are assembled into whole rows.
	for _, s := range ss {
		s.partialRows = true
	}
	if got := scanRows(t, tb, &pb.Scan{Caching: 3}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan of partial results = %v, want %v", got, want)
	}
	// A scanner lost mid-region (server restarted) is reopened after the last row.
	ss[0].partialRows, ss[1].partialRows = false, false
	sc := tb.Scan(context.Background(), &pb.Scan{Caching: 1})
	defer sc.Close()
	var rows []string
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		rows = append(rows, string(r.Row))
		if string(r.Row) == "a" {
			for _, s := range ss {
				s.mu.Lock()
				s.scanners = map[uint64]*fakeScanner{}
				s.mu.Unlock()
			}
		}
	}
	if sc.Err() != nil || fmt.Sprint(rows) != "[a c i k q z]" {
		t.Errorf("scan across a lost scanner = %v, err %v", rows, sc.Err())
	}

	// A scanner lost in the middle of a row whose first part was returned (AllowPartialResults)
	// reopens at that row and returns only the cells after it.
	for _, s := range ss {
		s.cutRows = true
	}
	sc = tb.Scan(context.Background(), &pb.Scan{Caching: 1, AllowPartialResults: true})
	defer sc.Close()
	var got []string
	dropped := false
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		for _, c := range r.Cells {
			got = append(got, string(c.Row)+"/"+string(c.Qualifier))
		}
		if string(r.Row) == "c" && r.Partial && !dropped {
			dropped = true
			for _, s := range ss {
				s.mu.Lock()
				s.scanners = map[uint64]*fakeScanner{}
				s.mu.Unlock()
			}
		}
	}
	if want := "[a/q1 a/q2 c/q1 c/q2 i/q1 i/q2 k/q1 k/q2 q/q1 q/q2 z/q1 z/q2]"; sc.Err() != nil || fmt.Sprint(got) != want {
		t.Errorf("partial scan across a lost scanner = %v, err %v; want %s", got, sc.Err(), want)
	}
	for _, s := range ss {
		s.cutRows = false
	}

	// A next over a read quota is sent again on the same scanner, after the wait.
	for _, s := range ss {
		s.mu.Lock()
		s.throttleNexts, s.opens = 2, 0
		s.mu.Unlock()
	}
	if got := scanRows(t, tb, &pb.Scan{Caching: 1}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan with throttled nexts = %v, want %v", got, want)
	}
	for i, s := range ss {
		s.mu.Lock()
		if s.opens != len(s.regions) || s.throttleNexts != 0 {
			t.Errorf("server %d: %d scanners opened for %d regions, %d throttles left; want one each region and none left", i, s.opens, len(s.regions), s.throttleNexts)
		}
		s.mu.Unlock()
	}

	// An inclusive stop row that is a region's end key is the next region's first row.
	put(t, tb, "p", "1")
	if got := scanRows(t, tb, &pb.Scan{StartRow: []byte("i"), StopRow: []byte("p"), IncludeStopRow: true}); fmt.Sprint(got) != "[i:2 k:2 p:1]" {
		t.Errorf("scan to an inclusive stop row at a region's end = %v", got)
	}
	if got := scanRows(t, tb, &pb.Scan{StartRow: []byte("i"), StopRow: []byte("p")}); fmt.Sprint(got) != "[i:2 k:2]" {
		t.Errorf("scan to an exclusive stop row at a region's end = %v", got)
	}
	if got := scanRows(t, tb, &pb.Scan{Reversed: true, StartRow: []byte("q"), StopRow: []byte("p"), IncludeStopRow: true}); fmt.Sprint(got) != "[q:2 p:1]" {
		t.Errorf("reversed scan to an inclusive stop row at a region's start = %v", got)
	}
}

func TestTimelineGetHedgesToReplica(t *testing.T) {
	m, ss, c := newCluster(t, 1)
	replica := newFakeServer(t)
	replica.stale = true
	addReplica(m, ss[0], replica)
	tb := c.Table("t")
	put(t, tb, "a", "primary")
	replica.rows["a"] = []cell.Cell{{Row: []byte("a"), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1, Type: cell.Put, Value: []byte("replica")}}

	r, err := tb.Get(context.Background(), &pb.Get{Row: []byte("a"), Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
	if err != nil || string(r.Value("f", "q")) != "primary" || r.Stale {
		t.Fatalf("healthy primary: got %v stale=%v err=%v", r, r != nil && r.Stale, err)
	}
	// The primary hangs: the replica answers after the hedge delay, marked stale.
	ss[0].block = make(chan struct{})
	defer close(ss[0].block)
	r, err = tb.Get(context.Background(), &pb.Get{Row: []byte("a"), Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Value("f", "q")) != "replica" || !r.Stale {
		t.Errorf("hung primary: got %q stale=%v, want the replica's stale answer", r.Value("f", "q"), r.Stale)
	}
}

// A replica that moved is looked up again: with the primary hung, a TIMELINE get whose cached
// replica location is stale finds the replica's new server (it tried the old one until the
// operation's time ran out).
func TestTimelineGetFollowsAMovedReplica(t *testing.T) {
	m, ss, c := newCluster(t, 1)
	old, moved := newFakeServer(t), newFakeServer(t)
	rinfo := addReplica(m, ss[0], old)
	tb := c.Table("t")
	put(t, tb, "a", "primary") // caches the region's location, the replica's on old
	moved.stale = true
	moved.regions["r1_1"] = rinfo
	moved.rows["a"] = []cell.Cell{{Row: []byte("a"), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1, Type: cell.Put, Value: []byte("replica")}}
	delete(old.regions, "r1_1")
	m.setServer("r1_1", moved)

	ss[0].block = make(chan struct{})
	defer close(ss[0].block)
	r, err := tb.Get(context.Background(), &pb.Get{Row: []byte("a"), Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Value("f", "q")) != "replica" || !r.Stale {
		t.Errorf("hung primary, moved replica: got %q stale=%v, want the moved replica's stale answer", r.Value("f", "q"), r.Stale)
	}
}

func TestDeadServerIsRetriedElsewhere(t *testing.T) {
	m, ss, c := newCluster(t, 2, "m")
	tb := c.Table("t")
	put(t, tb, "a", "1")
	// Server 0 dies; the master reassigns its region to server 1 (which has the data).
	ss[1].regions["r1"] = ss[0].regions["r1"]
	ss[1].rows["a"] = ss[0].rows["a"]
	ss[0].srv.Close()
	m.setServer("r1", ss[1])
	if got := get(t, tb, "a"); got != "1" {
		t.Fatalf("after failover a = %q", got)
	}
}

// A cell over the client's limit fails before anything is sent (a 200 MiB value used to cross the
// network before the server refused it).
func TestOversizedCellRefusedBeforeSending(t *testing.T) {
	_, ss, c := newCluster(t, 1, "")
	tb := c.Table("t")
	before := ss[0].calls.Load()
	big := make([]byte, 11<<20)
	err := tb.Put(context.Background(), NewPut([]byte("r")).Add("f", "q", 0, big))
	if err == nil || !strings.Contains(err.Error(), "over the limit of 10485760") {
		t.Fatalf("a put of an 11 MiB value: %v", err)
	}
	res := tb.Batch(context.Background(), []BatchOp{{Mutation: NewPut([]byte("r")).Add("f", "q", 0, big)}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "over the limit") {
		t.Fatalf("a batch with an 11 MiB value: %v", res[0].Err)
	}
	if n := ss[0].calls.Load() - before; n != 0 {
		t.Errorf("%d calls reached the server", n)
	}
}

// refusingMaster answers NOT_ACTIVE_MASTER while refusals last (naming other as the active master,
// or, leaderless, naming none with a retry-after as a master handover does), then as m.
type refusingMaster struct {
	*fakeMaster
	other      *string
	leaderless bool
	self       string // names itself: elected, loading the catalog
	refusals   *atomic.Int64
	calls      atomic.Int64
}

func (r *refusingMaster) LocateRegion(ctx context.Context, req *pb.LocateRegionRequest) (*pb.LocateRegionResponse, error) {
	r.calls.Add(1)
	if r.refusals.Add(-1) >= 0 {
		d := &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER, Message: "standby", Retryable: true}
		switch {
		case r.self != "":
			d.NewMaster, d.RetryAfterMs = r.self, 1
		case r.leaderless:
			d.RetryAfterMs = 1
		default:
			d.NewMaster = *r.other
		}
		return nil, d.Status()
	}
	return r.fakeMaster.LocateRegion(ctx, req)
}

// retryRecords is a slog handler that keeps the client's retry records.
type retryRecords struct {
	mu       sync.Mutex
	attempts []int64
}

func (h *retryRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryRecords) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "attempt" {
			h.mu.Lock()
			h.attempts = append(h.attempts, a.Value.Int64())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}
func (h *retryRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *retryRecords) WithGroup(string) slog.Handler      { return h }

// Two masters that name each other as the active one (their views of the election differ for a
// moment) are followed a bounded number of times before the client pauses; a handover's answers
// (no leader, a retry-after) are waited out at the hinted pause without growing the backoff.
func TestMasterRedirectsAreBoundedAndHandoverHintsDoNotGrowTheBackoff(t *testing.T) {
	for _, leaderless := range []bool{false, true} {
		t.Run(fmt.Sprintf("leaderless=%v", leaderless), func(t *testing.T) {
			_, ss, _ := newCluster(t, 1)
			inner := &fakeMaster{}
			for _, r := range ss[0].regions {
				inner.regions = append(inner.regions, &fakeRegion{info: r, server: ss[0]})
			}
			refusals := &atomic.Int64{}
			refusals.Store(40)
			var addrs [2]string
			var masters [2]*refusingMaster
			for i := range masters {
				masters[i] = &refusingMaster{fakeMaster: inner, other: &addrs[1-i], leaderless: leaderless, refusals: refusals}
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addrs[i] = lis.Addr().String()
				gs := grpc.NewServer()
				pb.RegisterMasterServer(gs, masters[i])
				go gs.Serve(lis)
				t.Cleanup(gs.Stop)
			}
			rec := &retryRecords{}
			c, err := New(Config{Masters: addrs[:], Pause: time.Millisecond, MaxPause: 5 * time.Millisecond, RPCTimeout: 2 * time.Second,
				OperationTimeout: 20 * time.Second, Logger: slog.New(rec)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			put(t, c.Table("t"), "a", "1")
			calls := masters[0].calls.Load() + masters[1].calls.Load()
			if calls != 41 {
				t.Fatalf("%d calls to the masters, want the 40 refusals and the answer", calls)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if leaderless {
				// Every refusal is a pause at the hint, and the backoff's attempt never grows.
				if len(rec.attempts) != 40 {
					t.Fatalf("%d pauses for 40 leaderless answers", len(rec.attempts))
				}
				for _, a := range rec.attempts {
					if a != 0 {
						t.Fatalf("the backoff grew on retry-after hints: attempts %v", rec.attempts)
					}
				}
				return
			}
			// At most len(Masters)+1 redirects in a row, then a pause.
			if min := 40 / 4; len(rec.attempts) < min {
				t.Fatalf("%d pauses in 40 redirects between two masters naming each other, want at least %d", len(rec.attempts), min)
			}
		})
	}
}

// A master that names itself in NOT_ACTIVE_MASTER was elected and is loading the catalog: the
// client asks it again after its hinted pause and never goes to the other masters meanwhile
// (during a handover the other is the master that stopped).
func TestAnElectedMasterLoadingTheCatalogIsWaitedFor(t *testing.T) {
	_, ss, _ := newCluster(t, 1)
	inner := &fakeMaster{}
	for _, r := range ss[0].regions {
		inner.regions = append(inner.regions, &fakeRegion{info: r, server: ss[0]})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusals := &atomic.Int64{}
	refusals.Store(20)
	elected := &refusingMaster{fakeMaster: inner, self: lis.Addr().String(), refusals: refusals}
	gs := grpc.NewServer()
	pb.RegisterMasterServer(gs, elected)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	// The other master accepts connections and never answers: counted if the client tries it.
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopped.Close() })
	var tried atomic.Int64
	go func() {
		for {
			conn, err := stopped.Accept()
			if err != nil {
				return
			}
			tried.Add(1)
			conn.Close()
		}
	}()
	rec := &retryRecords{}
	c, err := New(Config{Masters: []string{elected.self, stopped.Addr().String()}, Pause: time.Millisecond, MaxPause: 5 * time.Millisecond,
		RPCTimeout: 2 * time.Second, OperationTimeout: 20 * time.Second, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	put(t, c.Table("t"), "a", "1")
	if n := elected.calls.Load(); n != 21 {
		t.Errorf("%d calls to the elected master, want its 20 refusals and the answer", n)
	}
	if n := tried.Load(); n != 0 {
		t.Errorf("the client connected %d times to the other master while the elected one loaded the catalog", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.attempts) != 20 || slices.Max(rec.attempts) != 0 {
		t.Errorf("pauses %v, want 20 at the hint (attempt 0)", rec.attempts)
	}
}

// A scan whose server answers heartbeats (no rows yet, a cursor) goes on through them, and asks
// the server for a time limit under its call timeout.
func TestScanFollowsHeartbeats(t *testing.T) {
	_, ss, c := newCluster(t, 2, "m")
	tb := c.Table("t")
	for _, r := range []string{"a", "b", "n", "z"} {
		put(t, tb, r, "v"+r)
	}
	for _, s := range ss {
		s.heartbeats = 3
	}
	sc := tb.Scan(context.Background(), &pb.Scan{Caching: 1})
	defer sc.Close()
	var got []string
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		got = append(got, string(r.Row))
	}
	if err := sc.Err(); err != nil || strings.Join(got, ",") != "a,b,n,z" {
		t.Fatalf("scan through heartbeats: %v %v", got, err)
	}
	for _, s := range ss {
		s.mu.Lock()
		limits := slices.Clone(s.timeLimits)
		s.mu.Unlock()
		if len(limits) < 8 { // 3 heartbeats before each of the server's 2 rows, and the rows
			t.Fatalf("server answered %d scan calls, want at least 8", len(limits))
		}
		for _, l := range limits {
			if l <= 0 || l > c.cfg.RPCTimeout.Milliseconds() {
				t.Fatalf("a scan call asked for a time limit of %d ms (call timeout %v)", l, c.cfg.RPCTimeout)
			}
		}
	}
}

// records keeps the client's log records as "message key=value ...".
type records struct {
	mu    sync.Mutex
	lines []string
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// A request's tries are in the client's Debug log with its context (what loadcheck reports for
// its slowest requests): the connection it waited for, and each try that failed, with its server.
func TestTriesAreLogged(t *testing.T) {
	_, ss, c := newCluster(t, 1)
	rec := &records{}
	c.cfg.Logger = slog.New(rec) // before its first request
	ss[0].failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, Message: "not here", Retryable: true})
	put(t, c.Table("t"), "a", "1")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var connected, failed bool
	for _, l := range rec.lines {
		connected = connected || strings.HasPrefix(l, "connected server="+ss[0].addr)
		failed = failed || (strings.HasPrefix(l, "try server="+ss[0].addr) && strings.Contains(l, "not here"))
	}
	if !connected || !failed {
		t.Fatalf("records %q: want the connection to %s and the failed try there", rec.lines, ss[0].addr)
	}
}

// A call whose operation deadline passed, or that a hedge cancelled, says nothing of where the
// region is: the cached locations stay (a cancelled replica call of every hedged TIMELINE get,
// and every get past its caller's deadline, sent the next calls to the master), and a scanner
// given up on is closed at the server rather than left there until its lease ends.
func TestGivingUpKeepsLocationsAndClosesScanners(t *testing.T) {
	m, ss, c := newCluster(t, 1)
	tb := c.Table("t")
	put(t, tb, "a", "1")
	put(t, tb, "b", "2")
	before := m.locates.Load()

	// A get past its caller's deadline.
	ss[0].block = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := tb.Get(ctx, &pb.Get{Row: []byte("a")})
	cancel()
	close(ss[0].block) // (left closed: the fake's handlers read it unlocked)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a get past its deadline: %v", err)
	}
	if c.cache.lookup("t", []byte("a")) == nil {
		t.Error("a get past its caller's deadline dropped the server's cached locations")
	}

	// A batch its caller cancels while the server holds it.
	ss[0].multiGate = make(chan struct{})
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		for ss[0].inMulti.Load() == 0 {
			time.Sleep(time.Millisecond) // polling the fake server's multis under way
		}
		cancel()
	}()
	res := tb.Batch(ctx, []BatchOp{{Mutation: NewPut([]byte("a")).Add("f", "q", 1, []byte("2"))}})
	close(ss[0].multiGate)
	if res[0].Err == nil {
		t.Fatal("a batch its caller cancelled succeeded")
	}
	if c.cache.lookup("t", []byte("a")) == nil {
		t.Error("a batch its caller cancelled dropped the server's cached locations")
	}

	// A replica call the hedge cancels.
	replica := newFakeServer(t)
	addReplica(m, ss[0], replica)
	c.cache.invalidate("t", "r1")
	loc, err := c.locate(context.Background(), tb, []byte("a"), false, false)
	if err != nil || len(loc.replicas) != 1 {
		t.Fatalf("locate with a replica: %v %v", loc, err)
	}
	replica.block = make(chan struct{})
	defer close(replica.block)
	calls := replica.calls.Load()
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		for replica.calls.Load() == calls { // the replica has the call: the primary answered first
			time.Sleep(time.Millisecond) // polling the fake server's call count
		}
		cancel()
	}()
	if _, err := c.replicaGet(ctx, tb, loc, 0, &pb.Get{Row: []byte("a")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled replica get: %v", err)
	}
	if c.cache.lookup("t", []byte("a")) == nil {
		t.Error("a replica call the hedge cancelled dropped its region's cached location")
	}

	// A scan past its caller's deadline.
	ss[0].nextBlock = make(chan struct{})
	defer close(ss[0].nextBlock)
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	sc := tb.Scan(ctx, &pb.Scan{Caching: 1})
	if _, ok := sc.Next(); !ok {
		t.Fatalf("the scan's first row: %v", sc.Err())
	}
	if _, ok := sc.Next(); ok || !errors.Is(sc.Err(), context.DeadlineExceeded) {
		t.Fatalf("a next past the deadline: %v", sc.Err())
	}
	sc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ss[0].mu.Lock()
		open := len(ss[0].scanners)
		ss[0].mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scanners still open at the server after the client gave up", open)
		}
		time.Sleep(5 * time.Millisecond) // polling the fake server's scanners
	}
	if n := m.locates.Load() - before; n != 1 {
		t.Errorf("%d locates, want the one made to see the replica", n)
	}
}

// A read replica serving a TIMELINE scan answers REGION_MOVED: that is the replica's move, not the
// primary's. The primary's cached location must not take the replica's new server (every strong
// read and write of the region would then go there first, and be refused).
func TestReplicaErrorsLeaveThePrimarysLocation(t *testing.T) {
	m, ss, c := newCluster(t, 1)
	replica, elsewhere := newFakeServer(t), newFakeServer(t)
	addReplica(m, ss[0], replica)
	tb := c.Table("t")
	for _, row := range []string{"a", "b", "c"} {
		put(t, tb, row, "1")
		replica.rows[row] = ss[0].rows[row]
	}
	ss[0].openBlock = make(chan struct{}) // the primary's scanner opens hang: the replica serves
	defer close(ss[0].openBlock)
	sc := tb.Scan(context.Background(), &pb.Scan{Caching: 1, Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
	defer sc.Close()
	if _, ok := sc.Next(); !ok {
		t.Fatalf("the scan's first row: %v", sc.Err())
	}
	replica.failNext(1, &pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_REGION_MOVED, Region: "r1_1", NewLocation: elsewhere.name(), Retryable: true})
	for {
		if _, ok := sc.Next(); !ok {
			break
		}
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	if loc := c.cache.lookup("t", []byte("a")); loc != nil && loc.addr != ss[0].addr {
		t.Errorf("the primary's cached location is %s after its replica moved, want %s", loc.addr, ss[0].addr)
	}
	if n := elsewhere.calls.Load(); n != 0 {
		t.Errorf("%d calls went to the replica's new server as if the primary were there", n)
	}
}

// alterMaster is a master holding one table's descriptor whose first ModifyTable is applied but
// answered as lost (a master failover mid-call): the client's retry finds the version raised.
type alterMaster struct {
	*fakeMaster
	mu      sync.Mutex
	td      *pb.TableDescriptor
	version uint64
	lost    bool
}

func (m *alterMaster) DescribeTable(context.Context, *pb.TableRequest) (*pb.DescribeTableResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &pb.DescribeTableResponse{Table: proto.CloneOf(m.td), Version: m.version}, nil
}

func (m *alterMaster) ModifyTable(_ context.Context, req *pb.ModifyTableRequest) (*pb.ModifyTableResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.ExpectVersion != nil && req.GetExpectVersion() != m.version {
		return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_CONCURRENT_MODIFICATION, Message: "altered since"}).Status()
	}
	m.td, m.version = proto.CloneOf(req.GetTable()), m.version+1
	if !m.lost {
		m.lost = true
		return nil, status.Error(codes.Unavailable, "the answer was lost")
	}
	return &pb.ModifyTableResponse{}, nil
}

// An alter whose first ModifyTable was applied but whose answer was lost succeeds: its retry is
// refused (the version rose), and the table reads as what was sent. Before, the change was applied
// again to the altered table, and one that is not idempotent (dropping a family) failed.
func TestAlterWhoseAnswerWasLost(t *testing.T) {
	am := &alterMaster{fakeMaster: &fakeMaster{}, td: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}, {Name: []byte("g")}}}, version: 7}
	c := clientOf(t, am)
	err := c.AlterTable(context.Background(), "t", func(td *pb.TableDescriptor) error {
		i := slices.IndexFunc(td.Families, func(f *pb.ColumnFamilyDescriptor) bool { return string(f.Name) == "g" })
		if i < 0 {
			return errors.New("table t has no family g")
		}
		td.Families = slices.Delete(td.Families, i, i+1)
		return nil
	})
	if err != nil || len(am.td.GetFamilies()) != 1 || am.version != 8 {
		t.Fatalf("an alter whose answer was lost: %v (families %v, version %d); want it applied once", err, am.td.GetFamilies(), am.version)
	}
}

// addReplica makes server on hold replica 1 of region r1 of primary, as the master says.
func addReplica(m *fakeMaster, primary, on *fakeServer) *pb.RegionInfo {
	rinfo := proto.Clone(primary.regions["r1"]).(*pb.RegionInfo)
	rinfo.ReplicaId, rinfo.Name = 1, "r1_1"
	on.regions["r1_1"] = rinfo
	m.regions = append(m.regions, &fakeRegion{info: rinfo, server: on})
	return rinfo
}
