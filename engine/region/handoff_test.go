//go:build linux

package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/s3/s3test"
	"github.com/cellstore/cellstore/engine/wal"
)

// putBoth writes rows [from, to) into families a and b, each row one edit.
func putBoth(t *testing.T, r *Region, from, to int, val string) {
	t.Helper()
	for i := from; i < to; i++ {
		m := NewMutation(fmt.Appendf(nil, "row%05d", i)).
			Put([]byte("a"), []byte("q"), int64(100+i), []byte(val)).
			Put([]byte("b"), []byte("q"), int64(100+i), []byte(val+"-b"))
		if err := r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
}

// storedManifest reads the region's manifest as it is on storage.
func (e *env) storedManifest() *manifest {
	e.t.Helper()
	m, _, _, err := readManifest(e.r.store, e.info.Dir())
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func TestCloseForMoveHandsTheMemstoreOffInTheManifest(t *testing.T) {
	e := newEnv(t, fam("a"), fam("b"))
	putBoth(t, e.r, 0, 20, "v1")
	if _, err := e.r.Flush(); err != nil { // the pre-close flush
		t.Fatal(err)
	}
	putBoth(t, e.r, 20, 30, "v1")
	putBoth(t, e.r, 0, 5, "v2") // newer versions of flushed rows
	if err := e.r.Mutate(NewMutation([]byte("row00007")).DeleteColumn([]byte("a"), []byte("q"), 107)); err != nil {
		t.Fatal(err)
	}
	want, wantRaw, files := visibleDump(t, e.r), rawDump(t, e.r), e.r.StoreFileCount()

	moved := e.r
	if err := moved.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	if got := moved.Metrics().Handoffs.Load(); got != 1 {
		t.Fatalf("handoffs %d, want 1", got)
	}
	if got := moved.Metrics().Flushes.Load(); got != 1 {
		t.Fatalf("flushes %d, want only the pre-close one: the close wrote a store file", got)
	}
	man := e.storedManifest()
	if len(man.Handoff) != 16 { // 10 + 5 rows, 1 delete: one edit each
		t.Fatalf("the manifest holds %d handed-off edits, want 16", len(man.Handoff))
	}
	for i, h := range man.Handoff {
		var ed wal.Edit
		if err := wal.DecodeEditRecord(h.Record, &ed); err != nil || ed.Seq != h.Seq || string(ed.Region) != e.r.name {
			t.Fatalf("handed-off edit %d: %v (seq %d, manifest says %d)", i, err, ed.Seq, h.Seq)
		}
		if i > 0 && h.Seq <= man.Handoff[i-1].Seq {
			t.Fatalf("handed-off edits out of order at %d", i)
		}
		if h.Seq <= man.FlushedSeq {
			t.Fatalf("handed-off edit %d has sequence id %d, flushed to %d", i, h.Seq, man.FlushedSeq)
		}
	}

	// The destination opens without flushing them and serves them.
	e.open()
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after the move reads\n%q\nwant\n%q", got, want)
	}
	if got := rawDump(t, e.r); !slices.Equal(got, wantRaw) {
		t.Fatalf("after the move raw reads\n%q\nwant\n%q", got, wantRaw)
	}
	if got := e.r.StoreFileCount(); !maps.Equal(got, files) || e.r.Metrics().Flushes.Load() != 0 {
		t.Fatalf("the open wrote store files: %v (was %v), %d flushes", got, files, e.r.Metrics().Flushes.Load())
	}

	// Moved on again before any flush: the manifest keeps the first close's edits too.
	putBoth(t, e.r, 30, 35, "v1")
	wantRaw = rawDump(t, e.r)
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	if man := e.storedManifest(); len(man.Handoff) != 21 {
		t.Fatalf("after the second move the manifest holds %d handed-off edits, want 21", len(man.Handoff))
	}
	e.open()
	if got := rawDump(t, e.r); !slices.Equal(got, wantRaw) {
		t.Fatalf("after the second move raw reads\n%q\nwant\n%q", got, wantRaw)
	}

	// A crash there: the WAL's edits and the handed-off ones are both replayed; the WAL's are
	// flushed at the open, which takes the handed-off ones along.
	putBoth(t, e.r, 35, 40, "v3")
	want, wantRaw = visibleDump(t, e.r), rawDump(t, e.r)
	e.r.Abort()
	e.open()
	if got := rawDump(t, e.r); !slices.Equal(got, wantRaw) {
		t.Fatalf("after the crash raw reads\n%q\nwant\n%q", got, wantRaw)
	}
	if man := e.storedManifest(); len(man.Handoff) != 0 || e.r.man.Handoff != nil {
		t.Fatalf("the open's flush left %d handed-off edits in the manifest", len(man.Handoff))
	}
	e.reopen()
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after a reopen reads\n%q\nwant\n%q", got, want)
	}
}

// A region opened from a handoff: a per-family flush keeps the edits the other family still
// needs, a full flush drops them all; a split's storage step refuses the region until then.
func TestHandedOffEditsLeaveWithTheFlushThatWritesThem(t *testing.T) {
	e := newEnv(t, fam("a"), fam("b"))
	putBoth(t, e.r, 0, 10, "v1")
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	e.open()
	want := rawDump(t, e.r)
	if err := e.r.Close(); err != nil { // a close that is not a move flushes
		t.Fatal(err)
	}
	if man := e.storedManifest(); len(man.Handoff) != 0 || len(man.Families["a"]) != 1 || len(man.Families["b"]) != 1 {
		t.Fatalf("after a flushing close: %d handed-off edits, files %v", len(man.Handoff), man.Families)
	}
	e.open()
	if got := rawDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after the flushing close\n%q\nwant\n%q", got, want)
	}

	putBoth(t, e.r, 10, 20, "v1")
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	lo := Info{Namespace: "default", Table: "t", ID: 2}
	hi := Info{Namespace: "default", Table: "t", ID: 3}
	if _, err := SplitClosed(Storage{FS: e.fs}, e.info, lo, hi, []byte("row00015")); !errors.Is(err, ErrCannotSplit) || !strings.Contains(err.Error(), "open the region") {
		t.Fatalf("split of a region with handed-off edits: %v", err)
	}
	e.open()
	// Only family a flushes: edits with cells of b stay handed off.
	e.r.flushMu.Lock()
	_, err := e.r.flushLocked(false, 0, func([]memstore.Stats) []bool { return []bool{true, false} })
	e.r.flushMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if man := e.storedManifest(); len(man.Handoff) != 10 {
		t.Fatalf("after a flush of family a alone the manifest holds %d handed-off edits, want 10", len(man.Handoff))
	}
	want = rawDump(t, e.r)
	e.r.Abort()
	e.open()
	if got := rawDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after a crash with family a flushed\n%q\nwant\n%q", got, want)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if man := e.storedManifest(); len(man.Handoff) != 0 {
		t.Fatalf("after a full flush the manifest holds %d handed-off edits", len(man.Handoff))
	}
	e.reopen()
	if got := rawDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("at the end\n%q\nwant\n%q", got, want)
	}
}

// A memstore larger than maxHandoffBytes is flushed to a store file as before.
func TestCloseForMoveFlushesALargeMemstore(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := 0; i < 100; i++ {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%05d", i)).Put([]byte("f"), []byte("q"), 1, make([]byte, 1024))); err != nil {
			t.Fatal(err)
		}
	}
	r := e.r
	if err := r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	if r.Metrics().Handoffs.Load() != 0 || r.Metrics().Flushes.Load() != 1 {
		t.Fatalf("handoffs %d, flushes %d: want a flush", r.Metrics().Handoffs.Load(), r.Metrics().Flushes.Load())
	}
	if man := e.storedManifest(); len(man.Handoff) != 0 || len(man.Families["f"]) != 1 {
		t.Fatalf("manifest: %d handed-off edits, files %v", len(man.Handoff), man.Families)
	}
}

// On a bucket, a move's close writes the manifest and nothing else.
func TestCloseForMoveOnABucketWritesOnlyTheManifest(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b storage.Bucket) {
		e := bucketEnv(t, b)
		putRows(t, e.r, 0, 10, "one")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		putRows(t, e.r, 10, 15, "two")
		before := keysUnder(t, b, e.info.Dir()+"/")
		if err := e.r.CloseForMove(); err != nil {
			t.Fatal(err)
		}
		if after := keysUnder(t, b, e.info.Dir()+"/"); !slices.Equal(after, before) {
			t.Fatalf("the close wrote objects:\nbefore %q\nafter  %q", before, after)
		}
		e.open()
		for i := 0; i < 15; i++ {
			want := "one"
			if i >= 10 {
				want = "two"
			}
			if got := getVal(t, e.r, i); got != want {
				t.Fatalf("row %d after the move: %q, want %q", i, got, want)
			}
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		if man := e.storedManifest(); len(man.Handoff) != 0 || len(man.Families["f"]) != 2 {
			t.Fatalf("after the destination's flush: %d handed-off edits, files %v", len(man.Handoff), man.Families)
		}
		e.reopen()
		if got := getVal(t, e.r, 12); got != "two" {
			t.Fatalf("row 12 after a reopen: %q", got)
		}
	})
}

// BenchmarkMoveClose is a move's close of a region on MinIO with a few edits since its pre-close
// flush: the flush that writes a store file and the manifest (flush), and the handoff that writes
// the manifest alone (handoff). The ratio of the two is what the region's writes wait for less.
//
//	CELLSTORE_S3_SERVER=$(hack/s3-server.sh) go test ./engine/region -run XXX -bench MoveClose -benchtime 200x
func BenchmarkMoveClose(b *testing.B) {
	srv := s3test.Start(b)
	for _, mode := range []string{"flush", "handoff"} {
		bucket := benchBucket(b, srv, mode)
		b.Run(mode, func(b *testing.B) {
			e := bucketEnv(b, bucket)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := e.r.Flush(); err != nil { // the pre-close flush; a handoff's open flushes nothing
					b.Fatal(err)
				}
				for j := 0; j < 5; j++ {
					if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%06d-%d", i, j)).Put([]byte("f"), []byte("q"), 1, make([]byte, 100))); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				var err error
				if mode == "flush" {
					err = e.r.Close()
				} else {
					err = e.r.CloseForMove()
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				e.open()
				b.StartTimer()
			}
		})
	}
}

// A region opened from a handoff asks for the flush that writes the edits soon after it opens
// (until then every manifest carries them, and a server of an earlier release would miss them).
func TestOpenFromAHandoffFlushesSoon(t *testing.T) {
	saved := handoffFlushAfter
	handoffFlushAfter = 10 * time.Millisecond
	t.Cleanup(func() { handoffFlushAfter = saved })
	e := newEnv(t, fam("f"))
	putRows(t, e.r, 0, 5, "v")
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	e.cfg.DisableAutoFlush = false
	e.open()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.storedManifest().Handoff) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the handed-off edits are still in the manifest 10 s after the open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := getVal(t, e.r, 3); got != "v" || e.r.StoreFileCount()["f"] != 1 {
		t.Fatalf("after the flush: row 3 %q, files %v", got, e.r.StoreFileCount())
	}
}

// Handed-off edits of a family the table no longer has leave nothing in memory: a flush drops
// them from the manifest rather than keeping them (and refusing splits) forever.
func TestHandedOffEditsOfADroppedFamilyGo(t *testing.T) {
	e := newEnv(t, fam("a"), fam("b"))
	for i := 0; i < 3; i++ {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "row%d", i)).Put([]byte("b"), []byte("q"), 1, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	altered := e.table
	altered.Families = []Family{fam("a")}
	if err := Create(e.fs, altered, e.info); err != nil {
		t.Fatal(err)
	}
	e.open()
	if n := len(e.storedManifest().Handoff); n != 3 {
		t.Fatalf("before the flush the manifest holds %d handed-off edits, want 3", n)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.storedManifest().Handoff); n != 0 {
		t.Fatalf("after the flush the manifest holds %d handed-off edits", n)
	}
}

// What the region reports as flushed (to the master, whose log splits skip edits up to it)
// includes the handed-off edits: no WAL is needed for them.
func TestFlushedSeqCountsHandedOffEdits(t *testing.T) {
	e := newEnv(t, fam("f"))
	putRows(t, e.r, 0, 3, "v")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := e.r.FlushedSeq()
	putRows(t, e.r, 3, 6, "v")
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	e.open()
	man := e.storedManifest()
	if man.FlushedSeq != flushed || len(man.Handoff) != 3 {
		t.Fatalf("manifest flushed to %d with %d handed-off edits, want %d and 3", man.FlushedSeq, len(man.Handoff), flushed)
	}
	if got, want := e.r.FlushedSeq(), man.Handoff[2].Seq; got != want {
		t.Fatalf("FlushedSeq %d, want the last handed-off edit's %d", got, want)
	}
}

// A handed-off edit has no nonce; the same edit recovered from the closing server's log has, and
// the replay remembers it: a retried increment is answered, not applied twice.
func TestRecoveredNonceOfAHandedOffEditIsKept(t *testing.T) {
	e := newEnv(t, fam("f"))
	inc := &Increment{Row: []byte("counter"), Columns: []IncrementColumn{{Family: []byte("f"), Qualifier: []byte("n"), Amount: 1}},
		NonceGroup: 1, Nonce: 7}
	if _, err := e.r.Increment(inc); err != nil {
		t.Fatal(err)
	}
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	e.open() // replays the handed-off edit, then the same edit from the WAL (this env's recovery)
	res, err := e.r.Increment(inc)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.r.Metrics().NonceDuplicates.Load(); got != 1 || len(res.Cells) != 1 || binary.BigEndian.Uint64(res.Cells[0].Value) != 1 {
		t.Fatalf("the retried increment: %v (nonce duplicates %d), want the first try's answer, 1", res.Cells, got)
	}
}

// heldLog holds MarkFlushed (which a close calls right after its last commit) until released.
type heldLog struct {
	wal.Log
	entered, release chan struct{}
}

func (h *heldLog) MarkFlushed(region string, seq uint64) error {
	if h.entered != nil {
		close(h.entered)
		<-h.release
		h.entered = nil
	}
	return h.Log.MarkFlushed(region, seq)
}

// A close serves reads until it is done, and the edits it handed off stay readable there until
// then: they are in no store file, so the memstore keeps them (a get and a scan right after the
// manifest's write, before the close ends, find them).
func TestHandedOffEditsStayReadableUntilTheCloseEnds(t *testing.T) {
	e := newEnv(t, fam("f"))
	putRows(t, e.r, 0, 10, "v")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	putRows(t, e.r, 10, 15, "h")
	h := &heldLog{Log: e.w, entered: make(chan struct{}), release: make(chan struct{})}
	e.r.cfg.WAL, e.r.wal = h, h
	closed := make(chan error, 1)
	go func() { closed <- e.r.CloseForMove() }()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the close did not hand off")
	}
	got, n := getVal(t, e.r, 12), countRows(t, e.r)
	close(h.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got != "h" || n != 15 {
		t.Fatalf("between the handoff's commit and the close's end: row 12 %q, %d rows; want h and 15", got, n)
	}
	if e.r.Metrics().Handoffs.Load() != 1 {
		t.Fatal("the close did not hand its edits off")
	}
	e.open()
	if n := countRows(t, e.r); n != 15 {
		t.Fatalf("%d rows after the reopen, want 15", n)
	}
}

// A region about to close for a move starts no compaction (asked for or by its own trigger), so
// that its close does not wait for one.
func TestHeldCompactionsDoNotRun(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := range 4 {
		putRows(t, e.r, i*10, i*10+10, "v")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	e.r.HoldCompactions()
	if _, err := e.r.Compact(true); !errors.Is(err, ErrClosed) {
		t.Fatalf("a compaction of a region holding them answered %v; want ErrClosed", err)
	}
	if n := e.r.StoreFileCount()["f"]; n != 4 {
		t.Fatalf("%d store files; want the 4 flushed", n)
	}
	e.r.cfg.DisableAutoCompaction = false
	e.r.requestCompaction()
	if e.r.compactRequested.Load() {
		t.Fatal("a region holding compactions asked for one")
	}
	if err := e.r.CloseForMove(); err != nil {
		t.Fatal(err)
	}
	e.open()
	if n := countRows(t, e.r); n != 40 {
		t.Fatalf("%d rows after the move, want 40", n)
	}
}
