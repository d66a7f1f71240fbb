//go:build linux

package memstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
)

func testPool(t testing.TB, chunk int, budget int64) *offheap.ChunkPool {
	t.Helper()
	b, err := offheap.NewBudget("memstore", budget, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", ChunkSize: chunk, SlabSize: int64(chunk) * 4,
		Hugepages: offheap.HugepagesOff, Budget: b, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("chunk pool close: %v (chunks leaked)", err)
		}
	})
	return p
}

type ent struct {
	key cell.Key
	val []byte
	seq uint64
}

func key(row, q string, ts int64, typ cell.Type) cell.Key {
	return cell.AppendKey(nil, []byte(row), []byte("f"), []byte(q), ts, typ)
}

func collect(t *testing.T, sc cell.Scanner, ok bool) []ent {
	t.Helper()
	var out []ent
	for ; ok; ok = sc.Next() {
		out = append(out, ent{append(cell.Key(nil), sc.Key()...), append([]byte(nil), sc.Value()...), sc.Seq()})
	}
	return out
}

func sortEnts(es []ent) {
	slices.SortStableFunc(es, func(a, b ent) int { return cell.CompareWithSeq(a.key, a.seq, b.key, b.seq) })
}

func TestOrderAndReadPoint(t *testing.T) {
	p := testPool(t, 64<<10, 8<<20)
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var all []ent
	for i := 0; i < 3000; i++ {
		k := key(fmt.Sprintf("r%03d", r.IntN(200)), fmt.Sprintf("q%d", r.IntN(4)), int64(r.IntN(5)), []cell.Type{cell.Put, cell.Delete, cell.DeleteColumn}[r.IntN(3)])
		v := bytes.Repeat([]byte{byte(i)}, r.IntN(40))
		seq := uint64(i + 1)
		if err := m.Add(k, v, seq); err != nil {
			t.Fatal(err)
		}
		all = append(all, ent{k, v, seq})
	}
	sortEnts(all)
	for _, rp := range []uint64{0, 1, 1500, 3000} {
		var want []ent
		for _, e := range all {
			if e.seq <= rp {
				want = append(want, e)
			}
		}
		scs, err := m.Scanners(rp)
		if err != nil || len(scs) != 1 {
			t.Fatal(err, len(scs))
		}
		sc := scs[0]
		got := collect(t, sc, sc.Seek(cell.AppendFirstOnRow(nil, []byte(""))))
		if len(got) != len(want) {
			t.Fatalf("read point %d: %d cells, want %d", rp, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].key, want[i].key) || got[i].seq != want[i].seq || !bytes.Equal(got[i].val, want[i].val) {
				t.Fatalf("read point %d: cell %d = %v/%d, want %v/%d", rp, i, got[i].key, got[i].seq, want[i].key, want[i].seq)
			}
		}
		// Seek to a middle row.
		if len(want) > 0 {
			mid := want[len(want)/2]
			sk := cell.AppendFirstOnRow(nil, mid.key.Row())
			if !sc.Seek(sk) || cell.CompareRows(sc.Key(), mid.key) != 0 {
				t.Fatalf("seek to row %q landed on %v", mid.key.Row(), sc.Key())
			}
			// Reverse: every row in descending order via SeekToPreviousRow.
			var rows []string
			for ok := sc.SeekToLastRow(); ok; ok = sc.SeekToPreviousRow(sc.Key()) {
				rows = append(rows, string(sc.Key().Row()))
				// positioned at the first visible cell of the row
				first := slices.IndexFunc(want, func(e ent) bool { return cell.CompareRows(e.key, sc.Key()) == 0 })
				if !bytes.Equal(want[first].key, sc.Key()) || want[first].seq != sc.Seq() {
					t.Fatalf("reverse: row %q positioned at %v, want %v", sc.Key().Row(), sc.Key(), want[first].key)
				}
			}
			var wantRows []string
			for i := len(want) - 1; i >= 0; i-- {
				if r := string(want[i].key.Row()); len(wantRows) == 0 || wantRows[len(wantRows)-1] != r {
					wantRows = append(wantRows, r)
				}
			}
			if !slices.Equal(rows, wantRows) {
				t.Fatalf("reverse rows %v, want %v", rows, wantRows)
			}
		}
		sc.Close()
		sc.Close()
	}
	st := m.Stats()
	if st.Cells != 3000 || st.MaxSeq != 3000 || st.MinSeq != 1 || st.MinTs != 0 || st.MaxTs != 4 {
		t.Fatalf("stats %+v", st)
	}
	m.Close()
	if s := p.Stats(); s.InUse != 0 {
		t.Fatalf("%d chunks in use after Close", s.InUse)
	}
}

func TestConcurrentAddAndScan(t *testing.T) {
	p := testPool(t, 64<<10, 64<<20)
	m, _ := New(p)
	defer m.Close()
	const writers, per = 4, 2000
	var seq struct {
		sync.Mutex
		n uint64
	}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				seq.Lock()
				seq.n++
				s := seq.n
				seq.Unlock()
				k := key(fmt.Sprintf("row%05d", (i*7+w*13)%3000), "q", int64(i), cell.Put)
				if err := m.Reserve(EncodedCellSize(len(k), 8)); err != nil {
					t.Error(err)
					return
				}
				if err := m.Add(k, []byte("vvvvvvvv"), s); err != nil {
					t.Error(err)
				}
				m.Unreserve(EncodedCellSize(len(k), 8))
			}
		}(w)
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			scs, _ := m.Scanners(^uint64(0))
			for _, sc := range scs {
				var prev []byte
				var prevSeq uint64
				for ok := sc.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = sc.Next() {
					if prev != nil && cell.CompareWithSeq(prev, prevSeq, sc.Key(), sc.Seq()) > 0 {
						t.Error("concurrent scan out of order")
					}
					prev = append(prev[:0], sc.Key()...)
					prevSeq = sc.Seq()
				}
				sc.Close()
			}
		}
	}()
	wg.Wait()
	close(stop)
	rwg.Wait()
	if n := m.Stats().Cells; n != writers*per {
		t.Fatalf("%d cells, want %d", n, writers*per)
	}
	scs, _ := m.Scanners(^uint64(0))
	got := collect(t, scs[0], scs[0].Seek(cell.AppendFirstOnRow(nil, nil)))
	scs[0].Close()
	if len(got) != writers*per {
		t.Fatalf("scanned %d cells", len(got))
	}
}

func TestSnapshotRefcountsAndLargeCells(t *testing.T) {
	p := testPool(t, 64<<10, 8<<20)
	m, _ := New(p)
	big := bytes.Repeat([]byte("x"), 40<<10) // > chunk/4: key and value on the heap
	for i := 0; i < 10; i++ {
		if err := m.Add(key(fmt.Sprintf("r%d", i), "q", 1, cell.Put), big, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	m.Add(key("small", "q", 1, cell.Put), []byte("v"), 11)
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(); !errors.Is(err, ErrSnapshotExists) {
		t.Fatalf("second snapshot: %v", err)
	}
	m.Add(key("after", "q", 1, cell.Put), []byte("new"), 12)
	scs, _ := m.Scanners(100)
	if len(scs) != 2 {
		t.Fatalf("%d scanners", len(scs))
	}
	held := p.Stats().InUse
	m.ClearSnapshot(snap)
	if p.Stats().InUse != held {
		t.Fatal("snapshot chunks released while a scanner reads them")
	}
	got := collect(t, scs[0], scs[0].Seek(cell.AppendFirstOnRow(nil, nil)))
	if len(got) != 11 || !bytes.Equal(got[0].val, big) {
		t.Fatalf("snapshot scan: %d cells", len(got))
	}
	for _, sc := range scs {
		sc.Close()
	}
	if p.Stats().InUse >= held {
		t.Fatalf("snapshot chunks not released after the last scanner closed: %d >= %d", p.Stats().InUse, held)
	}
	m.Close()
	if p.Stats().InUse != 0 {
		t.Fatal("chunks leaked")
	}
}

func TestBudgetExhaustion(t *testing.T) {
	p := testPool(t, 64<<10, 256<<10) // four chunks
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v := make([]byte, 1000)
	var failed error
	for i := 0; i < 1000 && failed == nil; i++ {
		k := key(fmt.Sprintf("r%05d", i), "q", 1, cell.Put)
		if err := m.Reserve(EncodedCellSize(len(k), len(v))); err != nil {
			failed = err
			break
		}
		if err := m.Add(k, v, uint64(i+1)); err != nil {
			t.Fatalf("Add after a successful Reserve failed: %v", err)
		}
		m.Unreserve(EncodedCellSize(len(k), len(v)))
	}
	if !errors.Is(failed, ErrFull) || !errors.Is(failed, offheap.ErrBudgetExceeded) {
		t.Fatalf("want ErrFull, got %v", failed)
	}
}

func BenchmarkAdd(b *testing.B) {
	p := testPool(b, 2<<20, 1<<30)
	m, _ := New(p)
	defer func() { m.Close() }()
	keys := make([]cell.Key, 1<<16)
	for i := range keys {
		keys[i] = cell.AppendKey(nil, fmt.Appendf(nil, "user%010d", rand.IntN(1<<30)), []byte("f"), []byte("q"), 1, cell.Put)
	}
	v := make([]byte, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%(1<<16) == 0 {
			b.StopTimer()
			m.Close()
			m, _ = New(p)
			b.StartTimer()
		}
		m.Add(keys[i%len(keys)], v, uint64(i+1))
	}
}

// Cells with tags keep their value and tags apart, inline and heap-stored
// (large) alike, and seeks over them work as over plain cells.
func TestTaggedCells(t *testing.T) {
	p := testPool(t, 64<<10, 8<<20)
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tags := cell.AppendTTLTag(nil, 1234)
	big := bytes.Repeat([]byte("x"), 100<<10) // larger than a chunk: on the heap
	cells := []struct {
		k    cell.Key
		v, t []byte
	}{
		{key("a", "q", 1, cell.Put), []byte("plain"), nil},
		{key("b", "q", 1, cell.Put), []byte("tagged"), tags},
		{key("c", "q", 1, cell.Put), big, tags},
		{key("d", "q", 1, cell.Put), nil, tags},
	}
	for i, c := range cells {
		if err := m.AddTagged(c.k, c.v, c.t, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	scs, err := m.Scanners(10)
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	defer sc.Close()
	i := 0
	for ok := sc.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = sc.Next() {
		c := cells[i]
		k, v, tg, _ := sc.Current()
		if !bytes.Equal(sc.Key(), c.k) || !bytes.Equal(sc.Value(), c.v) || !bytes.Equal(sc.Tags(), c.t) ||
			!bytes.Equal(k, c.k) || !bytes.Equal(v, c.v) || !bytes.Equal(tg, c.t) {
			t.Fatalf("cell %d: %v value %d bytes tags %x, want %v value %d bytes tags %x", i, sc.Key(), len(sc.Value()), sc.Tags(), c.k, len(c.v), c.t)
		}
		i++
	}
	if i != len(cells) {
		t.Fatalf("%d cells scanned, want %d", i, len(cells))
	}
	if !sc.Seek(key("c", "q", 1, cell.Put)) || !bytes.Equal(sc.Tags(), tags) || len(sc.Value()) != len(big) {
		t.Fatal("seek to the heap-stored tagged cell")
	}
}

// A memstore holds no chunk until written, and a flush (snapshot, then dropping it) gives every
// chunk back: regions cost chunk memory only while they hold data.
func TestChunksOnlyWhileWritten(t *testing.T) {
	pool := testPool(t, 64<<10, 1<<20)
	inUse := func() int64 { return pool.Stats().InUse }
	var stores []*Memstore
	for range 100 { // more memstores than the budget has chunks (16)
		m, err := New(pool)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, m)
	}
	if n := inUse(); n != 0 {
		t.Fatalf("100 empty memstores hold %d chunks", n)
	}
	m := stores[0]
	if err := m.Add(cell.AppendKey(nil, []byte("r"), []byte("f"), []byte("q"), 1, cell.Put), []byte("v"), 1); err != nil {
		t.Fatal(err)
	}
	if n := inUse(); n != 1 {
		t.Fatalf("one written memstore: %d chunks in use, want 1", n)
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := inUse(); n != 1 {
		t.Fatalf("after the snapshot: %d chunks in use, want 1 (the snapshot's; the new segment holds none)", n)
	}
	if got := snap.Stats().Cells; got != 1 {
		t.Fatalf("snapshot holds %d cells", got)
	}
	m.ClearSnapshot(snap)
	if n := inUse(); n != 0 {
		t.Fatalf("after the flush: %d chunks in use, want 0", n)
	}
	for _, m := range stores {
		m.Close()
	}
}

// A reservation the pool cannot give gives back what it took: an empty memstore whose write was
// refused holds no chunk (it held them as spares, which no flush of an empty memstore frees).
func TestFailedReservationKeepsNoChunk(t *testing.T) {
	p := testPool(t, 64<<10, 256<<10) // four chunks
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Reserve(3 << 20); !errors.Is(err, ErrFull) {
		t.Fatalf("a reservation of 3 MiB from four 64 KiB chunks: %v, want ErrFull", err)
	}
	if n := p.Stats().InUse; n != 0 {
		t.Fatalf("%d chunks held after the refused reservation", n)
	}
	if st := m.Stats(); st.ChunkBytes != 0 {
		t.Fatalf("the memstore counts %d chunk bytes after the refused reservation", st.ChunkBytes)
	}
	k := key("r", "q", 1, cell.Put)
	if err := m.Reserve(EncodedCellSize(len(k), 10)); err != nil {
		t.Fatalf("a small reservation after it: %v", err)
	}
	m.Unreserve(EncodedCellSize(len(k), 10))
}
