package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
	// Too large for one PUT from memory (on a bucket that cannot write in parts): a clear error,
	// nothing written.
	w3, _ := NewObjectWriter(onePut{b}, "data/t/r/f/big", 100)
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

// onePut hides a bucket's multipart upload.
type onePut struct{ Bucket }

// On a MultipartBucket a large object is uploaded in parts as it is written — one part in memory —
// and appears whole at Sync; a writer closed without Sync leaves nothing behind.
func TestObjectWriterMultipart(t *testing.T) {
	dir := t.TempDir()
	b, err := NewDirBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	body := make([]byte, 3*MinPartSize+12345)
	for i := range body {
		body[i] = byte(i * 7 / 3)
	}
	w, err := NewObjectWriter(b, "data/big", 1<<20) // the in-memory limit does not apply to parts
	if err != nil {
		t.Fatal(err)
	}
	w.SetPartSize(MinPartSize)
	for off := 0; off < len(body); {
		n := min(777777, len(body)-off)
		if _, err := w.Write(body[off : off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
		if len(w.buf) > MinPartSize {
			t.Fatalf("%d bytes buffered: more than one part", len(w.buf))
		}
	}
	if w.up == nil {
		t.Fatal("no upload started for an object of 3 parts")
	}
	if _, err := b.Stat(ctx, "data/big"); !errors.Is(err, ErrNoObject) {
		t.Fatalf("the object is visible before Sync: %v", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, _, err := ReadObject(ctx, b, "data/big")
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, want %d: %v", len(got), len(body), err)
	}

	// Closed without Sync: the upload is aborted, no object and no temporary file remain.
	w2, _ := NewObjectWriter(b, "data/abandoned", 0)
	w2.SetPartSize(MinPartSize)
	if _, err := w2.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "data/abandoned"); !errors.Is(err, ErrNoObject) {
		t.Fatalf("an abandoned writer left an object: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "big" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("files left beside the object: %v", names)
	}
}
