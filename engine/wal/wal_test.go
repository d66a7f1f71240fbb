package wal

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

func TestRecordRoundTrip(t *testing.T) {
	for i, e := range []*Edit{testEdit("r1", 1), testEdit("region-two", 3), {Region: []byte("empty")}} {
		size := payloadSize(e)
		rec := appendRecord(nil, e, uint64(100+i), 12345, size)
		if len(rec) != recordHeaderSize+size {
			t.Fatalf("record length %d, want %d", len(rec), recordHeaderSize+size)
		}
		var d Edit
		if err := decodeEdit(rec[recordHeaderSize:], &d); err != nil {
			t.Fatal(err)
		}
		want := cloneEdit(e)
		want.Seq = uint64(100 + i)
		if !sameEdit(&d, &want) || d.WriteTime != 12345 {
			t.Fatalf("round trip: %+v vs %+v", d, want)
		}
	}
}

func TestAppendAndReplay(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1"})
	var want []Edit
	for i := 0; i < 100; i++ {
		e := testEdit(fmt.Sprintf("region-%d", i%3), i)
		seq, err := w.Append(e, SyncWAL)
		if err != nil {
			t.Fatal(err)
		}
		if seq != uint64(i+1) || e.Seq != seq {
			t.Fatalf("append %d got seq %d (edit %d)", i, seq, e.Seq)
		}
		want = append(want, cloneEdit(e))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := mustReplay(t, mem, "wal/rs1")
	if len(got) != len(want) {
		t.Fatalf("replayed %d edits, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameEdit(&got[i], &want[i]) {
			t.Fatalf("edit %d differs", i)
		}
	}
	// Region filter and start sequence id.
	sub, _, err := replayAll(t, mem, "wal/rs1", ReplayOptions{FromSeq: 50, Filter: func(r []byte) bool { return string(r) == "region-1" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sub {
		if string(e.Region) != "region-1" || e.Seq < 50 {
			t.Fatalf("filter let through %s/%d", e.Region, e.Seq)
		}
	}
	if len(sub) != 17 { // i in [49, 99] with i%3 == 1
		t.Fatalf("filtered replay has %d edits", len(sub))
	}
}

func TestAppendValidation(t *testing.T) {
	w := mustOpen(t, Options{FS: storage.NewMem(), Dir: "wal/rs1", MaxRecordSize: 1000})
	defer w.Close()
	if _, err := w.Append(&Edit{}, SyncWAL); !errors.Is(err, ErrInvalidEdit) {
		t.Fatalf("empty region: %v", err)
	}
	if _, err := w.Append(&Edit{Region: []byte("r"), Cells: []cell.KeyValue{{1, 2, 3}}}, SyncWAL); !errors.Is(err, ErrInvalidEdit) {
		t.Fatalf("malformed cell: %v", err)
	}
	big := cell.AppendKeyValue(nil, []byte("r"), []byte("f"), nil, 1, cell.Put, make([]byte, 2000))
	if _, err := w.Append(&Edit{Region: []byte("r"), Cells: []cell.KeyValue{big}}, SyncWAL); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("large record: %v", err)
	}
	if _, err := w.Append(testEdit("r", 1), Durability(42)); err == nil {
		t.Fatal("unknown durability accepted")
	}
	// No sequence id was consumed by the rejected edits.
	if seq, err := w.Append(testEdit("r", 1), SyncWAL); err != nil || seq != 1 {
		t.Fatalf("first valid append: %d %v", seq, err)
	}
}

func TestSkipWALAndSeqs(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1"})
	s1, _ := w.Append(testEdit("r", 1), SyncWAL)
	s2, err := w.Append(testEdit("r", 2), SkipWAL)
	if err != nil || s2 != s1+1 {
		t.Fatalf("skip: %d %v", s2, err)
	}
	if err := w.WaitDurable(s2); err != nil {
		t.Fatalf("WaitDurable of a SKIP_WAL id: %v", err)
	}
	w.AdvanceSeq(1000)
	w.AdvanceSeq(10) // never goes back
	s3, _ := w.Append(testEdit("r", 3), SyncWAL)
	if s3 != 1001 || w.LastSeq() != 1001 {
		t.Fatalf("after AdvanceSeq: %d, last %d", s3, w.LastSeq())
	}
	if err := w.WaitDurable(5000); err == nil {
		t.Fatal("WaitDurable of an unassigned id succeeded")
	}
	w.Close()
	got := mustReplay(t, mem, "wal/rs1")
	if len(got) != 2 || got[0].Seq != s1 || got[1].Seq != s3 {
		t.Fatalf("replay: %d edits", len(got))
	}
}

// TestConcurrentSyncAppends: many goroutines append with SYNC_WAL; every
// acknowledged edit is replayed exactly once, in sequence order, and syncs
// are shared.
func TestConcurrentSyncAppends(t *testing.T) {
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		mem := storage.NewMem()
		ffs := faultfs.New(mem)
		// A slow sync, as on a real disk, so that appenders pile up.
		ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Action: faultfs.Delay, Delay: time.Millisecond})
		opts := Options{FS: ffs, Dir: "wal/rs1", SegmentSize: 64 << 10}
		set(&opts)
		w := mustOpen(t, opts)
		const goroutines, perG = 32, 100
		acked := make([][]Edit, goroutines)
		var wg sync.WaitGroup
		syncsBefore := ffs.Count(faultfs.OpSync)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perG; i++ {
					e := testEdit(fmt.Sprintf("region-%d", g%5), g*perG+i)
					if _, err := w.Append(e, SyncWAL); err != nil {
						t.Errorf("append: %v", err)
						return
					}
					acked[g] = append(acked[g], cloneEdit(e))
				}
			}()
		}
		wg.Wait()
		syncs := ffs.Count(faultfs.OpSync) - syncsBefore
		st := w.Stats()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		total := goroutines * perG
		t.Logf("%d appends, %d file syncs, %d data syncs, %d rolls", total, syncs, st.Syncs, st.Rolls)
		if st.Syncs >= uint64(total)/4 {
			t.Fatalf("group commit did not group: %d syncs for %d appends", st.Syncs, total)
		}
		if syncs >= int64(total)/4 {
			t.Fatalf("backend saw %d syncs for %d appends", syncs, total)
		}
		got := mustReplay(t, mem, "wal/rs1")
		bySeq := map[uint64]*Edit{}
		for i := range got {
			if i > 0 && got[i].Seq <= got[i-1].Seq {
				t.Fatalf("replay out of order at %d", i)
			}
			bySeq[got[i].Seq] = &got[i]
		}
		n := 0
		for _, edits := range acked {
			for i := range edits {
				r, ok := bySeq[edits[i].Seq]
				if !ok || !sameEdit(r, &edits[i]) {
					t.Fatalf("acknowledged edit seq %d missing or different", edits[i].Seq)
				}
				n++
			}
		}
		if n != total || len(got) != total {
			t.Fatalf("acked %d, replayed %d, want %d", n, len(got), total)
		}
		if st.Rolls == 0 {
			t.Fatal("expected rolls under concurrent appends with a 64 KiB segment size")
		}
	})
}

func TestAsyncWALSyncedWithinInterval(t *testing.T) {
	mem := storage.NewMem()
	ffs := faultfs.New(mem)
	const interval = 50 * time.Millisecond
	start := time.Now() // before the open, where the sync interval's clock starts
	w := mustOpen(t, Options{FS: ffs, Dir: "wal/rs1", SyncInterval: interval})
	defer w.Close()
	syncs := ffs.Count(faultfs.OpSync)
	var last uint64
	for i := 0; i < 10; i++ {
		seq, err := w.Append(testEdit("r", i), AsyncWAL)
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if ffs.Count(faultfs.OpSync) != syncs && time.Since(start) < interval/2 {
		t.Fatal("ASYNC_WAL appends triggered a sync")
	}
	waitFor(t, 5*time.Second, "async records to be synced", func() bool { return w.Stats().SyncedSeq >= last })
	elapsed := time.Since(start)
	t.Logf("async records durable after %v (interval %v)", elapsed, interval)
	// Durable means: survives a power loss now.
	got := mustReplay(t, mem.CrashClone(storage.CrashOptions{}), "wal/rs1")
	if len(got) != 10 {
		t.Fatalf("after crash: %d edits, want 10", len(got))
	}
}

func TestAsyncWALDoesNotWaitForSync(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	w := mustOpen(t, Options{FS: ffs, Dir: "wal/rs1", SyncInterval: time.Hour})
	defer w.Close()
	// Hold the next segment sync until released.
	entered, release := make(chan struct{}), make(chan struct{})
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "wal/rs1/*.wal", Nth: 1, Action: faultfs.Call,
		Fn: func() { close(entered); <-release }})
	syncDone := make(chan error, 1)
	go func() {
		_, err := w.Append(testEdit("r", 0), SyncWAL)
		syncDone <- err
	}()
	<-entered
	// The syncer is stuck in a sync: ASYNC_WAL appends still return.
	var last uint64
	for i := 1; i <= 100; i++ {
		seq, err := w.Append(testEdit("r", i), AsyncWAL)
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	select {
	case err := <-syncDone:
		t.Fatalf("SYNC_WAL append returned before its sync finished: %v", err)
	default:
	}
	if w.Stats().SyncedSeq >= 1 {
		t.Fatal("synced watermark moved during a blocked sync")
	}
	close(release)
	if err := <-syncDone; err != nil {
		t.Fatal(err)
	}
	if err := w.WaitDurable(last); err != nil {
		t.Fatal(err)
	}
}

func TestRollBySize(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", SegmentSize: 2048})
	for i := 0; i < 100; i++ {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := w.Segments()
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 5 || !segs[len(segs)-1].Active {
		t.Fatalf("%d segments after 100 appends of ~150 bytes with 2 KiB segments", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		if s.Size < 2048 || s.Size > 2048+400 {
			t.Fatalf("closed segment %s has %d bytes", s.Path, s.Size)
		}
	}
	w.Close()
	if got := mustReplay(t, mem, "wal/rs1"); len(got) != 100 {
		t.Fatalf("replayed %d", len(got))
	}
}

func TestRollByTime(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", RollInterval: 30 * time.Millisecond, SyncInterval: 5 * time.Millisecond})
	defer w.Close()
	time.Sleep(50 * time.Millisecond) // not synchronisation: an empty segment must not roll
	if w.Stats().Rolls != 0 {
		t.Fatal("rolled an empty segment")
	}
	w.Append(testEdit("r", 1), SyncWAL)
	waitFor(t, 5*time.Second, "a time-based roll", func() bool { return w.Stats().Rolls >= 1 })
}

func TestArchiveAfterFlush(t *testing.T) {
	for _, archiveDir := range []string{"archive/wal/rs1", ""} {
		t.Run(fmt.Sprintf("archive=%q", archiveDir), func(t *testing.T) {
			mem := storage.NewMem()
			w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", ArchiveDir: archiveDir})
			defer w.Close()
			var a1, b1 uint64
			for i := 0; i < 10; i++ {
				a1, _ = w.Append(testEdit("a", i), SyncWAL)
				b1, _ = w.Append(testEdit("b", i), SyncWAL)
			}
			if err := w.Roll(); err != nil {
				t.Fatal(err)
			}
			a2, _ := w.Append(testEdit("a", 100), SyncWAL)
			if err := w.Roll(); err != nil {
				t.Fatal(err)
			}
			w.Append(testEdit("c", 1), SyncWAL)
			segs, _ := w.Segments()
			if len(segs) != 3 {
				t.Fatalf("%d segments", len(segs))
			}
			first := segs[0].Path
			units, pin := w.Backlog()
			if units != 2 || strings.Join(pin, ",") != "a,b" {
				t.Fatalf("backlog %d closed segments, pinning %v: want 2, a,b", units, pin)
			}
			// a flushed past its edits in segment 1 but not segment 2.
			if err := w.MarkFlushed("a", a1); err != nil {
				t.Fatal(err)
			}
			if segs, _ := w.Segments(); len(segs) != 3 {
				t.Fatal("archived a segment still holding b's edits")
			}
			_, pin = w.Backlog()
			if strings.Join(pin, ",") != "b" {
				t.Fatalf("pinning = %v", pin)
			}
			if err := w.MarkFlushed("b", b1-1); err != nil {
				t.Fatal(err)
			}
			if segs, _ := w.Segments(); len(segs) != 3 {
				t.Fatal("archived with b flushed below its last edit")
			}
			if err := w.MarkFlushed("b", b1); err != nil {
				t.Fatal(err)
			}
			segs, _ = w.Segments()
			if len(segs) != 2 || segs[0].Path == first {
				t.Fatalf("segment 1 not archived: %+v", segs)
			}
			if ok, _ := storage.Exists(mem, first); ok {
				t.Fatal("archived segment still in the WAL directory")
			}
			if archiveDir != "" {
				if ok, _ := storage.Exists(mem, path.Join(archiveDir, path.Base(first))); !ok {
					t.Fatal("segment not in the archive")
				}
			}
			// Segment 2 (a only) goes once a flushes past a2; the active
			// segment never goes.
			w.MarkFlushed("a", a2)
			w.MarkFlushed("c", 1<<40)
			segs, _ = w.Segments()
			if len(segs) != 1 || !segs[0].Active {
				t.Fatalf("after all flushes: %+v", segs)
			}
			if w.Stats().SegmentsArchived != 2 {
				t.Fatalf("archived %d", w.Stats().SegmentsArchived)
			}
		})
	}
}

func TestReopenContinues(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1"})
	for i := 0; i < 5; i++ {
		w.Append(testEdit("a", i), SyncWAL)
	}
	w.Close()
	w = mustOpen(t, Options{FS: mem, Dir: "wal/rs1", ArchiveDir: "archive"})
	if w.LastSeq() != 5 {
		t.Fatalf("LastSeq after reopen = %d", w.LastSeq())
	}
	seq, _ := w.Append(testEdit("a", 5), SyncWAL)
	if seq != 6 {
		t.Fatalf("seq after reopen = %d", seq)
	}
	segs, _ := w.Segments()
	if len(segs) != 2 || segs[0].Regions["a"] != 5 {
		t.Fatalf("inherited segment: %+v", segs)
	}
	w.MarkFlushed("a", 5)
	if segs, _ := w.Segments(); len(segs) != 1 {
		t.Fatal("inherited segment not archived after flush")
	}
	w.Close()
	got := mustReplay(t, mem, "wal/rs1")
	if len(got) != 1 || got[0].Seq != 6 {
		t.Fatalf("replay after archive: %d edits", len(got))
	}
	// InitialSeq lifts the start.
	w = mustOpen(t, Options{FS: mem, Dir: "wal/rs1", InitialSeq: 500})
	if seq, _ := w.Append(testEdit("a", 7), SyncWAL); seq != 501 {
		t.Fatalf("seq with InitialSeq = %d", seq)
	}
	w.Close()
}

func TestCloseSemantics(t *testing.T) {
	mem := storage.NewMem()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", SyncInterval: time.Hour})
	seq, _ := w.Append(testEdit("r", 1), AsyncWAL)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitDurable(seq); err != nil {
		t.Fatalf("async record not durable after Close: %v", err)
	}
	if _, err := w.Append(testEdit("r", 2), SyncWAL); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := w.Append(testEdit("r", 2), AsyncWAL); !errors.Is(err, ErrClosed) {
		t.Fatalf("async append after close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if err := w.Roll(); !errors.Is(err, ErrClosed) {
		t.Fatalf("roll after close: %v", err)
	}
	if got := mustReplay(t, mem.CrashClone(storage.CrashOptions{}), "wal/rs1"); len(got) != 1 {
		t.Fatalf("%d edits after close + crash", len(got))
	}
}

// TestSyncFailureNeverAcks: a failing sync (full disk) fails every waiting
// appender, refuses later appends, and Roll recovers without losing any
// acknowledged edit.
func TestSyncFailureNeverAcks(t *testing.T) {
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		for _, action := range []faultfs.Action{faultfs.Fail, faultfs.ShortWrite} {
			t.Run(fmt.Sprint(action), func(t *testing.T) {
				mem := storage.NewMem()
				ffs := faultfs.New(mem)
				opts := Options{FS: ffs, Dir: "wal/rs1"}
				set(&opts)
				w := mustOpen(t, opts)
				var mu sync.Mutex
				var acked []Edit
				var failed int
				ops := faultfs.OpSync
				if action == faultfs.ShortWrite {
					ops = faultfs.OpWrite
				}
				ffs.AddRule(faultfs.Rule{Ops: ops, Path: "wal/rs1/*.wal", Nth: 20, Action: action, Err: syscall.ENOSPC})
				var wg sync.WaitGroup
				for g := 0; g < 8; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 50; i++ {
							e := testEdit("r", g*1000+i)
							_, err := w.Append(e, SyncWAL)
							mu.Lock()
							if err == nil {
								acked = append(acked, cloneEdit(e))
							} else {
								if !errors.Is(err, ErrBroken) || !storage.IsNoSpace(err) && !errors.Is(err, ErrBroken) {
									t.Errorf("unexpected error: %v", err)
								}
								failed++
							}
							mu.Unlock()
							if err != nil {
								return
							}
						}
					}()
				}
				wg.Wait()
				if failed == 0 {
					t.Fatal("no append failed")
				}
				if _, err := w.Append(testEdit("r", 9999), SyncWAL); !errors.Is(err, ErrBroken) {
					t.Fatalf("append on a broken WAL: %v", err)
				}
				if err := w.Roll(); err != nil {
					t.Fatalf("roll to recover: %v", err)
				}
				after, err := w.Append(testEdit("r", 10000), SyncWAL)
				if err != nil {
					t.Fatalf("append after recovery: %v", err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				got := mustReplay(t, mem, "wal/rs1")
				bySeq := map[uint64]*Edit{}
				for i := range got {
					bySeq[got[i].Seq] = &got[i]
				}
				for i := range acked {
					if r, ok := bySeq[acked[i].Seq]; !ok || !sameEdit(r, &acked[i]) {
						t.Fatalf("acknowledged seq %d lost", acked[i].Seq)
					}
				}
				if _, ok := bySeq[after]; !ok {
					t.Fatal("post-recovery edit lost")
				}
				// Records of the failed batch were cut off by Roll.
				if len(got) != len(acked)+1 {
					t.Fatalf("replayed %d edits, acked %d + 1", len(got), len(acked))
				}
				t.Logf("acked %d, failed %d", len(acked), failed)
			})
		}
	})
}

// TestWaitDurableOfLostRecord: a record dropped by a failed sync never
// reports durable, even after recovery and later syncs.
func TestWaitDurableOfLostRecord(t *testing.T) {
	ffs := faultfs.New(storage.NewMem())
	w := mustOpen(t, Options{FS: ffs, Dir: "wal/rs1", SyncInterval: time.Hour})
	defer w.Close()
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: "wal/rs1/*.wal", Nth: 1, Err: syscall.EIO})
	seq, err := w.Append(testEdit("r", 1), AsyncWAL)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WaitDurable(seq); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitDurable: %v", err)
	}
	if err := w.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(testEdit("r", 2), SyncWAL); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitDurable(seq); !errors.Is(err, ErrLost) {
		t.Fatalf("WaitDurable of a lost record after recovery: %v", err)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{}, {FS: storage.NewMem()}, {FS: storage.NewMem(), Dir: "../x"}, {FS: storage.NewMem(), Dir: "w", ArchiveDir: "w"}} {
		if _, err := Open(o); err == nil {
			t.Fatalf("Open(%+v) succeeded", o)
		}
	}
}

func TestDurabilityString(t *testing.T) {
	names := []string{}
	for d := DurabilityDefault; d <= FsyncWAL; d++ {
		names = append(names, d.String())
	}
	if !slices.Equal(names, []string{"USE_DEFAULT", "SKIP_WAL", "ASYNC_WAL", "SYNC_WAL", "FSYNC_WAL"}) {
		t.Fatal(names)
	}
}
