package master

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
	"github.com/cellstore/cellstore/engine/wal"
)

// The catalog on a bucket survives reopening; a master that opens it fences the previous one: the
// deposed master's next change fails (fenced) and never shows in the catalog, and its snapshot
// cannot replace the newer one.
func TestBucketCatalogFencesThePreviousMaster(t *testing.T) {
	b := dirBucket(t)
	first, err := OpenBucketCatalog(b, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := first.Apply(CatalogChange{Key: k, Value: []byte("v-" + k)}); err != nil {
			t.Fatal(err)
		}
	}
	// The second master is elected while the first is paused; it opens the catalog.
	second, err := OpenBucketCatalog(b, "meta", "m2")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.SnapshotIfPending(); err != nil { // as the master does once it serves
		t.Fatal(err)
	}
	if got := string(second.Get("c")); got != "v-c" {
		t.Fatalf("the new master reads %q for c", got)
	}
	// The first master resumes and tries to commit.
	if err := first.Apply(CatalogChange{Key: "d", Value: []byte("stale")}); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("the deposed master's change: %v, want it fenced", err)
	}
	if err := first.Snapshot(); err == nil {
		t.Fatal("the deposed master replaced the snapshot")
	}
	first.Close()
	if err := second.Apply(CatalogChange{Key: "a", Value: nil}); err != nil {
		t.Fatal(err)
	}
	second.Close()
	third, err := OpenBucketCatalog(b, "meta", "m3")
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := third.SnapshotIfPending(); err != nil {
		t.Fatal(err)
	}
	if third.Get("a") != nil || string(third.Get("b")) != "v-b" || third.Get("d") != nil {
		t.Fatalf("after reopening: a=%q b=%q d=%q", third.Get("a"), third.Get("b"), third.Get("d"))
	}
	// The earlier logs were dropped after the opening snapshot: only fence markers remain there.
	objs, err := b.List(context.Background(), "meta/log/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) > 3*(wal.MaxFenceWindow+1) {
		t.Fatalf("%d objects under meta/log after three openings", len(objs))
	}
}

// countingBucket counts the GETs of log objects.
type countingBucket struct {
	storage.Bucket
	logGets atomic.Int64
}

func (c *countingBucket) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	if strings.HasPrefix(key, "meta/log/") && !strings.HasSuffix(key, "/fenced") { // (a fence's completion record is no log object)
		c.logGets.Add(1)
	}
	return c.Bucket.Get(ctx, key)
}

// A standby follows the catalog the active master writes (its log objects, then a new snapshot);
// elected, it opens the catalog from its copy, reading only the objects written since its last
// refresh, and has exactly what a full opening reads.
func TestCatalogFollowerTakesOverWithTheLastChangesOnly(t *testing.T) {
	dir := dirBucket(t)
	b := &countingBucket{Bucket: dir}
	ctx := context.Background()
	active, err := OpenBucketCatalog(b, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	f := NewCatalogFollower(b, "meta")
	apply := func(c *Catalog, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			ch := CatalogChange{Key: fmt.Sprintf("k%03d", i%50), Value: []byte(fmt.Sprint(i))}
			if i%7 == 0 {
				ch.Value = nil
			}
			if err := c.Apply(ch); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(active, 0, 100)
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	apply(active, 100, 200)
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// A snapshot drops the logs it covers: the follower reads the new snapshot.
	if err := active.Snapshot(); err != nil {
		t.Fatal(err)
	}
	apply(active, 200, 300)
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := f.c.Scan(""), active.Scan(""); !reflect.DeepEqual(got, want) {
		t.Fatalf("the follower's copy differs from the active catalog:\n%v\n%v", got, want)
	}
	apply(active, 300, 303) // after the last refresh: three objects
	before := b.logGets.Load()
	taken, err := OpenBucketCatalogFrom(b, "meta", "m2", f)
	if err != nil {
		t.Fatal(err)
	}
	// The 3 objects written since the last refresh, and the fence markers placed above them (a
	// whole reading would read the 103 objects since the snapshot as well).
	if n := b.logGets.Load() - before; n > 3+wal.MaxFenceWindow {
		t.Errorf("the takeover read %d log objects, want the 3 written since the last refresh and at most %d fence markers", n, wal.MaxFenceWindow)
	}
	if err := active.Apply(CatalogChange{Key: "late", Value: []byte("x")}); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("the deposed master's change: %v, want it fenced", err)
	}
	full, err := OpenBucketCatalog(b, "meta", "m3")
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if got, want := taken.Scan(""), full.Scan(""); !reflect.DeepEqual(got, want) || len(got) == 0 {
		t.Fatalf("taken over from the follower:\n%v\nread whole:\n%v", got, want)
	}
	taken.Close()
	active.Close()
}

// requestCounter counts a bucket's reads and listings under meta/log/.
type requestCounter struct {
	storage.Bucket
	reads, listed atomic.Int64
}

func (c *requestCounter) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	if strings.HasPrefix(key, "meta/log/") {
		c.reads.Add(1)
	}
	return c.Bucket.Get(ctx, key)
}

func (c *requestCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if strings.HasPrefix(key, "meta/log/") {
		c.reads.Add(1)
	}
	return c.Bucket.GetRange(ctx, key, off, n)
}

func (c *requestCounter) List(ctx context.Context, prefix, startAfter string, limit int) ([]storage.ObjectInfo, error) {
	objs, err := c.Bucket.List(ctx, prefix, startAfter, limit)
	if strings.HasPrefix(prefix, "meta/log") {
		c.listed.Add(int64(len(objs)))
	}
	return objs, err
}

// Each activation of a master leaves a generation of the catalog's log whose fence markers stay
// for good; once a snapshot covers it and its other objects are dropped, openings no longer fence,
// read or list it, so an opening costs the same after many activations as after a few (it grew
// with each: dozens of requests per earlier generation, until openings no longer fit their time).
// Every change made by every activation is there at the end, and a follower that loads the
// catalog afresh has the same.
func TestCatalogOpeningsDoNotGrowWithActivations(t *testing.T) {
	dir := dirBucket(t)
	b := &requestCounter{Bucket: dir}
	var costs []int64
	const activations = 20
	for i := range activations {
		reads, listed := b.reads.Load(), b.listed.Load()
		c, err := OpenBucketCatalog(b, "meta", fmt.Sprint("m", i))
		if err != nil {
			t.Fatalf("opening %d: %v", i, err)
		}
		costs = append(costs, b.reads.Load()-reads+b.listed.Load()-listed)
		for j := range i {
			if got := string(c.Get(fmt.Sprint("k", j))); got != fmt.Sprint("v", j) {
				t.Fatalf("opening %d reads %q for k%d", i, got, j)
			}
		}
		if err := c.SnapshotIfPending(); err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(CatalogChange{Key: fmt.Sprint("k", i), Value: []byte(fmt.Sprint("v", i))}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // some activations end with a snapshot of their own, others with a log only
			if err := c.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	t.Logf("reads and listed objects of the log per opening: %v", costs)
	if costs[activations-1] > costs[3]+costs[3]/2 {
		t.Errorf("reads and listed objects of the log per opening: %v — they grow with the activations", costs)
	}
	f := NewCatalogFollower(b, "meta")
	if err := f.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for j := range activations {
		if got := string(f.c.Get(fmt.Sprint("k", j))); got != fmt.Sprint("v", j) {
			t.Fatalf("a follower reads %q for k%d", got, j)
		}
	}
}

// listHook runs fn once, before the first listing of the catalog's log.
type listHook struct {
	storage.Bucket
	once sync.Once
	fn   func()
}

func (h *listHook) List(ctx context.Context, prefix, startAfter string, limit int) ([]storage.ObjectInfo, error) {
	if strings.HasPrefix(prefix, "meta/log") {
		h.once.Do(h.fn)
	}
	return h.Bucket.List(ctx, prefix, startAfter, limit)
}

// A master not yet deposed replaces the snapshot and drops the log objects it covers after an
// opening master read the snapshot and before it fenced that log: the opening must not serve a
// catalog without those changes (it read the old snapshot and a log missing them); it reads
// again from the new snapshot once everything is fenced.
func TestCatalogOpeningSeesASnapshotReplacedMeanwhile(t *testing.T) {
	dir := dirBucket(t)
	active, err := OpenBucketCatalog(dir, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	defer active.Close()
	if err := active.Apply(CatalogChange{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := active.Snapshot(); err != nil {
		t.Fatal(err)
	}
	hook := &listHook{Bucket: dir, fn: func() {
		// The opening has read the snapshot; the active master goes on.
		for i := range 5 {
			if err := active.Apply(CatalogChange{Key: fmt.Sprint("b", i), Value: []byte("2")}); err != nil {
				t.Error(err)
			}
		}
		if err := active.Snapshot(); err != nil { // replaces the snapshot, drops the objects
			t.Error(err)
		}
	}}
	next, err := OpenBucketCatalog(hook, "meta", "m2")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for i := range 5 {
		if got := string(next.Get(fmt.Sprint("b", i))); got != "2" {
			t.Fatalf("the new master reads %q for b%d, a change the snapshot made meanwhile holds", got, i)
		}
	}
	if got := string(next.Get("a")); got != "1" {
		t.Fatalf("a = %q", got)
	}
	if err := next.SnapshotIfPending(); err != nil {
		t.Fatalf("the new master's snapshot: %v", err)
	}
}

// failRetiredOnce fails the first write of meta/log-retired.
type failRetiredOnce struct {
	storage.Bucket
	failed atomic.Bool
}

func (f *failRetiredOnce) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	if key == "meta/log-retired" && f.failed.CompareAndSwap(false, true) {
		return "", errors.New("injected: the store is unavailable")
	}
	return f.Bucket.Put(ctx, key, body, cond)
}

// Recording the retired generations after a failed write is done by the next release: the
// generations dropped are not read by every opening for good.
func TestRetiringIsTriedAgain(t *testing.T) {
	dir := dirBucket(t)
	first, err := OpenBucketCatalog(dir, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Apply(CatalogChange{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	b := &failRetiredOnce{Bucket: dir}
	second, err := OpenBucketCatalog(b, "meta", "m2")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.SnapshotIfPending(); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("the opening snapshot's release with the retired record failing: %v", err)
	}
	if g, err := readRetired(context.Background(), dir, "meta"); err != nil || g != 0 {
		t.Fatalf("retired %d, %v after the failed write", g, err)
	}
	if err := second.Apply(CatalogChange{Key: "b", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if err := second.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if g, err := readRetired(context.Background(), dir, "meta"); err != nil || g != 1 {
		t.Fatalf("retired %d, %v after the next release, want generation 1", g, err)
	}
}

// A master that snapshots and closes with nothing more written leaves its generation's highest
// object: the next master takes the generation after it, so a standby that followed the catalog
// (and read that object) and takes over later reads everything the next master wrote.
func TestWarmStandbyAfterAnIdleMasterClosed(t *testing.T) {
	dir := dirBucket(t)
	m1, err := OpenBucketCatalog(dir, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Apply(CatalogChange{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := m1.Snapshot(); err != nil {
		t.Fatal(err)
	}
	f := NewCatalogFollower(dir, "meta")
	if err := f.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	m1.Close()
	m2, err := OpenBucketCatalog(dir, "meta", "m2")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := m2.Apply(CatalogChange{Key: fmt.Sprint("b", i), Value: []byte("2")}); err != nil {
			t.Fatal(err)
		}
	}
	m2.Close()
	m3, err := OpenBucketCatalogFrom(dir, "meta", "m3", f)
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	for i := range 5 {
		if got := string(m3.Get(fmt.Sprint("b", i))); got != "2" {
			t.Fatalf("the standby that took over reads %q for b%d", got, i)
		}
	}
}

// dirBucket is a directory bucket in the test's temporary directory, closed when the test ends.
func dirBucket(t *testing.T) *storage.DirBucket { return buckettest.Dir(t) }

// A snapshot whose Put landed but whose answer was lost is recognised as this master's own at the
// next snapshot (the master went on as active); one written by another master still deposes it.
func TestSnapshotWhoseAnswerWasLost(t *testing.T) {
	dir := dirBucket(t)
	b := &buckettest.FailingPuts{Bucket: dir, Err: fmt.Errorf("%w: s3: put: timeout", storage.ErrUnavailable), Landed: true}
	c, err := OpenBucketCatalog(b, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(CatalogChange{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	b.Failures.Store(1)
	if err := c.Snapshot(); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the snapshot whose answer was lost: %v", err)
	}
	if err := c.Apply(CatalogChange{Key: "b", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Snapshot(); err != nil {
		t.Fatalf("the next snapshot, over the one whose answer was lost: %v (the master took its own write for another master's)", err)
	}
	// Another master's snapshot in between still deposes this one.
	if err := c.Apply(CatalogChange{Key: "c", Value: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	b.Failures.Store(1)
	if err := c.Snapshot(); err == nil {
		t.Fatal("a failing snapshot succeeded")
	}
	if _, err := dir.Put(context.Background(), "meta/snapshot", []byte("another master's"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Snapshot(); err == nil || !strings.Contains(err.Error(), "no longer active") {
		t.Fatalf("a snapshot after another master's: %v, want this master deposed", err)
	}
}

// A deposed master's catalog is broken by its first failed write: its snapshot left to do after
// its opening is not written. It would claim the sequence id the failed write was handed, which
// its successor's first change takes: the next opening would skip that change.
func TestDeposedMastersPendingSnapshotIsNotWritten(t *testing.T) {
	b := dirBucket(t)
	activatedOnce(t, b, "m0")
	m1, err := OpenBucketCatalog(b, "meta", "m1") // its snapshot is pending (m0's log to let go)
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	if err := m1.Apply(CatalogChange{Key: "k1", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	m2, err := OpenBucketCatalog(b, "meta", "m2") // m1 paused meanwhile
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Apply(CatalogChange{Key: "stale", Value: []byte("1")}); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("the deposed master's change: %v, want it fenced", err)
	}
	if err := m1.SnapshotIfPending(); err == nil {
		t.Fatal("the deposed master wrote its pending snapshot after a failed write")
	}
	if err := m2.Apply(CatalogChange{Key: "k2", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	m2.Close()
	m3, err := OpenBucketCatalog(b, "meta", "m3")
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	if m3.Get("k2") == nil || m3.Get("k1") == nil || m3.Get("stale") != nil {
		t.Fatalf("after reopening: k1=%q k2=%q stale=%q; want k1 and k2, not stale", m3.Get("k1"), m3.Get("k2"), m3.Get("stale"))
	}
}

// A generation opened but never written is claimed: the next opening takes the one after it and
// fences it, so the deposed master's first write fails, not its successor's. (Before, the next
// opening saw no log there, took the same generation, and whichever wrote first won: the
// rightful master could be the one stopped.)
func TestAnEmptyGenerationIsNotTakenAgain(t *testing.T) {
	b := dirBucket(t)
	activatedOnce(t, b, "m0")
	m1, err := OpenBucketCatalog(b, "meta", "m1")
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	if err := m1.SnapshotIfPending(); err != nil { // m0's generation retired; m1's holds nothing
		t.Fatal(err)
	}
	m2, err := OpenBucketCatalog(b, "meta", "m2")
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if err := m1.Apply(CatalogChange{Key: "stale", Value: []byte("1")}); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("the deposed master's first change: %v, want it fenced", err)
	}
	if err := m2.Apply(CatalogChange{Key: "k", Value: []byte("2")}); err != nil {
		t.Fatalf("the new master's first change: %v", err)
	}
}

// activatedOnce is an earlier master's activation: it opens the catalog, writes a change and
// closes, leaving its generation's log for the next opening to fence, read and let go.
func activatedOnce(t *testing.T, b storage.Bucket, who string) {
	t.Helper()
	c, err := OpenBucketCatalog(b, "meta", who)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(CatalogChange{Key: "by/" + who, Value: []byte(who)}); err != nil {
		t.Fatal(err)
	}
	c.Close()
}
