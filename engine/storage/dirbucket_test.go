package storage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// countingBatches deletes in batches through its directory bucket's Delete and records each
// batch's size.
type countingBatches struct {
	storage.Bucket
	sizes []int
}

func (c *countingBatches) DeleteBatch(ctx context.Context, keys []string) error {
	c.sizes = append(c.sizes, len(keys))
	for _, k := range keys {
		if err := c.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAll cuts a long list into batches of at most MaxDeleteBatch keys.
func TestDeleteAllBatches(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := &countingBatches{Bucket: b}
	keys := make([]string, 2*storage.MaxDeleteBatch+500)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%05d", i)
	}
	if _, err := storage.DeleteAll(context.Background(), c, keys); err != nil {
		t.Fatal(err)
	}
	if want := []int{storage.MaxDeleteBatch, storage.MaxDeleteBatch, 500}; !slices.Equal(c.sizes, want) {
		t.Fatalf("batches %v, want %v", c.sizes, want)
	}
}

// countingLists counts a bucket's List calls.
type countingLists struct {
	storage.Bucket
	lists int
}

func (c *countingLists) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	c.lists++
	return c.Bucket.List(ctx, prefix, after, limit)
}

// Walk lists a page of 1000 at a time and stops at the first short page: a listing of a few
// objects (a region's family directory when it opens) is one round trip to the store.
func TestWalkStopsAtAShortPage(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 2500 {
		if _, err := b.Put(context.Background(), fmt.Sprintf("many/%05d", i), []byte("x"), storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prefix  string
		objects int
		lists   int
	}{{"many/", 2500, 3}, {"many/0000", 10, 1}, {"none/", 0, 1}} {
		c := &countingLists{Bucket: b}
		n := 0
		if err := storage.Walk(context.Background(), c, tc.prefix, func(storage.ObjectInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != tc.objects || c.lists != tc.lists {
			t.Errorf("walk of %s: %d objects in %d lists, want %d in %d", tc.prefix, n, c.lists, tc.objects, tc.lists)
		}
	}
}

// ignoresStartAfter is a store whose listing always starts at the beginning (a fault a real store
// does not make on purpose).
type ignoresStartAfter struct {
	storage.Bucket
	keys []storage.ObjectInfo
}

func (b ignoresStartAfter) List(_ context.Context, _, _ string, limit int) ([]storage.ObjectInfo, error) {
	return b.keys[:min(limit, len(b.keys))], nil
}

func (b ignoresStartAfter) Describe() string { return "test:ignores-start-after" }

// A walk over a store whose listing does not move past the key it was asked to start after ends
// with an error saying so, instead of paging without end.
func TestWalkNeedsListingsToMoveOn(t *testing.T) {
	b := ignoresStartAfter{}
	for i := range 1500 {
		b.keys = append(b.keys, storage.ObjectInfo{Key: fmt.Sprintf("p/%05d", i)})
	}
	seen := 0
	err := storage.Walk(context.Background(), b, "p/", func(storage.ObjectInfo) error {
		if seen++; seen > 10_000 {
			return errors.New("walked on")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "start-after") || seen != 1000 {
		t.Fatalf("walk of a store ignoring start-after: %v after %d objects", err, seen)
	}
}

// Listing a directory bucket page by page (storage.Walk, 1,000 keys a page) as the cleaner and
// the WAL's readers do: 20,000 objects in one directory beside 20,000 in others.
//
//	go test ./engine/storage -run '^$' -bench DirBucketWalk -benchtime 3x
func BenchmarkDirBucketWalk(b *testing.B) {
	ctx := context.Background()
	bk, err := storage.NewDirBucket(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20000 {
		for _, dir := range []string{"wal/rs1_1", fmt.Sprintf("data/t/%03d", i%100)} {
			if _, err := bk.Put(ctx, fmt.Sprintf("%s/%08d", dir, i), []byte("x"), storage.Condition{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, prefix := range []string{"wal/rs1_1/", "data/"} {
			n := 0
			if err := storage.Walk(ctx, bk, prefix, func(storage.ObjectInfo) error { n++; return nil }); err != nil || n != 20000 {
				b.Fatalf("%s: %d keys, %v", prefix, n, err)
			}
		}
	}
}
