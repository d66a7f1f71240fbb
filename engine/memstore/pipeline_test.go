//go:build linux

package memstore

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// scanAll reads every segment of the memstore at readPoint, merged in store order.
func scanAll(t *testing.T, m *Memstore, readPoint uint64) []ent {
	t.Helper()
	scs, err := m.Scanners(readPoint)
	if err != nil {
		t.Fatal(err)
	}
	var out []ent
	for _, sc := range scs {
		out = append(out, collect(t, sc, sc.Seek(cell.AppendFirstOnRow(nil, nil)))...)
		sc.Close()
	}
	sortEnts(out)
	return out
}

func TestPipelineKeepsEveryCell(t *testing.T) {
	m, err := New(testPool(t, 64<<10, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq := uint64(0)
	for round := range 5 {
		for i := range 200 {
			seq++
			k := key(fmt.Sprintf("r%03d", i%50), "q", int64(round), cell.Put)
			if err := m.Add(k, fmt.Appendf(nil, "v%d-%d", round, i), seq); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := m.InMemoryFlush(); err != nil || n != round+1 {
			t.Fatalf("InMemoryFlush: %d %v", n, err)
		}
	}
	if got := m.UnflushedDataBytes(); got != m.Stats().DataBytes || got == 0 {
		t.Fatalf("UnflushedDataBytes %d, Stats %d", got, m.Stats().DataBytes)
	}
	before := map[uint64][]ent{}
	for _, rp := range []uint64{0, 333, seq} {
		before[rp] = scanAll(t, m, rp)
	}
	// A scanner opened before the merge keeps reading the old segments.
	old, err := m.Scanners(seq)
	if err != nil {
		t.Fatal(err)
	}
	read, kept, err := m.MergePipeline(nil)
	if err != nil || read != 1000 || kept != 1000 || m.PipelineLen() != 1 {
		t.Fatalf("merge: read %d kept %d err %v, pipeline %d", read, kept, err, m.PipelineLen())
	}
	for rp, want := range before {
		if got := scanAll(t, m, rp); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("read point %d after the merge: %d cells, want %d", rp, len(got), len(want))
		}
	}
	var n int
	for _, sc := range old {
		n += len(collect(t, sc, sc.Seek(cell.AppendFirstOnRow(nil, nil))))
		sc.Close()
	}
	if n != 1000 {
		t.Fatalf("a scanner opened before the merge read %d cells", n)
	}
	// The flush takes the pipeline and the active segment.
	if err := m.Add(key("z", "q", 1, cell.Put), []byte("late"), seq+1); err != nil {
		t.Fatal(err)
	}
	f, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Segments()) != 2 || f.Stats().Cells != 1001 || m.UnflushedDataBytes() != 0 || m.PipelineLen() != 0 {
		t.Fatalf("snapshot of %d segments, %d cells; unflushed %d", len(f.Segments()), f.Stats().Cells, m.UnflushedDataBytes())
	}
	m.ClearSnapshot(f)
}

// Writers, in-memory flushes, merges and flushes at once (as the region runs them: adds under a
// shared lock, freezes under an exclusive one): every cell ends in exactly one flush.
func TestPipelineConcurrent(t *testing.T) {
	m, err := New(testPool(t, 64<<10, 256<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var updates sync.RWMutex
	var seq sync.Mutex
	next := uint64(0)
	const writers, each = 4, 3000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var flushed []ent
	var fmu sync.Mutex
	flush := func() {
		updates.Lock()
		f, err := m.Snapshot()
		updates.Unlock()
		if err != nil {
			t.Error(err)
			return
		}
		for _, s := range f.Segments() {
			sc, err := s.NewScanner(^uint64(0))
			if err != nil {
				t.Error(err)
				return
			}
			es := collect(t, sc, sc.Seek(cell.AppendFirstOnRow(nil, nil)))
			sc.Close()
			fmu.Lock()
			flushed = append(flushed, es...)
			fmu.Unlock()
		}
		m.ClearSnapshot(f)
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seq.Lock()
				next++
				s := next
				seq.Unlock()
				updates.RLock()
				err := m.Add(key(fmt.Sprintf("w%d-%05d", w, i), "q", 1, cell.Put), []byte("v"), s)
				updates.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			updates.Lock()
			_, err := m.InMemoryFlush()
			updates.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if _, _, err := m.MergePipeline(nil); err != nil {
				t.Error(err)
				return
			}
			if i%7 == 6 {
				flush()
			}
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	flush()
	if len(flushed) != writers*each {
		t.Fatalf("%d cells flushed, want %d", len(flushed), writers*each)
	}
	seen := map[uint64]bool{}
	for _, e := range flushed {
		if seen[e.seq] {
			t.Fatalf("cell of seq %d flushed twice", e.seq)
		}
		seen[e.seq] = true
	}
}

func TestVersionKeep(t *testing.T) {
	type c struct {
		k    cell.Key
		seq  uint64
		want bool
	}
	put := func(row, q string, ts int64) cell.Key { return key(row, q, ts, cell.Put) }
	cases := []c{
		{put("a", "q", 9), 10, true}, // newest
		{put("a", "q", 8), 9, false}, // beyond VERSIONS 1
		{put("a", "q", 7), 50, true}, // newer than the read point: kept, not counted
		{put("a", "r", 5), 3, true},  // another column
		{put("a", "r", 5), 2, false}, // an older write of the same cell
		{put("b", "q", 9), 12, true}, // another row
		{key("c", "q", 9, cell.DeleteColumn), 13, true},
		{put("c", "q", 8), 5, true}, // after a marker, everything stays
		{put("c", "q", 7), 4, true},
		{put("c", "r", 9), 14, true}, // a new column starts over
		{put("c", "r", 8), 1, false},
	}
	v := &VersionKeep{MaxVersions: 1, ReadPoint: 20}
	for i, x := range cases {
		if got := v.Keep(x.k, x.seq, nil); got != x.want {
			t.Fatalf("cell %d (%s seq %d): keep %v, want %v", i, x.k, x.seq, got, x.want)
		}
	}
	// A family delete marker keeps the rest of the row's family.
	v = &VersionKeep{MaxVersions: 1, ReadPoint: 20}
	fam := cell.AppendKey(nil, []byte("d"), []byte("f"), nil, 9, cell.DeleteFamily)
	for _, x := range []c{{fam, 2, true}, {put("d", "q", 9), 3, true}, {put("d", "q", 8), 1, true}} {
		if got := v.Keep(x.k, x.seq, nil); got != x.want {
			t.Fatalf("%s: keep %v, want %v", x.k, got, x.want)
		}
	}
}
