package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cellstore/cellstore/engine/storage"
)

// unwrittenExtents returns the byte ranges of path between off and off+n that are preallocated
// but unwritten (FIEMAP, after syncing the file's pending write-back): the blocks whose first
// write the next sync would have to journal. ok is false when the file system cannot say.
func unwrittenExtents(t *testing.T, path string, off, n int64) (ranges [][2]int64, ok bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const (
		maxExtents   = 256
		extentSize   = 56 // struct fiemap_extent
		headerSize   = 32 // struct fiemap
		flagSync     = 0x1
		extentUnwrit = 0x800
		fsIocFiemap  = 0xC020660B // _IOWR('f', 11, struct fiemap)
	)
	buf := make([]byte, headerSize+maxExtents*extentSize)
	*(*uint64)(unsafe.Pointer(&buf[0])) = uint64(off)
	*(*uint64)(unsafe.Pointer(&buf[8])) = uint64(n)
	*(*uint32)(unsafe.Pointer(&buf[16])) = flagSync
	*(*uint32)(unsafe.Pointer(&buf[24])) = maxExtents
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		if errors.Is(errno, syscall.EOPNOTSUPP) || errors.Is(errno, syscall.ENOTTY) {
			return nil, false
		}
		t.Fatalf("FIEMAP %s: %v", path, errno)
	}
	mapped := *(*uint32)(unsafe.Pointer(&buf[20]))
	for i := range int(mapped) {
		e := buf[headerSize+i*extentSize:]
		logical := *(*uint64)(unsafe.Pointer(&e[0]))
		length := *(*uint64)(unsafe.Pointer(&e[16]))
		flags := *(*uint32)(unsafe.Pointer(&e[40]))
		if flags&extentUnwrit != 0 {
			ranges = append(ranges, [2]int64{int64(logical), int64(logical + length)})
		}
	}
	return ranges, true
}

// TestLocalZeroAhead: on a local file system the log keeps the blocks past its end written with
// zeros (so its syncs journal no extent conversions), and the zeros never cost a record: many
// writers through many rolls of segments smaller than the zeroed window replay completely, every
// closed segment trimmed to its records.
func TestLocalZeroAhead(t *testing.T) {
	root := t.TempDir()
	fs, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 4 << 20
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1", SegmentSize: segSize})
	defer w.Close()
	segs, err := w.Segments()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, segs[0].Path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != segSize {
		t.Skipf("segment not preallocated (size %d): the file system under %s lacks fallocate", fi.Size(), root)
	}
	for i := range 200 {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "zeros ahead of the log", func() bool { return w.Stats().ZeroedBytes >= zeroAhead })
	if segs, err = w.Segments(); err != nil {
		t.Fatal(err)
	}
	active := segs[len(segs)-1]
	// At least half the window past the end is written (the zeroer is called below that); the
	// rest of the segment is not (yet).
	unwritten, ok := unwrittenExtents(t, path, active.Size, zeroAhead/2)
	if !ok {
		t.Skipf("the file system under %s does not map extents (FIEMAP)", root)
	}
	if len(unwritten) > 0 {
		t.Fatalf("unwritten blocks within %d bytes past the log's end (%d): %v", zeroAhead/2, active.Size, unwritten)
	}
	if tail, _ := unwrittenExtents(t, path, segSize-zeroChunk, zeroChunk); len(tail) == 0 {
		t.Fatalf("the segment's last %d bytes were written: the zeroer ran past its window", zeroChunk)
	}
	zeroed := w.Stats().ZeroedBytes
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Size() != active.Size+commitMarkerSize {
		t.Fatalf("closed segment: size %d, want %d (records and the closing commit marker)", fi.Size(), active.Size+commitMarkerSize)
	}
	if edits := mustReplay(t, fs, "wal/rs1"); len(edits) != 200 {
		t.Fatalf("replayed %d edits, want 200", len(edits))
	}
	t.Logf("zeroed %d bytes ahead of %d written", zeroed, active.Size)

	// Segments smaller than the window, rolled under concurrent writers: the zeroer races every
	// roll's trim and every commit's write, in every group-commit configuration.
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		dir := "wal/" + strings.ReplaceAll(t.Name(), "/", "-")
		opts := Options{FS: fs, Dir: dir, SegmentSize: 16 << 10}
		set(&opts)
		w2 := mustOpen(t, opts)
		const writers, each = 8, 300
		appendFrom(t, writers, each, func(e *Edit) error { _, err := w2.Append(e, SyncWAL); return err })
		st := w2.Stats()
		if st.Rolls < 10 || st.ZeroedBytes == 0 || st.ZeroErrors != 0 {
			t.Fatalf("%d rolls, %d bytes zeroed, %d failed: the test did not race the zeroer with rolls", st.Rolls, st.ZeroedBytes, st.ZeroErrors)
		}
		segs, err := w2.Segments()
		if err != nil {
			t.Fatal(err)
		}
		if err := w2.Close(); err != nil {
			t.Fatal(err)
		}
		// Every segment is exactly its records: the closed ones since their roll, the last since
		// the close, with its closing commit marker (no zeros after a trim).
		for _, sg := range segs {
			fi, err := os.Stat(filepath.Join(root, sg.Path))
			if err != nil {
				t.Fatal(err)
			}
			// The active one ends with the closing marker, unless a roll came between Segments and
			// Close (a syncer-mode runner rolls after acknowledging): then it was trimmed
			// without one and the segment after it is empty.
			ok := fi.Size() == sg.Size || sg.Active && fi.Size() == sg.Size+commitMarkerSize
			if !ok {
				t.Fatalf("segment %s is %d bytes, its records %d", sg.Path, fi.Size(), sg.Size)
			}
		}
		edits, r, err := replayAll(t, fs, dir, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tail, torn := r.TornTail(); torn {
			t.Fatalf("a closed WAL has a torn tail: %+v", tail)
		}
		seen := map[uint64]bool{}
		for _, e := range edits {
			if seen[e.Seq] {
				t.Fatalf("sequence id %d replayed twice", e.Seq)
			}
			seen[e.Seq] = true
		}
		if len(seen) != writers*each {
			t.Fatalf("replayed %d edits, want %d", len(seen), writers*each)
		}
	})

	// Off, nothing is zeroed.
	w3 := mustOpen(t, Options{FS: fs, Dir: "wal/rs3", SegmentSize: segSize, NoZeroAhead: true})
	for i := range 50 {
		if _, err := w3.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := w3.Close(); err != nil {
		t.Fatal(err)
	}
	if z := w3.Stats().ZeroedBytes; z != 0 {
		t.Fatalf("NoZeroAhead: %d bytes zeroed", z)
	}
}
