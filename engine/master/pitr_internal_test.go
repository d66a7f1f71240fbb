package master

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// archiveEdits writes n edits of region into a WAL, archives it at backup and dates the archive's
// objects at mtime.
func archiveEdits(t *testing.T, backupDir string, backup storage.Bucket, region string, n int, mtime time.Time) {
	t.Helper()
	mem := storage.NewMem()
	w, err := wal.Open(wal.Options{FS: mem, Dir: "wal/rs1_1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		kv := cell.AppendKeyValue(nil, []byte{'r', byte('a' + i)}, []byte("f"), []byte("q"), 1, cell.Put, []byte("v"))
		if _, err := w.Append(&wal.Edit{Region: []byte(region), Cells: []cell.KeyValue{kv}}, wal.SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := wal.ArchiveDeadDir(context.Background(), mem, "wal/rs1_1", wal.ArchiveTarget{Bucket: backup, Log: "rs1_1"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(filepath.Join(backupDir, wal.ArchivePrefix), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			err = os.Chtimes(p, mtime, mtime)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A point-in-time recovery replays the archive from the snapshot's first flush, not from its
// end: a region flushed first misses the edits made while the others flushed, which may be in
// archive objects written well before the snapshot's time (its flushes took 12 minutes here).
// And an archive pruned past those edits while the replay read it fails the replay, rather than
// leaving their absence unseen.
func TestReplayReadsTheArchiveFromTheFirstFlush(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	backup, err := storage.NewDirBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	region := layout.RegionName(7)
	archiveEdits(t, dir, backup, region, 5, now)
	m, err := New(Config{FS: storage.NewMem(), Backup: backup, WALArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	tn := &pb.TableName{Namespace: "default", Name: "t"}
	man := &pb.SnapshotManifest{Name: "s1", Table: &pb.TableDescriptor{Name: tn, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}},
		FlushStartedMs: now.Add(-time.Minute).UnixMilli(), CreatedMs: now.Add(11 * time.Minute).UnixMilli(),
		Regions: []*pb.SnapshotRegion{{RegionId: 7}}}
	infos := []*pb.RegionInfo{{Name: layout.RegionName(9), Table: &pb.TableName{Namespace: "default", Name: "c"}}}
	n, err := m.replayArchive(ctx, man, infos, now.Add(12*time.Minute).UnixMilli())
	if err != nil || n != 5 {
		t.Fatalf("replayed %d edits (%v), want the 5 made during the snapshot's flushes", n, err)
	}

	if _, err := wal.PruneArchive(ctx, backup, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err = m.replayArchive(ctx, man, infos, now.Add(12*time.Minute).UnixMilli())
	if d, ok := pb.DetailOf(err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION || !strings.Contains(err.Error(), "pruned") {
		t.Fatalf("a replay over a pruned archive: %d edits, %v; want FAILED_PRECONDITION naming the prune", n, err)
	}
}

// The periodic archive cleaner does not wait while an import (or a snapshot) holds the snapshot
// guard: waiting, it held every new snapshot, clone and restore behind it for as long as the
// import copied (a waiting writer blocks new readers).
func TestPeriodicCleanerSkipsWhileFilesAreRecorded(t *testing.T) {
	m, err := New(Config{FS: storage.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	m.snapGuard.RLock() // an import copying
	done := make(chan error, 1)
	go func() {
		_, err := m.cleanArchive(time.Now(), time.Hour, false)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the skipped pass: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the periodic cleaner waited for the import")
	}
	// A snapshot beside the import is not held back (no writer waits on the guard).
	if !m.snapGuard.TryRLock() {
		t.Fatal("a snapshot would wait behind the skipped pass")
	}
	m.snapGuard.RUnlock()
	m.snapGuard.RUnlock()
}
