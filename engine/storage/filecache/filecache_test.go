package filecache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellstore/cellstore/engine/storage"
)

var ctx = context.Background()

// counting counts the reads that reach the bucket.
type counting struct {
	storage.Bucket
	gets, ranges atomic.Int64
}

func (c *counting) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	c.gets.Add(1)
	return c.Bucket.Get(ctx, key)
}

func (c *counting) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.ranges.Add(1)
	return c.Bucket.GetRange(ctx, key, off, n)
}

func newBucket(t *testing.T) *counting {
	t.Helper()
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &counting{Bucket: b}
}

func body(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31/7) + seed
	}
	return p
}

func open(t *testing.T, dir string, capacity int64) *Cache {
	t.Helper()
	c, err := Open(Config{Dir: dir, Capacity: capacity, PrefetchBelow: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readAt(t *testing.T, f storage.ReadableFile, off int64, n int, want []byte) {
	t.Helper()
	p := make([]byte, n)
	got, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
	}
	if !bytes.Equal(p[:got], want) {
		t.Fatalf("ReadAt(%d, %d): %d bytes differ from the object's", off, n, got)
	}
}

// A range read once from the bucket is read from the cache after that — also by a new process
// on the same directory — and a range past the end is short with io.EOF.
func TestRangesAreCachedAndSurviveARestart(t *testing.T) {
	b := newBucket(t)
	obj := body(5<<20, 1) // above PrefetchBelow: cached by range
	if _, err := b.Put(ctx, "data/f1", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := open(t, dir, 64<<20)
	f, err := c.OpenObject(ctx, b, "data/f1")
	if err != nil {
		t.Fatal(err)
	}
	readAt(t, f, 100_000, 65_536, obj[100_000:165_536])
	readAt(t, f, 100_000, 65_536, obj[100_000:165_536])
	readAt(t, f, int64(len(obj))-10, 100, obj[len(obj)-10:])
	readAt(t, f, int64(len(obj))-10, 100, obj[len(obj)-10:])
	if n := b.ranges.Load(); n != 2 {
		t.Fatalf("%d ranged GETs for 2 distinct ranges read twice each", n)
	}
	if h, m := value(c.m.hits), value(c.m.misses); h != 2 || m != 2 {
		t.Fatalf("hits %v misses %v, want 2 and 2", h, m)
	}

	c2 := open(t, dir, 64<<20)
	if c2.Len() != 2 || c2.Used() != c.Used() {
		t.Fatalf("after a restart: %d entries of %d bytes, want 2 of %d", c2.Len(), c2.Used(), c.Used())
	}
	f2, _ := c2.OpenObject(ctx, b, "data/f1")
	readAt(t, f2, 100_000, 65_536, obj[100_000:165_536])
	if n := b.ranges.Load(); n != 2 {
		t.Fatalf("a restarted cache read from the bucket again (%d ranged GETs)", n)
	}

	// Restarted with room for one entry only: the older is evicted and its file removed.
	c3 := open(t, dir, c.Used()/2+1)
	var files int
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if c3.Len() != 1 || files != 1 {
		t.Fatalf("a smaller cache kept %d entries and %d files, want 1 and 1", c3.Len(), files)
	}
}

// A small object is read whole when opened; every read after that is local.
func TestSmallObjectsArePrefetched(t *testing.T) {
	b := newBucket(t)
	obj := body(300_000, 2)
	if _, err := b.Put(ctx, "data/small", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 64<<20)
	f, err := c.OpenObject(ctx, b, "data/small")
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 65_530, 200_000, 299_990} {
		readAt(t, f, off, 20, obj[off:min(off+20, int64(len(obj)))])
	}
	if g, r := b.gets.Load(), b.ranges.Load(); g != 1 || r != 0 {
		t.Fatalf("%d GETs and %d ranged GETs, want the one prefetch", g, r)
	}
	if _, err := c.OpenObject(ctx, b, "data/small"); err != nil || b.gets.Load() != 1 {
		t.Fatalf("opening a prefetched object again read it again (%d GETs): %v", b.gets.Load(), err)
	}
	if _, err := c.OpenObject(ctx, b, "data/missing"); !errors.Is(err, storage.ErrNoObject) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing object: %v", err)
	}
}

// OpenSmall reads an object by one GET whatever size its caller expected (what the GET returned is
// what is read), OpenWritten by none, and an object OpenSmall or OpenWritten cached is what a later
// OpenObject finds; a missing object is ErrNoObject and fs.ErrNotExist.
func TestOpenSmallAndOpenWritten(t *testing.T) {
	b := newBucket(t)
	obj := body(200_000, 3)
	if _, err := b.Put(ctx, "data/a", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 64<<20)
	for _, hint := range []int64{100, 200_000, 250_000} { // a hint too small, right, too large
		f, err := c.OpenSmall(ctx, b, "data/a", hint)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := f.Size(); n != int64(len(obj)) {
			t.Fatalf("hint %d: size %d, want the object's %d", hint, n, len(obj))
		}
		readAt(t, f, 199_990, 10, obj[199_990:])
	}
	if g, r := b.gets.Load(), b.ranges.Load(); g != 3 || r != 0 {
		t.Fatalf("%d GETs and %d ranged GETs, want one GET per open", g, r)
	}
	if _, err := c.OpenSmall(ctx, b, "data/missing", 10); !errors.Is(err, storage.ErrNoObject) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing object: %v", err)
	}
	// Above what one GET is worth, the cache is asked first (a HEAD for the version): no GET.
	before := b.gets.Load()
	if _, err := c.OpenSmall(ctx, b, "data/a", smallObject+1); err != nil || b.gets.Load() != before {
		t.Fatalf("a large hint: %d GETs, want none: %v", b.gets.Load()-before, err)
	}

	w, err := storage.NewObjectWriter(b, "data/w", 0)
	if err != nil {
		t.Fatal(err)
	}
	w.KeepWritten(int(c.PrefetchBelow()))
	written := body(70_000, 4)
	if _, err := w.Write(written); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	info, data, ok := w.WrittenObject()
	if st, err := b.Stat(ctx, "data/w"); !ok || data == nil || err != nil || st.ETag != info.ETag || st.Size != info.Size {
		t.Fatalf("WrittenObject: %+v (kept %d bytes, %v), the bucket has %+v (%v)", info, len(data), ok, st, err)
	}
	b.gets.Store(0)
	f, err := c.OpenWritten(ctx, b, info, data)
	if err != nil {
		t.Fatal(err)
	}
	readAt(t, f, 0, 70_000, written)
	if f, err = c.OpenObject(ctx, b, "data/w"); err != nil {
		t.Fatal(err)
	}
	readAt(t, f, 69_000, 1000, written[69_000:])
	if g, r := b.gets.Load(), b.ranges.Load(); g != 0 || r != 0 {
		t.Fatalf("%d GETs and %d ranged GETs of a written object, want none", g, r)
	}
}

// The cache stays within its capacity, evicting the least recently used entries.
func TestCapacityAndLRU(t *testing.T) {
	b := newBucket(t)
	obj := body(8<<20, 3)
	if _, err := b.Put(ctx, "data/big", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	const block = 64 << 10
	c := open(t, t.TempDir(), 10*(block+headerSize+4)) // room for 10 blocks
	f, _ := c.OpenObject(ctx, b, "data/big")
	for i := int64(0); i < 30; i++ {
		readAt(t, f, i*block, block, obj[i*block:(i+1)*block])
		readAt(t, f, 0, block, obj[:block]) // block 0 stays recently used
		if c.Used() > c.cfg.Capacity {
			t.Fatalf("%d bytes used, capacity %d", c.Used(), c.cfg.Capacity)
		}
	}
	before := b.ranges.Load()
	readAt(t, f, 0, block, obj[:block])
	readAt(t, f, 29*block, block, obj[29*block:30*block])
	if b.ranges.Load() != before {
		t.Fatal("the most recently used blocks were evicted")
	}
	readAt(t, f, 5*block, block, obj[5*block:6*block])
	if b.ranges.Load() != before+1 {
		t.Fatal("an old block was not evicted")
	}
	if value(c.m.evictions) == 0 {
		t.Fatal("no eviction counted")
	}
	var files int
	filepath.WalkDir(c.cfg.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if files != c.Len() {
		t.Fatalf("%d files on disk for %d entries", files, c.Len())
	}
}

// A damaged entry is caught by its checksum, dropped and read again from the bucket.
func TestDamagedEntryIsReadAgain(t *testing.T) {
	b := newBucket(t)
	obj := body(2<<20, 4)
	if _, err := b.Put(ctx, "data/f", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 64<<20)
	f, _ := c.OpenObject(ctx, b, "data/f")
	readAt(t, f, 1000, 200_000, obj[1000:201_000])
	var entryFile string
	filepath.WalkDir(c.cfg.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			entryFile = p
		}
		return nil
	})
	raw, err := os.ReadFile(entryFile)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-5000] ^= 0xff
	if err := os.WriteFile(entryFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	readAt(t, f, 1000, 200_000, obj[1000:201_000])
	if b.ranges.Load() != 2 || value(c.m.errors) != 1 {
		t.Fatalf("%d ranged GETs, %v errors: want the damaged entry read again and counted", b.ranges.Load(), value(c.m.errors))
	}
	readAt(t, f, 1000, 200_000, obj[1000:201_000])
	if b.ranges.Load() != 2 {
		t.Fatal("the entry was not cached again")
	}
}

// A cache whose disk fails never fails a read.
func TestFailingDiskFallsBackToTheBucket(t *testing.T) {
	b := newBucket(t)
	obj := body(2<<20, 5)
	if _, err := b.Put(ctx, "data/f", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cache")
	c := open(t, dir, 64<<20)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil { // every write fails
		t.Fatal(err)
	}
	f, _ := c.OpenObject(ctx, b, "data/f")
	for i := 0; i < 3; i++ {
		readAt(t, f, 4096, 8192, obj[4096:12288])
	}
	if b.ranges.Load() != 3 || value(c.m.errors) != 3 || c.Used() != 0 {
		t.Fatalf("%d ranged GETs, %v errors, %d bytes used", b.ranges.Load(), value(c.m.errors), c.Used())
	}
}

// An object replaced under the same key (a new ETag) is never answered with the old bytes.
func TestNewVersionIsNotTheOldOne(t *testing.T) {
	b := newBucket(t)
	if _, err := b.Put(ctx, "data/k", body(100, 6), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 64<<20)
	f, _ := c.OpenObject(ctx, b, "data/k")
	readAt(t, f, 0, 100, body(100, 6))
	if _, err := b.Put(ctx, "data/k", body(100, 7), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	f, _ = c.OpenObject(ctx, b, "data/k")
	readAt(t, f, 0, 100, body(100, 7))
}

// Concurrent readers of the same ranges get the right bytes and leave one file per entry.
func TestConcurrentReaders(t *testing.T) {
	b := newBucket(t)
	obj := body(4<<20, 8)
	if _, err := b.Put(ctx, "data/f", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 1<<20) // small: evictions race with reads
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			f, err := c.OpenObject(ctx, b, "data/f")
			if err != nil {
				t.Error(err)
				return
			}
			p := make([]byte, 32<<10)
			for i := 0; i < 200; i++ {
				off := int64((i*7+g)%100) * (32 << 10)
				if _, err := f.ReadAt(p, off); err != nil || !bytes.Equal(p, obj[off:off+int64(len(p))]) {
					t.Errorf("read at %d: %v", off, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if c.Used() > c.cfg.Capacity {
		t.Fatalf("%d bytes used, capacity %d", c.Used(), c.cfg.Capacity)
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// Small entries count as the whole blocks they take on disk (the kubelet evicts a pod whose
// emptyDir outgrows its size limit, and it counts blocks): 100 reads of 100 bytes in a cache of
// 40 blocks keep 40 entries, not 40 KiB / 116 bytes of them.
func TestSmallEntriesCountWholeBlocks(t *testing.T) {
	b := newBucket(t)
	obj := body(2<<20, 9)
	if _, err := b.Put(ctx, "data/f", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 40*blockSize)
	f, _ := c.OpenObject(ctx, b, "data/f")
	for i := int64(0); i < 100; i++ {
		readAt(t, f, i*1000, 100, obj[i*1000:i*1000+100])
	}
	if c.Len() != 40 || c.Used() != 40*blockSize {
		t.Fatalf("%d entries using %d bytes, want 40 whole blocks", c.Len(), c.Used())
	}
}

// newETag answers Stat with an older version's ETag: the object is replaced between the Stat and
// the Get of OpenObject's prefetch.
type newETag struct{ *counting }

func (b newETag) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	info, err := b.counting.Stat(ctx, key)
	info.ETag = "an-older-version"
	return info, err
}

// The metrics count reads: opening a cached small object reads nothing (its one ReadAt is the one
// hit), and a prefetch whose object changed under it is still a miss that fetched the object.
func TestOpenCountsWhatItReads(t *testing.T) {
	b := newBucket(t)
	obj := body(10_000, 4)
	if _, err := b.Put(ctx, "data/s", obj, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	c := open(t, t.TempDir(), 64<<20)
	if _, err := c.OpenObject(ctx, b, "data/s"); err != nil { // prefetched: a miss
		t.Fatal(err)
	}
	f, err := c.OpenObject(ctx, b, "data/s")
	if err != nil {
		t.Fatal(err)
	}
	readAt(t, f, 100, 50, obj[100:150])
	if h, m, fb := value(c.m.hits), value(c.m.misses), value(c.m.fetched); h != 1 || m != 1 || fb != 10_000 {
		t.Fatalf("hits %v, misses %v, fetched bytes %v; want 1, 1 and 10000", h, m, fb)
	}

	c2 := open(t, t.TempDir(), 64<<20)
	f, err = c2.OpenObject(ctx, newETag{b}, "data/s")
	if err != nil {
		t.Fatal(err)
	}
	if h, m, fb := value(c2.m.hits), value(c2.m.misses), value(c2.m.fetched); h != 0 || m != 1 || fb != 10_000 || c2.Len() != 0 {
		t.Fatalf("a changed object's prefetch: hits %v, misses %v, fetched bytes %v, %d entries; want 0, 1, 10000 and none cached",
			h, m, fb, c2.Len())
	}
	readAt(t, f, 100, 50, obj[100:150])
}
