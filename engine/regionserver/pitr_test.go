package regionserver

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
	"github.com/cellstore/cellstore/engine/wal"
)

// Point-in-time recovery: a cluster archives its WAL at the backup location (its live servers
// archive their own logs, the master what a crashed server left); a snapshot is exported; more
// writes, deletes and a split follow, then a time T is noted and more writes and deletes follow.
// A new cluster imports the snapshot and clones it to T: it holds exactly the rows acknowledged
// before T. Both storage backends.
func TestPointInTimeRecovery(t *testing.T) {
	t.Run("dir", func(t *testing.T) { testPointInTimeRecovery(t, false) })
	t.Run("bucket", func(t *testing.T) { testPointInTimeRecovery(t, true) })
}

func testPointInTimeRecovery(t *testing.T, onBucket bool) {
	backup := newDirBucket(t)
	var data storage.Bucket
	if onBucket {
		data = newDirBucket(t)
	}
	a := startClusterWith(t, 2, func(cfg *Config) {
		if data != nil {
			cfg.FS, cfg.Bucket = nil, data
		}
		// The test says when a live server archives (archiveWALOnce).
		cfg.WALArchive, cfg.WALArchiveInterval = backup, time.Hour
	}, func(mc *master.Config) {
		if data != nil {
			mc.FS, mc.Bucket = nil, data
		}
		mc.Backup, mc.WALArchive = backup, true
	})
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 1}}}
	if _, err := a.client.CreateTable(ctx, td, [][]byte{rowKey(100), rowKey(200)}); err != nil {
		t.Fatal(err)
	}
	a.waitOpen("t", 3, "", 30*time.Second)
	tbl := a.client.Table("t")
	want := map[string]string{}
	put := func(i int, v string) {
		t.Helper()
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
		want[string(rowKey(i))] = v
	}
	del := func(i int) {
		t.Helper()
		if _, err := tbl.Mutate(ctx, client.NewDelete(rowKey(i))); err != nil {
			t.Fatal(err)
		}
		delete(want, string(rowKey(i)))
	}
	for i := range 300 {
		put(i, fmt.Sprintf("v1-%d", i))
	}
	a.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: td.Name, Name: "s1"})
		return err
	})
	a.copyDone(t, "s1", true)

	// After the snapshot: overwrites, deletes, new rows, a split and writes to its daughters.
	for i := range 50 {
		put(i, fmt.Sprintf("v2-%d", i))
	}
	for i := 50; i < 60; i++ {
		del(i)
	}
	for i := 300; i < 400; i++ {
		put(i, fmt.Sprintf("v2-%d", i))
	}
	var parent string
	for _, l := range primaries(a.tableRegions("t")) {
		if string(l.GetRegion().GetStartKey()) == string(rowKey(100)) {
			parent = l.GetRegion().GetName()
		}
	}
	a.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: parent, SplitKey: rowKey(150)})
		return err
	})
	a.waitOpen("t", 4, "", 30*time.Second)
	for i := 140; i < 160; i++ {
		put(i, fmt.Sprintf("v3-%d", i))
	}
	// Half of what was written so far is archived by a live server; the rest stays in the logs.
	if _, err := a.servers[0].archiveWALOnce(ctx); err != nil {
		t.Fatal(err)
	}
	put(7, "v4-7")

	// T: every write above was acknowledged before it.
	until := time.Now().UnixMilli()
	for time.Now().UnixMilli() <= until {
		time.Sleep(100 * time.Microsecond) // the clock passes T
	}
	wantAtT := maps.Clone(want)
	for i := range 10 {
		put(i, "after-T")
	}
	for i := 300; i < 310; i++ {
		del(i)
	}
	for i := 400; i < 410; i++ {
		put(i, "after-T")
	}

	// One server crashes: the master archives what its log holds; the other archives its own.
	crashed := a.servers[1]
	crashed.Abort()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st *pb.ClusterStatusResponse
		a.masterCall(t, func(ctx context.Context, m pb.MasterClient) (err error) {
			st, err = m.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			return err
		})
		live := 0
		for _, s := range st.GetServers() {
			if s.GetLive() && fmt.Sprintf("%s:%d", s.GetServer().GetHost(), s.GetServer().GetPort()) == crashed.Name() {
				live++
			}
		}
		if live == 0 && len(st.GetDeadServers()) == 0 {
			break // declared dead and recovered: its log split, archived and gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashed server is not recovered after a minute: %v", st)
		}
		time.Sleep(20 * time.Millisecond) // polling the master
	}
	var arch *pb.ArchiveClusterWALResponse
	a.masterCall(t, func(ctx context.Context, m pb.MasterClient) (err error) {
		arch, err = m.ArchiveClusterWAL(ctx, &pb.ArchiveClusterWALRequest{})
		return err
	})
	if arch.GetServers() != 1 {
		t.Fatalf("ArchiveClusterWAL: %v, want the one live server", arch)
	}
	a.waitOpen("t", 4, crashed.Name(), 30*time.Second)
	if got := tableContents(t, a, "t"); !maps.Equal(got, want) {
		t.Fatalf("the source table after the crash: %d rows, want %d", len(got), len(want))
	}
	// (The status loop above may see the server neither live nor dead before the master recorded
	// it as dead, ahead of the recovery that archives its log: wait for the archive itself.)
	for deadline := time.Now().Add(60 * time.Second); ; {
		stats, err := wal.ReadArchive(ctx, backup, func(string, *wal.Edit) error { return nil })
		if err == nil && stats.Logs >= 2 && stats.Newest >= until*int64(time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive: %+v, %v; want both servers' logs, up to after T", stats, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the backup location
	}

	// A new cluster, over the same backup location, recovers the table to T.
	var data2 storage.Bucket
	if onBucket {
		data2 = newDirBucket(t)
	}
	b := startClusterWith(t, 1, func(cfg *Config) {
		if data2 != nil {
			cfg.FS, cfg.Bucket = nil, data2
		}
	}, func(mc *master.Config) {
		if data2 != nil {
			mc.FS, mc.Bucket = nil, data2
		}
		mc.Backup = backup
	})
	b.copyDone(t, "s1", false)
	err := b.client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.ArchiveClusterWAL(ctx, &pb.ArchiveClusterWALRequest{})
		return err
	})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("ArchiveClusterWAL on a cluster that does not archive: %v, want FAILED_PRECONDITION", err)
	}
	err = b.client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: &pb.TableName{Namespace: "default", Name: "early"},
			UntilMs: time.Now().Add(-time.Hour).UnixMilli()})
		return err
	})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("a recovery to before the snapshot: %v, want INVALID_ARGUMENT", err)
	}
	b.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: &pb.TableName{Namespace: "default", Name: "r"}, UntilMs: until})
		return err
	})
	b.waitOpen("r", 3, "", 30*time.Second)
	got := tableContents(t, b, "r")
	if !maps.Equal(got, wantAtT) {
		for k, v := range wantAtT {
			if got[k] != v {
				t.Errorf("row %x: %q, want %q", k, got[k], v)
			}
		}
		for k, v := range got {
			if _, ok := wantAtT[k]; !ok {
				t.Errorf("row %x: %q, want none", k, v)
			}
		}
		t.Fatalf("recovered to T: %d rows, want %d", len(got), len(wantAtT))
	}
	// The recovered table takes writes, and keeps them across a reopen of its regions.
	if err := b.client.Table("r").Put(ctx, client.NewPut(rowKey(1)).Add("f", "q", cell.LatestTimestamp, []byte("new"))); err != nil {
		t.Fatal(err)
	}
	b.compactTable(t, "r")
	if got := tableContents(t, b, "r"); got[string(rowKey(1))] != "new" || len(got) != len(wantAtT) {
		t.Fatalf("the recovered table after a write and a compaction: %d rows, row 1 %q", len(got), got[string(rowKey(1))])
	}

	// The archive pruned past the snapshot (its retention shorter than the backup's): a recovery
	// from it would replay with a gap, and is refused.
	if n, err := wal.PruneArchive(ctx, backup, time.Now().Add(time.Hour)); err != nil || n == 0 {
		t.Fatalf("pruning the archive: %d, %v", n, err)
	}
	err = b.client.MasterWait(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: &pb.TableName{Namespace: "default", Name: "gap"}, UntilMs: until})
		return err
	})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(d.GetMessage(), "pruned") {
		t.Fatalf("a recovery over a pruned archive: %v, want FAILED_PRECONDITION naming the prune", err)
	}
}

func newDirBucket(t *testing.T) *storage.DirBucket { return buckettest.Dir(t) }

// A SKIP_FLUSH snapshot taken after the region flushed only its large family (the default
// per-family flush policy): the small family's edits older than the large family's newest file
// were only in memory, and a point-in-time recovery from the snapshot must replay them from the
// archive. The replay used to skip every edit below the newest file of any family.
func TestPointInTimeRecoveryAfterAPerFamilyFlush(t *testing.T) {
	backup := newDirBucket(t)
	a := startClusterWith(t, 1, func(cfg *Config) {
		cfg.WALArchive, cfg.WALArchiveInterval = backup, time.Hour
	}, func(mc *master.Config) {
		mc.Backup, mc.WALArchive = backup, true
	})
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "pf"}, MemstoreFlushSize: 64 << 10,
		Attributes: map[string]string{region.FlushLowerBoundAttribute: "16384"},
		Families:   []*pb.ColumnFamilyDescriptor{{Name: []byte("big"), MaxVersions: 1}, {Name: []byte("small"), MaxVersions: 1}}}
	if _, err := a.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	locs := a.waitOpen("pf", 1, "", 30*time.Second)
	primary := a.regionOn(layout.ServerName(locs[0].GetServer()), locs[0].GetRegion().GetName())
	tbl := a.client.Table("pf")
	want := map[string]string{}
	put := func(row, fam string, v []byte) {
		t.Helper()
		if err := tbl.Put(ctx, client.NewPut([]byte(row)).Add(fam, "q", cell.LatestTimestamp, v)); err != nil {
			t.Fatal(err)
		}
		want[row] = string(v)
	}
	for i := range 20 {
		put(fmt.Sprintf("s%03d", i), "small", fmt.Appendf(nil, "small-%d", i))
	}
	value := bytes.Repeat([]byte("b"), 1000)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; primary.StoreFileCount()["big"] == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no flush after %d rows: %v", i, primary.StoreFileCount())
		}
		put(fmt.Sprintf("b%05d", i), "big", value)
	}
	if n := primary.StoreFileCount(); n["small"] != 0 {
		t.Fatalf("the flush by size wrote the small family too: %v", n)
	}
	for i := 20; i < 30; i++ {
		put(fmt.Sprintf("s%03d", i), "small", fmt.Appendf(nil, "small-%d", i))
	}
	a.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: td.Name, Name: "s1", SkipFlush: true})
		return err
	})
	if _, err := a.servers[0].archiveWALOnce(ctx); err != nil {
		t.Fatal(err)
	}
	until := time.Now().UnixMilli()
	for time.Now().UnixMilli() <= until {
		time.Sleep(100 * time.Microsecond) // the clock passes the target
	}
	a.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: &pb.TableName{Namespace: "default", Name: "r"}, UntilMs: until})
		return err
	})
	a.waitOpen("r", 1, "", 30*time.Second)
	got := tableContents(t, a, "r")
	for row, v := range want {
		if got[row] != v {
			t.Errorf("row %s: %q, want %q", row, got[row], v)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("recovered %d rows, want %d", len(got), len(want))
	}
}
