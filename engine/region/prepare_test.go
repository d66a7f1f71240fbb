package region

import (
	"context"
	"fmt"
	"path"
	"slices"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/filecache"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
)

// listReads is reads that counts listings too.
type listReads struct{ reads }

func (l *listReads) List(ctx context.Context, prefix, after string, limit int) ([]storage.ObjectInfo, error) {
	l.count("list")
	return l.reads.Bucket.List(ctx, prefix, after, limit)
}

// A move's destination prepares the region while its source still serves it, and the open after
// the source's close reads the .regioninfo and the manifest (once each) and the store file
// written since the prepare, nothing else: no prepared file again, no listing. Every row is there
// (the files taken, the one written since, the edits the close handed off); an object the prepare
// listed that no manifest names is archived by the open; nothing stays prepared.
func TestPreparedOpenReadsOnlyTheManifest(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		rb := &listReads{reads{Bucket: b}}
		e := bucketEnv(t, rb)
		famDir := path.Join(e.info.Dir(), "f")
		newCache := func() *filecache.Cache {
			c, err := filecache.Open(filecache.Config{Dir: t.TempDir(), Capacity: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		for i := range 2 {
			putRows(t, e.r, i*100, i*100+100, "v")
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		stray := path.Join(famDir, "00000000000000000000000000")
		if _, err := b.Put(context.Background(), stray, []byte("half a flush"), storage.Condition{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		dest := e.cfg
		dest.FileCache = newCache() // the destination's own
		p, err := Prepare(dest, e.info)
		if err != nil {
			t.Fatal(err)
		}
		if p.Files() != 2 {
			t.Fatalf("%d store files prepared, want 2", p.Files())
		}
		// The source goes on: its pre-close flush, then a few edits its close hands off.
		putRows(t, e.r, 200, 300, "v")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 300, 305, "h")
		if err := e.r.CloseForMove(); err != nil {
			t.Fatal(err)
		}
		rb.take()
		dest.Prepared, dest.Descriptor = p, &e.table
		r, err := Open(dest, e.info)
		if err != nil {
			t.Fatal(err)
		}
		e.r = r
		got := rb.take()
		// .regioninfo, the manifest, the pre-close flush's file; the stray object's archiving
		// (a HEAD and a GET of it) and the listing of recovered edits.
		if got["get"] != 4 || got["stat"] != 1 || got["range"] != 0 || got["list"] != 1 {
			t.Fatalf("the prepared open read %v; want 4 gets (.regioninfo, manifest, the file written since, the stray object's move), 1 stat (that move), 1 list (recovered edits)", got)
		}
		if p.Taken() != 2 || p.Files() != 0 {
			t.Fatalf("the open took %d prepared files and left %d; want both taken", p.Taken(), p.Files())
		}
		if n := countRows(t, r); n != 305 {
			t.Fatalf("%d rows after the prepared open, want 305", n)
		}
		for i, want := range map[int]string{0: "v", 150: "v", 299: "v", 304: "h"} {
			if got := getVal(t, r, i); got != want {
				t.Fatalf("row %d after the prepared open: %q, want %q", i, got, want)
			}
		}
		if slices.Contains(keysUnder(t, b, famDir+"/"), stray) || !slices.Contains(keysUnder(t, b, "archive/"+famDir+"/"), "archive/"+stray) {
			t.Fatal("the object the prepare listed and no manifest names was not archived by the open")
		}
	})
}

// What changed between the prepare and the open is read again: files a compaction replaced are
// not taken (their readers closed), the compaction's output is opened, and the rows are those of
// the manifest the open reads. A family whose settings changed opens its files itself. A Prepared
// nobody opens is released.
func TestPreparedOpenAfterACompactionAndAnAlter(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e := bucketEnv(t, b)
		for i := range 3 {
			putRows(t, e.r, i*100, i*100+100, "v")
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		p, err := Prepare(e.cfg, e.info)
		if err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 0, 50, "w")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.Compact(true); err != nil {
			t.Fatal(err)
		}
		if err := e.r.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := e.cfg
		cfg.Prepared, cfg.Descriptor = p, &e.table
		r, err := Open(cfg, e.info)
		if err != nil {
			t.Fatal(err)
		}
		e.r = r
		if p.Taken() != 0 {
			t.Fatalf("the open took %d prepared files; want none (a compaction replaced them all)", p.Taken())
		}
		if n := r.StoreFileCount()["f"]; n != 1 {
			t.Fatalf("%d store files after the open, want the compaction's one", n)
		}
		if n := countRows(t, r); n != 300 {
			t.Fatalf("%d rows after the open, want 300", n)
		}
		if got := getVal(t, r, 10); got != "w" {
			t.Fatalf("row 10 after the open: %q, want w", got)
		}

		// A family made IN_MEMORY after the prepare: its files are opened again, as such.
		p, err = Prepare(e.cfg, e.info)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.r.Close(); err != nil {
			t.Fatal(err)
		}
		altered := e.table
		altered.Families = slices.Clone(altered.Families)
		altered.Families[0].InMemory = true
		cfg.Prepared, cfg.Descriptor = p, &altered
		if r, err = Open(cfg, e.info); err != nil {
			t.Fatal(err)
		}
		e.r = r
		if p.Taken() != 0 {
			t.Fatalf("the open took %d prepared files of a family whose settings changed", p.Taken())
		}
		if !r.Families()[0].InMemory {
			t.Fatal("the open did not take the altered descriptor")
		}
		for _, sf := range r.files.Load().byFamily[0] {
			if !sf.reader.InMemory() {
				t.Fatalf("store file %s of the family made IN_MEMORY was taken as prepared before", sf.name)
			}
		}
		if _, table, err := readRegionInfo(filesOf(nil, b), e.info.Dir()); err != nil || !table.Families[0].InMemory {
			t.Fatalf("the .regioninfo after the altered open: %v %v, want the altered descriptor", table, err)
		}
		if n := countRows(t, r); n != 300 {
			t.Fatalf("%d rows after the altered open, want 300", n)
		}

		// Prepared, never opened: released (the files' readers closed; a second release is a no-op).
		p, err = Prepare(e.cfg, e.info)
		if err != nil {
			t.Fatal(err)
		}
		var files []*storeFile
		for _, sf := range p.files {
			files = append(files, sf)
		}
		if len(files) != 1 {
			t.Fatalf("%d files prepared, want 1", len(files))
		}
		p.Release()
		p.Release()
		for _, sf := range files {
			if n := sf.refs.Load(); n != 0 {
				t.Fatalf("store file %s holds %d references after the release; want its reader closed", sf.name, n)
			}
		}
		if p.Files() != 0 {
			t.Fatal("a released Prepared still holds files")
		}
	})
}

// BenchmarkMoveOpen is a move's open at its destination on a bucket (one with its own file
// cache), the region holding 1–4 store files and five edits its close handed off: "create" as the
// region server opened before (the .regioninfo checked, then the open reading it again with the
// manifest, then the store files), "descriptor" with the check folded into the open, "prepared"
// with the store files opened ahead (untimed: the source still serves then).
func BenchmarkMoveOpen(b *testing.B) {
	srv := s3test.Start(b)
	for _, mode := range []string{"create", "descriptor", "prepared"} {
		bucket := benchBucket(b, srv, mode)
		b.Run(mode, func(b *testing.B) {
			e := bucketEnv(b, bucket)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := e.r.Flush(); err != nil {
					b.Fatal(err)
				}
				if e.r.StoreFileCount()["f"] > 4 {
					if _, err := e.r.Compact(true); err != nil {
						b.Fatal(err)
					}
				}
				for j := 0; j < 5; j++ {
					if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%06d-%d", i, j)).Put([]byte("f"), []byte("q"), 1, make([]byte, 100))); err != nil {
						b.Fatal(err)
					}
				}
				cfg := e.cfg
				cache, err := filecache.Open(filecache.Config{Dir: b.TempDir(), Capacity: 64 << 20})
				if err != nil {
					b.Fatal(err)
				}
				cfg.FileCache = cache
				if mode == "prepared" {
					if cfg.Prepared, err = Prepare(cfg, e.info); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.r.CloseForMove(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if mode == "create" {
					err = CreateOnBucket(bucket, e.table, e.info)
				} else {
					cfg.Descriptor = &e.table
				}
				if err == nil {
					e.r, err = Open(cfg, e.info)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
