package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
)

// DefaultMaxObjectWrite bounds an ObjectWriter on a bucket that cannot write objects in parts:
// the object is buffered in memory until it is written with one PUT.
const DefaultMaxObjectWrite = 1 << 30

// DefaultPartSize is the size of the parts an ObjectWriter uploads on a MultipartBucket: it holds
// at most one part in memory, whatever the object's size.
const DefaultPartSize = 8 << 20

// ObjectWriter writes one object through the File interface (what the store-file writer takes),
// under its final key, never renamed. On a MultipartBucket, an object that outgrows one part is
// uploaded in parts as it is written (one part buffered), and the first Sync uploads the last part
// and completes the upload, create-only; a smaller object, or any object on another bucket, is
// buffered and written by the first Sync with one create-only PUT. Writes after that Sync fail;
// Close without a Sync aborts the upload.
type ObjectWriter struct {
	ctx      context.Context // of the uploads (aborts run without it)
	b        Bucket
	key      string
	limit    int
	partSize int

	mu      sync.Mutex
	buf     []byte
	up      Upload // the multipart upload once the object outgrew one part
	size    int64
	written bool
	etag    string // the store's ETag of the written object ("" when it gave none)
	keep    int    // KeepWritten's bound
	kept    []byte // the bytes of the written object, when it was written whole and fits keep
	err     error
}

// KeepWritten asks the writer to keep the bytes of an object it writes with one PUT, up to max
// bytes, for WrittenObject after the object was written: a reader of what was just written (a
// flush opening its new store file) then needs no request to read it back. Call before the first
// Sync.
func (w *ObjectWriter) KeepWritten(max int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keep = max
}

// WrittenObject returns the written object's key, size and ETag, and its bytes when KeepWritten
// kept them (nil otherwise); ok is false before the object was written.
func (w *ObjectWriter) WrittenObject() (info ObjectInfo, data []byte, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.written {
		return ObjectInfo{}, nil, false
	}
	return ObjectInfo{Key: w.key, Size: w.size, ETag: w.etag}, w.kept, true
}

// NewObjectWriter returns a writer of the object at key; limit bounds the size of an object
// written from memory (<= 0: DefaultMaxObjectWrite).
func NewObjectWriter(b Bucket, key string, limit int) (*ObjectWriter, error) {
	return NewObjectWriterContext(context.Background(), b, key, limit)
}

// NewObjectWriterContext is NewObjectWriter whose writes end when ctx does.
func NewObjectWriterContext(ctx context.Context, b Bucket, key string, limit int) (*ObjectWriter, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultMaxObjectWrite
	}
	return &ObjectWriter{ctx: ctx, b: b, key: key, limit: limit, partSize: DefaultPartSize}, nil
}

// SetPartSize changes the part size (at least MinPartSize) before the first write.
func (w *ObjectWriter) SetPartSize(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partSize = max(n, MinPartSize)
}

// Write buffers p, uploading every full part on a MultipartBucket.
func (w *ObjectWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	mb, multipart := w.b.(MultipartBucket)
	switch {
	case w.err != nil:
		return 0, w.err
	case w.written:
		return 0, fmt.Errorf("storage: %s in %s: write after the object was written (objects are immutable)", w.key, w.b.Describe())
	case multipart && w.size+int64(len(p)) > int64(w.partSize)*MaxParts:
		w.err = fmt.Errorf("storage: %s in %s: object larger than %d parts of %d bytes", w.key, w.b.Describe(), MaxParts, w.partSize)
		return 0, w.err
	case !multipart && len(w.buf)+len(p) > w.limit:
		w.err = fmt.Errorf("storage: %s in %s: object larger than %d bytes, the most one PUT from memory may carry here", w.key, w.b.Describe(), w.limit)
		return 0, w.err
	}
	n := len(p)
	for multipart && len(w.buf)+len(p) > w.partSize {
		// Fill the buffered part to its size and upload it; more may follow.
		take := w.partSize - len(w.buf)
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if w.up == nil {
			up, err := mb.StartUpload(w.ctx, w.key)
			if err != nil {
				w.err = fmt.Errorf("storage: writing %s: %w", w.key, err)
				return 0, w.err
			}
			w.up = up
		}
		if err := w.up.WritePart(w.ctx, w.buf); err != nil {
			w.err = fmt.Errorf("storage: writing %s: %w", w.key, err)
			_ = w.up.Abort(context.Background())
			return 0, w.err
		}
		w.buf = w.buf[:0]
	}
	w.buf = append(w.buf, p...)
	w.size += int64(n)
	return n, nil
}

// Sync writes the object (create-only) the first time; later calls return the first one's
// result. ErrPrecondition means another writer created the key first.
func (w *ObjectWriter) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.written {
		return w.err
	}
	var err error
	var etag string
	if w.up != nil {
		if err = w.up.WritePart(w.ctx, w.buf); err == nil {
			etag, err = w.up.Complete(w.ctx)
		} else {
			_ = w.up.Abort(context.Background())
		}
	} else {
		etag, err = w.b.Put(w.ctx, w.key, w.buf, Condition{IfNoneMatch: true})
		if err == nil && len(w.buf) <= w.keep {
			w.kept = w.buf
		}
	}
	if err != nil {
		w.err = fmt.Errorf("storage: writing %s: %w", w.key, err)
		return w.err
	}
	w.written, w.etag = true, etag
	w.buf = nil
	return nil
}

// Close drops the buffer; an object not synced is not written (its upload is aborted).
func (w *ObjectWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = nil
	if w.up != nil && !w.written {
		up := w.up
		w.up = nil
		if err := up.Abort(context.Background()); err != nil {
			return fmt.Errorf("storage: abandoning %s: %w", w.key, err)
		}
	}
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
		return nil, NotExist(err)
	}
	return &objectReader{b: b, key: key, size: info.Size}, nil
}

// OpenWrittenObject opens an object whose key and size the caller has from writing it (ObjectWriter's
// WrittenObject): as OpenObject, without the HEAD.
func OpenWrittenObject(b Bucket, info ObjectInfo) ReadableFile {
	return &objectReader{b: b, key: info.Key, size: info.Size}
}

// NotExist makes a missing object also match fs.ErrNotExist, which FS callers test for.
func NotExist(err error) error {
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
		return 0, NotExist(err)
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
	return data, info, NotExist(err)
}
