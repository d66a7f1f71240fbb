package region

import (
	"fmt"
	"testing"
)

// TestCellTTLDroppedFromFiles checks that flushes and compactions (minor and
// major) leave cells past their per-cell TTL out of the files they write,
// and keep the tags of the cells they copy.
func TestCellTTLDroppedFromFiles(t *testing.T) {
	e := newEnv(t, fam("f"))
	entries := func() int64 {
		var n int64
		for _, f := range e.r.files.Load().byFamily[0] {
			n += f.meta.EntryCount
		}
		return n
	}
	put := func(row string, ttl int64) {
		t.Helper()
		m := NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), 1_000_000, []byte("v"))
		m.TTL = ttl
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		put(fmt.Sprintf("a%d", i), 1000) // expires at 1001001
		put(fmt.Sprintf("b%d", i), 0)    // no TTL
	}
	put("c", 1) // expired before the flush
	e.clock.now.Store(1_000_002)
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 20 {
		t.Fatalf("flush wrote %d cells, want 20 (the expired one dropped)", n)
	}
	// A minor compaction of two files copies the tags: the TTL still
	// applies to the cells in the new file.
	for _, row := range []string{"d", "e"} {
		put(row, 5000)
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.r.compactAllMinor(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.r.files.Load().byFamily[0]); n != 1 {
		t.Fatalf("%d files after the minor compaction", n)
	}
	if n := entries(); n != 22 {
		t.Fatalf("minor compaction kept %d cells, want 22", n)
	}
	if f := e.r.files.Load().byFamily[0][0]; f.meta.MajorCompacted {
		t.Fatalf("the minor compaction's file %s says it is the output of a major one", f)
	}
	e.clock.now.Store(1_001_002) // the a* cells expired
	if got := countRows(t, e.r); got != 12 {
		t.Fatalf("%d rows visible, want 12 (b0..b9, d, e)", got)
	}
	if _, err := e.r.Compact(true); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 12 {
		t.Fatalf("major compaction kept %d cells, want 12", n)
	}
	if f := e.r.files.Load().byFamily[0][0]; !f.meta.MajorCompacted {
		t.Fatalf("the major compaction's file %s does not say so (sfile dump's majorCompacted)", f)
	}
	e.clock.now.Store(1_005_003) // d and e expired too: their tags survived both rewrites
	if got := countRows(t, e.r); got != 10 {
		t.Fatalf("%d rows visible, want 10", got)
	}
}
