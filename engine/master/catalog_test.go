package master

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

func TestCatalogPersistsAcrossReopenAndSnapshot(t *testing.T) {
	fs := storage.NewMem()
	c, err := OpenCatalog(fs, "meta")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Apply(CatalogChange{"table/default:t", []byte("desc")}, CatalogChange{"region/r1", []byte("a")}, CatalogChange{"region/r2", []byte("b")}))
	must(c.Apply(CatalogChange{Key: "region/r1"}))
	must(c.Snapshot())
	must(c.Apply(CatalogChange{"region/r3", []byte("c")}, CatalogChange{"table/default:t", []byte("desc2")}))
	must(c.Close())
	c, err = OpenCatalog(fs, "meta")
	must(err)
	defer c.Close()
	if got := string(c.Get("table/default:t")); got != "desc2" {
		t.Errorf("table row = %q", got)
	}
	var keys []string
	for _, r := range c.Scan("region/") {
		keys = append(keys, r.Key+"="+string(r.Value))
	}
	if fmt.Sprint(keys) != "[region/r2=b region/r3=c]" {
		t.Errorf("regions = %v", keys)
	}
	// Snapshots let the log's covered segments go: the log does not grow with them.
	for i := range 5 {
		must(c.Apply(CatalogChange{fmt.Sprint("x/", i), []byte("x")}))
		must(c.Snapshot())
	}
	segs, _ := fs.List("meta/wal")
	if archived, _ := fs.List("meta/archive"); len(archived)+len(segs) > 2 {
		t.Errorf("log segments kept after the snapshots that cover them: %v in meta/wal, %v in meta/archive", segs, archived)
	}
	if err := c.Apply(CatalogChange{Key: ""}); err == nil {
		t.Error("empty key accepted")
	}
}

func TestCatalogCorruptSnapshotIsAnError(t *testing.T) {
	fs := storage.NewMem()
	c, _ := OpenCatalog(fs, "meta")
	_ = c.Apply(CatalogChange{"k", []byte("v")})
	_ = c.Snapshot()
	_ = c.Close()
	b, _ := storage.ReadFile(fs, "meta/snapshot")
	b[len(b)/2] ^= 0xff
	if err := storage.WriteFile(fs, "meta/snapshot", b); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCatalog(fs, "meta"); err == nil {
		t.Fatal("a corrupt snapshot opened")
	} else if want := "meta/snapshot is corrupt"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// A crash at every mutating filesystem step of a sequence of changes and snapshots: after it, the
// catalog opens and holds every acknowledged change, and each change is whole or absent.
func TestCatalogCrashAtEveryStep(t *testing.T) {
	workload := func(c *Catalog, acked map[string]string) error {
		for i := range 12 {
			k1, k2 := fmt.Sprintf("row/%02d/a", i), fmt.Sprintf("row/%02d/b", i)
			v := fmt.Sprintf("v%d", i)
			if err := c.Apply(CatalogChange{k1, []byte(v)}, CatalogChange{k2, []byte(v)}); err != nil {
				return err
			}
			acked[k1], acked[k2] = v, v
			if i%5 == 4 {
				if err := c.Snapshot(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// Count the steps of a clean run.
	clean := faultfs.New(storage.NewMem())
	c, err := OpenCatalog(clean, "meta")
	if err != nil {
		t.Fatal(err)
	}
	opened := clean.Count(faultfs.OpsMutating)
	if err := workload(c, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	steps := clean.Count(faultfs.OpsMutating) - opened
	c.Close()
	for n := int64(1); n <= steps; n++ {
		fs := faultfs.New(storage.NewMem())
		c, err := OpenCatalog(fs, "meta")
		if err != nil {
			t.Fatal(err)
		}
		fs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: n, Action: faultfs.Crash})
		acked := map[string]string{}
		werr := workload(c, acked)
		if werr != nil && !errors.Is(werr, faultfs.ErrCrashed) && !errors.Is(werr, faultfs.ErrInjected) {
			t.Fatalf("step %d: unexpected error %v", n, werr)
		}
		after, err := fs.CrashClone(storage.CrashOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c2, err := OpenCatalog(after, "meta")
		if err != nil {
			t.Fatalf("crash at step %d: catalog does not open: %v", n, err)
		}
		for k, v := range acked {
			if got := string(c2.Get(k)); got != v {
				t.Fatalf("crash at step %d: acknowledged %s=%s lost (got %q)", n, k, v, got)
			}
		}
		for i := range 12 {
			a, b := c2.Get(fmt.Sprintf("row/%02d/a", i)), c2.Get(fmt.Sprintf("row/%02d/b", i))
			if (a == nil) != (b == nil) {
				t.Fatalf("crash at step %d: change %d half applied", n, i)
			}
		}
		// The reopened catalog takes new changes.
		if err := c2.Apply(CatalogChange{"after", []byte("crash")}); err != nil {
			t.Fatalf("crash at step %d: apply after reopen: %v", n, err)
		}
		c2.Close()
	}
	t.Logf("crashed at each of %d steps", steps)
}
