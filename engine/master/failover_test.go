package master_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// memLease is an in-memory election: the first candidate holds it until its context ends.
type memLease struct {
	mu      sync.Mutex
	holder  string
	changed chan struct{}
	leaders []func(string)
}

func newMemLease() *memLease { return &memLease{changed: make(chan struct{})} }

func (l *memLease) elector(id string) master.Elector { return &memElector{l: l, id: id} }

type memElector struct {
	l  *memLease
	id string
}

func (e *memElector) Check() error { return nil }

func (e *memElector) Run(ctx context.Context, cb master.ElectionCallbacks) {
	l := e.l
	l.mu.Lock()
	l.leaders = append(l.leaders, cb.Leader)
	holder := l.holder
	l.mu.Unlock()
	if holder != "" {
		cb.Leader(holder)
	}
	for {
		l.mu.Lock()
		var notify []func(string)
		if l.holder == "" {
			l.holder = e.id
			notify = append(notify, l.leaders...)
			close(l.changed)
			l.changed = make(chan struct{})
		}
		won, ch := l.holder == e.id, l.changed
		l.mu.Unlock()
		for _, f := range notify {
			f(e.id)
		}
		if won {
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				cb.Elected(lctx)
			}()
			<-ctx.Done()
			cancel()
			<-done
			l.mu.Lock()
			l.holder = ""
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

func TestStandbyRedirectsAndTakesOverAnAssignment(t *testing.T) {
	lease := newMemLease()
	runFailover(t, lease.elector)
}

// electedStarter starts masters of cfg that take part in an election (each with its own metrics),
// stopped when the test ends.
func electedStarter(t *testing.T, cfg master.Config, elect func(addr string) master.Elector) func(context.Context) *mastertest.Master {
	return func(ctx context.Context) *mastertest.Master {
		t.Helper()
		c := cfg
		c.Registerer = prometheus.NewRegistry()
		m, err := mastertest.StartElectedMaster(ctx, c, elect)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
}

// runFailover: two masters over one storage; the standby answers NOT_ACTIVE_MASTER naming the
// active one; the active one is killed (its context cancelled) while an open hangs; the standby
// takes over, resumes the assignment and completes it.
func runFailover(t *testing.T, elect func(addr string) master.Elector) {
	fs := storage.NewMem()
	cfg := testConfig(fs)
	cfg.DDLWait = 200 * time.Millisecond
	start := electedStarter(t, cfg, elect)
	ctx1, kill1 := context.WithCancel(context.Background())
	defer kill1()
	m1 := start(ctx1)
	if err := m1.WaitActive(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	m2 := start(context.Background())
	c := &cluster{t: t, fs: fs, cfg: cfg, m: m1}
	conn2 := dial(t, m2.Addr)
	c.waitFor("the standby to know the active master", 30*time.Second, func() (bool, string) {
		_, err := pb.NewMasterClient(conn2).ClusterStatus(c.ctx(), &pb.ClusterStatusRequest{})
		d, _ := pb.DetailOf(err)
		return d.GetCode() == pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER && d.GetNewMaster() == m1.Addr, fmt.Sprint(err)
	})
	if m2.Active() || m2.Ready() != nil {
		t.Fatalf("standby active %v, ready %v: want an inactive, ready standby", m2.Active(), m2.Ready())
	}
	// Servers and clients given the standby first follow it to the active master.
	c.mc = pb.NewMasterClient(dial(t, m1.Addr))
	// The standby reports itself: the active master lists it (`status` says "1 backup masters").
	c.waitFor("the active master to list the standby", 10*time.Second, func() (bool, string) {
		st := c.status().GetStandbyMasters()
		return slices.Equal(st, []string{m2.Addr}), fmt.Sprint(st)
	})
	for range 2 {
		s, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{m2.Addr, m1.Addr}, Version: "v1.4.2", Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		c.servers = append(c.servers, s)
	}
	c.waitFor("servers registered", 10*time.Second, func() (bool, string) {
		return c.servers[0].Registered() && c.servers[1].Registered(), "not yet"
	})
	hung := c.servers[0]
	hung.SetHangOpens(true)
	c.createTable("t1", 4, 0)
	c.waitFor("opens hanging", 10*time.Second, func() (bool, string) {
		return len(hung.Hung()) == 2, fmt.Sprint(hung.Hung())
	})
	calls := len(hung.Calls())

	killed := time.Now()
	kill1()
	<-m1.Done()
	// The stopped master never names itself: it names the new active master once it knows it,
	// and until then asks callers to come back soon (a handover is under way).
	_, err := pb.NewMasterClient(dial(t, m1.Addr)).ClusterStatus(c.ctx(), &pb.ClusterStatusRequest{})
	if d, _ := pb.DetailOf(err); d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER || d.GetNewMaster() == m1.Addr ||
		(d.GetNewMaster() == "") != (d.GetRetryAfterMs() > 0) {
		t.Errorf("the stopped master answered %v (retry after %d ms), want NOT_ACTIVE_MASTER naming the new master or else with a retry-after",
			err, d.GetRetryAfterMs())
	}
	if err := m2.WaitActive(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("standby active %v after the active master was killed", time.Since(killed).Round(time.Millisecond))
	c.m, c.mc = m2, pb.NewMasterClient(conn2)
	c.waitFor("the new master to send the hung opens again", 20*time.Second, func() (bool, string) {
		return len(hung.Calls()) >= calls+2, fmt.Sprintf("%d calls", len(hung.Calls()))
	})
	hung.SetHangOpens(false)
	hung.ReleaseHung()
	locs := c.waitAllOpen("t1", 20*time.Second)
	if n := perServer(locs)[hung.Name()]; n != 2 {
		t.Errorf("%d regions opened on the server whose opens hung, want 2 (the resumed procedures)", n)
	}
	if st := c.status(); st.GetActiveMaster() != m2.Addr || len(st.GetStandbyMasters()) != 0 {
		t.Errorf("active master %q, standbys %q: want %q and none (the other one is gone)", st.GetActiveMaster(), st.GetStandbyMasters(), m2.Addr)
	}
	// The servers registered with the first master; the new one learns their versions from
	// their heartbeats (ClusterStatus, which the operator's status.version is made of).
	c.waitFor("the new master to know the servers' versions", 10*time.Second, func() (bool, string) {
		var vs []string
		for _, s := range c.status().GetServers() {
			vs = append(vs, s.GetVersion())
		}
		return slices.Equal(vs, []string{"v1.4.2", "v1.4.2"}), fmt.Sprint(vs)
	})
	for _, s := range c.servers {
		if s.Reregistrations() != 0 {
			t.Errorf("server %s lost its registration over the failover", s.Name())
		}
	}
	if err := m1.Err(); err != nil && !strings.Contains(err.Error(), "leadership") {
		t.Errorf("killed master ended with %v", err)
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A master that cannot write its catalog stops (fail-stop) and lets another take over.
func TestCatalogWriteFailureStopsTheMaster(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 1, nil)
	c.createTable("t1", 2, 0)
	c.waitAllOpen("t1", 10*time.Second)
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpWrite, Path: "meta/wal/*"}) // nothing reaches the log
	_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 1)})
	if err == nil {
		t.Fatal("a create whose catalog write failed succeeded")
	}
	select {
	case <-c.m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not stop after a failed catalog write")
	}
	if err := c.m.Err(); err == nil || !strings.Contains(err.Error(), "catalog write") {
		t.Errorf("master ended with %v", err)
	}
	if c.m.Ready() == nil || c.m.Live() == nil {
		t.Error("a stopped master reports ready or live")
	}
	// A new master on the same storage has everything acknowledged before.
	ffs.ClearRules()
	c.startMaster()
	c.waitAllOpen("t1", 10*time.Second)
	if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("t2")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
		t.Errorf("the failed create left table t2: %v", err)
	}
}

func TestStopBeforeStartAndTwice(t *testing.T) {
	m, err := master.New(master.Config{FS: storage.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if m.Ready() == nil {
		t.Error("an unstarted master is ready")
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	if _, err := master.New(master.Config{}); err == nil {
		t.Error("a master without storage was made")
	}
	if _, err := master.New(master.Config{FS: storage.NewMem(), Lease: lease.Config{Lease: time.Second, HeartbeatInterval: time.Second}}); err == nil {
		t.Error("a bad lease configuration was accepted")
	}
}
