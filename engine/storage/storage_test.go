package storage

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// backends runs a test against every implementation.
func backends(t *testing.T, fn func(t *testing.T, f FS)) {
	t.Run("local", func(t *testing.T) {
		l, err := NewLocal(filepath.Join(t.TempDir(), "root"))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, l)
	})
	t.Run("mem", func(t *testing.T) { fn(t, NewMem()) })
}

func mustWrite(t *testing.T, f FS, name string, data []byte) {
	t.Helper()
	w, err := f.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	backends(t, func(t *testing.T, f FS) {
		if err := f.MkdirAll("/wal/rs1"); err != nil {
			t.Fatal(err)
		}
		if err := f.MkdirAll("wal/rs1"); err != nil {
			t.Fatal("MkdirAll of an existing dir:", err)
		}
		mustWrite(t, f, "wal/rs1/b", []byte("hello"))
		mustWrite(t, f, "/wal/rs1/a", nil)

		// Create is exclusive and needs the parent.
		if _, err := f.Create("wal/rs1/b"); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create existing: %v", err)
		}
		if _, err := f.Create("nope/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("create without parent: %v", err)
		}
		if err := f.SyncDir("wal/rs1"); err != nil {
			t.Fatal(err)
		}

		names, err := f.List("wal/rs1")
		if err != nil || strings.Join(names, ",") != "a,b" {
			t.Fatalf("List = %v, %v", names, err)
		}
		if _, err := f.List("wal/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("list missing: %v", err)
		}
		fi, err := f.Stat("wal/rs1/b")
		if err != nil || fi.Size != 5 || fi.IsDir || fi.Name != "b" {
			t.Fatalf("Stat = %+v, %v", fi, err)
		}
		if fi, err := f.Stat("wal"); err != nil || !fi.IsDir {
			t.Fatalf("Stat dir = %+v, %v", fi, err)
		}
		if ok, err := Exists(f, "wal/rs1/zzz"); ok || err != nil {
			t.Fatalf("Exists missing = %v, %v", ok, err)
		}

		// Random reads.
		r, err := f.Open("wal/rs1/b")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 3)
		if n, err := r.ReadAt(buf, 1); n != 3 || err != nil || string(buf) != "ell" {
			t.Fatalf("ReadAt = %d %v %q", n, err, buf)
		}
		if n, err := r.ReadAt(buf, 3); n != 2 || err != io.EOF {
			t.Fatalf("ReadAt past end = %d %v", n, err)
		}
		if sz, err := r.Size(); sz != 5 || err != nil {
			t.Fatalf("Size = %d %v", sz, err)
		}
		r.Close()
		if _, err := f.Open("wal/rs1/none"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("open missing: %v", err)
		}

		// Rename: the fencing rename of a WAL directory.
		if err := f.Rename("wal/rs1", "wal/rs1-splitting"); err != nil {
			t.Fatal(err)
		}
		if data, err := ReadFile(f, "wal/rs1-splitting/b"); err != nil || string(data) != "hello" {
			t.Fatalf("after rename: %q %v", data, err)
		}
		if _, err := f.Stat("wal/rs1"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("old name still there: %v", err)
		}
		// A second fencing attempt must not clobber the renamed dir.
		if err := f.MkdirAll("wal/rs1"); err != nil {
			t.Fatal(err)
		}
		if err := f.Rename("wal/rs1", "wal/rs1-splitting"); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("rename onto existing dir: %v", err)
		}
		// Files are replaced.
		mustWrite(t, f, "wal/rs1/x", []byte("new"))
		if err := f.Rename("wal/rs1/x", "wal/rs1-splitting/b"); err != nil {
			t.Fatal(err)
		}
		if data, _ := ReadFile(f, "wal/rs1-splitting/b"); string(data) != "new" {
			t.Fatalf("replaced file = %q", data)
		}
		if err := f.Rename("wal/none", "wal/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("rename missing: %v", err)
		}

		// Truncate.
		if err := f.Truncate("wal/rs1-splitting/b", 1); err != nil {
			t.Fatal(err)
		}
		if data, _ := ReadFile(f, "wal/rs1-splitting/b"); string(data) != "n" {
			t.Fatalf("truncated = %q", data)
		}

		// Remove and RemoveAll.
		if err := f.Remove("wal/rs1-splitting"); err == nil {
			t.Fatal("removed a non-empty dir")
		}
		if err := f.Remove("wal/rs1-splitting/a"); err != nil {
			t.Fatal(err)
		}
		if err := f.RemoveAll("wal/rs1-splitting"); err != nil {
			t.Fatal(err)
		}
		if err := f.RemoveAll("wal/rs1-splitting"); err != nil {
			t.Fatal("RemoveAll of a missing name:", err)
		}
		if err := f.RemoveAll("/"); err == nil {
			t.Fatal("RemoveAll of the root succeeded")
		}

		// WriteFile replaces atomically.
		if err := WriteFile(f, "meta/desc", []byte("v1")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("WriteFile without parent: %v", err)
		}
		f.MkdirAll("meta")
		for _, v := range []string{"v1", "v2"} {
			if err := WriteFile(f, "meta/desc", []byte(v)); err != nil {
				t.Fatal(err)
			}
			if data, _ := ReadFile(f, "meta/desc"); string(data) != v {
				t.Fatalf("WriteFile %s: %q", v, data)
			}
		}

		// Invalid names.
		for _, bad := range []string{"../x", "a/../../x", "a\\b", "a\x00"} {
			if _, err := f.Create(bad); !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("Create(%q): %v", bad, err)
			}
		}
	})
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{"": ".", "/": ".", ".": ".", "/wal/rs1/": "wal/rs1", "a//b/./c": "a/b/c", "a/b/../c": "a/c"} {
		if got, err := Clean(in); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestLocalErrorsNameThePath(t *testing.T) {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Open("data/t1/missing")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(l.Root(), "data", "t1", "missing")) {
		t.Fatalf("error does not name the path: %v", err)
	}
	// The new file is really on disk and the name durable after SyncDir.
	mustWrite(t, l, "f", []byte("x"))
	if err := l.SyncDir("."); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(l.Root(), "f")); err != nil || string(data) != "x" {
		t.Fatalf("on disk: %q %v", data, err)
	}
}

// TestLocalNoSpace fills a small filesystem given by CELLSTORE_TEST_SMALLFS
// (for example a 1 MiB tmpfs) and checks that a full disk surfaces as an
// error on Write or Sync, never as silent success, and that the file then
// refuses further writes.
func TestLocalNoSpace(t *testing.T) {
	dir := os.Getenv("CELLSTORE_TEST_SMALLFS")
	if dir == "" {
		t.Skip("set CELLSTORE_TEST_SMALLFS to a small mounted filesystem to run")
	}
	l, err := NewLocal(filepath.Join(dir, "nospace-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(l.Root())
	w, err := l.Create("big")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := bytes.Repeat([]byte{1}, 64<<10)
	var werr error
	for i := 0; i < 1<<14 && werr == nil; i++ {
		_, werr = w.Write(chunk)
		if werr == nil && i%16 == 0 {
			werr = w.Sync()
		}
	}
	if werr == nil {
		werr = w.Sync()
	}
	if !IsNoSpace(werr) {
		t.Fatalf("expected ENOSPC, got %v", werr)
	}
	if !strings.Contains(werr.Error(), "big") {
		t.Fatalf("error does not name the file: %v", werr)
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("write after ENOSPC succeeded")
	}
	if err := w.Sync(); err == nil {
		t.Fatal("sync after ENOSPC succeeded")
	}
}

func TestMemCrashDropsUnsynced(t *testing.T) {
	m := NewMem()
	m.MkdirAll("d")

	// Synced data in a file whose name was made durable.
	w, _ := m.Create("d/durable")
	w.Write([]byte("abc"))
	w.Sync()
	w.Write([]byte("def")) // not synced
	m.SyncDir("d")

	w3, _ := m.Create("d/old")
	w3.Sync()
	w4, _ := m.Create("d/removed")
	w4.Write([]byte("keep"))
	w4.Sync()
	m.SyncDir("d")

	// A rename and a remove that were not made durable.
	m.Rename("d/old", "d/new")
	m.Remove("d/removed")

	// A synced file whose directory entry was never synced.
	w2, _ := m.Create("d/nameless")
	w2.Write([]byte("x"))
	w2.Sync()

	c := m.CrashClone(CrashOptions{})
	names, _ := c.List("d")
	if got := strings.Join(names, ","); got != "durable,old,removed" {
		t.Fatalf("after crash: %s\n%s", got, c)
	}
	if data, _ := ReadFile(c, "d/durable"); string(data) != "abc" {
		t.Fatalf("durable = %q", data)
	}
	if data, _ := ReadFile(c, "d/removed"); string(data) != "keep" {
		t.Fatalf("removed = %q", data)
	}
	// The original is untouched and the clone independent.
	if data, _ := ReadFile(m, "d/durable"); string(data) != "abcdef" {
		t.Fatalf("original = %q", data)
	}
	w5, _ := c.Create("d/later")
	w5.Write([]byte("z"))
	if ok, _ := Exists(m, "d/later"); ok {
		t.Fatal("clone shares state with the original")
	}

	// Once synced, the namespace changes survive.
	m.SyncDir("d")
	c = m.CrashClone(CrashOptions{})
	names, _ = c.List("d")
	if got := strings.Join(names, ","); got != "durable,nameless,new" {
		t.Fatalf("after sync + crash: %s", got)
	}
}

func TestMemCrashKeepsRandomUnsyncedPrefix(t *testing.T) {
	m := NewMem()
	w, _ := m.Create("f")
	w.Write([]byte("synced"))
	w.Sync()
	w.Write([]byte("-unsynced-tail"))
	m.SyncDir(".")
	r := rand.New(rand.NewPCG(1, 1))
	sawPartial, sawZero := false, false
	for i := 0; i < 200; i++ {
		data, err := ReadFile(m.CrashClone(CrashOptions{Rand: r}), "f")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("synced")) || len(data) > 20 {
			t.Fatalf("crash lost synced data or invented bytes: %q", data)
		}
		tail := data[6:]
		full := []byte("-unsynced-tail")[:len(tail)]
		if len(tail) > 0 {
			sawPartial = true
		}
		for j := range tail {
			if tail[j] != full[j] && tail[j] != 0 {
				t.Fatalf("tail byte %d = %q", j, tail[j])
			}
			if tail[j] == 0 {
				sawZero = true
			}
		}
	}
	if !sawPartial || !sawZero {
		t.Fatalf("random crash never kept a tail (%v) or zeroed one (%v)", sawPartial, sawZero)
	}
}

func TestMemWriteAfterCloseAndRemove(t *testing.T) {
	m := NewMem()
	w, _ := m.Create("f")
	r, _ := m.Open("f")
	m.Remove("f")
	// POSIX: an open file outlives its name.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if sz, _ := r.Size(); sz != 1 {
		t.Fatalf("size %d", sz)
	}
	w.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// Errors that say the volume is failing are counted (cellstore_storage_volume_errors_total); those
// that say a name is missing or taken, as the store asks on purpose, are not.
func TestVolumeErrorsCounted(t *testing.T) {
	before := VolumeErrors()
	for _, err := range []error{fs.ErrNotExist, fs.ErrExist, syscall.ENOTEMPTY, syscall.ENOENT} {
		_ = pathErr("stat", "/x", err)
	}
	if got := VolumeErrors() - before; got != 0 {
		t.Fatalf("%d errors counted for missing or taken names, want 0", got)
	}
	for _, err := range []error{syscall.EIO, &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, &os.LinkError{Op: "rename", Err: syscall.EROFS}, syscall.ESTALE} {
		_ = pathErr("write", "/x", err)
	}
	if got := VolumeErrors() - before; got != 4 {
		t.Fatalf("%d failing-volume errors counted, want 4", got)
	}
}
