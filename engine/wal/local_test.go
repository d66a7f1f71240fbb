package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
)

// TestLocalBackend runs the WAL on real files: append, roll, reopen,
// archive, replay.
func TestLocalBackend(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1", ArchiveDir: "archive/wal", SegmentSize: 4096})
	for i := 0; i < 100; i++ {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Simulate a torn tail on disk.
	names, _ := fs.List("wal/rs1")
	last := filepath.Join(fs.Root(), "wal", "rs1", names[len(names)-1])
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{1, 2, 3})
	f.Close()
	w = mustOpen(t, Options{FS: fs, Dir: "wal/rs1", ArchiveDir: "archive/wal", SegmentSize: 4096})
	if w.LastSeq() != 100 {
		t.Fatalf("LastSeq = %d", w.LastSeq())
	}
	if err := w.MarkFlushed("r", 50); err != nil {
		t.Fatal(err)
	}
	seq, _ := w.Append(testEdit("r", 100), SyncWAL)
	w.Close()
	edits := mustReplay(t, fs, "wal/rs1")
	if edits[len(edits)-1].Seq != seq || edits[0].Seq > 51 {
		t.Fatalf("replay: first %d last %d", edits[0].Seq, edits[len(edits)-1].Seq)
	}
	archived, _ := fs.List("archive/wal")
	if len(archived) == 0 {
		t.Fatal("nothing archived")
	}
}

// TestLocalDiskFull fills a small filesystem given by CELLSTORE_TEST_SMALLFS
// (for example a 2 MiB tmpfs): appends fail with ENOSPC, no failed append
// is acknowledged, and every acknowledged one replays.
func TestLocalDiskFull(t *testing.T) {
	dir := os.Getenv("CELLSTORE_TEST_SMALLFS")
	if dir == "" {
		t.Skip("set CELLSTORE_TEST_SMALLFS to a small mounted filesystem to run")
	}
	root := filepath.Join(dir, "wal-disk-full")
	os.RemoveAll(root)
	defer os.RemoveAll(root)
	fs, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1", SegmentSize: 256 << 10})
	var acked []Edit
	var failure error
	for i := 0; i < 1<<20 && failure == nil; i++ {
		e := testEdit("r", i)
		if _, err := w.Append(e, SyncWAL); err != nil {
			failure = err
			break
		}
		acked = append(acked, cloneEdit(e))
	}
	if !storage.IsNoSpace(failure) || !errors.Is(failure, ErrBroken) {
		t.Fatalf("expected a no-space error, got %v", failure)
	}
	t.Logf("disk full after %d acknowledged appends: %v", len(acked), failure)
	if _, err := w.Append(testEdit("r", -1), SyncWAL); !errors.Is(err, ErrBroken) {
		t.Fatalf("append on a full disk: %v", err)
	}
	w.Close()
	edits := mustReplay(t, fs, "wal/rs1")
	if len(edits) < len(acked) {
		t.Fatalf("replayed %d of %d acknowledged edits", len(edits), len(acked))
	}
	for i := range acked {
		if !sameEdit(&edits[i], &acked[i]) {
			t.Fatalf("edit %d differs", i)
		}
	}
}

// TestLocalPreallocatedSegments: segments on a local file system are
// preallocated to the segment size; a crash image (the files as they are
// while the WAL runs) replays every synced edit and takes the zeros as a torn
// tail; rolled and closed segments are trimmed to what was written, so only
// the last segment can end in zeros; reopening the crash image truncates the
// zeros and carries on.
func TestLocalPreallocatedSegments(t *testing.T) {
	root := t.TempDir()
	fs, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 1 << 20
	opts := Options{FS: fs, Dir: "wal/rs1", SegmentSize: segSize}
	w := mustOpen(t, opts)
	defer w.Close()
	for i := range 100 {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := w.Segments()
	if err != nil {
		t.Fatal(err)
	}
	active := segs[len(segs)-1]
	fi, err := fs.Stat(active.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != segSize {
		t.Skipf("segment not preallocated (file size %d, written %d): the file system under %s lacks fallocate", fi.Size, active.Size, root)
	}

	// The crash image: copy the directory as it is now.
	crash := t.TempDir()
	if err := os.CopyFS(crash, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	cfs, err := storage.NewLocal(crash)
	if err != nil {
		t.Fatal(err)
	}
	edits, r, err := replayAll(t, cfs, "wal/rs1", ReplayOptions{})
	if err != nil || len(edits) != 100 {
		t.Fatalf("crash image: %d edits, %v", len(edits), err)
	}
	torn, ok := r.TornTail()
	if !ok || torn.Offset != active.Size || torn.Reason != "zeroed bytes" {
		t.Fatalf("crash image: torn tail %+v (%v), want zeros from %d", torn, ok, active.Size)
	}

	// Roll: the old segment is trimmed before the next one exists.
	if err := w.Roll(); err != nil {
		t.Fatal(err)
	}
	if fi, err := fs.Stat(active.Path); err != nil || fi.Size != active.Size {
		t.Fatalf("rolled segment: size %d (%v), want %d", fi.Size, err, active.Size)
	}
	for i := 100; i < 150; i++ {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if edits := mustReplay(t, fs, "wal/rs1"); len(edits) != 150 {
		t.Fatalf("live directory: %d edits", len(edits))
	}
	segs, _ = w.Segments()
	last := segs[len(segs)-1]
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Trimmed to its records and the closing commit marker.
	if fi, err := fs.Stat(last.Path); err != nil || fi.Size != last.Size+commitMarkerSize {
		t.Fatalf("closed segment: size %d (%v), want %d", fi.Size, err, last.Size+commitMarkerSize)
	}

	// Reopening the crash image cuts the zeros off and goes on.
	w2 := mustOpen(t, Options{FS: cfs, Dir: "wal/rs1", SegmentSize: segSize})
	if w2.LastSeq() != 100 {
		t.Fatalf("LastSeq after reopening the crash image = %d", w2.LastSeq())
	}
	if fi, err := cfs.Stat(active.Path); err != nil || fi.Size != active.Size {
		t.Fatalf("recovered segment: size %d (%v), want %d", fi.Size, err, active.Size)
	}
	if _, err := w2.Append(testEdit("r", 100), SyncWAL); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if edits := mustReplay(t, cfs, "wal/rs1"); len(edits) != 101 {
		t.Fatalf("crash image after reopening: %d edits", len(edits))
	}
}

// A WAL whose directory is renamed under it (the master fencing a server it
// declared dead) still closes cleanly, trimming its segment through the open
// file.
func TestLocalPreallocatedSegmentFenced(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1", SegmentSize: 1 << 20})
	for i := range 10 {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := w.Segments()
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename("wal/rs1", "wal/rs1-splitting"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close after the directory was renamed: %v", err)
	}
	moved := filepath.Join("wal/rs1-splitting", filepath.Base(segs[0].Path))
	if fi, err := fs.Stat(moved); err != nil || fi.Size != segs[0].Size+commitMarkerSize {
		t.Fatalf("fenced segment: size %d (%v), want %d (records and the closing commit marker)", fi.Size, err, segs[0].Size+commitMarkerSize)
	}
	if edits := mustReplay(t, fs, "wal/rs1-splitting"); len(edits) != 10 {
		t.Fatalf("fenced directory: %d edits", len(edits))
	}
}

// A committer that fills the active segment rolls it after letting go of its sync slot; Close can
// seal the WAL in between. The roll must then make no segment after the last one (it used to
// create and preallocate segment N+1 and leak its file).
func TestRollAfterCloseMakesNoSegment(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1", SegmentSize: 64 << 10})
	for i := range 20 {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := fs.List("wal/rs1")
	if err != nil {
		t.Fatal(err)
	}
	// What the committer's late rollIf(w.segmentFull) does, with the segment taken as full.
	if err := w.roll(func(*activeSegment) bool { return true }); err != nil {
		t.Fatalf("a late roll after Close: %v", err)
	}
	if err := w.roll(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Roll after Close: %v, want ErrClosed", err)
	}
	after, err := fs.List("wal/rs1")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("segments before the late roll %v, after %v", before, after)
	}
	if edits := mustReplay(t, fs, "wal/rs1"); len(edits) != 20 {
		t.Fatalf("replayed %d edits, want 20", len(edits))
	}
}
