package master_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

func (c *cluster) serverStatus(name string) *pb.ServerStatus {
	for _, s := range c.status().GetServers() {
		if layout.ServerName(s.GetServer()) == name {
			return s
		}
	}
	return nil
}

func TestDrainEmptiesAServerAndUndrainBalanceRefillsIt(t *testing.T) {
	c := newCluster(t, 3, nil, func(cfg *master.Config) { cfg.MaxMovesInFlight = 2 })
	c.createTable("t1", 9, 0)
	c.waitAllOpen("t1", 10*time.Second)
	target := c.servers[2]
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: target.Name()}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the drained server empty", 10*time.Second, func() (bool, string) {
		s := c.serverStatus(target.Name())
		return s.GetDraining() && s.GetRegions() == 0 && len(target.Regions()) == 0 && len(c.status().GetRegionsInTransition()) == 0,
			fmt.Sprintf("status %v, fake holds %v", s, target.Regions())
	})
	locs := c.waitAllOpen("t1", 10*time.Second)
	if counts := perServer(locs); counts[target.Name()] != 0 || len(counts) != 2 {
		t.Fatalf("after the drain: %v", counts)
	}
	// New regions never go to a draining server.
	c.createTable("t2", 4, 0)
	for _, l := range c.waitAllOpen("t2", 10*time.Second) {
		if layout.ServerName(l.GetServer()) == target.Name() {
			t.Errorf("region %s of a new table assigned to the draining server", l.GetRegion().GetName())
		}
	}
	// The moves closed with a flush and named their destination.
	for _, call := range target.Calls() {
		if !call.Open && (!call.Flush || call.Destination == "") {
			t.Errorf("drain close %+v: want a flush and a destination", call)
		}
	}
	if _, err := c.mc.UndrainServer(c.ctx(), &pb.DrainServerRequest{Server: target.Name()}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.mc.Balance(c.ctx(), &pb.BalanceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMoves() != 4 {
		t.Errorf("balance queued %d moves, want 4 (13 regions: 7/6/0 → 5/4/4)", resp.GetMoves())
	}
	c.waitFor("the undrained server refilled", 10*time.Second, func() (bool, string) {
		s := c.serverStatus(target.Name())
		return !s.GetDraining() && s.GetRegions() == 4 && len(target.Regions()) == 4,
			fmt.Sprintf("status %v, fake holds %v", s, target.Regions())
	})
	// Undraining a server the master never saw is not an error (the operator's contract).
	if _, err := c.mc.UndrainServer(c.ctx(), &pb.DrainServerRequest{Server: "gone.example:16020"}); err != nil {
		t.Errorf("undrain of an unknown server: %v", err)
	}
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: "not a name"}); errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Errorf("drain of a malformed name: %v", err)
	}
}

// A drain moves a server's regions a few at a time: at most MaxMovesPerServer of them closing at
// the source or opening at one destination, the rest queued (a rolling restart's drain of many
// regions at once made each close share its flushes' PUTs, and each open its destination, with the
// others).
func TestDrainMovesAFewAtATimePerServer(t *testing.T) {
	c := newCluster(t, 3, nil, nil) // MaxMovesPerServer: the default, 2
	c.createTable("t1", 20, 0)
	c.waitAllOpen("t1", 10*time.Second)
	src := c.servers[2]
	dests := []*mastertest.FakeServer{c.servers[0], c.servers[1]}
	held := len(src.Regions())
	if held < 5 {
		t.Fatalf("the drained server holds %d regions; the test needs more than its destinations take at once", held)
	}
	for _, d := range dests {
		d.SetHangOpens(true)
	}
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: src.Name()}); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for moved < held {
		// The master starts moves in one tick and commits them in one catalog write before it
		// orders anything: once both destinations hold what they may, every move it started is in
		// transition.
		want := min(4, held-moved)
		c.waitFor("the next moves opening at the destinations", 10*time.Second, func() (bool, string) {
			h0, h1 := len(dests[0].Hung()), len(dests[1].Hung())
			return h0+h1 == want && h0 <= 2 && h1 <= 2, fmt.Sprintf("hung opens %d and %d, want %d in all", h0, h1, want)
		})
		for _, d := range dests {
			if h := len(d.Hung()); h > 2 {
				t.Fatalf("%d regions opening at once at %s; at most 2 may", h, d.Name())
			}
		}
		if rit := len(c.status().GetRegionsInTransition()); rit != want {
			t.Fatalf("%d regions in transition while the destinations hold %d opens; the rest should wait in the queue", rit, want)
		}
		for _, d := range dests {
			d.ReleaseHung()
		}
		moved += want
	}
	c.waitFor("the drained server empty", 10*time.Second, func() (bool, string) {
		s := c.serverStatus(src.Name())
		return s.GetRegions() == 0 && len(src.Regions()) == 0 && len(c.status().GetRegionsInTransition()) == 0,
			fmt.Sprintf("status %v, fake holds %v", s, src.Regions())
	})
}

func TestMoveRegion(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 3, 0)
	locs := c.waitAllOpen("t1", 10*time.Second)
	l := locs[0]
	name, from := l.GetRegion().GetName(), layout.ServerName(l.GetServer())
	var to *mastertest.FakeServer
	for _, s := range c.servers {
		if s.Name() != from {
			to = s
			break
		}
	}
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: name, Destination: to.Name()}); err != nil {
		t.Fatal(err)
	}
	after := c.waitAllOpen("t1", 10*time.Second)
	if got := layout.ServerName(after[0].GetServer()); got != to.Name() {
		t.Fatalf("region %s on %s after the move, want %s", name, got, to.Name())
	}
	if after[0].GetSeq() != l.GetSeq()+1 {
		t.Errorf("location seq %d after a move from seq %d", after[0].GetSeq(), l.GetSeq())
	}
	src := c.server(from)
	if slices.Contains(src.Regions(), name) {
		t.Error("the source still serves the region")
	}
	calls := src.Calls()
	last := calls[len(calls)-1]
	if last.Open || last.Region != name || !last.Flush || last.Destination != to.Name() {
		t.Errorf("source's last order %+v, want a flushing close naming the destination", last)
	}
	// The region went from CLOSING at the source to OPENING at the destination in one catalog
	// write: each write is a round trip to storage while no server serves the region.
	states := regionHistory(t, c.fs, name)
	want := []string{"CLOSING@" + from, "OPENING@" + to.Name(), "OPEN@" + to.Name()}
	if len(states) < 3 || !slices.Equal(states[len(states)-3:], want) {
		t.Errorf("the region's catalog records end %q, want %q", states, want)
	}
	// Without a destination the master picks one.
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: name}); err != nil {
		t.Fatal(err)
	}
	if got := layout.ServerName(c.waitAllOpen("t1", 10*time.Second)[0].GetServer()); got == to.Name() {
		t.Error("a move without destination left the region where it was")
	}
	// Bad moves.
	for _, tc := range []struct {
		req  *pb.MoveRegionRequest
		code pb.ErrorCode
	}{
		{&pb.MoveRegionRequest{Region: "nosuchregion"}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{&pb.MoveRegionRequest{Region: name, Destination: "bad name"}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{&pb.MoveRegionRequest{Region: name, Destination: "127.0.0.1:1"}, pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION},
	} {
		if _, err := c.mc.MoveRegion(c.ctx(), tc.req); errCode(err) != tc.code {
			t.Errorf("move %v: %v, want %v", tc.req, err, tc.code)
		}
	}
}

// A move's CLOSED report is answered once the destination has the order to open the region: the
// source then sends the region's clients there (REGION_MOVED), where they wait for the open
// instead of being refused. Here the destination takes 300 ms to answer the order.
func TestMovesCloseReportIsAnsweredOnceTheDestinationHasTheOpen(t *testing.T) {
	c := newCluster(t, 2, nil, nil)
	c.createTable("t1", 1, 0)
	l := c.waitAllOpen("t1", 10*time.Second)[0]
	name, from := l.GetRegion().GetName(), layout.ServerName(l.GetServer())
	src := c.server(from)
	var to *mastertest.FakeServer
	for _, s := range c.servers {
		if s.Name() != from {
			to = s
		}
	}
	const delay = 300 * time.Millisecond
	to.SetOpenDelay(delay)
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: name, Destination: to.Name()}); err != nil {
		t.Fatal(err)
	}
	if got := layout.ServerName(c.waitAllOpen("t1", 10*time.Second)[0].GetServer()); got != to.Name() {
		t.Fatalf("region on %s after the move, want %s", got, to.Name())
	}
	var open time.Time
	for _, call := range to.Calls() {
		if call.Open && call.Region == name {
			open = call.At
		}
	}
	// The source records the answer when its call returns, which may be after the region
	// opened at the destination.
	var closed *mastertest.Report
	c.waitFor("the source's CLOSED report answered", 10*time.Second, func() (bool, string) {
		for _, r := range src.Reports() {
			if r.Region == name && r.Transition == pb.RegionTransition_REGION_TRANSITION_CLOSED {
				closed = &r
			}
		}
		return closed != nil, fmt.Sprint("reports ", src.Reports())
	})
	if open.IsZero() || closed.Err != nil {
		t.Fatalf("open order at %v, CLOSED report %+v", open, closed)
	}
	if answered := closed.At.Sub(open); answered < delay {
		t.Fatalf("the CLOSED report was answered %v after the open order reached the destination, which answers it after %v", answered, delay)
	}
}

// Replicas of a region never share a server, and spread over zones; the primary is placed first.
func TestReplicasNeverShareAServerAndSpreadOverZones(t *testing.T) {
	c := newCluster(t, 4, []string{"z1", "z2"}, nil)
	c.createTable("t1", 4, 2)
	locs := c.waitAllOpen("t1", 10*time.Second)
	if len(locs) != 8 {
		t.Fatalf("%d region replicas, want 8", len(locs))
	}
	zoneOf := map[string]string{}
	for _, s := range c.status().GetServers() {
		zoneOf[layout.ServerName(s.GetServer())] = s.GetZone()
	}
	check := func(locs []*pb.RegionLocation) {
		t.Helper()
		byGroup := map[string][]string{}
		for _, l := range locs {
			g := layout.PrimaryName(l.GetRegion().GetName())
			byGroup[g] = append(byGroup[g], layout.ServerName(l.GetServer()))
		}
		for g, servers := range byGroup {
			if len(servers) != 2 || servers[0] == servers[1] {
				t.Errorf("replicas of %s on %v", g, servers)
			} else if zoneOf[servers[0]] == zoneOf[servers[1]] {
				t.Errorf("replicas of %s both in zone %s", g, zoneOf[servers[0]])
			}
		}
	}
	check(locs)
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 1 && l.GetRegion().GetName() != layout.ReplicaName(l.GetRegion().GetRegionId(), 1) {
			t.Errorf("replica named %q", l.GetRegion().GetName())
		}
	}
	// LocateRegion with all_replicas returns both.
	resp, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: tableName("t1"), Row: []byte("x"), AllReplicas: true})
	if err != nil || len(resp.GetLocations()) != 2 || resp.GetLocations()[1].GetRegion().GetReplicaId() != 1 {
		t.Fatalf("locate with replicas: %v, %v", resp, err)
	}
	// Primaries first: in each group the primary's open was sent before its replica's.
	firstOpen := map[string]time.Time{}
	for _, s := range c.servers {
		for _, call := range s.Calls() {
			if call.Open {
				if t0, ok := firstOpen[call.Region]; !ok || call.At.Before(t0) {
					firstOpen[call.Region] = call.At
				}
			}
		}
	}
	for _, l := range locs {
		if ri := l.GetRegion(); ri.GetReplicaId() == 1 {
			if p := layout.RegionName(ri.GetRegionId()); firstOpen[ri.GetName()].Before(firstOpen[p]) {
				t.Errorf("replica %s opened before its primary", ri.GetName())
			}
		}
	}
	// Draining one server keeps replicas apart.
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: c.servers[0].Name()}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("drained", 10*time.Second, func() (bool, string) {
		return len(c.servers[0].Regions()) == 0 && len(c.status().GetRegionsInTransition()) == 0, fmt.Sprint(c.servers[0].Regions())
	})
	byGroup := map[string][]string{}
	for _, l := range c.waitAllOpen("t1", 10*time.Second) {
		g := layout.PrimaryName(l.GetRegion().GetName())
		byGroup[g] = append(byGroup[g], layout.ServerName(l.GetServer()))
	}
	for g, servers := range byGroup {
		if servers[0] == servers[1] {
			t.Errorf("after the drain replicas of %s share %s", g, servers[0])
		}
	}
}

// An open the server reports failed is retried on another server; after three failures the
// region is FAILED_OPEN.
func TestFailedOpensRetryElsewhereThenFailedOpen(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	bad := c.servers[0]
	bad.SetFailOpens(true)
	c.createTable("t1", 6, 0)
	locs := c.waitAllOpen("t1", 10*time.Second)
	if n := perServer(locs)[bad.Name()]; n != 0 {
		t.Errorf("%d regions on the server that fails opens", n)
	}
	if len(bad.Calls()) == 0 {
		t.Error("the failing server was never asked to open a region")
	}
	for _, s := range c.servers {
		s.SetFailOpens(true)
	}
	_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t2", 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor("FAILED_OPEN", 10*time.Second, func() (bool, string) {
		l := c.regions("t2")[0]
		return l.GetState() == pb.RegionState_REGION_STATE_FAILED_OPEN, l.GetState().String()
	})
	opens := 0
	for _, s := range c.servers {
		for _, call := range s.Calls() {
			if call.Open && !slices.ContainsFunc(locs, func(l *pb.RegionLocation) bool { return l.GetRegion().GetName() == call.Region }) {
				opens++
			}
		}
	}
	if opens != 3 {
		t.Errorf("%d open attempts before FAILED_OPEN, want 3", opens)
	}
	// Cluster status lists it with the regions in transition (it used to say "0 in transition").
	if rit := c.status().GetRegionsInTransition(); !slices.ContainsFunc(rit, func(r *pb.RegionInTransition) bool {
		return r.GetState() == pb.RegionState_REGION_STATE_FAILED_OPEN
	}) {
		t.Errorf("cluster status does not list the FAILED_OPEN region: %v", rit)
	}
	// Moving a FAILED_OPEN region assigns it again.
	good := c.servers[2]
	good.SetFailOpens(false)
	failed := c.regions("t2")[0].GetRegion().GetName()
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: failed, Destination: good.Name()}); err != nil {
		t.Fatal(err)
	}
	if l := c.waitAllOpen("t2", 10*time.Second)[0]; layout.ServerName(l.GetServer()) != good.Name() {
		t.Errorf("reassigned FAILED_OPEN region on %s, want %s", layout.ServerName(l.GetServer()), good.Name())
	}
}

// A server that accepts an open but never reports is told to abort it after the open timeout,
// and the region opens elsewhere.
func TestHungOpenTimesOutAndRetriesElsewhere(t *testing.T) {
	c := newCluster(t, 2, nil, func(cfg *master.Config) { cfg.OpenTimeout = 300 * time.Millisecond })
	hung := c.servers[0]
	hung.SetHangOpens(true)
	c.createTable("t1", 4, 0)
	locs := c.waitAllOpen("t1", 10*time.Second)
	if n := perServer(locs)[hung.Name()]; n != 0 {
		t.Errorf("%d regions on the hung server", n)
	}
	if len(hung.Hung()) != 0 {
		t.Errorf("regions still hung on the server after the aborts: %v", hung.Hung())
	}
	aborts := 0
	for _, call := range hung.Calls() {
		if !call.Open && !call.Flush {
			aborts++
		}
	}
	if aborts == 0 {
		t.Error("no abort (close without flush) sent to the hung server")
	}
}

// The master restarts (closed and reopened on the same storage) while an open hangs: the new
// master resumes the procedure, sends the open again and completes it.
func TestMasterRestartResumesAnAssignment(t *testing.T) {
	c := newCluster(t, 2, nil, func(cfg *master.Config) { cfg.DDLWait = 200 * time.Millisecond })
	hung := c.servers[0]
	hung.SetHangOpens(true)
	infos := c.createTable("t1", 4, 0)
	c.waitFor("opens hanging", 10*time.Second, func() (bool, string) {
		return len(hung.Hung()) == 2, fmt.Sprint("hung ", hung.Hung())
	})
	before := hung.Calls()
	c.m.Close()

	c.startMaster() // same storage, new address; the fakes follow
	c.waitFor("the open sent again by the new master", 10*time.Second, func() (bool, string) {
		return len(hung.Calls()) >= len(before)+2, fmt.Sprintf("%d calls", len(hung.Calls()))
	})
	// The same procedures (ids) were resumed.
	ids := map[string]uint64{}
	for _, call := range before {
		ids[call.Region] = call.ProcedureID
	}
	for _, call := range hung.Calls()[len(before):] {
		if call.Open && ids[call.Region] != call.ProcedureID {
			t.Errorf("region %s reopened under procedure %d, was %d", call.Region, call.ProcedureID, ids[call.Region])
		}
	}
	hung.SetHangOpens(false)
	hung.ReleaseHung()
	locs := c.waitAllOpen("t1", 10*time.Second)
	if len(locs) != len(infos) {
		t.Fatalf("%d regions, want %d", len(locs), len(infos))
	}
	if n := perServer(locs)[hung.Name()]; n != 2 {
		t.Errorf("%d regions opened on the resumed server, want 2", n)
	}
}

// A master restart with nothing in flight keeps the servers: they go on heartbeating to the new
// master without re-registering and keep their regions.
func TestMasterRestartKeepsServersAndRegions(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 6, 0)
	before := perServer(c.waitAllOpen("t1", 10*time.Second))
	c.m.Close()
	c.startMaster()
	hb := c.servers[0].Heartbeats()
	c.waitFor("heartbeats to the new master", 10*time.Second, func() (bool, string) {
		return c.servers[0].Heartbeats() > hb+3, "waiting"
	})
	after := perServer(c.waitAllOpen("t1", 10*time.Second))
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("layout changed over a master restart: %v → %v", before, after)
	}
	for _, s := range c.servers {
		if s.Reregistrations() != 0 {
			t.Errorf("server %s had to register again", s.Name())
		}
	}
}

// A server that dies while no master is active is restored by the new master with a fresh
// lease, declared dead when it runs out, and recovered.
func TestServerDeadDuringMasterRestartIsRecovered(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 6, 0)
	c.waitAllOpen("t1", 10*time.Second)
	c.m.Close()
	victim := c.servers[0]
	victim.Kill()
	c.startMaster()
	c.waitFor("the victim's regions reassigned", 20*time.Second, func() (bool, string) {
		for _, l := range c.regions("t1") {
			if layout.ServerName(l.GetServer()) == victim.Name() || l.GetState() != pb.RegionState_REGION_STATE_OPEN {
				return false, l.GetRegion().GetName() + " not moved"
			}
		}
		return true, ""
	})
	if n := len(c.waitAllOpen("t1", 10*time.Second)); n != 6 {
		t.Fatalf("%d regions", n)
	}
}

// A region server's own drain (its preStop: that process only) ends when the server restarts —
// a StoreCluster deleted and made again on its retained volume used to find every server
// draining and no region assignable. A drain of the name (the shell's, an operator's decision)
// survives restarts until undrained.
func TestProcessDrainEndsWithTheProcess(t *testing.T) {
	c := newCluster(t, 2, nil, nil)
	restart := func(s *mastertest.FakeServer) *mastertest.FakeServer {
		t.Helper()
		addr := s.Name()
		s.Kill()
		n, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{c.m.Addr}, DataAddr: addr, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		c.waitFor("the restarted server registered", 10*time.Second, func() (bool, string) {
			st := c.serverStatus(addr)
			return n.Registered() && st.GetLive() && st.GetServer().GetStartCode() == n.StartCode(), fmt.Sprintf("status %v", st)
		})
		return n
	}
	s := c.servers[1]
	name := s.Name()
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: name, StartCode: s.StartCode()}); err != nil {
		t.Fatal(err)
	}
	if !c.serverStatus(name).GetDraining() {
		t.Fatal("the process's drain did not take")
	}
	s = restart(s)
	if c.serverStatus(name).GetDraining() {
		t.Fatal("the restarted server is still draining: the previous process's own drain outlived it")
	}
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: name}); err != nil {
		t.Fatal(err)
	}
	// A process's own drain on top of the name's does not narrow it.
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: name, StartCode: s.StartCode()}); err != nil {
		t.Fatal(err)
	}
	restart(s)
	if !c.serverStatus(name).GetDraining() {
		t.Fatal("a drain of the server name ended with a restart")
	}
}

// Opens refused by stopping servers (a master that took over while every region server stops,
// before their heartbeats say so) are not failed attempts: the region waits for a server that can
// take it instead of going FAILED_OPEN, and opens on the first one that registers.
func TestOpensRefusedByStoppingServersAreNotFailures(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	for _, s := range c.servers {
		s.SetRefuseOpensStopping(true)
	}
	created := make(chan error, 1) // CreateTable waits for the region to open
	go func() {
		_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t", 1)})
		created <- err
	}()
	c.waitFor("every stopping server asked once", 10*time.Second, func() (bool, string) {
		asked := 0
		for _, s := range c.servers {
			if len(s.Calls()) > 0 {
				asked++
			}
		}
		return asked == 3, fmt.Sprintf("%d of 3 asked", asked)
	})
	// Five more rounds of the master's ticks: still waiting, never FAILED_OPEN, no server asked
	// twice (each said it is stopping).
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if st := c.regions("t")[0].GetState(); st == pb.RegionState_REGION_STATE_FAILED_OPEN || st == pb.RegionState_REGION_STATE_OPEN {
			t.Fatalf("region %s with every server stopping", st)
		}
		time.Sleep(20 * time.Millisecond) // watching for a wrong state over a second of ticks
	}
	for _, s := range c.servers {
		if n := len(s.Calls()); n != 1 {
			t.Errorf("%s was asked %d times after it said it is stopping", s.Name(), n)
		}
	}
	fresh := c.addServer("")
	if l := c.waitAllOpen("t", 10*time.Second)[0]; layout.ServerName(l.GetServer()) != fresh.Name() {
		t.Errorf("opened on %s, want the new server %s", layout.ServerName(l.GetServer()), fresh.Name())
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
}

// A lookup of a moving region with a wait answers once the region is open again, at its new
// server; without a wait it answers at once, with no server.
func TestLocateRegionWaitsForAMove(t *testing.T) {
	c := newCluster(t, 2, nil, func(cfg *master.Config) { cfg.DDLWait = 50 * time.Millisecond }) // MoveRegion answers before the open
	c.createTable("t1", 1, 0)
	l := c.waitAllOpen("t1", 10*time.Second)[0]
	name, from := l.GetRegion().GetName(), layout.ServerName(l.GetServer())
	to := c.servers[0]
	if to.Name() == from {
		to = c.servers[1]
	}
	to.SetHangOpens(true)
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: name, Destination: to.Name()}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the open to hang on the destination", 10*time.Second, func() (bool, string) {
		return len(to.Hung()) == 1, fmt.Sprint(to.Hung())
	})
	locate := func(waitMs uint32) (*pb.RegionLocation, error) {
		resp, err := c.mc.LocateRegion(c.ctx(), &pb.LocateRegionRequest{Table: &pb.TableName{Name: "t1"}, Row: []byte("a"), WaitMs: waitMs})
		return resp.GetLocations()[0], err
	}
	if got, err := locate(0); err != nil || got.GetServer() != nil || got.GetState() != pb.RegionState_REGION_STATE_OPENING {
		t.Fatalf("lookup without a wait: %v %v, want the region OPENING with no server", got, err)
	}
	type answer struct {
		loc *pb.RegionLocation
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		loc, err := locate(60_000) // capped at the master's 5 s
		answers <- answer{loc, err}
	}()
	to.SetHangOpens(false)
	to.ReleaseHung()
	a := <-answers
	if a.err != nil || layout.ServerName(a.loc.GetServer()) != to.Name() || a.loc.GetState() != pb.RegionState_REGION_STATE_OPEN {
		t.Fatalf("lookup with a wait: %v %v, want the region OPEN on %s", a.loc, a.err, to.Name())
	}
}

// regionHistory reads a region's rows from the catalog's log (on the test's in-memory FS), in
// order: "STATE@server" for each write of it.
func regionHistory(t *testing.T, fs storage.FS, name string) []string {
	t.Helper()
	r, err := wal.NewReader(fs, "meta/wal", wal.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for r.Next() {
		for _, kv := range r.Edit().Cells {
			if string(kv.Key().Row()) != "region/"+name || len(kv.Value()) == 0 {
				continue
			}
			var cr pb.CatalogRegion
			if err := proto.Unmarshal(kv.Value(), &cr); err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.TrimPrefix(cr.GetState().String(), "REGION_STATE_")+"@"+cr.GetServer())
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A move's close may leave its last edits in the region's manifest only while every live region
// server announces that it reads them (layout.FeatureManifestHandoff): a server of an earlier
// release would open such a region without them. A master that took over learns the
// announcements from the heartbeats.
func TestMoveHandsOffOnlyWhileEveryServerReadsHandedOffEdits(t *testing.T) {
	c := newCluster(t, 2, nil, nil)
	c.createTable("t1", 1, 0)
	// move moves the table's region to the other of the first two servers and returns the
	// source's close order.
	move := func() mastertest.Call {
		t.Helper()
		l := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0]
		name, from := l.GetRegion().GetName(), layout.ServerName(l.GetServer())
		to := c.servers[0]
		if to.Name() == from {
			to = c.servers[1]
		}
		if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: name, Destination: to.Name()}); err != nil {
			t.Fatal(err)
		}
		c.waitFor("the region at the destination", 10*time.Second, func() (bool, string) {
			l := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0]
			return layout.ServerName(l.GetServer()) == to.Name(), layout.ServerName(l.GetServer())
		})
		calls := c.server(from).Calls()
		last := calls[len(calls)-1]
		if last.Open || last.Region != name || last.Destination != to.Name() {
			t.Fatalf("the source's last order %+v, want the move's close", last)
		}
		return last
	}
	if got := move(); !got.Handoff {
		t.Fatalf("the close of a move among servers that read handed-off edits: %+v, want handoff", got)
	}
	old, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{c.m.Addr}, Logger: testLogger(), Features: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Stop)
	c.waitFor("the earlier release's server live", 10*time.Second, func() (bool, string) {
		s := c.serverStatus(old.Name())
		return s.GetLive(), fmt.Sprint(s)
	})
	if got := move(); got.Handoff {
		t.Fatalf("the close of a move while a server of an earlier release is live: %+v, want no handoff", got)
	}
	old.Stop()
	c.waitFor("the earlier release's server gone", 20*time.Second, func() (bool, string) {
		s := c.serverStatus(old.Name())
		return !s.GetLive(), fmt.Sprint(s)
	})
	// A new master: it hears the features with the servers' heartbeats.
	c.m.Close()
	c.startMaster()
	c.waitFor("a move's close with handoff under the new master", 20*time.Second, func() (bool, string) {
		got := move()
		return got.Handoff, fmt.Sprintf("%+v", got)
	})
}

// checkReplicasApart fails when a live fake server serves two replicas of one region.
func checkReplicasApart(c *cluster) (bool, string) {
	for _, s := range c.servers {
		seen := map[string]string{}
		for _, name := range s.Regions() {
			g := layout.PrimaryName(name)
			if o, ok := seen[g]; ok {
				return false, fmt.Sprintf("%s serves %s and %s", s.Name(), o, name)
			}
			seen[g] = name
		}
	}
	return true, ""
}

// primaryHolder is the server of the first primary in locs.
func primaryHolder(locs []*pb.RegionLocation) string {
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 {
			return layout.ServerName(l.GetServer())
		}
	}
	return ""
}

// primariesOpenOff: every primary of table is OPEN on a server other than off (and served there).
func primariesOpenOff(c *cluster, table, off string) (bool, string) {
	for _, l := range c.regions(table) {
		if l.GetRegion().GetReplicaId() != 0 {
			continue
		}
		srv := layout.ServerName(l.GetServer())
		if l.GetState() != pb.RegionState_REGION_STATE_OPEN || srv == off || c.server(srv) == nil || !slices.Contains(c.server(srv).Regions(), l.GetRegion().GetName()) {
			return false, fmt.Sprintf("primary %s is %s on %q", l.GetRegion().GetName(), l.GetState(), srv)
		}
	}
	return true, ""
}

// With as many replicas as servers every other server holds a replica of each region: a drain
// (a rolling restart's) still empties the server — a primary takes the place of its secondary on
// another server, a secondary waits closed — and the undrained server gets the waiting ones back.
// (Before, nothing could move and the drain never finished.)
func TestDrainWithAsManyReplicasAsServers(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 3, 3)
	locs := c.waitAllOpen("t1", 10*time.Second)
	if len(locs) != 9 {
		t.Fatalf("%d replicas, want 9", len(locs))
	}
	target := c.server(primaryHolder(locs))
	if _, err := c.mc.DrainServer(c.ctx(), &pb.DrainServerRequest{Server: target.Name()}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the drained server empty, every primary open elsewhere, no two replicas together", 15*time.Second, func() (bool, string) {
		if s := c.serverStatus(target.Name()); s.GetRegions() != 0 || len(target.Regions()) != 0 {
			return false, fmt.Sprintf("the drained server holds %v", target.Regions())
		}
		if ok, why := primariesOpenOff(c, "t1", target.Name()); !ok {
			return ok, why
		}
		return checkReplicasApart(c)
	})
	if _, err := c.mc.UndrainServer(c.ctx(), &pb.DrainServerRequest{Server: target.Name()}); err != nil {
		t.Fatal(err)
	}
	locs = c.waitAllOpen("t1", 15*time.Second)
	if counts := perServer(locs); len(locs) != 9 || counts[target.Name()] != 3 {
		t.Errorf("after the undrain: %d replicas open, per server %v", len(locs), counts)
	}
	if ok, why := checkReplicasApart(c); !ok {
		t.Error(why)
	}
}

// A dead server's primary opens on a survivor in its secondary's place when every survivor holds
// a replica of it (before, it stayed unassigned until the server came back: no writes).
func TestDeadServersPrimaryTakesASecondarysPlace(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 3, 3)
	victim := c.server(primaryHolder(c.waitAllOpen("t1", 10*time.Second)))
	victim.Kill()
	c.waitFor("every primary open on a survivor, no two replicas together", 20*time.Second, func() (bool, string) {
		if ok, why := primariesOpenOff(c, "t1", victim.Name()); !ok {
			return ok, why
		}
		return checkReplicasApart(c)
	})
}

// The primaries of a table with replicas spread over the servers (placed in name order, each
// primary before its replicas, they all went to the first server).
func TestPrimariesSpreadOverServers(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 6, 3)
	counts := map[string]int{}
	for _, l := range c.waitAllOpen("t1", 10*time.Second) {
		if l.GetRegion().GetReplicaId() == 0 {
			counts[layout.ServerName(l.GetServer())]++
		}
	}
	if len(counts) != 3 {
		t.Errorf("primaries per server: %v, want 2 on each of 3", counts)
	}
	for s, n := range counts {
		if n != 2 {
			t.Errorf("primaries per server: %v, want 2 on each (%s)", counts, s)
		}
	}
}

// A replica waiting for a server that can take it (more replicas than servers) does not stop the
// periodic balancer: it counted as a region in transition, and the balancer never ran again.
func TestBalancerRunsBesideAReplicaWaitingForAServer(t *testing.T) {
	c := newCluster(t, 1, nil, func(cfg *master.Config) { cfg.BalancerInterval = 200 * time.Millisecond })
	c.createTable("t1", 4, 0)
	c.waitAllOpen("t1", 10*time.Second)
	c.createTable("rep", 1, 3) // three replicas: one waits for a third server for good
	added := c.addServer("")
	c.waitFor("the balancer to give the new server its share", 20*time.Second, func() (bool, string) {
		n := 0
		for _, l := range c.regions("t1") {
			if layout.ServerName(l.GetServer()) == added.Name() && l.GetState() == pb.RegionState_REGION_STATE_OPEN {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d regions of t1 on the new server", n)
	})
}
