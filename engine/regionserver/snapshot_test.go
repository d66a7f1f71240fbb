package regionserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/storage"
)

// tableContents scans a table whole: row → value of f:q.
func tableContents(t *testing.T, c *cluster, table string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := c.client.Table(table).Scan(ctx, &pb.Scan{Caching: 500})
	defer sc.Close()
	out := map[string]string{}
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		for _, kv := range r.Cells {
			out[string(r.Row)] = string(kv.Value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scanning %s: %v", table, err)
	}
	return out
}

func (c *cluster) masterCall(t *testing.T, fn func(context.Context, pb.MasterClient) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.client.MasterWait(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

// dropTable disables and deletes a table.
func (c *cluster) dropTable(t *testing.T, tn *pb.TableName) {
	t.Helper()
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		if _, err := m.DisableTable(ctx, &pb.TableRequest{Table: tn}); err != nil {
			return err
		}
		_, err := m.DeleteTable(ctx, &pb.TableRequest{Table: tn})
		return err
	})
}

// compactTable major-compacts every open region of a table where it is served.
func (c *cluster) compactTable(t *testing.T, table string) {
	t.Helper()
	for _, l := range c.tableRegions(table) {
		r := c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
		if r == nil {
			t.Fatalf("region %s is not open on %s", l.GetRegion().GetName(), layout.ServerName(l.GetServer()))
		}
		if _, err := r.Compact(true); err != nil {
			t.Fatal(err)
		}
	}
}

// clean runs two passes of the archive cleaner (a file's age counts from the first pass that saw
// it) and returns how many files they deleted.
func (c *cluster) clean(t *testing.T) int {
	t.Helper()
	n := 0
	for range 2 {
		d, err := c.master.CleanArchive()
		if err != nil {
			t.Fatal(err)
		}
		n += d
		time.Sleep(time.Millisecond) // the files' age must pass the TTL (1 ns)
	}
	return n
}

// archived lists the files under archive/data.
func archived(t *testing.T, st region.Storage) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if err := st.WalkFiles("archive/data", func(p string) error { out[p] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// HBase's snapshot semantics end to end on real region servers: a snapshot records the table's
// files (no data copied); later writes, deletes, a major compaction and the archive cleaner do not
// take anything from it; clone_snapshot makes a table that reads exactly the snapshot's rows and
// takes writes of its own; restore_snapshot returns a disabled table to the snapshot; a dropped
// table comes back from it; once the snapshot is deleted and no table links to its files any more,
// the cleaner deletes them.
func TestSnapshotCloneRestoreAndTheCleaner(t *testing.T) {
	t.Run("dir", func(t *testing.T) { testSnapshots(t, false) })
	t.Run("bucket", func(t *testing.T) { testSnapshots(t, true) })
}

func testSnapshots(t *testing.T, onBucket bool) {
	var b storage.Bucket
	if onBucket {
		db, err := storage.NewDirBucket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		b = db
	}
	c := startClusterWith(t, 2, func(cfg *Config) {
		// Clones keep their links until the test compacts them (by default a region that opens
		// with links compacts them away at once).
		cfg.DisableAutoCompaction = true
		if b != nil {
			cfg.FS, cfg.Bucket = nil, b
		}
	}, func(mc *master.Config) {
		if b != nil {
			mc.FS, mc.Bucket = nil, b
		}
		mc.ArchiveTTL = time.Nanosecond // everything unprotected goes at the second pass that sees it
		mc.CleanerInterval = time.Hour  // passes run when the test says (CleanArchive)
		mc.JanitorInterval = 50 * time.Millisecond
	})
	ctx := context.Background()
	st := region.Storage{FS: c.fs}
	if b != nil {
		st = region.Storage{Bucket: b}
	}
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 1}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{rowKey(100), rowKey(200)}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("t", 3, "", 30*time.Second)
	tbl := c.client.Table("t")
	put := func(tbl *client.Table, i int, v string) {
		t.Helper()
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{}
	for i := range 300 {
		put(tbl, i, fmt.Sprintf("v1-%d", i))
		want[string(rowKey(i))] = fmt.Sprintf("v1-%d", i)
	}
	// Part of the table in files before the snapshot (one flush), part still in memstores (the
	// snapshot's own flush takes those).
	c.compactTable(t, "t")
	for i := 0; i < 300; i += 3 {
		put(tbl, i, fmt.Sprintf("v1b-%d", i))
		want[string(rowKey(i))] = fmt.Sprintf("v1b-%d", i)
	}
	var desc *pb.SnapshotDescription
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: td.Name, Name: "s1"})
		desc = resp.GetSnapshot()
		return err
	})
	if desc.GetRegions() != 3 || desc.GetFiles() == 0 {
		t.Fatalf("snapshot s1: %v", desc)
	}
	// A second snapshot of the same name is refused.
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: td.Name, Name: "s1"})
		return err
	}); err == nil {
		t.Fatal("a second snapshot named s1 was taken")
	}
	man, err := snapshot.Read(st, snapshot.ManifestKey("s1"))
	if err != nil {
		t.Fatal(err)
	}

	// After the snapshot: overwrite, delete, add; compact (the snapshot's files go to the
	// archive) and clean.
	after := maps.Clone(want)
	for i := 0; i < 300; i += 2 {
		put(tbl, i, fmt.Sprintf("v2-%d", i))
		after[string(rowKey(i))] = fmt.Sprintf("v2-%d", i)
	}
	for i := 1; i < 300; i += 10 {
		if err := tbl.Put(ctx, client.NewDelete(rowKey(i))); err != nil {
			t.Fatal(err)
		}
		delete(after, string(rowKey(i)))
	}
	for i := 300; i < 350; i++ {
		put(tbl, i, "new")
		after[string(rowKey(i))] = "new"
	}
	for _, l := range c.tableRegions("t") {
		if r := c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName()); r != nil {
			if _, err := r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.compactTable(t, "t")
	for _, p := range snapshot.Paths(man) {
		if _, err := st.ReadObject(p); err == nil {
			t.Fatalf("%s is still in data/ after a major compaction", p)
		}
	}
	if deleted := c.clean(t); deleted == 0 {
		t.Error("the cleaner deleted nothing: files compacted away after the snapshot, which it does not name, should have gone")
	}
	arch := archived(t, st)
	for _, p := range snapshot.Paths(man) {
		if !arch["archive/"+p] {
			t.Fatalf("snapshot file %s is not in the archive after compaction and a cleaner pass", p)
		}
	}
	if got := tableContents(t, c, "t"); !maps.Equal(got, after) {
		t.Fatalf("table t after the snapshot: %d rows, want %d", len(got), len(after))
	}

	// clone_snapshot: exactly the snapshot's rows; writable; its links compacted away.
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.CloneSnapshot(ctx, &pb.CloneSnapshotRequest{Name: "s1", Table: &pb.TableName{Namespace: "default", Name: "c1"}})
		return err
	})
	c.waitOpen("c1", 3, "", 30*time.Second)
	if got := tableContents(t, c, "c1"); !maps.Equal(got, want) {
		t.Fatalf("clone c1: %d rows, want the snapshot's %d", len(got), len(want))
	}
	put(c.client.Table("c1"), 5, "clone-write")
	if got, _ := c.client.Table("t").Get(ctx, &pb.Get{Row: rowKey(5)}); len(got.Cells) == 1 && string(got.Cells[0].Value) == "clone-write" {
		t.Fatal("a write to the clone reached the source table")
	}
	if got := tableContents(t, c, "t"); !maps.Equal(got, after) {
		t.Fatalf("table t after the clone: %d rows, want %d", len(got), len(after))
	}

	// restore_snapshot: the table must be disabled, and stays so.
	err = c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: "s1"})
		return err
	})
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("restore into an enabled table: %v", err)
	}
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DisableTable(ctx, &pb.TableRequest{Table: td.Name})
		return err
	})
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: "s1"})
		return err
	})
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		resp, err := m.DescribeTable(ctx, &pb.TableRequest{Table: td.Name})
		if err == nil && resp.GetState() != pb.TableState_TABLE_STATE_DISABLED {
			return fmt.Errorf("table t is %v after restore_snapshot, want disabled", resp.GetState())
		}
		return err
	})
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.EnableTable(ctx, &pb.TableRequest{Table: td.Name})
		return err
	})
	c.waitOpen("t", 3, "", 30*time.Second)
	if got := tableContents(t, c, "t"); !maps.Equal(got, want) {
		t.Fatalf("table t restored: %d rows, want the snapshot's %d", len(got), len(want))
	}

	// A dropped table comes back with restore_snapshot (its files are in the archive).
	c.dropTable(t, td.Name)
	c.clean(t)
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: "s1"})
		return err
	})
	c.waitOpen("t", 3, "", 30*time.Second)
	if got := tableContents(t, c, "t"); !maps.Equal(got, want) {
		t.Fatalf("dropped table t restored: %d rows, want the snapshot's %d", len(got), len(want))
	}

	var list *pb.ListSnapshotsResponse
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) (err error) {
		list, err = m.ListSnapshots(ctx, &pb.ListSnapshotsRequest{})
		return err
	})
	if len(list.GetSnapshots()) != 1 || list.GetSnapshots()[0].GetName() != "s1" || list.GetSnapshots()[0].GetTable().GetName() != "t" {
		t.Fatalf("list_snapshots: %v", list)
	}

	// Delete the snapshot: its files stay while t and c1 link to them; once both compacted their
	// links away (the janitor then drops their copies of the manifest), the cleaner deletes them.
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: "s1"})
		return err
	})
	c.clean(t)
	arch = archived(t, st)
	for _, p := range snapshot.Paths(man) {
		if !arch["archive/"+p] {
			t.Fatalf("%s was deleted while clones still link to it", p)
		}
	}
	if got := tableContents(t, c, "c1"); len(got) != len(want) {
		t.Fatalf("clone c1 after the snapshot was deleted: %d rows, want %d", len(got), len(want))
	}
	c.compactTable(t, "t")
	c.compactTable(t, "c1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		c.clean(t)
		arch = archived(t, st)
		for _, p := range snapshot.Paths(man) {
			if arch["archive/"+p] {
				left++
			}
		}
		links := 0
		_ = st.WalkFiles(snapshot.LinksDir, func(string) error { links++; return nil })
		if left == 0 && links == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files of the deleted snapshot and %d manifest copies left after both tables compacted their links away", left, links)
		}
		time.Sleep(20 * time.Millisecond) // polling the janitor's link check
	}
	if got := tableContents(t, c, "t"); !maps.Equal(got, want) {
		t.Fatalf("table t after its links went: %d rows, want %d", len(got), len(want))
	}
	wantC1 := maps.Clone(want)
	wantC1[string(rowKey(5))] = "clone-write"
	if got := tableContents(t, c, "c1"); !maps.Equal(got, wantC1) {
		t.Fatalf("clone c1 after its links went: %d rows, want %d", len(got), len(wantC1))
	}
	if _, err := st.ReadObject(snapshot.ManifestKey("s1")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the deleted snapshot's manifest: %v", err)
	}
}

// copyDone polls an export or import through the master until it is done.
func (c *cluster) copyDone(t *testing.T, name string, export bool) *pb.CopySnapshotResponse {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var resp *pb.CopySnapshotResponse
		c.masterCall(t, func(ctx context.Context, m pb.MasterClient) (err error) {
			if export {
				resp, err = m.ExportSnapshot(ctx, &pb.CopySnapshotRequest{Name: name})
			} else {
				resp, err = m.ImportSnapshot(ctx, &pb.CopySnapshotRequest{Name: name})
			}
			return err
		})
		switch resp.GetState() {
		case pb.CopyState_COPY_STATE_DONE:
			return resp
		case pb.CopyState_COPY_STATE_FAILED:
			t.Fatalf("copy of %s failed: %s", name, resp.GetError())
		}
		if time.Now().After(deadline) {
			t.Fatalf("copy of %s not done after a minute: %v", name, resp)
		}
		time.Sleep(20 * time.Millisecond) // polling the master's job
	}
}

// Backups through the master: a snapshot exported to the backup location survives the table's
// drop and the snapshot's deletion in the cluster, comes back by import and restore; a second
// export of another snapshot copies only new files; deleting backups prunes the location.
func TestBackupThroughTheMaster(t *testing.T) {
	backup, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backup.Close() })
	bst := region.Storage{Bucket: backup}
	c := startClusterWith(t, 1, nil, func(mc *master.Config) { mc.Backup = backup; mc.ArchiveTTL = time.Nanosecond })
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{rowKey(50)}); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("t", 2, "", 30*time.Second)
	want := map[string]string{}
	for i := range 100 {
		v := fmt.Sprintf("v%d", i)
		if err := c.client.Table("t").Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
		want[string(rowKey(i))] = v
	}
	snap := func(name string) {
		c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.Snapshot(ctx, &pb.SnapshotRequest{Table: td.Name, Name: name})
			return err
		})
	}
	snap("b1")
	first := c.copyDone(t, "b1", true)
	if first.GetFiles() == 0 || first.GetSkipped() != 0 {
		t.Fatalf("first export: %v", first)
	}
	if again := c.copyDone(t, "b1", true); again.GetStartedMs() != first.GetStartedMs() {
		t.Fatalf("a finished export ran again: %v", again)
	}
	// Gone from the backup location since (deleted there by hand): the next call copies it again
	// (its files are still there: only the manifest is written).
	if err := bst.DeleteObject(snapshot.ManifestKey("b1")); err != nil {
		t.Fatal(err)
	}
	if again := c.copyDone(t, "b1", true); again.GetSkipped() != first.GetFiles() {
		t.Fatalf("an export whose snapshot left the backup location: %v", again)
	}
	if _, err := bst.ReadObject(snapshot.ManifestKey("b1")); err != nil {
		t.Fatalf("the snapshot is not back at the backup location: %v", err)
	}
	if err := c.client.Table("t").Put(ctx, client.NewPut(rowKey(7)).Add("f", "q", cell.LatestTimestamp, []byte("later"))); err != nil {
		t.Fatal(err)
	}
	snap("b2")
	second := c.copyDone(t, "b2", true)
	if second.GetSkipped() != first.GetFiles() || second.GetFiles() != first.GetFiles()+1 {
		t.Fatalf("second export (one new flush): %v; first %v", second, first)
	}
	var list *pb.ListSnapshotsResponse
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) (err error) {
		list, err = m.ListSnapshots(ctx, &pb.ListSnapshotsRequest{Backup: true})
		return err
	})
	if len(list.GetSnapshots()) != 2 {
		t.Fatalf("snapshots at the backup location: %v", list)
	}

	// Disaster: the table and the cluster's snapshots are gone, and the archive is cleaned.
	c.dropTable(t, td.Name)
	for _, call := range []func(context.Context, pb.MasterClient) error{
		func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: "b1"})
			return err
		},
		func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.DeleteSnapshot(ctx, &pb.SnapshotNameRequest{Name: "b2"})
			return err
		},
	} {
		c.masterCall(t, call)
	}
	c.clean(t)
	if n := len(archived(t, region.Storage{FS: c.fs})); n != 0 {
		t.Fatalf("%d files left in the cluster's archive", n)
	}
	c.copyDone(t, "b1", false)
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.RestoreSnapshot(ctx, &pb.SnapshotNameRequest{Name: "b1"})
		return err
	})
	c.waitOpen("t", 2, "", 30*time.Second)
	if got := tableContents(t, c, "t"); !maps.Equal(got, want) {
		t.Fatalf("restored from the backup: %d rows, want %d", len(got), len(want))
	}
	// The imported files are the cluster's now: the cleaner keeps them.
	c.clean(t)
	if got := tableContents(t, c, "t"); !maps.Equal(got, want) {
		t.Fatalf("after a cleaner pass: %d rows, want %d", len(got), len(want))
	}

	// Deleting backups prunes what no remaining one names.
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteBackup(ctx, &pb.SnapshotNameRequest{Name: "b1"})
		return err
	})
	if n := len(archived(t, bst)); n != int(second.GetFiles()) {
		t.Fatalf("after deleting b1 the backup location holds %d files, want b2's %d", n, second.GetFiles())
	}
	c.masterCall(t, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.DeleteBackup(ctx, &pb.SnapshotNameRequest{Name: "b2"})
		return err
	})
	if n := len(archived(t, bst)); n != 0 {
		t.Fatalf("after deleting every backup the location holds %d files", n)
	}
}

// The archive cleaner deletes nothing while another process copies a snapshot into the cluster
// (the CLI's import: it skips files archive/ has, and names them in a manifest written last).
func TestArchiveCleanerWaitsForACopyIntoTheCluster(t *testing.T) {
	c := startClusterWith(t, 1, nil, func(mc *master.Config) {
		mc.ArchiveTTL = time.Nanosecond
		mc.CleanerInterval = time.Hour // passes run when the test says (CleanArchive)
	})
	st := region.Storage{FS: c.fs}
	const file = "archive/data/default/gone/0000000000000001/f/abc"
	if _, err := st.WriteStream(context.Background(), file, strings.NewReader("a file an import found")); err != nil {
		t.Fatal(err)
	}
	intent := snapshot.IntentDir + "/copy-0123456789abcdef"
	if err := st.WriteObject(intent, []byte(time.Now().UTC().Format(time.RFC3339Nano)+" an import\n"), false); err != nil {
		t.Fatal(err)
	}
	if n := c.clean(t); n != 0 {
		t.Fatalf("the cleaner deleted %d files while a copy into the cluster ran", n)
	}
	if _, err := st.StatObject(file); err != nil {
		t.Fatalf("the file a copy found is gone: %v", err)
	}
	if err := st.DeleteObject(intent); err != nil {
		t.Fatal(err)
	}
	if n := c.clean(t); n != 1 {
		t.Fatalf("after the copy the cleaner deleted %d files, want the unreferenced one", n)
	}
}
