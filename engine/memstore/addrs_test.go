package memstore

import (
	"fmt"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// A search's saved list of chunk addresses resolves a node in a chunk the segment took after the
// list was loaded, also when that chunk's id falls in a gap of the list: recycled chunks come back
// last in, first out, so a segment often takes descending ids, and the first (highest) makes the
// list long with nil gaps below it. (Resolving through such a gap dereferenced nil.)
func TestNodeAddrsResolveChunksAddedInGaps(t *testing.T) {
	const chunk = 64 << 10
	m, err := New(testPool(t, chunk, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	value := make([]byte, 1000)
	seq := uint64(0)
	add := func(i int) {
		t.Helper()
		seq++
		if err := m.Add(cell.AppendKey(nil, fmt.Appendf(nil, "row%08d", i), []byte("f"), []byte("q"), 1, cell.Put), value, seq); err != nil {
			t.Fatal(err)
		}
	}
	// Fill a few chunks, flush them away: the pool keeps them for the next segment.
	for i := range 300 {
		add(i)
	}
	f, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m.ClearSnapshot(f)
	s := m.active.Load()
	add(0) // the new segment's first chunk
	a := s.addrs()
	gaps := 0
	for _, p := range a.b {
		if p == nil {
			gaps++
		}
	}
	// Now chunks the saved list does not know: every node must resolve through it.
	for i := 1; i < 200; i++ {
		add(i)
	}
	if gaps == 0 {
		t.Fatal("the saved chunk list has no gap: the test no longer sets up what it checks")
	}
	for x := nodeLink(a.ptr(s.head), 0).Load(); x != 0; x = nodeLink(a.ptr(x), 0).Load() {
		k, _ := s.nodeStored(a.ptr(x))
		if len(k) == 0 {
			t.Fatal("a node resolved to an empty key")
		}
	}
}
