package master_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
	"github.com/cellstore/cellstore/engine/wal"
)

// A clone is a procedure in the catalog: a master that fails while it writes the new regions'
// directories leaves the table ENABLING with its regions unassigned; the next master writes them
// and opens the table. (The data side — what a clone reads — is tested with real region servers in
// engine/regionserver's TestSnapshotCloneRestoreAndTheCleaner.)
func TestCloneSnapshotSurvivesAMasterFailover(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 2, nil)
	c.createTable("t1", 3, 0)
	c.waitAllOpen("t1", 10*time.Second)
	// The fake servers keep no files: the snapshot records three regions without files. (A
	// flush is asked of a real server; SKIP_FLUSH asks none.)
	resp, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "s1", SkipFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSnapshot().GetRegions() != 3 {
		t.Fatalf("snapshot: %v", resp.GetSnapshot())
	}
	for _, bad := range []*pb.SnapshotRequest{
		{Table: tableName("t1"), Name: ".hidden"},
		{Table: tableName("t1"), Name: "a/b"},
		{Table: tableName("nope"), Name: "s2"},
		{Table: tableName("t1"), Name: "s1"}, // exists
	} {
		if _, err := c.mc.Snapshot(c.ctx(), bad); err == nil {
			t.Errorf("snapshot %v was taken", bad)
		}
	}
	if _, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("t1")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_EXISTS {
		t.Errorf("clone onto an existing table: %v", err)
	}
	if _, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "missing", Table: tableName("c2")}); errCode(err) != pb.ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND {
		t.Errorf("clone of a missing snapshot: %v", err)
	}

	// The region directories of the clone cannot be written: the call gives up waiting.
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpMkdirAll, Path: "data/default/c1/*"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.mc.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("c1")}); err == nil {
		t.Fatal("the clone succeeded without its region directories")
	}
	d, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")})
	if err != nil || d.GetState() != pb.TableState_TABLE_STATE_ENABLING {
		t.Fatalf("clone c1 half made: %v %v", d.GetState(), err)
	}
	for _, l := range c.regions("c1") {
		if l.GetState() != pb.RegionState_REGION_STATE_OFFLINE {
			t.Fatalf("region %s of a clone not yet written is %s", l.GetRegion().GetName(), l.GetState())
		}
	}

	// The master goes; the next one finishes the clone.
	c.m.Close()
	ffs.ClearRules()
	c.startMaster()
	locs := c.waitAllOpen("c1", 20*time.Second)
	if len(locs) != 3 {
		t.Fatalf("clone c1 has %d regions, want 3", len(locs))
	}
	for _, l := range locs {
		manifest := path.Join(layout.RegionDir(l.GetRegion()), "MANIFEST")
		if ok, err := storage.Exists(ffs, manifest); err != nil || !ok {
			t.Errorf("region %s of the clone has no manifest (%v)", l.GetRegion().GetName(), err)
		}
	}
	c.waitFor("c1 enabled", 10*time.Second, func() (bool, string) {
		d, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")})
		return err == nil && d.GetState() == pb.TableState_TABLE_STATE_ENABLED, fmt.Sprint(d.GetState(), err)
	})
	list, err := c.mc.ListSnapshots(c.ctx(), &pb.ListSnapshotsRequest{Pattern: "s.*"})
	if err != nil || len(list.GetSnapshots()) != 1 {
		t.Fatalf("list_snapshots: %v %v", list, err)
	}
	if _, err := c.mc.DeleteSnapshot(c.ctx(), &pb.SnapshotNameRequest{Name: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DeleteSnapshot(c.ctx(), &pb.SnapshotNameRequest{Name: "s1"}); errCode(err) != pb.ErrorCode_ERROR_CODE_SNAPSHOT_NOT_FOUND {
		t.Errorf("deleting a deleted snapshot: %v", err)
	}
}

// snapshotNewTable creates table with regions regions, waits for them to open and takes a
// SKIP_FLUSH snapshot of it named snap (the fake servers keep no files: it records the regions).
func (c *cluster) snapshotNewTable(table string, regions int32, snap string) {
	c.t.Helper()
	c.createTable(table, regions, 0)
	c.waitAllOpen(table, 10*time.Second)
	if _, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName(table), Name: snap, SkipFlush: true}); err != nil {
		c.t.Fatal(err)
	}
}

// While a snapshot is restored into a table, enabling, truncating or altering it is refused (it
// would open, drop or redescribe the regions the restore is writing); a table still being
// deleted cannot be the target of a clone (its drop would remove the clone's regions and rows).
func TestRestoreAndCloneGuardTheirTable(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 2, nil)
	c.snapshotNewTable("t1", 3, "s1")
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	// The restore cannot write its regions' directories: it stays under way.
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpMkdirAll, Path: "data/default/t1/*"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.mc.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: "s1"})
	cancel()
	if err == nil {
		t.Fatal("the restore finished without its region directories")
	}
	refused := func(what string, err error) {
		t.Helper()
		if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(fmt.Sprint(err), "being restored") {
			t.Errorf("%s during a restore: %v, want a refusal naming the restore", what, err)
		}
	}
	_, err = c.mc.EnableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
	refused("enable", err)
	_, err = c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("t1")})
	refused("truncate", err)
	d, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.mc.ModifyTable(c.ctx(), &pb.ModifyTableRequest{Table: d.GetTable()})
	refused("alter", err)
	ffs.ClearRules()
	c.waitFor("the restore done and t1 enabled", 20*time.Second, func() (bool, string) {
		_, err := c.mc.EnableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
		return err == nil, fmt.Sprint(err)
	})
	c.waitAllOpen("t1", 10*time.Second)

	// A table whose drop cannot remove its regions yet: a clone under its name waits.
	c.createTable("t2", 2, 0)
	c.waitAllOpen("t2", 10*time.Second)
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t2")}); err != nil {
		t.Fatal(err)
	}
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsAll, Path: "data/default/t2"}) // the drop looks at and moves the table directory
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, _ = c.mc.DeleteTable(ctx, &pb.TableRequest{Table: tableName("t2")})
	cancel()
	// (The deadline may end the call before the master took it on a loaded machine: ask until
	// the table is marked as being deleted, which stays so while its directory cannot move.)
	c.waitFor("a clone onto t2 refused as being deleted", 20*time.Second, func() (bool, string) {
		_, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("t2")})
		if errCode(err) == pb.ErrorCode_ERROR_CODE_TABLE_EXISTS && !strings.Contains(fmt.Sprint(err), "being deleted") {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, _ = c.mc.DeleteTable(ctx, &pb.TableRequest{Table: tableName("t2")})
			cancel()
			return false, fmt.Sprint(err)
		}
		if errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_EXISTS {
			t.Fatalf("clone onto a table being deleted: %v, want a retryable refusal", err)
		}
		return true, ""
	})
	ffs.ClearRules()
	// Asked again only while t2 is being deleted. A clone whose wait for its regions ran out (a
	// loaded machine; "goes on in the background") was taken: asking again would find t2 there.
	var answers []string
	c.waitFor("the clone once t2 is gone", 20*time.Second, func() (bool, string) {
		_, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("t2")})
		msg := fmt.Sprint(err)
		if len(answers) == 0 || answers[len(answers)-1] != msg {
			answers = append(answers, msg)
		}
		switch {
		case err == nil || errCode(err) == pb.ErrorCode_ERROR_CODE_TIMEOUT && strings.Contains(msg, "goes on in the background"):
			return true, ""
		case errCode(err) == pb.ErrorCode_ERROR_CODE_TABLE_EXISTS && strings.Contains(msg, "being deleted"):
			return false, strings.Join(answers, "; then ")
		}
		t.Fatalf("the clone once t2's drop can finish: %s", strings.Join(answers, "; then "))
		return false, ""
	})
	if len(answers) > 1 || answers[0] != "<nil>" {
		t.Logf("the clone's answers: %s", strings.Join(answers, "; then "))
	}
	c.waitAllOpen("t2", 20*time.Second)
}

// A manifest whose regions a table cannot be made of (none, a gap, an overlap, not from the first
// row to the last, files a region cannot link to) or that has no table descriptor is refused as invalid before anything changes:
// a restore into a disabled table keeps its regions (it used to drop them in the commit that made
// the new ones, then fail to write those on every try, leaving the old regions' files to the
// archive cleaner), and a clone makes no table.
func TestRestoreAndCloneRefuseAManifestOfBadRegions(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	c.snapshotNewTable("t1", 3, "s1")
	st := region.Storage{FS: c.fs}
	good, err := snapshot.Read(st, snapshot.ManifestKey("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(good.GetRegions()) != 3 {
		t.Fatalf("the snapshot has %d regions, want 3", len(good.GetRegions()))
	}
	r0, r1, r2 := good.Regions[0], good.Regions[1], good.Regions[2]
	with := func(f func(r *pb.SnapshotRegion)) *pb.SnapshotRegion {
		r := proto.CloneOf(r1)
		f(r)
		return r
	}
	bad := map[string]func(m *pb.SnapshotManifest){
		"no-regions": func(m *pb.SnapshotManifest) { m.Regions = nil },
		"no-table":   func(m *pb.SnapshotManifest) { m.Table = nil },
		"first-not-at-start": func(m *pb.SnapshotManifest) {
			m.Regions[0] = proto.CloneOf(r0)
			m.Regions[0].StartKey = []byte{0}
		},
		"last-not-at-end": func(m *pb.SnapshotManifest) {
			m.Regions[2] = proto.CloneOf(r2)
			m.Regions[2].EndKey = []byte{0xff, 0xff}
		},
		"gap":          func(m *pb.SnapshotManifest) { m.Regions = []*pb.SnapshotRegion{r0, r2} },
		"out-of-order": func(m *pb.SnapshotManifest) { m.Regions = []*pb.SnapshotRegion{r0, r2, r1} },
		"overlap": func(m *pb.SnapshotManifest) {
			m.Regions = []*pb.SnapshotRegion{r0, r1, with(func(r *pb.SnapshotRegion) { r.EndKey = nil })}
		},
		"empty-region": func(m *pb.SnapshotManifest) { // a repeated start key
			m.Regions = []*pb.SnapshotRegion{r0, with(func(r *pb.SnapshotRegion) { r.EndKey = r.StartKey }), r1, r2}
		},
		"unknown-family": func(m *pb.SnapshotManifest) {
			m.Regions[1] = with(func(r *pb.SnapshotRegion) {
				r.Files = []*pb.SnapshotFile{{Family: "nope", Path: "data/default/t1/0000000000000001/nope/a"}}
			})
		},
		"not-a-store-file": func(m *pb.SnapshotManifest) {
			m.Regions[1] = with(func(r *pb.SnapshotRegion) { r.Files = []*pb.SnapshotFile{{Family: "f", Path: "catalog/../x"}} })
		},
	}
	for name, f := range bad {
		m := proto.CloneOf(good)
		m.Name = name
		f(m)
		if err := snapshot.Write(st, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	regionNames := func() []string {
		var out []string
		for _, l := range c.regions("t1") {
			out = append(out, l.GetRegion().GetName())
		}
		return out
	}
	before := regionNames()
	for name := range bad {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.mc.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: name})
		cancel()
		if errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(fmt.Sprint(err), "snapshot "+name) {
			t.Errorf("restore of %s: %v, want INVALID_ARGUMENT naming the snapshot", name, err)
		}
		d, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")})
		if err != nil || d.GetState() != pb.TableState_TABLE_STATE_DISABLED {
			t.Fatalf("after the restore of %s, t1 is %v (%v), want disabled", name, d.GetState(), err)
		}
		if after := regionNames(); !slices.Equal(after, before) {
			t.Fatalf("after the restore of %s, t1's regions are %q, were %q", name, after, before)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.mc.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: name, Table: tableName("c-" + name)})
		cancel()
		if errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(fmt.Sprint(err), "snapshot "+name) {
			t.Errorf("clone of %s: %v, want INVALID_ARGUMENT naming the snapshot", name, err)
		}
		if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("c-" + name)}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
			t.Errorf("the refused clone of %s made a table: %v", name, err)
		}
	}
	// Nor did a refused call write the table's copy of a manifest.
	if err := st.WalkFiles(snapshot.LinksDir, func(p string) error { return fmt.Errorf("%s written", p) }); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Error(err)
	}
	// The table can still be restored from a sound snapshot.
	if _, err := c.mc.RestoreSnapshot(c.ctx(), &pb.SnapshotNameRequest{Name: "s1"}); err != nil {
		t.Fatal(err)
	}
}

// A manifest under another snapshot's name (renamed or copied by hand) is refused as corrupt: a
// clone would go by the name inside it. It can still be deleted.
func TestCloneRefusesAManifestNamingAnotherSnapshot(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	c.snapshotNewTable("t1", 2, "s1")
	st := region.Storage{FS: c.fs}
	b, err := st.ReadObject(snapshot.ManifestKey("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteObject(snapshot.ManifestKey("renamed"), b, true); err != nil {
		t.Fatal(err)
	}
	_, err = c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "renamed", Table: tableName("c1")})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_CORRUPTION || !strings.Contains(fmt.Sprint(err), `names snapshot "s1"`) {
		t.Fatalf("clone of a manifest at renamed naming s1: %v, want CORRUPTION naming both", err)
	}
	if _, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
		t.Errorf("the refused clone made a table: %v", err)
	}
	if _, err := c.mc.DeleteSnapshot(c.ctx(), &pb.SnapshotNameRequest{Name: "renamed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.StatObject(snapshot.ManifestKey("s1")); err != nil {
		t.Fatalf("deleting renamed deleted s1: %v", err)
	}
}

// A region whose server died (or restarted as a new process) before its recovery reassigned it
// has unflushed edits only in that process's WAL: a snapshot is refused (retryably) rather than
// taken from its files without them.
func TestSnapshotRefusesRegionsBeingRecovered(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 1, nil)
	c.createTable("t1", 2, 0)
	c.waitAllOpen("t1", 10*time.Second)
	if _, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "before"}); err != nil {
		t.Fatal(err)
	}
	victim := c.servers[0]
	// Its recovery cannot read its WAL directory yet: it stays at fencing and splitting the log,
	// its regions still open on the dead process with no procedure.
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsAll, Path: "wal/*"})
	victim.PauseHeartbeats(true)
	c.waitFor("the server declared dead", 20*time.Second, func() (bool, string) {
		st := c.status()
		return len(st.GetDeadServers()) > 0, fmt.Sprint(st.GetDeadServers())
	})
	_, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "during"})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("snapshot while the table's only server is being recovered: %v, want a retryable refusal", err)
	}
	ffs.ClearRules()
	victim.PauseHeartbeats(false)
	c.waitFor("the snapshot once the regions are open again", 30*time.Second, func() (bool, string) {
		_, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "after"})
		return err == nil, fmt.Sprint(err)
	})
}

// A closed region whose manifest holds the last edits of a move's close (its destination never
// opened it before its table was disabled) has edits in no store file: a snapshot is refused until
// the region has opened and flushed them.
func TestSnapshotRefusesAClosedRegionWithHandedOffEdits(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	rf := newRegionFiles(t, c.fs)
	c.createTable("t1", 1, 0)
	ri := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0].GetRegion()
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	put := func(r *region.Region) {
		if err := r.Mutate(region.NewMutation([]byte("row")).Put([]byte("f"), []byte("q"), 1, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	rf.withClose(ri, put, (*region.Region).CloseForMove)
	_, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "s1"})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(fmt.Sprint(err), "in no store file") {
		t.Fatalf("snapshot of a disabled table whose region holds handed-off edits: %v, want FAILED_PRECONDITION", err)
	}
	rf.with(ri, func(*region.Region) {}) // opened (the edits replayed) and closed with a flush
	if _, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "s1"}); err != nil {
		t.Fatal(err)
	}
}

// Likewise a closed region with recovered edits above its files (a point-in-time recovery's,
// into a restored table, which stays disabled): a snapshot of it would miss them. Stale ones (at
// or below what its files hold) do not count.
func TestSnapshotRefusesAClosedRegionWithRecoveredEdits(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	rf := newRegionFiles(t, c.fs)
	c.createTable("t1", 1, 0)
	ri := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0].GetRegion()
	rf.with(ri, func(r *region.Region) {
		if err := r.Mutate(region.NewMutation([]byte("a")).Put([]byte("f"), []byte("q"), 1, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	recovered := func(seq uint64) {
		t.Helper()
		buf, err := wal.AppendEditRecord(wal.RecoveredEditsHeader(nil), &wal.Edit{Region: []byte(ri.GetName()), Seq: seq,
			Cells: []cell.KeyValue{cell.AppendKeyValue(nil, []byte("b"), []byte("f"), []byte("q"), 1, cell.Put, []byte("v"))}})
		if err == nil {
			err = region.Storage{FS: c.fs}.WriteObject(path.Join(layout.RecoveredEditsDir(ri), wal.RecoveredEditsName(1)), buf, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	recovered(1_000_000)
	_, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "s1"})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(fmt.Sprint(err), "recovered edits") {
		t.Fatalf("snapshot of a disabled table whose region has recovered edits: %v, want FAILED_PRECONDITION", err)
	}
	rf.with(ri, func(*region.Region) {}) // opened (the edits replayed and flushed) and closed
	recovered(1)                         // stale: below what the files hold
	if _, err := c.mc.Snapshot(c.ctx(), &pb.SnapshotRequest{Table: tableName("t1"), Name: "s1"}); err != nil {
		t.Fatal(err)
	}
}

// A clone that cannot finish (here: its regions' directories cannot be written; in life, a corrupt
// archive object for a point-in-time recovery) keeps its table ENABLING: dropping the table
// cancels it, and the name can be used again.
func TestDropCancelsAFailingClone(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	c := newClusterOn(t, ffs, 2, nil)
	c.snapshotNewTable("t1", 2, "s1")
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpMkdirAll, Path: "data/default/c1/*"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.mc.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("c1")})
	cancel()
	if err == nil {
		t.Fatal("the clone finished without its region directories")
	}
	// The failure is listed with the table, and tried again after a growing wait, not at every
	// pass of the master's loop (each try writes every region again, and may read the archive).
	var why string
	c.waitFor("the clone's failure listed", 10*time.Second, func() (bool, string) {
		resp, err := c.mc.ListTables(c.ctx(), &pb.ListTablesRequest{})
		for _, ts := range resp.GetTables() {
			if ts.GetTable().GetName().GetName() == "c1" {
				why = ts.GetRestoreError()
			}
		}
		return why != "", fmt.Sprint(err)
	})
	if !strings.Contains(why, "c1") {
		t.Errorf("the clone's failure listed as %q", why)
	}
	tries := ffs.Count(faultfs.OpMkdirAll)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // a rate over a time: fewer tries on a slow machine, never more
	}
	if n := ffs.Count(faultfs.OpMkdirAll) - tries; n > 4 {
		t.Errorf("the failing clone made %d directories in 1.5 s: it is tried again at every pass of the loop", n)
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")}); err == nil {
		t.Fatal("a clone under way was disabled")
	}
	if _, err := c.mc.DeleteTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")}); err != nil {
		t.Fatalf("dropping a table whose clone fails: %v", err)
	}
	c.waitFor("c1 gone", 10*time.Second, func() (bool, string) {
		_, err := c.mc.DescribeTable(c.ctx(), &pb.TableRequest{Table: tableName("c1")})
		return errCode(err) == pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND, fmt.Sprint(err)
	})
	ffs.ClearRules()
	if _, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("c1")}); err != nil {
		t.Fatal(err)
	}
	c.waitAllOpen("c1", 10*time.Second)
}

// A truncate (or drop, or restore) of a table is recorded in the WAL archive at the backup
// location: a point-in-time recovery from an earlier snapshot to a time after it is refused —
// replaying the table's edits from both sides would bring the truncated rows back — and one to a
// time before it is not.
func TestPointInTimeRecoveryDoesNotCrossATruncate(t *testing.T) {
	backup, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := newClusterOn(t, storage.NewMem(), 1, func(mc *master.Config) { mc.Backup, mc.WALArchive = backup, true })
	c.snapshotNewTable("t1", 2, "s1")
	before := time.Now().UnixMilli()
	for time.Now().UnixMilli() <= before+1 {
		time.Sleep(100 * time.Microsecond) // the clock passes the earlier target
	}
	// Refused (the table is enabled): no record, which would refuse recoveries for nothing.
	if _, err := c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("t1")}); err == nil {
		t.Fatal("an enabled table was truncated")
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	resets, err := wal.TableResets(context.Background(), backup, "default:t1")
	if err != nil || len(resets) != 1 || resets[0].What != "truncate" {
		t.Fatalf("the archive's resets of t1: %v, %v", resets, err)
	}
	_, err = c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("c1"), UntilMs: time.Now().UnixMilli()})
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(fmt.Sprint(err), "truncate") {
		t.Fatalf("a recovery across the truncate: %v, want FAILED_PRECONDITION naming it", err)
	}
	if _, err := c.mc.CloneSnapshot(c.ctx(), &pb.CloneSnapshotRequest{Name: "s1", Table: tableName("c2"), UntilMs: before}); err != nil {
		t.Fatalf("a recovery to before the truncate: %v", err)
	}
	c.waitAllOpen("c2", 10*time.Second)
}
