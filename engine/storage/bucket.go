package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Bucket is the common ground of object stores (S3 and its compatibles) and a directory: whole,
// immutable objects, conditional create and conditional replace, ranged reads, prefix listing in
// key order, and delete — no append, no rename. The durable layout of issue 19 (store files
// recorded by manifests, WALs as sequences of objects fenced by conditional creates, the catalog)
// is built on this; FS remains for the directory-only code until it moves over.
//
// Keys are slash-separated like FS names but name objects, not files in directories: there are
// no directories to create, and a prefix lists every key under it.
//
// Implementations are safe for concurrent use, also by several processes on one bucket; a Put
// that returns nil is durable.
type Bucket interface {
	// Put writes the whole object at key. With IfNoneMatch it fails with ErrPrecondition when the
	// key exists; with IfMatch, when the key is missing or its ETag differs. It returns the new
	// object's ETag.
	//
	// A conditional Put whose condition fails because the object already is this body succeeds:
	// that is how a Put whose answer was lost, retried, recognises its own write. Callers whose
	// correctness rests on a condition (fencing) make their bodies unique to the writer — they
	// carry its epoch — so that no other writer's object can be taken for theirs.
	Put(ctx context.Context, key string, body []byte, cond Condition) (etag string, err error)
	// Get reads the whole object.
	Get(ctx context.Context, key string) ([]byte, ObjectInfo, error)
	// GetRange reads n bytes from offset off (fewer at the end of the object; none past it).
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Stat describes the object.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to limit objects (all when limit <= 0) whose keys start with prefix and sort
	// after startAfter, in byte order of their keys: fewer than limit only when no more are left.
	List(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
	// Delete removes the object; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Describe names the bucket for messages ("s3://bucket/prefix", "dir:/path").
	Describe() string
}

// BatchDeleter is a Bucket that deletes many objects in one request (S3's DeleteObjects).
type BatchDeleter interface {
	Bucket
	// DeleteBatch removes the objects (at most MaxDeleteBatch keys); missing keys are not an
	// error. On an error some of them may be gone: deleting them again is harmless.
	DeleteBatch(ctx context.Context, keys []string) error
}

// MaxDeleteBatch is the most keys one DeleteBatch takes (S3's limit for DeleteObjects).
const MaxDeleteBatch = 1000

// DeleteAll removes the objects at keys, a batch of up to MaxDeleteBatch per request when b
// deletes in batches (one object costs a local S3 server about a quarter of the CPU a DELETE of
// its own does), else one by one. Missing keys are not an error. It returns how many of the keys,
// from the first, are surely gone: on an error, some after those may be gone too.
func DeleteAll(ctx context.Context, b Bucket, keys []string) (int, error) {
	bd, ok := b.(BatchDeleter)
	if !ok || len(keys) <= 1 {
		return DeleteEach(ctx, b, keys)
	}
	done := 0
	for done < len(keys) {
		n := min(len(keys)-done, MaxDeleteBatch)
		if err := bd.DeleteBatch(ctx, keys[done:done+n]); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// DeleteEach removes the objects at keys with one Delete each, and returns how many it removed
// before an error.
func DeleteEach(ctx context.Context, b Bucket, keys []string) (int, error) {
	for i, k := range keys {
		if err := b.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}

// MultipartBucket is a Bucket that can also write an object in parts, so that a large object never
// sits in memory whole: S3's multipart upload, a directory's temporary file.
type MultipartBucket interface {
	Bucket
	// StartUpload begins writing the object at key in parts; nothing is visible at key until
	// Complete.
	StartUpload(ctx context.Context, key string) (Upload, error)
}

// Upload is an object being written in parts.
type Upload interface {
	// WritePart appends the next part. Every part but the last carries at least MinPartSize
	// bytes; at most MaxParts parts make an object.
	WritePart(ctx context.Context, part []byte) error
	// Complete makes the object visible at key, create-only: ErrPrecondition when the key exists.
	// It returns the object's ETag.
	Complete(ctx context.Context) (etag string, err error)
	// Abort drops what was written; the key is left as it was.
	Abort(ctx context.Context) error
}

// Limits of S3's multipart upload, which every MultipartBucket keeps.
const (
	MinPartSize = 5 << 20
	MaxParts    = 10000
)

// Condition makes a Put conditional. The zero value writes unconditionally.
type Condition struct {
	// IfNoneMatch: create only, never replace (S3's If-None-Match: *).
	IfNoneMatch bool
	// IfMatch: replace only the object with this ETag (S3's If-Match).
	IfMatch string
}

// ObjectInfo describes an object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ETag    string
	ModTime time.Time
}

// Errors of a Bucket, matched with errors.Is.
var (
	// ErrPrecondition: a conditional Put found the key in another state than it asked for.
	ErrPrecondition = errors.New("storage: precondition failed")
	// ErrNoObject: the key does not exist.
	ErrNoObject = errors.New("storage: no such object")
	// ErrUnavailable: the store did not serve the request for now — it throttled it (S3's 503
	// SlowDown), answered a server error or did not answer — after the client's own retries. The
	// same request may succeed later; a conditional Put may also have taken effect (Put's retry
	// rule finds out).
	ErrUnavailable = errors.New("storage: the object store is unavailable for now")
	// ErrConflict comes with ErrPrecondition when a conditional Put met another conditional
	// write of the key still under way (S3's 409) — perhaps an earlier attempt of the same Put —
	// and the key does not hold this body yet: that write may still take effect or fail; asking
	// again tells which.
	ErrConflict = errors.New("storage: a concurrent conditional write of the key is under way")
)

// CheckKey refuses keys a bucket cannot hold the same way on every backend.
func CheckKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || path.Clean(key) != key ||
		key == "." || strings.HasPrefix(key, "../") || key == ".." || len(key) > 1024 {
		return fmt.Errorf("storage: bad object key %q: want a clean relative path of at most 1024 bytes", key)
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, ".") && (part == "." || part == ".." || strings.HasPrefix(part, dirTempPrefix)) {
			return fmt.Errorf("storage: bad object key %q: %q is reserved", key, part)
		}
	}
	return nil
}

// walkPage is how many objects Walk lists at a time (S3's most per request).
const walkPage = 1000

// Walk calls fn with every object under prefix, in key order, listing a page of 1000 at a time;
// fn may delete the object it is given. It stops at the first error.
func Walk(ctx context.Context, b Bucket, prefix string, fn func(ObjectInfo) error) error {
	return WalkAfter(ctx, b, prefix, "", fn)
}

// WalkAfter is Walk over the keys after after (all of them when it is ""). A store whose listing
// does not move past the key it was asked to start after is an error, not a walk without end.
func WalkAfter(ctx context.Context, b Bucket, prefix, after string, fn func(ObjectInfo) error) error {
	for {
		page, err := b.List(ctx, prefix, after, walkPage)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		if after != "" && page[0].Key <= after {
			return fmt.Errorf("storage: listing %s in %s after %q answered %q: the store does not honour start-after", prefix, b.Describe(), after, page[0].Key)
		}
		for _, o := range page {
			if err := fn(o); err != nil {
				return err
			}
		}
		if len(page) < walkPage {
			return nil // the last page: no round trip to hear that nothing is left
		}
		after = page[len(page)-1].Key
	}
}

// MoveObject moves the object at from to to: object stores have no rename, so it copies through
// this process — an object up to MoveInMemory by one GET and a create-only PUT (a retry finds its
// own copy), a larger one streamed by ranged GETs into a multipart upload, so memory stays bounded
// by a part whatever the size of a store file — and then deletes from. Another object at to stops
// the move and keeps the original (for a large object: one of another size; objects never change,
// so one of the same size is this move's own copy from an attempt that did not get to the delete).
func MoveObject(ctx context.Context, b Bucket, from, to string) error {
	info, err := b.Stat(ctx, from)
	if err != nil {
		return err
	}
	if info.Size <= MoveInMemory {
		body, _, err := b.Get(ctx, from)
		if err != nil {
			return err
		}
		if _, err := b.Put(ctx, to, body, Condition{IfNoneMatch: true}); err != nil {
			return fmt.Errorf("move %s to %s: %w", from, to, err)
		}
		return b.Delete(ctx, from)
	}
	copied := func() (bool, error) {
		have, err := b.Stat(ctx, to)
		switch {
		case errors.Is(err, ErrNoObject):
			return false, nil
		case err != nil:
			return false, err
		case have.Size != info.Size:
			return false, fmt.Errorf("move %s to %s: another object of %d bytes is there: %w", from, to, have.Size, ErrPrecondition)
		}
		return true, nil
	}
	done, err := copied()
	if err != nil {
		return err
	}
	if !done {
		w, err := NewObjectWriterContext(ctx, b, to, 0)
		if err != nil {
			return err
		}
		defer w.Close()
		src := io.NewSectionReader(&objectReader{b: b, key: from, size: info.Size}, 0, info.Size)
		if _, err := io.CopyBuffer(w, src, make([]byte, 4<<20)); err != nil {
			return fmt.Errorf("move %s to %s: %w", from, to, err)
		}
		if err := w.Sync(); err != nil {
			if !errors.Is(err, ErrPrecondition) {
				return fmt.Errorf("move %s to %s: %w", from, to, err)
			}
			if done, err = copied(); err != nil || !done { // lost a race with another mover
				return fmt.Errorf("move %s to %s: %w", from, to, errors.Join(err, ErrPrecondition))
			}
		}
	}
	return b.Delete(ctx, from)
}

// MoveInMemory is the largest object MoveObject copies whole in memory.
const MoveInMemory = 8 << 20
