package master_test

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
	"github.com/cellstore/cellstore/engine/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// newClusterOn is newCluster over the given storage.
func newClusterOn(t *testing.T, fs storage.FS, n int, tweak func(*master.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, fs: fs}
	c.cfg = testConfig(fs)
	if tweak != nil {
		tweak(&c.cfg)
	}
	c.startMaster()
	for range n {
		c.addServer("")
	}
	c.waitFor("servers registered", 10*time.Second, func() (bool, string) {
		n2 := 0
		for _, s := range c.status().GetServers() {
			if s.GetLive() {
				n2++
			}
		}
		return n2 == n, fmt.Sprintf("%d live", n2)
	})
	return c
}

func walEdit(region string, i int) *wal.Edit {
	kv := cell.AppendKeyValue(nil, fmt.Appendf(nil, "row%04d", i), []byte("f"), []byte("q"), int64(i+1), cell.Put, fmt.Appendf(nil, "v%d", i))
	return &wal.Edit{Region: []byte(region), Cells: []cell.KeyValue{kv}}
}

// A region server dies with unflushed edits in its WAL: after its lease and the margin the master
// declares it dead, fences its WAL directory, splits it into recovered edits (skipping what a
// region flushed), reassigns its regions to the others, then archives the log and forgets it.
func TestDeadServerIsFencedSplitAndItsRegionsReassigned(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := newClusterOn(t, fs, 3, nil)
	c.createTable("t1", 8, 0)
	c.waitAllOpen("t1", 10*time.Second)
	victim := c.servers[0]
	infos := victim.RegionInfos()
	if len(infos) < 2 {
		t.Fatalf("victim holds %d regions", len(infos))
	}
	// The victim's WAL: edits for each of its regions, in a few segments.
	walDir := layout.WALDir(victim.Name(), victim.StartCode())
	const segmentSize = 1024
	w, err := wal.Open(wal.Options{FS: fs, Dir: walDir, SegmentSize: segmentSize})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]uint64{}
	for i := range 60 {
		region := infos[i%len(infos)].GetName()
		seq, err := w.Append(walEdit(region, i), wal.SyncWAL)
		if err != nil {
			t.Fatal(err)
		}
		seqs[region] = append(seqs[region], seq)
	}
	// Not closed: the server dies with its last segment preallocated (on a local filesystem).
	t.Cleanup(func() { _ = w.Close() })
	// The first region flushed its first three edits (reported in heartbeats).
	flushedRegion := infos[0].GetName()
	flushedSeq := seqs[flushedRegion][2]
	victim.SetFlushedSeq(flushedRegion, flushedSeq)
	hb := victim.Heartbeats()
	c.waitFor("two heartbeats carrying the flushed seq", 5*time.Second, func() (bool, string) {
		return victim.Heartbeats() >= hb+2, "waiting"
	})

	start := time.Now()
	victim.Kill()
	var declared time.Duration
	c.waitFor("every region open on the survivors", 20*time.Second, func() (bool, string) {
		st := c.status()
		if declared == 0 && slices.Contains(st.GetDeadServers(), victim.Name()) {
			declared = time.Since(start)
		}
		for _, l := range c.regions("t1") {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN || layout.ServerName(l.GetServer()) == victim.Name() {
				return false, fmt.Sprintf("region %s is %s on %s", l.GetRegion().GetName(), l.GetState(), layout.ServerName(l.GetServer()))
			}
		}
		return true, ""
	})
	recovered := time.Since(start)
	t.Logf("killed server declared dead after %v (lease %v + margin %v); all its %d regions open elsewhere %v after the kill",
		declared.Round(time.Millisecond), testLease.Lease, testLease.DeadMargin, len(infos), recovered.Round(time.Millisecond))
	if recovered < testLease.Lease+testLease.DeadMargin {
		t.Errorf("regions reassigned %v after the kill, before lease + margin %v: the dead server was not given its lease", recovered, testLease.Lease+testLease.DeadMargin)
	}
	locs := c.waitAllOpen("t1", 10*time.Second)
	if counts := perServer(locs); len(counts) != 2 {
		t.Errorf("regions on %v, want the two survivors", counts)
	}
	// The split wrote each region's unflushed edits, in order.
	for _, ri := range infos {
		dir := path.Join("data", "default", "t1", ri.GetName(), "recovered.edits")
		r, err := wal.NewRecoveredEditsReader(fs, dir, wal.ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for r.Next() {
			e := r.Edit()
			if string(e.Region) != ri.GetName() {
				t.Errorf("recovered edits of %s hold an edit of %s", ri.GetName(), e.Region)
			}
			got = append(got, e.Seq)
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		want := seqs[ri.GetName()]
		if ri.GetName() == flushedRegion {
			want = want[3:]
		}
		if !slices.Equal(got, want) {
			t.Errorf("region %s: recovered edits %v, want %v", ri.GetName(), got, want)
		}
	}
	// The recovery ends: the fenced log is archived and the server forgotten.
	c.waitFor("the dead server forgotten", 10*time.Second, func() (bool, string) {
		st := c.status()
		for _, s := range st.GetServers() {
			if layout.ServerName(s.GetServer()) == victim.Name() {
				return false, "still listed"
			}
		}
		return len(st.GetDeadServers()) == 0, fmt.Sprint("dead servers ", st.GetDeadServers())
	})
	for name, want := range map[string]bool{walDir: false, walDir + layout.SplittingSuffix: false,
		path.Join("archive", "wal", layout.WALDirName(victim.Name(), victim.StartCode())): true} {
		if ok, err := storage.Exists(fs, name); err != nil || ok != want {
			t.Errorf("%s exists: %v (err %v), want %v", name, ok, err, want)
		}
	}
	// The last segment's preallocated tail was cut off before archiving: it is shorter than a
	// segment (it held the 60 edits' last few).
	archived := path.Join("archive", "wal", layout.WALDirName(victim.Name(), victim.StartCode()))
	names, err := fs.List(archived)
	if err != nil || len(names) == 0 {
		t.Fatalf("archive: %v %v", names, err)
	}
	slices.Sort(names)
	st, err := fs.Stat(path.Join(archived, names[len(names)-1]))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size >= segmentSize {
		t.Errorf("the archived last segment is %d bytes: its preallocated tail (segment size %d) was kept", st.Size, segmentSize)
	}
}

// A server that stops heartbeating but keeps running is declared dead; when it comes back, its
// heartbeat is answered "unknown server": it drops its regions and registers as a new process.
func TestCutOffServerIsToldItIsUnknownAndRegistersAgain(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	c.createTable("t1", 6, 0)
	c.waitAllOpen("t1", 10*time.Second)
	victim := c.servers[1]
	oldStart := victim.StartCode()
	victim.PauseHeartbeats(true)
	c.waitFor("its regions reassigned", 20*time.Second, func() (bool, string) {
		for _, l := range c.regions("t1") {
			if layout.ServerName(l.GetServer()) == victim.Name() || l.GetState() != pb.RegionState_REGION_STATE_OPEN {
				return false, l.GetRegion().GetName() + " not moved yet"
			}
		}
		return true, ""
	})
	victim.PauseHeartbeats(false)
	c.waitFor("the server back as a new process", 10*time.Second, func() (bool, string) {
		return victim.Reregistrations() == 1 && victim.Registered() && victim.StartCode() != oldStart && len(victim.Regions()) == 0,
			fmt.Sprintf("reregistrations %d, regions %v", victim.Reregistrations(), victim.Regions())
	})
	// Balancing gives it its share again.
	if _, err := c.mc.Balance(c.ctx(), &pb.BalanceRequest{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("balanced", 10*time.Second, func() (bool, string) {
		return len(victim.Regions()) == 2, fmt.Sprint("victim holds ", victim.Regions())
	})
}

// mastertest's fake is what the region-server contract asks: keep it honest.
var _ pb.AdminServer = (*mastertest.FakeServer)(nil)

// A request whose catalog write is larger than the catalog's log takes in one record (8 MiB on a
// bucket) is refused as INVALID_ARGUMENT and changes nothing; the master goes on serving. Split
// keys over a row key's limit are refused before that.
func TestCatalogWriteTooLargeIsRefused(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClusterOn(t, storage.NewMem(), 1, func(cfg *master.Config) { cfg.Bucket = b })
	create := func(name string, keys [][]byte) error {
		_, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor(name, 0), SplitKeys: keys})
		return err
	}
	var keys [][]byte // 300 keys of 30 KiB: a 9 MB request, ~18 MB of region rows
	for i := range 300 {
		keys = append(keys, fmt.Appendf(bytes.Repeat([]byte("k"), 30<<10), "%04d", i))
	}
	if err := create("big", keys); errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(err.Error(), "too large for the catalog") {
		t.Fatalf("a table of 300 regions with 30 KiB keys: %v", err)
	}
	if err := create("long", [][]byte{bytes.Repeat([]byte("k"), cell.MaxRowLength+1)}); errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("a split key over the limit: %v", err)
	}
	if err := create("small", [][]byte{[]byte("m")}); err != nil {
		t.Fatalf("a table after the refusal: %v", err)
	}
	c.waitAllOpen("small", 10*time.Second)
	if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("big")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
		t.Fatalf("the refused table: %v, want it not found", err)
	}
}

// A dead server's regions too many for one catalog write (here: a write per region) are taken off
// it in several writes, each adding the regions it took to the dead server's record, and placed
// and reported over several writes; the recovery finishes with every region open on the
// survivors. Disabling and enabling the table close and assign its regions a write at a time.
func TestDeadServerRegionsReassignedInSeveralWrites(t *testing.T) {
	defer master.SetMaxBatchBytes(1)()
	c := newClusterOn(t, storage.NewMem(), 3, nil)
	c.createTable("t1", 9, 0)
	c.waitAllOpen("t1", 10*time.Second)
	victim := c.servers[0]
	if n := len(victim.RegionInfos()); n < 2 {
		t.Fatalf("victim holds %d regions", n)
	}
	victim.Kill()
	c.waitFor("every region open on the survivors", 20*time.Second, func() (bool, string) {
		for _, l := range c.regions("t1") {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN || layout.ServerName(l.GetServer()) == victim.Name() {
				return false, fmt.Sprintf("region %s is %s on %s", l.GetRegion().GetName(), l.GetState(), layout.ServerName(l.GetServer()))
			}
		}
		return true, ""
	})
	c.waitFor("the recovery finished", 10*time.Second, func() (bool, string) {
		return len(c.status().GetDeadServers()) == 0, fmt.Sprint(c.status().GetDeadServers())
	})
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("every region closed", 20*time.Second, func() (bool, string) {
		for _, l := range c.regions("t1") {
			if l.GetState() != pb.RegionState_REGION_STATE_CLOSED {
				return false, fmt.Sprintf("region %s is %s", l.GetRegion().GetName(), l.GetState())
			}
		}
		return true, ""
	})
	if _, err := c.mc.EnableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	c.waitAllOpen("t1", 20*time.Second)
}

// archive_wal answers that every acknowledged write can be recovered to only once the logs of
// servers that died or stopped are archived too (their recovery does it at its end): with one
// held at its fence, it says which server it waits for; once it is done, it succeeds.
func TestArchiveClusterWALWaitsForDeadServersLogs(t *testing.T) {
	backup, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 2, func(mc *master.Config) { mc.Backup, mc.WALArchive = backup, true })
	c.createTable("t1", 2, 0)
	c.waitAllOpen("t1", 10*time.Second)
	victim := c.servers[0]
	w, err := wal.Open(wal.Options{FS: ffs, Dir: layout.WALDir(victim.Name(), victim.StartCode())})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpRename, Path: "wal/*"})
	victim.Kill()
	c.waitFor("the recovery held at its fence", 20*time.Second, func() (bool, string) {
		return slices.Contains(c.status().GetDeadServers(), victim.Name()) && ffs.Count(faultfs.OpRename) > 0, "not yet"
	})
	ctx, cancel := context.WithTimeout(c.ctx(), 5*time.Second) // (the master answers a tenth before it ends)
	_, err = c.mc.ArchiveClusterWAL(ctx, &pb.ArchiveClusterWALRequest{})
	cancel()
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(fmt.Sprint(err), victim.Name()) {
		t.Fatalf("archive_wal with a dead server's log unarchived: %v, want FAILED_PRECONDITION naming it", err)
	}
	ffs.ClearRules()
	if _, err := c.mc.ArchiveClusterWAL(c.ctx(), &pb.ArchiveClusterWALRequest{}); err != nil {
		t.Fatalf("archive_wal once the recovery can end: %v", err)
	}
	if dead := c.status().GetDeadServers(); len(dead) != 0 {
		t.Fatalf("archive_wal answered with dead servers still recovering: %v", dead)
	}
}

// The recovery of a dead server resumes after a master restart at whichever step it was: the
// fence (its rename kept failing), the split (writing recovered edits kept failing) or the wait
// for the reassigned regions to open (their new servers hung).
func TestDeadServerRecoveryResumesAfterMasterRestart(t *testing.T) {
	for _, step := range []string{"fence", "split", "wait"} {
		t.Run(step, func(t *testing.T) {
			ffs := faultfs.New(storage.NewMem())
			c := newClusterOn(t, ffs, 3, nil)
			c.createTable("t1", 6, 0)
			c.waitAllOpen("t1", 10*time.Second)
			victim := c.servers[0]
			infos := victim.RegionInfos()
			walDir := layout.WALDir(victim.Name(), victim.StartCode())
			w, err := wal.Open(wal.Options{FS: ffs, Dir: walDir})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if _, err := w.Append(walEdit(infos[i%len(infos)].GetName(), i), wal.SyncWAL); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			var blocked func() (bool, string)
			switch step {
			case "fence":
				ffs.AddRule(faultfs.Rule{Ops: faultfs.OpRename, Path: "wal/*"})
				blocked = func() (bool, string) {
					ok, _ := storage.Exists(ffs, walDir)
					return ok && ffs.Count(faultfs.OpRename) > 0, "no failed fence yet"
				}
			case "split":
				ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Path: "data/default/t1/*/recovered.edits/*"})
				blocked = func() (bool, string) {
					fenced, _ := storage.Exists(ffs, walDir+layout.SplittingSuffix)
					return fenced, "not fenced yet"
				}
			case "wait":
				for _, s := range c.servers[1:] {
					s.SetHangOpens(true)
				}
				blocked = func() (bool, string) {
					n := 0
					for _, s := range c.servers[1:] {
						n += len(s.Hung())
					}
					return n == len(infos), fmt.Sprintf("%d opens hang", n)
				}
			}
			victim.Kill()
			c.waitFor("the recovery blocked at the "+step, 20*time.Second, func() (bool, string) {
				if !slices.Contains(c.status().GetDeadServers(), victim.Name()) {
					return false, "not declared dead yet"
				}
				return blocked()
			})
			// Whatever was blocked, no region left the dead server before its logs were split.
			if step != "wait" {
				for _, l := range c.regions("t1") {
					if slices.ContainsFunc(infos, func(ri *pb.RegionInfo) bool { return ri.GetName() == l.GetRegion().GetName() }) &&
						l.GetState() == pb.RegionState_REGION_STATE_OPEN && layout.ServerName(l.GetServer()) != victim.Name() {
						t.Fatalf("region %s reopened before the split", l.GetRegion().GetName())
					}
				}
			}
			c.m.Close()
			ffs.ClearRules()
			c.startMaster()
			if step == "wait" {
				for _, s := range c.servers[1:] {
					s.SetHangOpens(false)
				}
				c.waitFor("the opens resent", 10*time.Second, func() (bool, string) {
					for _, s := range c.servers[1:] {
						s.ReleaseHung()
					}
					return len(c.servers[1].Regions())+len(c.servers[2].Regions()) == 6, "waiting"
				})
			}
			c.waitAllOpen("t1", 20*time.Second)
			c.waitFor("the recovery finished", 10*time.Second, func() (bool, string) {
				return len(c.status().GetDeadServers()) == 0, fmt.Sprint(c.status().GetDeadServers())
			})
			for _, ri := range infos {
				r, err := wal.NewRecoveredEditsReader(ffs, layout.RecoveredEditsDir(ri), wal.ReplayOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for r.Next() {
					n++
				}
				r.Close()
				if want := 10 / len(infos); n < want {
					t.Errorf("region %s: %d recovered edits, want at least %d", ri.GetName(), n, want)
				}
			}
			if ok, _ := storage.Exists(ffs, path.Join("archive", "wal", layout.WALDirName(victim.Name(), victim.StartCode()))); !ok {
				t.Error("the split log was not archived")
			}
		})
	}
}

// An elected master opens the catalog only once it holds the catalog directory's lock: a previous
// master paused past its Lease still holds it, and two masters never write the catalog at once
// (the chaos run corrupted it that way).
func TestElectedMasterWaitsForTheCatalogLock(t *testing.T) {
	root := t.TempDir()
	fs, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	held, err := storage.LockDir(path.Join(root, "meta")) // the paused predecessor
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := mastertest.StartMaster(ctx, testConfig(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.WaitActive(time.Second); err == nil {
		t.Fatal("the master became active while another held the catalog lock")
	}
	held.Release()
	if err := m.WaitActive(10 * time.Second); err != nil {
		t.Fatalf("the master did not become active once the lock was released: %v", err)
	}
}

// An order answered by a newer process of the server the catalog names (that process restarted
// and has not reached this master yet — after a failover, say) is not taken for the region's
// state: "not serving" from the new process does not mean the old one closed the region, whose
// unflushed edits are in the old process's WAL. The master recovers the old process (fence,
// split its log, reassign) and only then does the region open elsewhere. (Taking the answer for
// "closed" moved or split regions without their unflushed edits: the chaos run lost writes so.)
func TestOrderToAReplacedProcessRecoversIt(t *testing.T) {
	c := newClusterOn(t, storage.NewMem(), 2, nil)
	c.createTable("t1", 1, 0)
	locs := c.waitAllOpen("t1", 10*time.Second)
	region := locs[0].GetRegion().GetName()
	src := c.server(layout.ServerName(locs[0].GetServer()))
	var dst *mastertest.FakeServer
	for _, s := range c.servers {
		if s != src {
			dst = s
		}
	}
	src.Reincarnate()
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: region, Destination: dst.Name()}); err != nil {
		t.Fatal(err)
	}
	// The recovery is quick here (no WAL): the counter of recoveries tells whether it ran before
	// the region opened elsewhere (a lease expiry would take over a second).
	crashes := func() float64 {
		fams, err := c.cfg.Registerer.(*prometheus.Registry).Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "cellstore_master_server_crash_procedures_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := crashes()
		locs := c.regions("t1")
		if len(locs) == 1 && locs[0].GetState() == pb.RegionState_REGION_STATE_OPEN && layout.ServerName(locs[0].GetServer()) == dst.Name() {
			if n == 0 {
				t.Fatal("the region moved on a close answered by a newer process, without the old process's recovery")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("region %s not open on %s after 20 s: %v", region, dst.Name(), locs)
		}
		time.Sleep(5 * time.Millisecond) // polling the master
	}
	refused := false
	for _, call := range src.Calls() {
		if call.Region == region && !call.Open {
			refused = true
		}
	}
	if !refused {
		t.Fatal("the close never reached the server's new process")
	}
	// The new process comes to the master and serves again.
	src.PauseHeartbeats(false)
	c.waitFor("the new process registered", 10*time.Second, func() (bool, string) { return src.Registered(), "" })
}
