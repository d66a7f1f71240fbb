package region

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
	"github.com/cellstore/cellstore/engine/wal"
)

// A batch that names a row more than once writes that row's cells together, the later write of a
// cell winning, and leaves the other rows alone (resolveMutations shares one buffer among the
// mutations and keys rows without copying them).
func TestBatchRepeatsARow(t *testing.T) {
	e := newEnv(t, fam("f"))
	put := func(row, q, v string) *Mutation {
		m := NewMutation([]byte(row))
		m.Put([]byte("f"), []byte(q), 5, []byte(v))
		return m
	}
	ms := []*Mutation{put("r1", "a", "1"), put("r2", "a", "2"), put("r1", "b", "3"), put("r1", "a", "4"), put("r3", "c", "5")}
	for i, err := range e.r.Batch(ms) {
		if err != nil {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}
	want := map[string]string{"r1": "f:a@5=4 f:b@5=3", "r2": "f:a@5=2", "r3": "f:c@5=5"}
	for row, w := range want {
		res, err := e.r.Get(&Get{Row: []byte(row)})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, c := range res.Cells {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s:%s@%d=%s", c.Family(), c.Qualifier(), c.Timestamp(), c.Value)
		}
		if got != w {
			t.Errorf("row %s: got %q, want %q", row, got, w)
		}
	}
}

// Row locks stay exclusive when their entries (and the copies of the rows that key them) are
// recycled: goroutines lock random rows of a small set, each checks it is alone in its row, and
// every entry is gone at the end.
func TestRowLocksRecycled(t *testing.T) {
	l := newRowLocks()
	const rows = 6
	var holders [rows]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 0, 16)
			for range 3000 {
				i := rng.IntN(rows)
				// The caller's buffer is reused for the next row at once: the lock must hold its own copy.
				buf = fmt.Appendf(buf[:0], "row-%d", i)
				rl, err := l.lock(buf, 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				buf = append(buf[:0], "scribbled"...)
				mu.Lock()
				holders[i]++
				n := holders[i]
				mu.Unlock()
				if n != 1 {
					t.Errorf("row-%d held by %d goroutines at once", i, n)
				}
				if rl.row != fmt.Sprintf("row-%d", i) {
					t.Errorf("lock entry keyed %q, want row-%d", rl.row, i)
				}
				mu.Lock()
				holders[i]--
				mu.Unlock()
				l.unlock(rl)
			}
		}()
	}
	wg.Wait()
	for i := range l.shards {
		if n := len(l.shards[i].m); n != 0 {
			t.Errorf("shard %d keeps %d lock entries after every lock was released", i, n)
		}
	}
}

// A write whose mutations all ask for ASYNC_WAL (or SKIP_WAL) is acknowledged without waiting for
// the WAL's sync, through every write call; one with a SYNC_WAL mutation waits for it. (A batch
// used to start from the zero durability, the table default, so every write was synced.)
func TestAsyncDurabilityDoesNotWaitForTheSync(t *testing.T) {
	e := newEnv(t, fam("f"))
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	e.r = nil
	e.w.Close()
	ffs := faultfs.New(e.fs)
	e.fs, e.cfg.FS = ffs, ffs
	e.openWAL()
	e.open()
	release := make(chan struct{})
	var syncing atomic.Int32
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "wal/rs1/*", Action: faultfs.Call, Fn: func() {
		syncing.Add(1)
		<-release
	}})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	put := func(row string, d wal.Durability) *Mutation {
		m := NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte("v"))
		m.Durability = d
		return m
	}
	// returns runs f and reports whether it returned within 10 s.
	returns := func(f func() error) bool {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	calls := map[string]func() error{
		"Mutate": func() error { return e.r.Mutate(put("a", wal.AsyncWAL)) },
		"Batch": func() error {
			return errors.Join(e.r.Batch([]*Mutation{put("b1", wal.AsyncWAL), put("b2", wal.SkipWAL), put("b3", wal.AsyncWAL)})...)
		},
		"MutateRow": func() error { return e.r.MutateRow([]*Mutation{put("c", wal.AsyncWAL), put("c", wal.AsyncWAL)}) },
		"CheckAndMutate": func() error {
			ok, err := e.r.CheckAndMutate(&CheckAndMutate{Row: []byte("d"), Family: []byte("f"), Qualifier: []byte("q"), Op: filter.Equal,
				Mutations: []*Mutation{put("d", wal.AsyncWAL)}}) // the cell is absent: the check holds
			if err == nil && !ok {
				err = errors.New("CheckAndMutate: the check of an absent cell failed")
			}
			return err
		},
	}
	for name, call := range calls {
		if !returns(call) {
			t.Fatalf("%s with ASYNC_WAL mutations waited for the WAL's sync", name)
		}
	}
	// A batch with one SYNC_WAL mutation waits for the sync (which also makes the others durable).
	done := make(chan []error, 1)
	go func() { done <- e.r.Batch([]*Mutation{put("e1", wal.AsyncWAL), put("e2", wal.SyncWAL)}) }()
	for deadline := time.Now().Add(10 * time.Second); syncing.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the SYNC_WAL batch never reached the WAL's sync")
		}
		time.Sleep(time.Millisecond) // polling the fault hook
	}
	select {
	case errs := <-done:
		t.Fatalf("a batch with a SYNC_WAL mutation returned before its sync finished: %v", errs)
	default:
	}
	close(release)
	released = true
	if err := errors.Join(<-done...); err != nil {
		t.Fatal(err)
	}
}

// MutateRow keeps each mutation's tags (cell ACLs), visibility and TTL on its own cells: it used to
// merge the mutations' ops into one mutation without them, storing labelled cells unlabelled.
func TestMutateRowKeepsEachMutationsTags(t *testing.T) {
	e := newEnv(t, fam("f"))
	acl := cell.AppendTag(nil, 1, []byte("acl-of-a"))
	vis := cell.AppendTag(nil, cell.TagVisibility, []byte{0, 0, 0, 1})
	a := NewMutation([]byte("r")).Put([]byte("f"), []byte("a"), 10, []byte("va"))
	a.Tags = acl
	b := NewMutation([]byte("r")).Put([]byte("f"), []byte("b"), 10, []byte("vb"))
	b.Visibility, b.TTL = vis, 1_000_000
	c := NewMutation([]byte("r")).Put([]byte("f"), []byte("c"), 10, []byte("vc"))
	if err := e.r.MutateRow([]*Mutation{a, b, c}); err != nil {
		t.Fatal(err)
	}
	res, err := e.r.Get(&Get{Row: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 3 {
		t.Fatalf("got %d cells, want 3", len(res.Cells))
	}
	for _, kv := range res.Cells {
		switch q := string(kv.Qualifier()); q {
		case "a":
			if !bytes.Equal(kv.Tags, acl) {
				t.Errorf("f:a tags %x, want the mutation's %x", kv.Tags, acl)
			}
		case "b":
			if !bytes.Contains(kv.Tags, vis) {
				t.Errorf("f:b tags %x, want its visibility %x", kv.Tags, vis)
			}
			if _, ok := cell.TTLOf(kv.Tags); !ok {
				t.Errorf("f:b tags %x: no TTL", kv.Tags)
			}
		case "c":
			if len(kv.Tags) != 0 {
				t.Errorf("f:c tags %x, want none (another mutation's tags leaked onto it)", kv.Tags)
			}
		}
	}
}

// A row delete whose family marker has an empty family (what the HBase protocol sends for
// `new Delete(row, ts)`) deletes every family up to ts, as one with no family does; it used to
// fail with "no such column family".
func TestDeleteRowWithEmptyFamily(t *testing.T) {
	f3, g3 := fam("f"), fam("g")
	f3.MaxVersions, g3.MaxVersions = 3, 3
	e := newEnv(t, f3, g3)
	for _, f := range []string{"f", "g"} {
		for _, ts := range []int64{50, 150} {
			m := NewMutation([]byte("r")).Put([]byte(f), []byte("q"), ts, []byte("v"))
			if err := e.r.Mutate(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := NewMutation([]byte("r"))
	del.Ops = append(del.Ops, Op{Type: cell.DeleteFamily, Family: []byte{}, Timestamp: 100})
	if err := e.r.Mutate(del); err != nil {
		t.Fatalf("row delete with an empty family: %v", err)
	}
	res, err := e.r.Get(&Get{Row: []byte("r"), MaxVersions: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 2 {
		t.Fatalf("got %d cells, want the two at ts 150", len(res.Cells))
	}
	for _, kv := range res.Cells {
		if kv.Timestamp() != 150 {
			t.Errorf("%s:%s@%d survived the delete up to 100", kv.Family(), kv.Qualifier(), kv.Timestamp())
		}
	}
}

// An Increment returns its cells in cell order whatever the order of its columns, and reads the
// current value only from its time range (HBase's Increment.setTimeRange).
func TestIncrementOrderAndTimeRange(t *testing.T) {
	e := newEnv(t, fam("f"))
	res, err := e.r.Increment(&Increment{Row: []byte("r"), Columns: []IncrementColumn{
		{Family: []byte("f"), Qualifier: []byte("b"), Amount: 1}, {Family: []byte("f"), Qualifier: []byte("a"), Amount: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 2 || string(res.Cells[0].Qualifier()) != "a" || string(res.Cells[1].Qualifier()) != "b" {
		t.Fatalf("increment of f:b then f:a returned %d cells starting with %q, want f:a then f:b", len(res.Cells), res.Cells[0].Qualifier())
	}
	five := make([]byte, 8)
	five[7] = 5
	if err := e.r.Mutate(NewMutation([]byte("c")).Put([]byte("f"), []byte("n"), 100, five)); err != nil {
		t.Fatal(err)
	}
	inc := func(tr TimeRange) int64 {
		t.Helper()
		res, err := e.r.Increment(&Increment{Row: []byte("c"), TimeRange: tr,
			Columns: []IncrementColumn{{Family: []byte("f"), Qualifier: []byte("n"), Amount: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		v := res.Cells[0].Value
		return int64(v[0])<<56 | int64(v[1])<<48 | int64(v[2])<<40 | int64(v[3])<<32 | int64(v[4])<<24 | int64(v[5])<<16 | int64(v[6])<<8 | int64(v[7])
	}
	if got := inc(TimeRange{Min: 0, Max: 101}); got != 6 {
		t.Fatalf("increment over [0, 101): %d, want 5+1", got)
	}
	if got := inc(TimeRange{Min: 1 << 50}); got != 1 {
		t.Fatalf("increment over a range with no version: %d, want 0+1", got)
	}
}

// A condition without an expected value (nil or empty) holds as HBase's does: for every operator
// but NOT_EQUAL when the cell is missing or empty, for NOT_EQUAL when it holds a value.
func TestCheckWithoutAValue(t *testing.T) {
	e := newEnv(t, fam("f"))
	for row, v := range map[string]string{"empty": "", "full": "x"} {
		if err := e.r.Mutate(NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), 10, []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		row   string
		op    filter.CompareOp
		value []byte
		want  bool
	}{
		{"missing", filter.Equal, nil, true}, {"missing", filter.NotEqual, nil, false}, {"missing", filter.Less, nil, true},
		{"empty", filter.Equal, nil, true}, {"empty", filter.Equal, []byte{}, true}, {"empty", filter.NotEqual, nil, false},
		{"full", filter.Equal, nil, false}, {"full", filter.NotEqual, []byte{}, true}, {"full", filter.Greater, nil, false},
	} {
		ok, err := e.r.CheckAndMutate(&CheckAndMutate{Row: []byte(tc.row), Family: []byte("f"), Qualifier: []byte("q"), Op: tc.op, Value: tc.value,
			Mutations: []*Mutation{NewMutation([]byte(tc.row)).Put([]byte("f"), []byte("other"), 10, []byte("y"))}})
		if err != nil || ok != tc.want {
			t.Errorf("row %s: check %v %q: %v %v, want %v", tc.row, tc.op, tc.value, ok, err, tc.want)
		}
	}
}

// A raw scan returns cells past the family's TTL until a compaction drops them, as HBase's; a
// plain read never does.
func TestRawScanSeesExpiredCells(t *testing.T) {
	f := fam("f")
	f.TTL = 10 // seconds
	e := newEnv(t, f)
	if err := e.r.Mutate(NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), e.clock.now.Load(), []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	e.clock.now.Add(20_000)
	count := func(raw bool) int {
		t.Helper()
		n := 0
		for _, res := range scanResults(t, e.r, &Scan{Raw: raw}) {
			n += len(res.Cells)
		}
		return n
	}
	if n := count(false); n != 0 {
		t.Fatalf("a read returned %d expired cells", n)
	}
	if n := count(true); n != 1 {
		t.Fatalf("a raw scan returned %d cells, want the expired one", n)
	}
	if _, err := e.r.Compact(true); err != nil {
		t.Fatal(err)
	}
	if n := count(true); n != 0 {
		t.Fatalf("after a major compaction a raw scan returned %d cells, want none", n)
	}
}

// A raw scan with a CellCheck returns only the delete markers the check lets it see, as cells.
func TestRawScanChecksDeleteMarkers(t *testing.T) {
	e := newEnv(t, fam("f"))
	secret := cell.AppendTag(nil, cell.TagVisibility, []byte{0, 0, 0, 1})
	del := NewMutation([]byte("secret-row")).DeleteColumn([]byte("f"), []byte("ssn"), 4)
	del.Visibility = secret
	if err := e.r.Mutate(del); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Mutate(NewMutation([]byte("open-row")).DeleteColumn([]byte("f"), []byte("q"), 4)); err != nil {
		t.Fatal(err)
	}
	hide := func(_ cell.Key, tags []byte) bool { return !bytes.Contains(tags, secret) }
	var rows []string
	for _, res := range scanResults(t, e.r, &Scan{Raw: true, CellCheck: hide}) {
		rows = append(rows, string(res.Row))
	}
	if len(rows) != 1 || rows[0] != "open-row" {
		t.Fatalf("a raw scan returned markers of rows %q, want only open-row's", rows)
	}
}
