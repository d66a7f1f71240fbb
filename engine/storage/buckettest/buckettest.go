// Package buckettest is the conformance suite of storage.Bucket: every backend (the directory, S3
// against a real server) must pass it. It checks what the durable layout relies on — conditional
// create and replace, also racing; listing in byte order of keys; ranged reads; large objects —
// and catches stores that get them wrong (some MinIO releases let If-Match succeed on a missing
// key, where AWS answers 404).
package buckettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
)

// Run runs the suite; open returns an empty bucket for each subtest.
func Run(t *testing.T, open func(t *testing.T) storage.Bucket) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, storage.Bucket)
	}{
		{"PutGetStat", testPutGetStat},
		{"IfNoneMatch", testIfNoneMatch},
		{"IfMatch", testIfMatch},
		{"IfMatchOnMissingKeyFails", testIfMatchMissing},
		{"ConditionalPutOfTheSameBodySucceeds", testOwnBody},
		{"ConditionalCreateRace", testCreateRace},
		{"ConditionalReplaceRace", testReplaceRace},
		{"ListOrderPrefixAndPaging", testList},
		{"Ranges", testRanges},
		{"LargeObject", testLarge},
		{"Multipart", testMultipart},
		{"Move", testMove},
		{"Delete", testDelete},
		{"DeleteAll", testDeleteAll},
		{"BadKeys", testBadKeys},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

var ctx = context.Background()

func put(t *testing.T, b storage.Bucket, key string, body string, cond storage.Condition) string {
	t.Helper()
	etag, err := b.Put(ctx, key, []byte(body), cond)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	if etag == "" {
		t.Fatalf("put %s: empty ETag", key)
	}
	return etag
}

func mustGet(t *testing.T, b storage.Bucket, key, want string) storage.ObjectInfo {
	t.Helper()
	got, info, err := b.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if string(got) != want {
		t.Fatalf("get %s = %q, want %q", key, got, want)
	}
	return info
}

func testPutGetStat(t *testing.T, b storage.Bucket) {
	etag := put(t, b, "a/b/c.obj", "hello", storage.Condition{})
	info := mustGet(t, b, "a/b/c.obj", "hello")
	if info.ETag != etag || info.Size != 5 {
		t.Errorf("get info %+v, want ETag %s size 5", info, etag)
	}
	st, err := b.Stat(ctx, "a/b/c.obj")
	if err != nil || st.ETag != etag || st.Size != 5 || st.Key != "a/b/c.obj" {
		t.Errorf("stat %+v %v", st, err)
	}
	if _, _, err := b.Get(ctx, "a/b/missing"); !errors.Is(err, storage.ErrNoObject) {
		t.Errorf("get of a missing key: %v, want ErrNoObject", err)
	}
	if _, err := b.Stat(ctx, "a/b"); !errors.Is(err, storage.ErrNoObject) {
		t.Errorf("stat of a prefix: %v, want ErrNoObject", err)
	}
	etag2 := put(t, b, "a/b/c.obj", "hello, again", storage.Condition{})
	if etag2 == etag {
		t.Error("an unconditional replace kept the ETag")
	}
	mustGet(t, b, "a/b/c.obj", "hello, again")
	put(t, b, "empty", "", storage.Condition{})
	mustGet(t, b, "empty", "")
}

func testIfNoneMatch(t *testing.T, b storage.Bucket) {
	put(t, b, "fence/0001", "first", storage.Condition{IfNoneMatch: true})
	_, err := b.Put(ctx, "fence/0001", []byte("second"), storage.Condition{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("second conditional create: %v, want ErrPrecondition", err)
	}
	mustGet(t, b, "fence/0001", "first")
}

func testIfMatch(t *testing.T, b storage.Bucket) {
	e1 := put(t, b, "manifest", "v1", storage.Condition{})
	e2 := put(t, b, "manifest", "v2", storage.Condition{IfMatch: e1})
	if _, err := b.Put(ctx, "manifest", []byte("v3"), storage.Condition{IfMatch: e1}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("replace with a stale ETag: %v, want ErrPrecondition", err)
	}
	mustGet(t, b, "manifest", "v2")
	put(t, b, "manifest", "v3", storage.Condition{IfMatch: e2})
	mustGet(t, b, "manifest", "v3")
}

// A conditional Put that finds its own body (a retried Put whose answer was lost) succeeds; any
// other body is refused.
func testOwnBody(t *testing.T, b storage.Bucket) {
	e1 := put(t, b, "own", "writer 1, epoch 7", storage.Condition{IfNoneMatch: true})
	if e, err := b.Put(ctx, "own", []byte("writer 1, epoch 7"), storage.Condition{IfNoneMatch: true}); err != nil || e != e1 {
		t.Fatalf("create-only Put of the object's own body: %q %v, want success with ETag %s", e, err, e1)
	}
	if _, err := b.Put(ctx, "own", []byte("writer 2, epoch 8"), storage.Condition{IfNoneMatch: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("create-only Put of another body: %v", err)
	}
	e2 := put(t, b, "own", "writer 1, epoch 8", storage.Condition{IfMatch: e1})
	if _, err := b.Put(ctx, "own", []byte("writer 1, epoch 8"), storage.Condition{IfMatch: e1}); err != nil {
		t.Fatalf("replace (stale ETag) whose body is already there: %v, want success", err)
	}
	if _, err := b.Put(ctx, "own", []byte("writer 3"), storage.Condition{IfMatch: e1}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("replace with a stale ETag and another body: %v", err)
	}
	mustGet(t, b, "own", "writer 1, epoch 8")
	_ = e2
}

func testIfMatchMissing(t *testing.T, b storage.Bucket) {
	e := put(t, b, "other", "x", storage.Condition{})
	if _, err := b.Put(ctx, "never-written", []byte("x"), storage.Condition{IfMatch: e}); !errors.Is(err, storage.ErrPrecondition) && !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("If-Match on a missing key: %v; the store must refuse it (this store lets a conditional replace create)", err)
	}
	if _, err := b.Stat(ctx, "never-written"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("If-Match on a missing key created it: %v", err)
	}
}

// race runs n writers at once, writer i putting "writer i" at key under cond, and returns their
// errors.
func race(b storage.Bucket, key string, n int, cond storage.Condition) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Put(ctx, key, []byte(fmt.Sprintf("writer %d", i)), cond)
		}()
	}
	wg.Wait()
	return errs
}

// Many writers create one key at once: exactly one wins, and the object is the winner's.
func testCreateRace(t *testing.T, b storage.Bucket) {
	winner := -1
	for i, err := range race(b, "race/create", 8, storage.Condition{IfNoneMatch: true}) {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both created the key", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, storage.ErrPrecondition):
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer created the key")
	}
	mustGet(t, b, "race/create", fmt.Sprintf("writer %d", winner))
}

// Many writers replace one version at once: exactly one wins.
func testReplaceRace(t *testing.T, b storage.Bucket) {
	base := put(t, b, "race/replace", "base", storage.Condition{})
	wins := 0
	for i, err := range race(b, "race/replace", 8, storage.Condition{IfMatch: base}) {
		if err == nil {
			wins++
			mustGet(t, b, "race/replace", fmt.Sprintf("writer %d", i))
		} else if !errors.Is(err, storage.ErrPrecondition) {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers replaced the same version, want 1", wins)
	}
}

func testList(t *testing.T, b storage.Bucket) {
	keys := []string{"t/a/b", "t/a-b", "t/a.b", "t/a/c/d", "t/a0", "t/b", "u/x", "t/a/b2"}
	for _, k := range keys {
		put(t, b, k, k, storage.Condition{})
	}
	names := func(infos []storage.ObjectInfo) []string {
		var out []string
		for _, i := range infos {
			out = append(out, i.Key)
		}
		return out
	}
	all, err := b.List(ctx, "t/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"t/a-b", "t/a.b", "t/a/b", "t/a/b2", "t/a/c/d", "t/a0", "t/b"} // byte order of whole keys
	if got := names(all); !slices.Equal(got, want) {
		t.Fatalf("list t/ = %q, want %q", got, want)
	}
	for _, i := range all {
		if i.Size != int64(len(i.Key)) || i.ETag == "" {
			t.Errorf("listed %+v: want size %d and an ETag", i, len(i.Key))
		}
	}
	if got, _ := b.List(ctx, "t/a/", "", 0); !slices.Equal(names(got), []string{"t/a/b", "t/a/b2", "t/a/c/d"}) {
		t.Errorf("list t/a/ = %q", names(got))
	}
	if got, _ := b.List(ctx, "t/a/b", "", 0); !slices.Equal(names(got), []string{"t/a/b", "t/a/b2"}) {
		t.Errorf("list with a partial name t/a/b = %q", names(got))
	}
	// Paging: startAfter and limit walk the listing in order, every page full but the last
	// (storage.Walk stops at a short page).
	var paged []string
	after := ""
	for {
		page, err := b.List(ctx, "t/", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 3 {
			t.Fatalf("page of %d, limit 3", len(page))
		}
		if len(page) < 3 && len(paged)+len(page) < len(want) {
			t.Fatalf("a page of %d after %q with more left: only the last page may be short", len(page), after)
		}
		paged = append(paged, names(page)...)
		after = page[len(page)-1].Key
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged listing %q, want %q", paged, want)
	}
	if got, err := b.List(ctx, "nothing/", "", 0); err != nil || len(got) != 0 {
		t.Errorf("list of an empty prefix: %q %v", names(got), err)
	}
}

func testRanges(t *testing.T, b storage.Bucket) {
	put(t, b, "r", "0123456789", storage.Condition{})
	for _, tc := range []struct {
		off, n int64
		want   string
	}{{0, 4, "0123"}, {3, 4, "3456"}, {8, 10, "89"}, {10, 5, ""}, {20, 5, ""}, {0, 0, ""}} {
		got, err := b.GetRange(ctx, "r", tc.off, tc.n)
		if err != nil || string(got) != tc.want {
			t.Errorf("range %d+%d = %q %v, want %q", tc.off, tc.n, got, err, tc.want)
		}
	}
	if _, err := b.GetRange(ctx, "missing", 0, 1); !errors.Is(err, storage.ErrNoObject) {
		t.Errorf("range of a missing key: %v", err)
	}
}

func testLarge(t *testing.T, b storage.Bucket) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	body[12345] = 'X'
	if _, err := b.Put(ctx, "big/object", body, storage.Condition{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	got, info, err := b.Get(ctx, "big/object")
	if err != nil || info.Size != int64(len(body)) || !bytes.Equal(got, body) {
		t.Fatalf("16 MiB object read back wrong: size %d, err %v", info.Size, err)
	}
	part, err := b.GetRange(ctx, "big/object", 12340, 10)
	if err != nil || string(part) != string(body[12340:12350]) {
		t.Fatalf("range in a large object: %q %v", part, err)
	}
}

// testMultipart: an object written in parts is invisible until Complete, then reads back whole
// and by ranges across part boundaries; Complete is create-only; Abort leaves nothing, not even
// in a listing.
func testMultipart(t *testing.T, b storage.Bucket) {
	mb, ok := b.(storage.MultipartBucket)
	if !ok {
		t.Fatalf("%s does not write objects in parts (storage.MultipartBucket)", b.Describe())
	}
	parts := [][]byte{
		bytes.Repeat([]byte("a"), storage.MinPartSize),
		bytes.Repeat([]byte("b"), storage.MinPartSize+3),
		[]byte("tail"),
	}
	var whole []byte
	for _, p := range parts {
		whole = append(whole, p...)
	}
	up, err := mb.StartUpload(ctx, "mp/object")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if err := up.WritePart(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Stat(ctx, "mp/object"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("the object is visible before Complete: %v", err)
	}
	etag, err := up.Complete(ctx)
	if err != nil || etag == "" {
		t.Fatalf("complete: %q %v", etag, err)
	}
	got, info, err := b.Get(ctx, "mp/object")
	if err != nil || !bytes.Equal(got, whole) || info.ETag != etag {
		t.Fatalf("read back %d bytes (want %d), ETag %s (Complete said %s): %v", len(got), len(whole), info.ETag, etag, err)
	}
	edge := int64(storage.MinPartSize - 2)
	if r, err := b.GetRange(ctx, "mp/object", edge, 4); err != nil || string(r) != "aabb" {
		t.Fatalf("range across a part boundary: %q %v", r, err)
	}

	// Create-only: a second upload to the key fails, and the first object stays.
	up2, err := mb.StartUpload(ctx, "mp/object")
	if err != nil {
		t.Fatal(err)
	}
	if err := up2.WritePart(ctx, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := up2.Complete(ctx); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("completing an upload to an existing key: %v, want ErrPrecondition", err)
	}
	if info, err := b.Stat(ctx, "mp/object"); err != nil || info.ETag != etag {
		t.Fatalf("the object changed under a refused upload: %+v %v", info, err)
	}

	// Abort: nothing at the key, nothing listed.
	up3, err := mb.StartUpload(ctx, "mp/aborted")
	if err != nil {
		t.Fatal(err)
	}
	if err := up3.WritePart(ctx, parts[0]); err != nil {
		t.Fatal(err)
	}
	if err := up3.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "mp/aborted"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("an aborted upload left an object: %v", err)
	}
	list, err := b.List(ctx, "mp/", "", 0)
	if err != nil || len(list) != 1 || list[0].Key != "mp/object" {
		t.Fatalf("listing after an abort: %+v %v", list, err)
	}

	// An empty object can be written in parts too.
	up4, err := mb.StartUpload(ctx, "mp/empty")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up4.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	mustGet(t, b, "mp/empty", "")
}

func testDelete(t *testing.T, b storage.Bucket) {
	put(t, b, "d/x", "x", storage.Condition{})
	if err := b.Delete(ctx, "d/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "d/x"); !errors.Is(err, storage.ErrNoObject) {
		t.Fatalf("stat after delete: %v", err)
	}
	if err := b.Delete(ctx, "d/x"); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	if err := b.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("delete under a missing prefix: %v", err)
	}
	// A deleted key can be created again, conditionally.
	put(t, b, "d/x", "again", storage.Condition{IfNoneMatch: true})
	mustGet(t, b, "d/x", "again")
}

// testDeleteAll: many keys at once (in one request where the bucket deletes in batches), missing
// ones among them, and nothing else touched.
func testDeleteAll(t *testing.T, b storage.Bucket) {
	var keys []string
	for i := range 5 {
		k := fmt.Sprintf("da/%d", i)
		put(t, b, k, "x", storage.Condition{})
		keys = append(keys, k)
	}
	put(t, b, "da/kept", "kept", storage.Condition{})
	if _, err := storage.DeleteAll(ctx, b, append(keys, "da/missing", "never/was")); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := b.Stat(ctx, k); !errors.Is(err, storage.ErrNoObject) {
			t.Fatalf("%s after DeleteAll: %v", k, err)
		}
	}
	mustGet(t, b, "da/kept", "kept")
	if bd, ok := b.(storage.BatchDeleter); ok {
		if err := bd.DeleteBatch(ctx, make([]string, storage.MaxDeleteBatch+1)); err == nil {
			t.Fatal("a batch over the limit was taken")
		}
		if err := bd.DeleteBatch(ctx, []string{"da/kept", "a//b"}); err == nil {
			t.Fatal("a batch with a bad key was taken")
		}
		mustGet(t, b, "da/kept", "kept")
	}
}

func testBadKeys(t *testing.T, b storage.Bucket) {
	for _, k := range []string{"", "/abs", "a//b", "a/../b", "../x", "dir/", "."} {
		if _, err := b.Put(ctx, k, []byte("x"), storage.Condition{}); err == nil {
			t.Errorf("put accepted the key %q", k)
		}
	}
}

// testMove: MoveObject moves small and large objects (the large one streamed, not read whole),
// finishes a move whose delete did not happen, and refuses to replace another object.
func testMove(t *testing.T, b storage.Bucket) {
	small := []byte("a small object")
	large := bytes.Repeat([]byte("0123456789abcdef"), (storage.MoveInMemory+3<<20)/16) // more than MoveInMemory
	large[storage.MoveInMemory+5] = 'X'
	for name, body := range map[string][]byte{"small": small, "large": large} {
		from, to := "move/"+name, "archive/move/"+name
		if _, err := b.Put(ctx, from, body, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		counting := &getCounter{Bucket: b}
		if err := storage.MoveObject(ctx, counting, from, to); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "large" && counting.gets > 0 {
			t.Errorf("a large object was read whole (%d GETs) to be moved", counting.gets)
		}
		if got, _, err := b.Get(ctx, to); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s moved: %d bytes, %v", name, len(got), err)
		}
		if _, err := b.Stat(ctx, from); !errors.Is(err, storage.ErrNoObject) {
			t.Fatalf("%s: the source is still there: %v", name, err)
		}
		// An earlier attempt copied but did not delete: the move finishes.
		if _, err := b.Put(ctx, from, body, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		if err := storage.MoveObject(ctx, b, from, to); err != nil {
			t.Fatalf("%s: finishing a move: %v", name, err)
		}
		if _, err := b.Stat(ctx, from); !errors.Is(err, storage.ErrNoObject) {
			t.Fatalf("%s: the source is still there after finishing: %v", name, err)
		}
		// Another object at the destination: refused, the source kept.
		other := append(append([]byte(nil), body...), '!')
		if _, err := b.Put(ctx, from, other, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
		if err := storage.MoveObject(ctx, b, from, to); !errors.Is(err, storage.ErrPrecondition) {
			t.Fatalf("%s: a move onto another object: %v", name, err)
		}
		if got, _, err := b.Get(ctx, from); err != nil || !bytes.Equal(got, other) {
			t.Fatalf("%s: the refused move lost its source: %v", name, err)
		}
	}
}

// getCounter counts whole-object reads.
type getCounter struct {
	storage.Bucket
	gets int
}

func (g *getCounter) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	g.gets++
	return g.Bucket.Get(ctx, key)
}

func (g *getCounter) StartUpload(ctx context.Context, key string) (storage.Upload, error) {
	mb, ok := g.Bucket.(storage.MultipartBucket)
	if !ok {
		return nil, errors.New("the bucket under test writes no parts")
	}
	return mb.StartUpload(ctx, key)
}

// Dir is a directory bucket in the test's temporary directory, closed when the test ends.
func Dir(t testing.TB) *storage.DirBucket {
	t.Helper()
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
