package master

import (
	"context"
	"errors"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// The catalog on a bucket survives reopening; a master that opens it fences the previous one: the
// deposed master's next change fails (fenced) and never shows in the catalog, and its snapshot
// cannot replace the newer one.
func TestBucketCatalogFencesThePreviousMaster(t *testing.T) {
	b, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
