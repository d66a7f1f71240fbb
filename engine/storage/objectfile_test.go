package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
)

func TestObjectWriterAndReader(t *testing.T) {
	b, err := NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	w, err := NewObjectWriter(b, "data/t/r/f/file1", 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789"), 50)
	for i := 0; i < len(body); i += 100 {
		if _, err := w.Write(body[i : i+100]); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ReadObject(ctx, b, "data/t/r/f/file1"); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNoObject) {
		t.Fatalf("before Sync the object must not exist: %v", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil || !w.Written() {
		t.Fatalf("second Sync: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("write after the object was written: %v", err)
	}
	w.Close()

	r, err := OpenObject(ctx, b, "data/t/r/f/file1")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Size(); n != int64(len(body)) {
		t.Fatalf("size %d, want %d", n, len(body))
	}
	p := make([]byte, 30)
	if n, err := r.ReadAt(p, 95); n != 30 || err != nil || !bytes.Equal(p, body[95:125]) {
		t.Fatalf("ReadAt(95): %d %v %q", n, err, p)
	}
	if n, err := r.ReadAt(p, int64(len(body)-10)); n != 10 || err != io.EOF || !bytes.Equal(p[:10], body[len(body)-10:]) {
		t.Fatalf("ReadAt at the end: %d %v", n, err)
	}
	if _, err := r.ReadAt(p, int64(len(body))); err != io.EOF {
		t.Fatalf("ReadAt past the end: %v", err)
	}

	// Another writer of the same key with another body loses: objects are created once.
	w2, _ := NewObjectWriter(b, "data/t/r/f/file1", 0)
	w2.Write([]byte("other"))
	if err := w2.Sync(); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("second writer of a key: %v", err)
	}
	// Too large for one PUT from memory: a clear error, nothing written.
	w3, _ := NewObjectWriter(b, "data/t/r/f/big", 100)
	if _, err := w3.Write(make([]byte, 101)); err == nil || !strings.Contains(err.Error(), "larger than 100 bytes") {
		t.Fatalf("over the limit: %v", err)
	}
	if err := w3.Sync(); err == nil {
		t.Fatal("Sync after a refused write succeeded")
	}
	if _, err := OpenObject(ctx, b, "data/t/r/f/big"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("refused object exists: %v", err)
	}
	if _, err := NewObjectWriter(b, "../x", 0); err == nil {
		t.Fatal("a bad key was accepted")
	}
}
