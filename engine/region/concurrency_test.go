//go:build linux

package region

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

// A flipped byte in a store file's data block is reported as an error
// naming the file and the offset; nothing panics.
func TestCorruptStoreFile(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := 0; i < 200; i++ {
		m := NewMutation(fmt.Appendf(nil, "row%04d", i)).Put([]byte("f"), []byte("q"), 1, bytes.Repeat([]byte("v"), 50))
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	set := e.r.files.Load()
	p := set.byFamily[0][0].path
	e.r.Close()
	data, err := storage.ReadFile(e.fs, p)
	if err != nil {
		t.Fatal(err)
	}
	data[100] ^= 0x40 // inside the first data block
	if err := e.fs.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteFile(e.fs, p, data); err != nil {
		t.Fatal(err)
	}
	e.open()
	_, err = e.r.Get(&Get{Row: []byte("row0000")})
	if err == nil {
		t.Fatal("read of a corrupt block succeeded")
	}
	var ce *sfile.CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, sfile.ErrCorruption) || !strings.Contains(err.Error(), path.Base(p)) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("error does not name the file and offset: %v", err)
	}
	sc, _ := e.r.Scanner(&Scan{})
	if _, err := sc.Next(); err == nil || !errors.Is(err, sfile.ErrCorruption) {
		t.Fatalf("scan: %v", err)
	}
	sc.Close()
}

// Concurrent writers of whole rows and scanners: a scan never sees a
// partially applied row mutation, and the read point only moves forward.
func TestMVCCConcurrentWritersAndScanners(t *testing.T) {
	e := newEnv(t, fam("f"), fam("g"))
	const writers, rows, perWriter = 3, 20, 300
	var wg sync.WaitGroup
	var stop atomic.Bool
	var writeErr atomic.Value
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				row := fmt.Appendf(nil, "row%02d", (i*7+w)%rows)
				v := fmt.Appendf(nil, "w%d-%d", w, i)
				m := NewMutation(row)
				for _, q := range []string{"a", "b", "c"} {
					m.Put([]byte("f"), []byte(q), cell.LatestTimestamp, v)
					m.Put([]byte("g"), []byte(q), cell.LatestTimestamp, v)
				}
				if err := e.r.Mutate(m); err != nil {
					writeErr.Store(err)
					return
				}
			}
		}(w)
	}
	var rwg sync.WaitGroup
	var scanErr atomic.Value
	for s := 0; s < 2; s++ {
		rwg.Add(1)
		go func(s int) {
			defer rwg.Done()
			last := uint64(0)
			for !stop.Load() {
				rp := e.r.ReadPoint()
				if rp < last {
					scanErr.Store(fmt.Errorf("read point went back from %d to %d", last, rp))
					return
				}
				last = rp
				sc, err := e.r.Scanner(&Scan{Reversed: s == 1, Caching: 3})
				if err != nil {
					scanErr.Store(err)
					return
				}
				for {
					b, err := sc.Next()
					if err != nil {
						scanErr.Store(err)
						break
					}
					for _, res := range b.Results {
						if len(res.Cells) != 6 {
							scanErr.Store(fmt.Errorf("row %s has %d cells", res.Row, len(res.Cells)))
						}
						for _, c := range res.Cells {
							if !bytes.Equal(c.Value, res.Cells[0].Value) {
								scanErr.Store(fmt.Errorf("row %s: partial mutation visible: %s vs %s", res.Row, c.Value, res.Cells[0].Value))
							}
						}
					}
					if !b.More {
						break
					}
				}
				sc.Close()
			}
		}(s)
	}
	// Flush and compact while all this runs.
	for i := 0; i < 5; i++ {
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.Compact(i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	stop.Store(true)
	rwg.Wait()
	if err := writeErr.Load(); err != nil {
		t.Fatal(err)
	}
	if err := scanErr.Load(); err != nil {
		t.Fatal(err)
	}
	if p := e.r.mvcc.pending(); p != 0 {
		t.Fatalf("%d writes still pending", p)
	}
}

// Writes block (with ErrWritesBlocked) instead of exceeding the memstore
// limit, and resume after a flush.
func TestWritesBlockedUntilFlush(t *testing.T) {
	e := newEnv(t, fam("f"))
	e.r.cfg.FlushSize = 4 << 10
	e.r.cfg.BlockingMultiplier = 2
	e.r.cfg.BlockingWait = 50 * 1e6
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = e.r.Mutate(NewMutation(fmt.Appendf(nil, "r%d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 200)))
	}
	if !errors.Is(err, ErrWritesBlocked) {
		t.Fatalf("want ErrWritesBlocked, got %v", err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Mutate(NewMutation([]byte("after")).Put([]byte("f"), []byte("q"), 1, []byte("x"))); err != nil {
		t.Fatalf("write after flush: %v", err)
	}
}

// A write that waits for a flush counts once, however many times it looks again (HBase's
// blockedRequestsCount), in the region's metrics and in the server's count (Config.BlockedWrites),
// which outlives the region.
func TestBlockedWriteCountedOnce(t *testing.T) {
	e := newEnv(t, fam("f"))
	var server atomic.Int64
	e.r.cfg.BlockedWrites = &server
	e.r.cfg.FlushSize = 4 << 10
	e.r.cfg.BlockingMultiplier = 2
	e.r.cfg.BlockingWait = 300 * time.Millisecond // several looks, no flush
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = e.r.Mutate(NewMutation(fmt.Appendf(nil, "r%d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 200)))
	}
	if !errors.Is(err, ErrWritesBlocked) {
		t.Fatalf("want ErrWritesBlocked, got %v", err)
	}
	if got := e.r.Metrics().BlockedWrites.Load(); got != 1 || server.Load() != 1 {
		t.Fatalf("one blocked write counted %d times by the region, %d by the server; want once each", got, server.Load())
	}
}

// TestWritePressure: a region's write pressure is 0 under its flush size, rises with its memstore
// between the flush size and the blocking size, is 100 where writes block, and falls back to 0
// once a flush empties the memstore.
func TestWritePressure(t *testing.T) {
	e := newEnv(t, fam("f"))
	e.r.cfg.FlushSize = 16 << 10
	e.r.cfg.BlockingMultiplier = 3
	e.r.cfg.BlockingWait = 50 * time.Millisecond
	put := func(i int) error {
		return e.r.Mutate(NewMutation(fmt.Appendf(nil, "r%05d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 200)))
	}
	last, i := uint32(0), 0
	var seen []uint32
	for ; e.r.MemstoreStats().DataBytes < e.r.cfg.FlushSize; i++ {
		if p := e.r.WritePressure(); p != 0 {
			t.Fatalf("pressure %d with %d bytes held, under the flush size %d", p, e.r.MemstoreStats().DataBytes, e.r.cfg.FlushSize)
		}
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for ; err == nil; i++ {
		p := e.r.WritePressure()
		if p < last || p > 100 {
			t.Fatalf("pressure went from %d to %d with %d bytes held", last, p, e.r.MemstoreStats().DataBytes)
		}
		if p != last {
			seen = append(seen, p)
		}
		last = p
		err = put(i)
	}
	if !errors.Is(err, ErrWritesBlocked) {
		t.Fatalf("want ErrWritesBlocked at the blocking size, got %v", err)
	}
	if p := e.r.WritePressure(); p != 100 || len(seen) < 10 {
		t.Fatalf("pressure %d where writes block, after %d distinct values on the way (want 100, and a rise by steps)", p, len(seen))
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if p := e.r.WritePressure(); p != 0 {
		t.Fatalf("pressure %d after a flush", p)
	}
	for _, tc := range []struct {
		held, low, high int64
		want            uint32
	}{{0, 10, 20, 0}, {10, 10, 20, 0}, {15, 10, 20, 50}, {19, 10, 20, 90}, {20, 10, 20, 100}, {99, 10, 20, 100}, {11, 10, 10, 100}} {
		if got := PressureBetween(tc.held, tc.low, tc.high); got != tc.want {
			t.Errorf("PressureBetween(%d, %d, %d) = %d, want %d", tc.held, tc.low, tc.high, got, tc.want)
		}
	}
}

// A daughter region serves its half through references and compacts them
// away.
func TestSplitDaughters(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := 0; i < 100; i++ {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%03d", i)).Put([]byte("f"), []byte("q"), 1, fmt.Appendf(nil, "v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	mid, err := e.r.SplitPoint()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, err := e.r.Split(mid, 2)
	if err != nil {
		t.Fatal(err)
	}
	e.r = nil
	rl, err := Open(e.cfg, lo)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	rh, err := Open(e.cfg, hi)
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	if nl, nh := countRows(t, rl), countRows(t, rh); nl+nh != 100 || nl == 0 || nh == 0 {
		t.Fatalf("daughters hold %d + %d rows", nl, nh)
	}
	if !rl.HasReferences() {
		t.Fatal("daughter has no references")
	}
	if _, err := rl.Compact(false); err != nil {
		t.Fatal(err)
	}
	if rl.HasReferences() {
		t.Fatal("compaction left references")
	}
	if _, err := rl.SplitPoint(); err != nil && !errors.Is(err, ErrCannotSplit) {
		t.Fatal(err)
	}
	if err := rl.Mutate(NewMutation(fmt.Appendf(nil, "row%03d", 1)).Put([]byte("f"), []byte("q"), 2, []byte("new"))); err != nil {
		t.Fatal(err)
	}
	if err := rl.Mutate(NewMutation(hi.StartKey).Put([]byte("f"), []byte("q"), 2, []byte("x"))); !errors.Is(err, ErrWrongRegion) {
		t.Fatalf("write outside the daughter: %v", err)
	}
}

// SplitRowOf reads the split row of an open region from storage; SplitClosed writes daughters of
// a closed one (refusing one with no files, one big row, or references) and is idempotent.
func TestSplitRowOfAndSplitClosed(t *testing.T) {
	e := newEnv(t, fam("f"))
	if _, err := SplitRowOf(Storage{FS: e.fs}, e.info); !errors.Is(err, ErrCannotSplit) {
		t.Fatalf("split row of an empty region: %v", err)
	}
	// One big row: no split row.
	for i := 0; i < 200; i++ {
		if err := e.r.Mutate(NewMutation([]byte("big")).Put([]byte("f"), fmt.Appendf(nil, "q%03d", i), 1, make([]byte, 100))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := SplitRowOf(Storage{FS: e.fs}, e.info); !errors.Is(err, ErrCannotSplit) {
		t.Fatalf("split row of one big row: %v", err)
	}
	for i := 0; i < 300; i++ { // a larger file: the split row comes from it
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%03d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 300))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	row, err := SplitRowOf(Storage{FS: e.fs}, e.info) // the region is open meanwhile
	if err != nil || len(row) == 0 {
		t.Fatalf("split row: %q %v", row, err)
	}
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	e.r = nil
	lo := Info{Namespace: "default", Table: "t", ID: 5, Name: "lo"}
	hi := Info{Namespace: "default", Table: "t", ID: 6, Name: "hi"}
	// Recovered edits above the files were never replayed: no split. Stale ones (a log split
	// writes a region's edits whatever it flushed since, as for one that moved or stopped) do not
	// stop it.
	recovered := func(seq uint64) {
		t.Helper()
		buf, err := wal.AppendEditRecord(wal.RecoveredEditsHeader(nil), &wal.Edit{Region: []byte(e.info.EncodedName()), Seq: seq,
			Cells: []cell.KeyValue{cell.AppendKeyValue(nil, []byte("row001"), []byte("f"), []byte("q"), 1, cell.Put, []byte("v"))}})
		if err == nil {
			err = Storage{FS: e.fs}.WriteObject(path.Join(e.info.Dir(), "recovered.edits", wal.RecoveredEditsName(1)), buf, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	recovered(1 << 40)
	if _, err := SplitClosed(Storage{FS: e.fs}, e.info, lo, hi, nil); !errors.Is(err, ErrCannotSplit) || !strings.Contains(err.Error(), "not replayed") {
		t.Fatalf("SplitClosed with recovered edits never replayed: %v", err)
	}
	recovered(1)
	for range 2 { // a resumed split writes the same daughters again
		got, err := SplitClosed(Storage{FS: e.fs}, e.info, lo, hi, nil)
		if err != nil || string(got) != string(row) {
			t.Fatalf("SplitClosed: %q %v, want %q", got, err, row)
		}
	}
	if refs, err := HasReferenceFiles(Storage{FS: e.fs}, lo); err != nil || !refs {
		t.Fatalf("bottom daughter references: %v %v", refs, err)
	}
	lo.EndKey, hi.StartKey = row, row
	rl, err := Open(e.cfg, lo)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	// A daughter holding references cannot split, open or closed.
	if _, err := SplitRowOf(Storage{FS: e.fs}, lo); !errors.Is(err, ErrCannotSplit) {
		t.Fatalf("split row of a daughter with references: %v", err)
	}
	if _, err := SplitClosed(Storage{FS: e.fs}, lo, Info{Namespace: "default", Table: "t", ID: 7, Name: "x"}, Info{Namespace: "default", Table: "t", ID: 8, Name: "y"}, nil); !errors.Is(err, ErrCannotSplit) {
		t.Fatalf("SplitClosed of a daughter with references: %v", err)
	}
	if _, err := rl.Compact(true); err != nil {
		t.Fatal(err)
	}
	if refs, err := HasReferenceFiles(Storage{FS: e.fs}, lo); err != nil || refs {
		t.Fatalf("references after the compaction: %v %v", refs, err)
	}
	if refs, err := HasReferenceFiles(Storage{FS: e.fs}, Info{Namespace: "default", Table: "t", Name: "gone"}); err != nil || refs {
		t.Fatalf("references of a region without a directory: %v %v", refs, err)
	}
}

// Gets recycle their scanners (and the store file scanners under them): a result must stay
// intact after later Gets reuse them, also from concurrent goroutines.
func TestGetResultsSurviveRecycledScanners(t *testing.T) {
	e := newEnv(t, fam("f"))
	const rows = 200
	val := func(i int) []byte {
		return fmt.Appendf(nil, "value-%03d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, i%50))
	}
	for i := 0; i < rows; i++ {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%03d", i)).Put([]byte("f"), []byte("q"), 1, val(i))); err != nil {
			t.Fatal(err)
		}
		if i == rows/2 {
			if _, err := e.r.Flush(); err != nil { // half in a store file, half in the memstore
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kept []*Result
			for n := 0; n < 500; n++ {
				i := (n*7 + g) % rows
				res, err := e.r.Get(&Get{Row: fmt.Appendf(nil, "row%03d", i)})
				if err != nil {
					errs <- err
					return
				}
				kept = append(kept, res)
				for j, k := range kept[max(0, len(kept)-20):] {
					want := (max(0, len(kept)-20)+j)*7 + g
					if len(k.Cells) != 1 || !bytes.Equal(k.Cells[0].Value, val(want%rows)) || !bytes.Equal(k.Cells[0].Row(), fmt.Appendf(nil, "row%03d", want%rows)) {
						errs <- fmt.Errorf("an earlier Get's result changed: %v", k.Cells)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A close gives up a compaction in flight instead of waiting for it (a region being moved stays
// unavailable only for its flush): the compaction fails with ErrClosed, its partial file is
// dropped, and the region reopens with every row and only the files its manifest names.
func TestCloseGivesUpACompactionInFlight(t *testing.T) {
	e := newEnv(t, fam("f"))
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// The throughput limiter's pause is where the compaction is held until the close has begun.
	e.cfg.Compaction.ThroughputLimit = 1
	e.cfg.Compaction.Sleep = func(time.Duration) {
		once.Do(func() {
			close(inside)
			<-release
		})
	}
	e.reopen()
	const rows = 3000
	for part := range 2 {
		for i := part; i < rows; i += 2 {
			if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%05d", i)).Put([]byte("f"), []byte("q"), 1, bytes.Repeat([]byte{'v'}, 100))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	r := e.r
	compacted := make(chan error, 1)
	go func() {
		_, err := r.Compact(true)
		compacted <- err
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	for deadline := time.Now().Add(10 * time.Second); !r.closed.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the close did not begin")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-compacted; !errors.Is(err, ErrClosed) {
		t.Fatalf("compaction during the close: %v, want it given up with ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	e.open()
	if n := countRows(t, e.r); n != rows {
		t.Fatalf("%d rows after the reopen, want %d", n, rows)
	}
	files, err := e.fs.List(path.Join(e.r.dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if want := len(e.r.files.Load().byFamily[0]); len(files) != want {
		t.Errorf("family directory holds %v, the manifest names %d files: the partial compaction output stayed", files, want)
	}
}

// TestSecondCloseWaitsForTheFirst: a close that finds another close under way waits for its
// flush and answers as it ended; one that finds the region aborted says so. A second close used
// to return ErrClosed at once, which its callers took for "closed and flushed": a region server
// could report a region CLOSED (to split or move it) while its last flush was still being
// written, or after an abort that flushed nothing.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := range 20000 {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "r%05d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 100))); err != nil {
			t.Fatal(err)
		}
	}
	last := e.r.ReadPoint()
	first := make(chan error, 1)
	go func() { first <- e.r.Close() }()
	for !e.r.closed.Load() {
		runtime.Gosched()
	}
	err := e.r.Close()
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("second close = %v, want ErrClosed (flushed by the first)", err)
	}
	if got := e.r.FlushedSeq(); got < last {
		t.Fatalf("the second close returned with the region flushed to %d, its last write is %d", got, last)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	e.open() // the data is in its files

	e.r.Abort()
	if err := e.r.Close(); !errors.Is(err, ErrAborted) || errors.Is(err, ErrClosed) {
		t.Fatalf("close after an abort = %v, want ErrAborted", err)
	}
	e.r = nil
}
