//go:build linux

package region

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/buckettest"
	"github.com/cellstore/cellstore/engine/storage/filecache"
	s3 "github.com/cellstore/cellstore/engine/storage/s3"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
	"github.com/cellstore/cellstore/engine/wal"
)

// forEachBucket runs fn on a directory bucket and on a real S3 server (MinIO, started by PID;
// skipped with the way to get it outside make test).
func forEachBucket(t *testing.T, fn func(t *testing.T, b storage.Bucket)) {
	t.Run("dir", func(t *testing.T) {
		b, err := storage.NewDirBucket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		fn(t, b)
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		srv.CreateBucket(t, "regions")
		b, err := s3.Open(context.Background(), srv.Config("regions"))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, b)
	})
}

// bucketEnv is a region whose files are on a bucket (its WAL on an in-memory FS: the object log
// is wired separately).
func bucketEnv(t testing.TB, b storage.Bucket) *env {
	t.Helper()
	mem := storage.NewMem()
	e := &env{t: t, fs: mem, mem: mem, clock: &testClock{}, pool: newPool(t)}
	e.clock.now.Store(1_000_000)
	e.table = TableDescriptor{Namespace: "default", Name: "t", Families: []Family{fam("f")}}
	e.info = Info{Namespace: "default", Table: "t", ID: 1}
	if err := CreateOnBucket(b, e.table, e.info); err != nil {
		t.Fatal(err)
	}
	e.openWAL()
	e.cfg = Config{Bucket: b, WAL: e.w, Pool: e.pool, Clock: e.clock.Now, DisableAutoFlush: true,
		DisableAutoCompaction: true, Logger: quiet, BlockingWait: time.Second}
	e.open()
	t.Cleanup(e.close)
	return e
}

// benchBucket makes a bucket of its own on srv for one of a benchmark's modes (before b.Run, which
// runs its function more than once).
func benchBucket(b *testing.B, srv *s3test.Server, name string) storage.Bucket {
	srv.CreateBucket(b, name)
	bucket, err := s3.Open(context.Background(), srv.Config(name))
	if err != nil {
		b.Fatal(err)
	}
	return bucket
}

func putRows(t *testing.T, r *Region, from, to int, val string) {
	t.Helper()
	for i := from; i < to; i++ {
		m := NewMutation([]byte(fmt.Sprintf("row%05d", i))).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte(val))
		if err := r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
}

func getVal(t *testing.T, r *Region, i int) string {
	t.Helper()
	res, err := r.Get(&Get{Row: []byte(fmt.Sprintf("row%05d", i))})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 1 {
		return ""
	}
	return string(res.Cells[0].Value)
}

func keysUnder(t *testing.T, b storage.Bucket, prefix string) []string {
	t.Helper()
	objs, err := b.List(context.Background(), prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// Flushes and compactions write store files once under their final keys and commit them by
// replacing the manifest; nothing is renamed; the region reopens with every row; the files a
// compaction replaced go to archive/; a store file no manifest names (a crash between its PUT and
// the manifest's) is archived when the region opens.
func TestRegionOnBucket(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e := bucketEnv(t, b)
		famDir := path.Join(e.info.Dir(), "f")
		putRows(t, e.r, 0, 300, "v1")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 200, 500, "v2")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		files := keysUnder(t, b, famDir+"/")
		if len(files) != 2 {
			t.Fatalf("after two flushes the family holds %v", files)
		}
		if _, err := e.r.Compact(true); err != nil {
			t.Fatal(err)
		}
		after := keysUnder(t, b, famDir+"/")
		if len(after) != 1 || slices.Contains(files, after[0]) {
			t.Fatalf("after a major compaction the family holds %v (before: %v)", after, files)
		}
		if archived := keysUnder(t, b, "archive/"+famDir+"/"); len(archived) != 2 {
			t.Fatalf("archive holds %v, want the two compacted files", archived)
		}
		// A crash after a store file's PUT and before its manifest: an unnamed object.
		stray := path.Join(famDir, "00000000000000000000000000")
		if _, err := b.Put(context.Background(), stray, []byte("half a flush"), storage.Condition{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 400, 600, "v3") // in the memstore: flushed by the close
		e.reopen()
		for i, want := range map[int]string{0: "v1", 199: "v1", 200: "v2", 399: "v2", 400: "v3", 599: "v3"} {
			if got := getVal(t, e.r, i); got != want {
				t.Fatalf("row %d after reopen: %q, want %q", i, got, want)
			}
		}
		if n := countRows(t, e.r); n != 600 {
			t.Fatalf("%d rows after reopen, want 600", n)
		}
		if slices.Contains(keysUnder(t, b, famDir+"/"), stray) || !slices.Contains(keysUnder(t, b, "archive/"+famDir+"/"), "archive/"+stray) {
			t.Fatal("the unnamed object was not archived when the region opened")
		}
	})
}

// Two servers holding one region (the master moved it while the first was cut off): the manifest
// is replaced by conditional writes, so the first one's next flush fails with ErrFenced, the region
// breaks and acknowledges nothing more, and the second one's files are intact.
func TestRegionOnBucketFenced(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		old := bucketEnv(t, b)
		putRows(t, old.r, 0, 100, "old")
		if _, err := old.r.Flush(); err != nil {
			t.Fatal(err)
		}
		// The region opens on another server (its own WAL and memory).
		mem := storage.NewMem()
		w, err := wal.Open(wal.Options{FS: mem, Dir: "wal/rs2"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		pool := newPool(t)
		defer pool.Close()
		cfg := old.cfg
		cfg.WAL, cfg.Pool = w, pool
		moved, err := Open(cfg, old.info)
		if err != nil {
			t.Fatal(err)
		}
		defer moved.Close()
		putRows(t, moved, 100, 200, "new")
		if _, err := moved.Flush(); err != nil {
			t.Fatal(err)
		}

		putRows(t, old.r, 200, 210, "stale")
		if _, err := old.r.Flush(); !errors.Is(err, ErrFenced) {
			t.Fatalf("the fenced server's flush: %v, want ErrFenced", err)
		}
		err = old.r.Mutate(NewMutation([]byte("row99999")).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte("x")))
		if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "fenced") {
			t.Fatalf("a write to the fenced region: %v, want it broken by the fence", err)
		}
		if got := getVal(t, moved, 150); got != "new" {
			t.Fatalf("the new holder reads %q", got)
		}
		man, _, _, err := readManifest(bucketFiles{b: b}, old.info.Dir())
		if err != nil {
			t.Fatal(err)
		}
		if n := len(man.Families["f"]); n != 2 {
			t.Fatalf("the manifest names %d files, want the new holder's 2", n)
		}
	})
}

// The whole crash path on object storage: a region server's region writes its edits to an object
// log and its files to the bucket; the server dies (the region is dropped without a flush); the
// master fences the log and splits it into recovered edits; the region opens on another server and
// every acknowledged row is there — flushed ones from the store files, the rest replayed — and the
// recovered edits are gone once it flushed them.
func TestRegionOnBucketRecoversFromObjectLog(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		ctx := context.Background()
		table := TableDescriptor{Namespace: "default", Name: "t", Families: []Family{fam("f")}}
		info := Info{Namespace: "default", Table: "t", ID: 1}
		if err := CreateOnBucket(b, table, info); err != nil {
			t.Fatal(err)
		}
		log, err := wal.OpenObjectLog(ctx, wal.ObjectLogOptions{Bucket: b, Prefix: "wal/rs1_1", Writer: "rs1"})
		if err != nil {
			t.Fatal(err)
		}
		pool := newPool(t)
		cfg := Config{Bucket: b, WAL: log, Pool: pool, DisableAutoFlush: true, DisableAutoCompaction: true,
			Logger: quiet, BlockingWait: time.Second}
		r, err := Open(cfg, info)
		if err != nil {
			t.Fatal(err)
		}
		putRows(t, r, 0, 100, "flushed")
		if _, err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		putRows(t, r, 100, 250, "logged") // acknowledged: in the object log only
		// The server dies: nothing more is flushed or logged.
		r.Abort()
		if err := pool.Close(); err != nil {
			t.Fatal(err)
		}

		// The master: fence, split, then the region opens elsewhere.
		if _, err := wal.FenceObjectLog(ctx, b, "wal/rs1_1", "master"); err != nil {
			t.Fatal(err)
		}
		if _, err := log.Append(&wal.Edit{Region: []byte(info.EncodedName()), Cells: nil}); !errors.Is(err, wal.ErrFenced) {
			t.Fatalf("the dead server's log after the fence: %v", err)
		}
		log.Close()
		res, err := wal.SplitObjectLog(ctx, wal.SplitObjectLogOptions{Bucket: b, Prefix: "wal/rs1_1",
			RecoveredEditsDir: func(region string) string { return path.Join(info.Dir(), "recovered.edits") }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Edits != 150 {
			// The flush of the first 100 let the log delete their objects (MarkFlushed).
			t.Fatalf("split recovered %d edits, want the 150 not flushed", res.Edits)
		}
		log2, err := wal.OpenObjectLog(ctx, wal.ObjectLogOptions{Bucket: b, Prefix: "wal/rs2_1", Writer: "rs2"})
		if err != nil {
			t.Fatal(err)
		}
		defer log2.Close()
		pool2 := newPool(t)
		defer pool2.Close()
		cfg.WAL, cfg.Pool = log2, pool2
		r2, err := Open(cfg, info)
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Close()
		if n := countRows(t, r2); n != 250 {
			t.Fatalf("%d rows after recovery, want 250", n)
		}
		if got := getVal(t, r2, 0); got != "flushed" {
			t.Fatalf("row 0: %q", got)
		}
		if got := getVal(t, r2, 249); got != "logged" {
			t.Fatalf("row 249: %q", got)
		}
		if left := keysUnder(t, b, path.Join(info.Dir(), "recovered.edits")+"/"); len(left) != 0 {
			t.Fatalf("recovered edits left after the region flushed them: %v", left)
		}
		// New writes on the new server get higher sequence ids than everything recovered.
		putRows(t, r2, 250, 260, "new")
		if _, err := r2.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, r2); n != 260 {
			t.Fatalf("%d rows, want 260", n)
		}
	})
}

// splittableOnBucket is a region on b with 400 flushed rows and the row it would split at, read
// from the bucket while the region is open.
func splittableOnBucket(t *testing.T, b storage.Bucket) (*env, Storage, []byte) {
	t.Helper()
	e := bucketEnv(t, b)
	putRows(t, e.r, 0, 400, "v")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	st := Storage{Bucket: b}
	row, err := SplitRowOf(st, e.info)
	if err != nil {
		t.Fatal(err)
	}
	return e, st, row
}

// A region on a bucket splits as on a directory: the daughters' references and manifests are
// objects, each daughter reads its half of the parent's files, a compaction replaces the
// references, and then no daughter holds one (the master may archive the parent).
func TestRegionOnBucketSplits(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e, st, row := splittableOnBucket(t, b)
		lo, hi, err := e.r.Split(row, 2)
		if err != nil {
			t.Fatal(err)
		}
		e.r = nil
		var daughters []*Region
		for _, info := range []Info{lo, hi} {
			if refs, err := HasReferenceFiles(st, info); err != nil || !refs {
				t.Fatalf("daughter %s: references %v, %v", info.EncodedName(), refs, err)
			}
			d, err := Open(e.cfg, info)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			daughters = append(daughters, d)
		}
		if nl, nh := countRows(t, daughters[0]), countRows(t, daughters[1]); nl+nh != 400 || nl == 0 || nh == 0 {
			t.Fatalf("daughters hold %d + %d rows", nl, nh)
		}
		for i, d := range daughters {
			if _, err := d.Compact(true); err != nil {
				t.Fatal(err)
			}
			if refs, err := HasReferenceFiles(st, []Info{lo, hi}[i]); err != nil || refs {
				t.Fatalf("after compaction: references %v, %v", refs, err)
			}
		}
		if got := getVal(t, daughters[0], 0); got != "v" {
			t.Fatalf("row 0 in the low daughter: %q", got)
		}
		if got := getVal(t, daughters[1], 399); got != "v" {
			t.Fatalf("row 399 in the high daughter: %q", got)
		}
	})
}

// With a local file cache, store files opened from the bucket are read through it: the rows are
// the same, and the cache holds what was read (small files whole, from the prefetch on open).
func TestRegionOnBucketWithFileCache(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e := bucketEnv(t, b)
		cache, err := filecache.Open(filecache.Config{Dir: t.TempDir(), Capacity: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		e.cfg.FileCache = cache
		putRows(t, e.r, 0, 400, "v1")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 200, 600, "v2")
		e.reopen() // flushes v2; both files opened through the cache
		if cache.Len() == 0 {
			t.Fatal("opening the region's store files put nothing in the file cache")
		}
		for i, want := range map[int]string{0: "v1", 199: "v1", 200: "v2", 599: "v2"} {
			if got := getVal(t, e.r, i); got != want {
				t.Fatalf("row %d through the file cache: %q, want %q", i, got, want)
			}
		}
		if _, err := e.r.Compact(true); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, e.r); n != 600 {
			t.Fatalf("%d rows after a compaction through the file cache, want 600", n)
		}
	})
}

// A split's or merge's storage step that runs again is a no-op while the new region has its first
// manifest (a retry, or a new master resuming the procedure), and refused with ErrFenced once the
// region has lived: a deposed master's late run must not put a daughter or a merged region back to
// its first files, which would lose what it flushed since.
func TestStaleSplitAndMergeStepsOnBucket(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e, st, row := splittableOnBucket(t, b)
		if err := e.r.Close(); err != nil {
			t.Fatal(err)
		}
		e.r = nil
		lo := Info{Namespace: "default", Table: "t", ID: 5, Name: "lo", EndKey: row}
		hi := Info{Namespace: "default", Table: "t", ID: 6, Name: "hi", StartKey: row}
		for range 2 { // a retried step writes the same daughters
			if _, err := SplitClosed(st, e.info, lo, hi, row); err != nil {
				t.Fatal(err)
			}
		}
		// The daughters live: each writes and flushes, and compacts its references away.
		for i, info := range []Info{lo, hi} {
			d, err := Open(e.cfg, info)
			if err != nil {
				t.Fatal(err)
			}
			putRows(t, d, []int{0, 399}[i], []int{1, 400}[i], "after-split")
			if _, err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Compact(true); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := SplitClosed(st, e.info, lo, hi, row); !errors.Is(err, ErrFenced) {
			t.Fatalf("a stale split step after the daughters lived: %v, want ErrFenced", err)
		}
		merged := Info{Namespace: "default", Table: "t", ID: 7, Name: "merged"}
		for range 2 {
			if _, err := MergeClosed(st, lo, hi, merged); err != nil {
				t.Fatal(err)
			}
		}
		merged.EndKey = nil
		m, err := Open(e.cfg, merged)
		if err != nil {
			t.Fatal(err)
		}
		if got, got2 := getVal(t, m, 0), getVal(t, m, 399); got != "after-split" || got2 != "after-split" {
			t.Fatalf("the merged region reads %q and %q; want what the daughters wrote", got, got2)
		}
		putRows(t, m, 200, 201, "after-merge")
		if _, err := m.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := MergeClosed(st, lo, hi, merged); !errors.Is(err, ErrFenced) {
			t.Fatalf("a stale merge step after the merged region lived: %v, want ErrFenced", err)
		}
		m, err = Open(e.cfg, merged)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := getVal(t, m, 200); got != "after-merge" {
			t.Fatalf("row 200 of the merged region after the stale step: %q, want after-merge", got)
		}
		d, err := Open(e.cfg, lo)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if got := getVal(t, d, 0); got != "after-split" {
			t.Fatalf("row 0 of the low daughter after the stale step: %q, want after-split", got)
		}
	})
}

// writeNew leaves a file that exists as it is on a bucket: a stale split step that passed its
// manifest check just before its successor finished cannot put back an older .regioninfo.
func TestWriteNewKeepsWhatIsThere(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		files := filesOf(nil, b)
		p := "data/default/t/r/.regioninfo"
		if err := files.writeFile(p, []byte("altered")); err != nil {
			t.Fatal(err)
		}
		if err := files.writeNew(p, []byte("stale")); err != nil {
			t.Fatal(err)
		}
		if got, err := files.readFile(p); err != nil || string(got) != "altered" {
			t.Fatalf("after writeNew over an existing file: %q %v, want it unchanged", got, err)
		}
		if err := files.writeNew("data/default/t/r/new", []byte("n")); err != nil {
			t.Fatal(err)
		}
		if got, err := files.readFile("data/default/t/r/new"); err != nil || string(got) != "n" {
			t.Fatalf("writeNew of a new file: %q %v", got, err)
		}
	})
}

// An open writes .regioninfo only when the descriptor changed: on a bucket the PUT is the open's
// slowest step, while nobody serves the region (a move, a restart).
func TestCreateWritesRegionInfoOnlyWhenItChanges(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newRoundTrips(b)
	table := TableDescriptor{Namespace: "default", Name: "t", Families: []Family{fam("f")}}
	info := Info{Namespace: "default", Table: "t", ID: 1}
	key := path.Join(info.Dir(), ".regioninfo")
	for range 3 {
		if err := CreateOnBucket(c, table, info); err != nil {
			t.Fatal(err)
		}
	}
	if c.kinds["put "+key] != 1 {
		t.Fatalf(".regioninfo written %d times by three creates with one descriptor, want once", c.kinds["put "+key])
	}
	table.Families = append(table.Families, fam("g")) // an ALTER
	if err := CreateOnBucket(c, table, info); err != nil {
		t.Fatal(err)
	}
	if c.kinds["put "+key] != 2 {
		t.Fatalf(".regioninfo written %d times, want a second write for the new descriptor", c.kinds["put "+key])
	}
	_, td, err := readRegionInfo(filesOf(nil, b), info.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(td.Families) != 2 {
		t.Fatalf("the rewritten .regioninfo has %d families, want 2", len(td.Families))
	}
}

// roundTrips counts a bucket's requests by kind (a PUT by key: "put <key>") and how many Stats
// (one per store file opened) were under way at once; each Stat waits (up to a deadline) for
// another to join it, so that files opened one after another show as one at a time.
type roundTrips struct {
	storage.Bucket
	requestCounts
	stats  int // Stats under way
	most   int // the most Stats under way at once
	joined *sync.Cond
}

func newRoundTrips(b storage.Bucket) *roundTrips {
	rt := &roundTrips{Bucket: b, requestCounts: requestCounts{kinds: map[string]int{}}} // (Stat counts under the lock it also waits on)
	rt.joined = sync.NewCond(&rt.mu)
	return rt
}

// requestCounts counts a bucket's requests by kind.
type requestCounts struct {
	mu    sync.Mutex
	kinds map[string]int
}

func (c *requestCounts) count(kind string) {
	c.mu.Lock()
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	c.kinds[kind]++
	c.mu.Unlock()
}

// take returns the counts so far and starts again from none.
func (c *requestCounts) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.kinds
	c.kinds = nil
	if k == nil {
		k = map[string]int{}
	}
	return k
}

func (rt *roundTrips) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	deadline := time.Now().Add(2 * time.Second)
	rt.mu.Lock()
	rt.kinds["stat"]++
	rt.stats++
	rt.most = max(rt.most, rt.stats)
	rt.joined.Broadcast()
	defer func() {
		rt.mu.Lock()
		rt.stats--
		rt.mu.Unlock()
	}()
	for rt.most < 2 && time.Now().Before(deadline) {
		t := time.AfterFunc(50*time.Millisecond, rt.joined.Broadcast)
		rt.joined.Wait()
		t.Stop()
	}
	rt.mu.Unlock()
	return rt.Bucket.Stat(ctx, key)
}

func (rt *roundTrips) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	rt.count("list")
	return rt.Bucket.List(ctx, prefix, after, limit)
}

func (rt *roundTrips) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	rt.count("put " + key)
	return rt.Bucket.Put(ctx, key, body, cond)
}

func (rt *roundTrips) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	rt.count("get")
	return rt.Bucket.Get(ctx, key)
}

// A region on a bucket opens its store files at once, and lists its family directory (for
// leftovers) and its recovered edits once each: nobody serves the region while it opens.
func TestOpenOnABucketOpensItsFilesAtOnce(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := bucketEnv(t, b)
	for i := range 4 {
		putRows(t, e.r, i*100, i*100+100, "v")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	rt := newRoundTrips(b)
	e.cfg.Bucket = rt
	e.open()
	if got := getVal(t, e.r, 399); got != "v" {
		t.Fatalf("row 399 after the reopen: %q", got)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.kinds["stat"] != 4 || rt.most < 2 {
		t.Errorf("%d store files opened, at most %d at once: want 4, opened together", rt.kinds["stat"], rt.most)
	}
	if rt.kinds["list"] != 2 {
		t.Errorf("%d listings (the family directory and the recovered edits: want one each)", rt.kinds["list"])
	}
}

// reads counts the read requests a bucket gets, by kind ("stat", "get", "range").
type reads struct {
	storage.Bucket
	requestCounts
}

func (r *reads) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	r.count("stat")
	return r.Bucket.Stat(ctx, key)
}

func (r *reads) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	r.count("get")
	return r.Bucket.Get(ctx, key)
}

func (r *reads) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	r.count("range")
	return r.Bucket.GetRange(ctx, key, off, n)
}

// With a file cache, a flush reads nothing back of the store file it wrote (the cache takes the
// bytes it wrote; the region is unavailable for a closing flush, so every request counts there), and
// an open reads each small store file by one GET, without a HEAD first; reads are then served from
// the cache.
func TestStoreFilesOnABucketAreNotReadBack(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		rb := &reads{Bucket: b}
		e := bucketEnv(t, rb)
		newCache := func() *filecache.Cache {
			c, err := filecache.Open(filecache.Config{Dir: t.TempDir(), Capacity: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		e.cfg.FileCache = newCache()
		e.reopen()
		for i := range 3 {
			putRows(t, e.r, i*100, i*100+100, "v")
			rb.take()
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := rb.take(); len(got) != 0 {
				t.Fatalf("flush %d read the bucket: %v, want no read", i, got)
			}
		}
		for _, i := range []int{0, 150, 299} {
			if got := getVal(t, e.r, i); got != "v" {
				t.Fatalf("row %d after the flushes: %q", i, got)
			}
		}
		if got := rb.take(); got["range"]+got["get"]+got["stat"] != 0 {
			t.Fatalf("gets of flushed rows read the bucket: %v, want them from the file cache", got)
		}

		if err := e.r.Close(); err != nil {
			t.Fatal(err)
		}
		e.cfg.FileCache = newCache() // another server's: nothing cached
		rb.take()
		e.open()
		got := rb.take()
		// .regioninfo, the manifest and the three store files: one GET each, no HEAD, no range.
		if got["stat"] != 0 || got["range"] != 0 || got["get"] != 5 {
			t.Fatalf("the open read %v, want 5 gets (.regioninfo, manifest, 3 store files) and nothing else", got)
		}
		for _, i := range []int{0, 150, 299} {
			if got := getVal(t, e.r, i); got != "v" {
				t.Fatalf("row %d after the reopen: %q", i, got)
			}
		}
		if got := rb.take(); len(got) != 0 {
			t.Fatalf("gets after the reopen read the bucket: %v", got)
		}
	})
}

// meetings records whether requests of two kinds were under way at once: a request of a kind that
// waits for another waits (up to a second) for one of that kind to start.
type meetings struct {
	storage.Bucket
	kind    func(op, key string) string
	waitFor map[string]string // kind -> the kind it waits for
	mu      sync.Mutex
	started map[string]chan struct{}
	met     map[string]bool
}

func (m *meetings) arrive(op, key string) {
	k := m.kind(op, key)
	if k == "" {
		return
	}
	m.mu.Lock()
	ch := m.started[k]
	if ch == nil {
		ch = make(chan struct{})
		m.started[k] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
	other, waits := m.waitFor[k]
	var och chan struct{}
	if waits {
		if och = m.started[other]; och == nil {
			och = make(chan struct{})
			m.started[other] = och
		}
	}
	m.mu.Unlock()
	if !waits {
		return
	}
	select {
	case <-och:
		m.mu.Lock()
		m.met[k] = true
		m.mu.Unlock()
	case <-time.After(time.Second):
	}
}

func (m *meetings) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	m.arrive("get", key)
	return m.Bucket.Get(ctx, key)
}

func (m *meetings) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	m.arrive("stat", key)
	return m.Bucket.Stat(ctx, key)
}

func (m *meetings) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	m.arrive("list", prefix)
	return m.Bucket.List(ctx, prefix, after, limit)
}

// A region opening on a bucket does not wait for one read to ask the next: the manifest is read
// while the .regioninfo is, and the recovered edits are listed while the store files open.
func TestOpenOnABucketReadsAtOnce(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := bucketEnv(t, b)
	putRows(t, e.r, 0, 100, "v")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	m := &meetings{Bucket: b, started: map[string]chan struct{}{}, met: map[string]bool{},
		waitFor: map[string]string{"regioninfo": "manifest", "storefile": "recovered"},
		kind: func(op, key string) string {
			switch {
			case op == "get" && strings.HasSuffix(key, "/.regioninfo"):
				return "regioninfo"
			case op == "get" && strings.HasSuffix(key, "/"+manifestName):
				return "manifest"
			case op == "list" && strings.Contains(key, "/recovered.edits"):
				return "recovered"
			case op == "stat" && strings.Contains(key, "/f/"):
				return "storefile"
			}
			return ""
		}}
	e.cfg.Bucket = m
	e.open()
	if got := getVal(t, e.r, 99); got != "v" {
		t.Fatalf("row 99 after the reopen: %q", got)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.met["regioninfo"] || !m.met["storefile"] {
		t.Fatalf("reads under way at once: .regioninfo with the manifest %v, recovered edits' listing with a store file's %v; want both",
			m.met["regioninfo"], m.met["storefile"])
	}
}

// A close whose flush finds the object store unavailable for now (throttled past the client's own
// attempts) flushes again and closes cleanly: the region reopens with every row. Any other
// failure still fails the close (its server then aborts and the WAL recovers the edits).
func TestCloseFlushesAgainWhenTheStoreIsUnavailable(t *testing.T) {
	dir, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	u := &buckettest.FailingPuts{Bucket: dir, Err: fmt.Errorf("%w: s3: put: SlowDown", storage.ErrUnavailable)}
	e := bucketEnv(t, u)
	putRows(t, e.r, 0, 100, "v1")
	u.Failures.Store(3) // the store file's PUT, twice, then the manifest's
	e.reopen()
	if left := u.Failures.Load(); left >= 0 {
		t.Fatalf("the close made %d fewer PUTs than the store refused", left+1)
	}
	if n := countRows(t, e.r); n != 100 {
		t.Fatalf("%d rows after the close and reopen, want 100", n)
	}

	putRows(t, e.r, 100, 200, "v2")
	denied := errors.New("s3: put: access denied")
	u.Err = denied
	u.Failures.Store(1)
	if err := e.r.Close(); !errors.Is(err, denied) {
		t.Fatalf("close against a store that denies the PUT: %v, want the denial", err)
	}
	e.r = nil
}

// A replica's store files on a bucket stay readable after the primary's compaction moves them to
// archive/ and before the replica applies that change (replication lag): a read that finds the
// data/ key gone continues at archive/<key>, as HBase's FileLink does — gets, new scans and a scan
// already under way, with no file cache and with one whose entries are gone (a read falls through
// it to the bucket).
func TestReplicaOnBucketReadsFilesArchivedUnderIt(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("filecache=%v", withCache), func(t *testing.T) {
			forEachBucket(t, func(t *testing.T, b storage.Bucket) {
				e := bucketEnv(t, b)
				e.clock.tick.Store(1)
				cacheDir := t.TempDir()
				if withCache {
					cache, err := filecache.Open(filecache.Config{Dir: cacheDir, Capacity: 64 << 20, PrefetchBelow: -1})
					if err != nil {
						t.Fatal(err)
					}
					e.cfg.FileCache = cache
				}
				if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
					t.Fatal(err)
				}
				rep := e.openReplica()
				sh := newShipper(t, e.r, rep)
				sh.drain()
				val := strings.Repeat("x", 1000) // many blocks per file: reads go on after the open
				putRows(t, e.r, 0, 300, val)
				if _, err := e.r.Flush(); err != nil {
					t.Fatal(err)
				}
				putRows(t, e.r, 300, 600, val)
				if _, err := e.r.Flush(); err != nil {
					t.Fatal(err)
				}
				sh.drain() // the replica opens both files
				famDir := path.Join(e.info.Dir(), "f")
				files := keysUnder(t, b, famDir+"/")
				if len(files) != 2 || len(rep.files.Load().byFamily[0]) != 2 {
					t.Fatalf("after two flushes the family holds %v, the replica %d files", files, len(rep.files.Load().byFamily[0]))
				}
				for _, i := range []int{0, 299, 300, 599} {
					if got := getVal(t, rep, i); got != val {
						t.Fatalf("row %d on the replica before the compaction: %.10q", i, got)
					}
				}
				sc, err := rep.Scanner(&Scan{Caching: 10})
				if err != nil {
					t.Fatal(err)
				}
				defer sc.Close()
				first, err := sc.Next()
				if err != nil || len(first.Results) != 10 || !first.More {
					t.Fatalf("first batch of the replica's scan: %d rows, more %v, %v", len(first.Results), first.More, err)
				}

				// The primary compacts and archives both files; the replica does not hear of it.
				if _, err := e.r.Compact(true); err != nil {
					t.Fatal(err)
				}
				for _, k := range files {
					if slices.Contains(keysUnder(t, b, famDir+"/"), k) || !slices.Contains(keysUnder(t, b, "archive/"+famDir+"/"), "archive/"+k) {
						t.Fatalf("%s was not moved to archive/ by the compaction", k)
					}
				}
				if len(rep.files.Load().byFamily[0]) != 2 {
					t.Fatal("the replica learned of the compaction: the test ships nothing")
				}
				if withCache {
					// Whatever the replica's reads cached is gone: reads go to the bucket.
					if err := os.RemoveAll(cacheDir); err != nil {
						t.Fatal(err)
					}
				}

				for _, i := range []int{0, 150, 299, 300, 450, 599} {
					if got := getVal(t, rep, i); got != val {
						t.Fatalf("row %d on the replica after the primary archived its file: %.10q", i, got)
					}
				}
				rows := len(first.Results)
				for more := first.More; more; {
					b, err := sc.Next()
					if err != nil {
						t.Fatalf("the replica's scan under way, after %d rows: %v", rows, err)
					}
					rows += len(b.Results)
					more = b.More
				}
				if rows != 600 {
					t.Fatalf("the replica's scan under way returned %d rows, want 600", rows)
				}
				if n := countRows(t, rep); n != 600 {
					t.Fatalf("a new scan of the replica returned %d rows, want 600", n)
				}
				sh.drain()
				if want, got := rawDump(t, e.r), rawDump(t, rep); !slices.Equal(want, got) {
					t.Fatalf("replica differs after catching up\nprimary: %d cells\nreplica: %d cells", len(want), len(got))
				}
			})
		})
	}
}

// manifestAnswerLost writes the next n manifests it is given and answers that the store was
// unavailable (its answer lost): the commit's outcome is unknown to the region.
type manifestAnswerLost struct {
	storage.Bucket
	n atomic.Int64
	// unwritten: the next manifests after those fail without being written.
	unwritten atomic.Int64
}

func (m *manifestAnswerLost) Put(ctx context.Context, key string, body []byte, c storage.Condition) (string, error) {
	if strings.HasSuffix(key, "/"+manifestName) && m.n.Load() <= 0 && m.unwritten.Add(-1) >= 0 {
		return "", fmt.Errorf("%w: no answer", storage.ErrUnavailable)
	}
	if strings.HasSuffix(key, "/"+manifestName) && m.n.Add(-1) >= 0 {
		if _, err := m.Bucket.Put(ctx, key, body, c); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%w: the answer was lost", storage.ErrUnavailable)
	}
	return m.Bucket.Put(ctx, key, body, c)
}

// A manifest commit whose answer was lost (it landed) does not break the region at its next
// commit: that one found the manifest replaced (its condition failed) and took it for another
// server's — a fence — and the close aborted the server. The region commits over its own landed
// manifest, closes, and reopens with every row.
func TestManifestCommitOfUnknownOutcome(t *testing.T) {
	b := &manifestAnswerLost{Bucket: buckettest.Dir(t)}
	e := bucketEnv(t, b)
	putRows(t, e.r, 0, 50, "v")
	b.n.Store(1)
	if _, err := e.r.Flush(); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a flush whose manifest answer was lost: %v, want ErrUnavailable", err)
	}
	putRows(t, e.r, 50, 100, "v")
	b.unwritten.Store(1) // and the next commit does not land either: its body is not the manifest
	if _, err := e.r.Flush(); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a flush whose manifest did not land: %v, want ErrUnavailable", err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatalf("the next flush: %v", err)
	}
	e.reopen()
	for _, i := range []int{0, 49, 50, 99} {
		if got := getVal(t, e.r, i); got != "v" {
			t.Fatalf("row %d after the reopen: %q", i, got)
		}
	}
}

// A family an alter dropped leaves the manifest when the region next opens, its files archived
// (HBase deletes the family's directory): re-adding the family does not bring its old cells back.
func TestDroppedFamilysFilesGo(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e := bucketEnv(t, b)
		reopenWith := func(fams ...Family) {
			t.Helper()
			if err := e.r.Close(); err != nil {
				t.Fatal(err)
			}
			cfg := e.cfg
			cfg.Descriptor = &TableDescriptor{Namespace: "default", Name: "t", Families: fams}
			r, err := Open(cfg, e.info)
			if err != nil {
				t.Fatal(err)
			}
			e.r = r
		}
		reopenWith(fam("f"), fam("g")) // an alter adds g
		for _, family := range []string{"f", "g"} {
			if err := e.r.Mutate(NewMutation([]byte("row")).Put([]byte(family), []byte("q"), cell.LatestTimestamp, []byte("old "+family))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		gDir := path.Join(e.info.Dir(), "g")
		written := keysUnder(t, b, gDir+"/")
		if len(written) != 1 {
			t.Fatalf("g holds %v after a flush", written)
		}

		reopenWith(fam("f")) // an alter drops g
		if _, listed := e.r.man.Families["g"]; listed {
			t.Fatalf("the manifest still lists the dropped family: %v", e.r.man.Families["g"])
		}
		if slices.Contains(keysUnder(t, b, gDir+"/"), written[0]) || !slices.Contains(keysUnder(t, b, "archive/"+gDir+"/"), "archive/"+written[0]) {
			t.Fatal("the dropped family's file was not archived")
		}

		reopenWith(fam("f"), fam("g")) // and adds it again
		res, err := e.r.Get(&Get{Row: []byte("row")})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Cells) != 1 || string(res.Cells[0].Family()) != "f" {
			t.Fatalf("the row after g was dropped and added again: %v; want only f's cell", res.Cells)
		}
	})
}
