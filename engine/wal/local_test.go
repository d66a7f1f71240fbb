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
