package storage_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
)

func TestDirBucketConformance(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) storage.Bucket {
		b, err := storage.NewDirBucket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// Two processes' worth of buckets on one directory (a shared volume): conditional writes hold
// across bucket handles, which do not share the in-process mutex, only the flock.
func TestDirBucketConformanceAcrossHandles(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) storage.Bucket {
		dir := t.TempDir()
		a, err := storage.NewDirBucket(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := storage.NewDirBucket(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return &alternating{bs: []storage.Bucket{a, b}}
	})
}

// alternating spreads calls over several handles of one bucket.
type alternating struct {
	bs []storage.Bucket
	n  atomic.Uint64
}

func (a *alternating) next() storage.Bucket { return a.bs[a.n.Add(1)%uint64(len(a.bs))] }

func (a *alternating) Put(ctx context.Context, key string, body []byte, c storage.Condition) (string, error) {
	return a.next().Put(ctx, key, body, c)
}
func (a *alternating) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	return a.next().Get(ctx, key)
}
func (a *alternating) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return a.next().GetRange(ctx, key, off, n)
}
func (a *alternating) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	return a.next().Stat(ctx, key)
}
func (a *alternating) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	return a.next().List(ctx, prefix, after, limit)
}
func (a *alternating) Delete(ctx context.Context, key string) error { return a.next().Delete(ctx, key) }
func (a *alternating) Describe() string                             { return a.bs[0].Describe() }
func (a *alternating) StartUpload(ctx context.Context, key string) (storage.Upload, error) {
	return a.next().(storage.MultipartBucket).StartUpload(ctx, key)
}
