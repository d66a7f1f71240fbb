package master_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/storage"
)

// Integration tests: an in-process master on a loopback socket, fake region servers (package
// mastertest) speaking the real gRPC APIs, shared storage in memory or in a temporary directory.
// Nothing sleeps to synchronise: tests poll with deadlines.

// testLease is short so that death is declared in about a second.
var testLease = lease.Config{Lease: time.Second, HeartbeatInterval: 200 * time.Millisecond,
	SelfFenceMargin: 200 * time.Millisecond, DeadMargin: 300 * time.Millisecond}

func testConfig(fs storage.FS) master.Config {
	return master.Config{
		FS:                    fs,
		Lease:                 testLease,
		TickInterval:          20 * time.Millisecond,
		RetryDelay:            50 * time.Millisecond,
		StandbyReportInterval: 50 * time.Millisecond,
		RPCTimeout:            2 * time.Second,
		DDLWait:               10 * time.Second,
		Logger:                testLogger(),
		Registerer:            prometheus.NewRegistry(),
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("MASTER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type cluster struct {
	t       *testing.T
	fs      storage.FS
	cfg     master.Config
	m       *mastertest.Master
	servers []*mastertest.FakeServer
	mc      pb.MasterClient
	conn    *grpc.ClientConn
}

// newCluster starts a master and n fake region servers (zones cycled when given).
func newCluster(t *testing.T, n int, zones []string, tweak func(*master.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, fs: storage.NewMem()}
	c.cfg = testConfig(c.fs)
	if tweak != nil {
		tweak(&c.cfg)
	}
	c.startMaster()
	for i := range n {
		zone := ""
		if len(zones) > 0 {
			zone = zones[i%len(zones)]
		}
		c.addServer(zone)
	}
	c.waitFor("servers registered", 10*time.Second, func() (bool, string) {
		st := c.status()
		live := 0
		for _, s := range st.GetServers() {
			if s.GetLive() {
				live++
			}
		}
		return live == n, fmt.Sprintf("%d of %d live", live, n)
	})
	return c
}

func (c *cluster) startMaster() {
	c.t.Helper()
	c.startMasterWith(prometheus.NewRegistry())
}

func (c *cluster) startMasterWith(reg *prometheus.Registry) {
	c.t.Helper()
	c.cfg.Registerer = reg
	m, err := mastertest.StartMaster(context.Background(), c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.m = m
	c.t.Cleanup(m.Close)
	if err := m.WaitActive(10 * time.Second); err != nil {
		c.t.Fatal(err)
	}
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, err = grpc.NewClient(m.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	conn := c.conn
	c.t.Cleanup(func() { conn.Close() })
	c.mc = pb.NewMasterClient(c.conn)
	for _, s := range c.servers {
		s.SetMasters(m.Addr)
	}
}

func (c *cluster) addServer(zone string) *mastertest.FakeServer {
	c.t.Helper()
	s, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{c.m.Addr}, Zone: zone, Logger: testLogger()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(s.Stop)
	c.servers = append(c.servers, s)
	return s
}

func (c *cluster) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	c.t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test with cond's last explanation at the deadline.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cluster) status() *pb.ClusterStatusResponse {
	c.t.Helper()
	st, err := c.mc.ClusterStatus(c.ctx(), &pb.ClusterStatusRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func (c *cluster) regions(table string) []*pb.RegionLocation {
	c.t.Helper()
	resp, err := c.mc.GetTableRegions(c.ctx(), &pb.TableRequest{Table: tableName(table)})
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.GetLocations()
}

// waitAllOpen waits until every region of table is OPEN and each fake serves what the catalog
// says it does.
func (c *cluster) waitAllOpen(table string, timeout time.Duration) []*pb.RegionLocation {
	c.t.Helper()
	var locs []*pb.RegionLocation
	c.waitFor("every region of "+table+" open", timeout, func() (bool, string) {
		locs = c.regions(table)
		for _, l := range locs {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN {
				return false, fmt.Sprintf("region %s is %s", l.GetRegion().GetName(), l.GetState())
			}
			srv := c.server(layout.ServerName(l.GetServer()))
			if srv == nil || !slices.Contains(srv.Regions(), l.GetRegion().GetName()) {
				return false, fmt.Sprintf("region %s not served by %s", l.GetRegion().GetName(), layout.ServerName(l.GetServer()))
			}
		}
		return len(locs) > 0, "no regions"
	})
	return locs
}

func (c *cluster) server(name string) *mastertest.FakeServer {
	for _, s := range c.servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func tableName(s string) *pb.TableName {
	if ns, n, ok := strings.Cut(s, ":"); ok {
		return &pb.TableName{Namespace: ns, Name: n}
	}
	return &pb.TableName{Name: s}
}

func descriptor(table string, replication int32) *pb.TableDescriptor {
	return &pb.TableDescriptor{Name: tableName(table), RegionReplication: replication,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
}

func (c *cluster) createTable(table string, regions int32, replication int32) []*pb.RegionInfo {
	c.t.Helper()
	resp, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor(table, replication), NumRegions: regions})
	if err != nil {
		c.t.Fatalf("create %s: %v", table, err)
	}
	return resp.GetRegions()
}

// perServer counts regions per server name.
func perServer(locs []*pb.RegionLocation) map[string]int {
	out := map[string]int{}
	for _, l := range locs {
		out[layout.ServerName(l.GetServer())]++
	}
	return out
}

func errCode(err error) pb.ErrorCode {
	d, ok := pb.DetailOf(err)
	if !ok {
		return -1
	}
	return d.GetCode()
}

func TestCreatePreSplitTableSpreadsOverServersAndLocates(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	infos := c.createTable("t1", 8, 0)
	if len(infos) != 8 {
		t.Fatalf("%d regions created, want 8", len(infos))
	}
	locs := c.waitAllOpen("t1", 10*time.Second)
	counts := perServer(locs)
	if len(counts) != 3 {
		t.Fatalf("regions on %d servers, want 3: %v", len(counts), counts)
	}
	for s, n := range counts {
		if n < 2 || n > 3 {
			t.Errorf("server %s holds %d regions, want 2 or 3 (8 over 3): %v", s, n, counts)
		}
	}
	// The regions tile the key space: the first starts empty, each ends where the next starts.
	for i, l := range locs {
		ri := l.GetRegion()
		if i == 0 && len(ri.GetStartKey()) != 0 || i == len(locs)-1 && len(ri.GetEndKey()) != 0 ||
			i > 0 && !bytes.Equal(locs[i-1].GetRegion().GetEndKey(), ri.GetStartKey()) {
			t.Fatalf("regions do not tile the key space at %d: %v", i, locs)
		}
		if l.GetSeq() != 1 {
			t.Errorf("region %s location seq %d after its first open, want 1", ri.GetName(), l.GetSeq())
		}
		if want := fmt.Sprintf("%016x", ri.GetRegionId()); ri.GetName() != want {
			t.Errorf("region name %q, want the id in 16 hex digits %q", ri.GetName(), want)
		}
	}
	// LocateRegion answers for any row, forwards and backwards.
	for _, row := range [][]byte{nil, {0}, {0x1f, 0xff}, {0x20}, []byte("m"), {0xff, 0xff, 0xff}} {
		resp, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: tableName("t1"), Row: row})
		if err != nil {
			t.Fatalf("locate %q: %v", row, err)
		}
		ri := resp.GetLocations()[0].GetRegion()
		if bytes.Compare(row, ri.GetStartKey()) < 0 || len(ri.GetEndKey()) > 0 && bytes.Compare(row, ri.GetEndKey()) >= 0 {
			t.Errorf("row %q located in region [%q, %q)", row, ri.GetStartKey(), ri.GetEndKey())
		}
		if resp.GetLocations()[0].GetServer() == nil {
			t.Errorf("row %q: location without a server", row)
		}
	}
	before, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: tableName("t1"), Row: []byte{0x20}, Before: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := before.GetLocations()[0].GetRegion(); !bytes.Equal(got.GetEndKey(), []byte{0x20}) {
		t.Errorf("the region before row 0x20 ends at %q", got.GetEndKey())
	}
	// The Go client locates through the master and reaches the right fake server.
	checkClientLocates(t, c, "t1", [][]byte{[]byte("a"), {0x05}, {0x90, 1}, {0xfe}})
}

// checkClientLocates reads rows with the Go client: it must find each row's region through the
// master and send the GET to the server holding it.
func checkClientLocates(t *testing.T, c *cluster, table string, rows [][]byte) {
	t.Helper()
	cl, err := client.New(client.Config{Masters: []string{c.m.Addr}, OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	locs := c.regions(table)
	for _, row := range rows {
		if _, err := cl.Table(table).Get(c.ctx(), &pb.Get{Row: row}); err != nil {
			t.Fatalf("client get %q: %v", row, err)
		}
		var want *pb.RegionLocation
		for _, l := range locs {
			ri := l.GetRegion()
			if ri.GetReplicaId() == 0 && bytes.Compare(row, ri.GetStartKey()) >= 0 && (len(ri.GetEndKey()) == 0 || bytes.Compare(row, ri.GetEndKey()) < 0) {
				want = l
			}
		}
		srv := c.server(layout.ServerName(want.GetServer()))
		found := false
		for _, g := range srv.Gets() {
			found = found || (g.Region == want.GetRegion().GetName() && bytes.Equal(g.Row, row))
		}
		if !found {
			t.Errorf("GET of row %q did not reach region %s on %s", row, want.GetRegion().GetName(), srv.Name())
		}
	}
}
