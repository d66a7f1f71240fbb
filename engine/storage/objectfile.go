package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
)

// DefaultMaxObjectWrite bounds an ObjectWriter: the object is buffered in memory until it is
// written with one PUT (multipart upload, which would stream larger files, is not built yet).
const DefaultMaxObjectWrite = 1 << 30

// ObjectWriter writes one object through the File interface (what the store-file writer takes):
// writes are buffered, and the first Sync writes the whole object with a create-only PUT — an
// object is written once, under its final key, never renamed. Writes after that Sync fail.
type ObjectWriter struct {
	b     Bucket
	key   string
	limit int

	mu      sync.Mutex
	buf     []byte
	written bool
	err     error
}

// NewObjectWriter returns a writer of the object at key; limit bounds its size (<= 0:
// DefaultMaxObjectWrite).
func NewObjectWriter(b Bucket, key string, limit int) (*ObjectWriter, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultMaxObjectWrite
	}
	return &ObjectWriter{b: b, key: key, limit: limit}, nil
}

// Write buffers p.
func (w *ObjectWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		return 0, w.err
	case w.written:
		return 0, fmt.Errorf("storage: %s in %s: write after the object was written (objects are immutable)", w.key, w.b.Describe())
	case len(w.buf)+len(p) > w.limit:
		w.err = fmt.Errorf("storage: %s in %s: object larger than %d bytes, the most one PUT from memory may carry here", w.key, w.b.Describe(), w.limit)
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Sync writes the object (create-only) the first time; later calls return the first one's
// result. ErrPrecondition means another writer created the key first.
func (w *ObjectWriter) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.written {
		return w.err
	}
	if _, err := w.b.Put(context.Background(), w.key, w.buf, Condition{IfNoneMatch: true}); err != nil {
		w.err = fmt.Errorf("storage: writing %s: %w", w.key, err)
		return w.err
	}
	w.written = true
	w.buf = nil
	return nil
}

// Close drops the buffer; an object not synced is not written.
func (w *ObjectWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = nil
	return nil
}

// Name returns the object's key.
func (w *ObjectWriter) Name() string { return w.key }

// Written reports whether the object was written.
func (w *ObjectWriter) Written() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// objectReader reads an immutable object by ranged GETs.
type objectReader struct {
	b    Bucket
	key  string
	size int64
}

// OpenObject opens the object at key for random reads (ReadableFile): one ranged GET per ReadAt.
// A missing key fails with an error matching both ErrNoObject and fs.ErrNotExist.
func OpenObject(ctx context.Context, b Bucket, key string) (ReadableFile, error) {
	info, err := b.Stat(ctx, key)
	if err != nil {
		return nil, notExist(err)
	}
	return &objectReader{b: b, key: key, size: info.Size}, nil
}

// notExist makes a missing object also match fs.ErrNotExist, which FS callers test for.
func notExist(err error) error {
	if errors.Is(err, ErrNoObject) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w)", err, fs.ErrNotExist)
	}
	return err
}

func (r *objectReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("storage: %s: negative offset %d", r.key, off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	data, err := r.b.GetRange(context.Background(), r.key, off, int64(len(p)))
	if err != nil {
		return 0, notExist(err)
	}
	n := copy(p, data)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *objectReader) Size() (int64, error) { return r.size, nil }
func (r *objectReader) Close() error         { return nil }

// ReadObject reads a whole object; a missing key matches both ErrNoObject and fs.ErrNotExist.
func ReadObject(ctx context.Context, b Bucket, key string) ([]byte, ObjectInfo, error) {
	data, info, err := b.Get(ctx, key)
	return data, info, notExist(err)
}
