package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// crashLog records what a workload was told.
type crashLog struct {
	mu      sync.Mutex
	acked   []Edit            // acknowledged as durable
	flushed map[string]uint64 // regions' flush marks (their edits may be archived)
}

func (l *crashLog) ack(e ...Edit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = append(l.acked, e...)
}

var crashOpts = Options{Dir: "wal/rs1", ArchiveDir: "archive/rs1", SegmentSize: 1024, SyncInterval: time.Hour, RollInterval: -1}

// sequentialWorkload appends 40 edits (SYNC and ASYNC), rolls, and marks
// flushes. It stops at the first error.
func sequentialWorkload(fs storage.FS, log *crashLog) error {
	opts := crashOpts
	opts.FS = fs
	w, err := Open(opts)
	if err != nil {
		return err
	}
	defer w.Close()
	var async []Edit
	for i := 0; i < 40; i++ {
		region := fmt.Sprintf("region-%d", i%3)
		e := testEdit(region, i)
		d := SyncWAL
		if i%4 == 1 {
			d = AsyncWAL
		}
		if _, err := w.Append(e, d); err != nil {
			return err
		}
		if d == AsyncWAL {
			async = append(async, cloneEdit(e))
		} else {
			// A synced record makes every earlier one durable.
			log.ack(async...)
			log.ack(cloneEdit(e))
			async = nil
		}
		if i%10 == 9 {
			if err := w.Roll(); err != nil {
				return err
			}
		}
		if i == 24 || i == 35 {
			// Regions flushed everything so far: all of them at 24,
			// region-0 only at 35.
			seq := w.LastSeq()
			for r := 0; r < 3; r++ {
				if r > 0 && i == 35 {
					break
				}
				region := fmt.Sprintf("region-%d", r)
				log.mu.Lock()
				log.flushed[region] = seq
				log.mu.Unlock()
				if err := w.MarkFlushed(region, seq); err != nil {
					return err
				}
			}
		}
	}
	return w.Close()
}

// concurrentWorkload appends each edits from each of 4 goroutines, every syncEvery-th with
// SYNC_WAL and the others with ASYNC_WAL (syncEvery 1: all synced), and stops a goroutine at its
// first error.
func concurrentWorkload(fs storage.FS, log *crashLog, set func(*Options), each, syncEvery int) error {
	opts := crashOpts
	opts.FS = fs
	set(&opts)
	w, err := Open(opts)
	if err != nil {
		return err
	}
	defer w.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []Edit
			for i := 0; i < each; i++ {
				e := testEdit(fmt.Sprintf("region-%d", g), g*100+i)
				d := AsyncWAL
				if i%syncEvery == syncEvery-1 {
					d = SyncWAL
				}
				if _, err := w.Append(e, d); err != nil {
					return
				}
				if mine = append(mine, cloneEdit(e)); d == SyncWAL {
					log.ack(mine...) // a synced record makes every earlier one durable
					mine = nil
				}
			}
		}()
	}
	wg.Wait()
	return w.Close()
}

// checkWholeEdit checks that a replayed edit is exactly one that the
// workload built: a record is whole or absent, never half-visible.
func checkWholeEdit(t *testing.T, e *Edit) {
	t.Helper()
	if len(e.Cells) != 1 {
		t.Fatalf("seq %d: %d cells", e.Seq, len(e.Cells))
	}
	row := cell.KeyValue(e.Cells[0]).Key().Row()
	i, err := strconv.Atoi(string(row[3:]))
	if err != nil {
		t.Fatalf("seq %d: bad row %q", e.Seq, row)
	}
	want := testEdit(string(e.Region), i)
	if !bytes.Equal(e.Cells[0], want.Cells[0]) || e.HasNonce != want.HasNonce || e.Nonce != want.Nonce {
		t.Fatalf("seq %d: record differs from what was appended", e.Seq)
	}
}

// checkRecovered replays a crashed filesystem and checks it.
func checkRecovered(t *testing.T, fs storage.FS, log *crashLog, what string) {
	t.Helper()
	if ok, _ := storage.Exists(fs, crashOpts.Dir); !ok {
		if len(log.acked) > 0 {
			t.Fatalf("%s: WAL directory lost with %d acknowledged edits", what, len(log.acked))
		}
		return
	}
	edits, _, err := replayAll(t, fs, crashOpts.Dir, ReplayOptions{})
	if err != nil {
		t.Fatalf("%s: replay after crash: %v\n%v", what, err, fs)
	}
	bySeq := map[uint64]*Edit{}
	for i := range edits {
		checkWholeEdit(t, &edits[i])
		bySeq[edits[i].Seq] = &edits[i]
	}
	for i := range log.acked {
		a := &log.acked[i]
		if a.Seq <= log.flushed[string(a.Region)] {
			continue // flushed: its segment may have been archived
		}
		if r, ok := bySeq[a.Seq]; !ok || !sameEdit(r, a) {
			t.Fatalf("%s: acknowledged edit seq %d (%s) missing after crash\n%v", what, a.Seq, a.Region, fs)
		}
	}
	// The WAL reopens on the crashed state (repairing a torn tail) and
	// keeps working; everything replays again afterwards.
	opts := crashOpts
	opts.FS = fs
	w, err := Open(opts)
	if err != nil {
		t.Fatalf("%s: reopen after crash: %v", what, err)
	}
	seq, err := w.Append(testEdit("region-new", 1), SyncWAL)
	if err != nil {
		t.Fatalf("%s: append after reopen: %v", what, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	again, _, err := replayAll(t, fs, crashOpts.Dir, ReplayOptions{})
	if err != nil {
		t.Fatalf("%s: replay after reopen: %v", what, err)
	}
	if len(again) == 0 || again[len(again)-1].Seq != seq {
		t.Fatalf("%s: edit appended after reopen not replayed last", what)
	}
	for i := range edits {
		if !sameEdit(&edits[i], &again[i]) {
			t.Fatalf("%s: reopen changed edit %d", what, i)
		}
	}
}

// TestCrashAtEveryOperation crashes the workload at its 1st, 2nd, ...
// mutating filesystem operation (create, write, sync, rename, remove,
// mkdir, truncate, dir sync), drops every unsynced byte and namespace
// change, and checks recovery. A second pass keeps random parts of the
// unsynced tails (torn writes).
func TestCrashAtEveryOperation(t *testing.T) {
	dry := faultfs.New(storage.NewMem())
	if err := sequentialWorkload(dry, &crashLog{flushed: map[string]uint64{}}); err != nil {
		t.Fatal(err)
	}
	total := dry.Count(faultfs.OpsMutating)
	if dry.Count(faultfs.OpRename) == 0 || dry.Count(faultfs.OpSyncDir) == 0 {
		t.Fatal("the workload must archive and roll")
	}
	t.Logf("workload: %d mutating operations", total)
	rng := rand.New(rand.NewPCG(42, 42))
	for n := int64(1); n <= total+1; n++ {
		for _, torn := range []string{"none", "tail", "pages"} {
			ffs := faultfs.New(storage.NewMem())
			ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: n, Action: faultfs.Crash})
			log := &crashLog{flushed: map[string]uint64{}}
			err := sequentialWorkload(ffs, log)
			if n <= total && err == nil {
				t.Fatalf("crash at op %d: workload did not notice", n)
			}
			opts := storage.CrashOptions{}
			if torn != "none" {
				opts.Rand, opts.Pages = rng, torn == "pages"
			}
			after, cerr := ffs.CrashClone(opts)
			if cerr != nil {
				t.Fatal(cerr)
			}
			checkRecovered(t, after, log, fmt.Sprintf("crash at op %d (torn: %s)", n, torn))
		}
	}
}

// burstWorkload appends from 4 goroutines, each 29 ASYNC_WAL edits then one SYNC_WAL, so that a
// commit spans pages, into segments of many commits.
func burstWorkload(fs storage.FS, log *crashLog, set func(*Options)) error {
	return concurrentWorkload(fs, log, func(o *Options) { o.SegmentSize = 64 << 10; set(o) }, 90, 30)
}

// TestCrashPersistsPagesOutOfOrder: a power loss during a sync may persist the pages of the
// commits being written in any order (a later page kept, an earlier one lost), as a disk does with
// blocks overwritten in place (written ahead with zeros, or the block a commit continues). Replay
// must take that for a torn tail, not corruption, and keep every acknowledged edit: the commit
// markers say which bytes had been synced.
func TestCrashPersistsPagesOutOfOrder(t *testing.T) {
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		rng := rand.New(rand.NewPCG(11, 11))
		dry := faultfs.New(storage.NewMem())
		if err := burstWorkload(dry, &crashLog{flushed: map[string]uint64{}}, set); err != nil {
			t.Fatal(err)
		}
		total, syncs := dry.Count(faultfs.OpsMutating), dry.Count(faultfs.OpSync)
		holes := 0
		for iter := 0; iter < 120; iter++ {
			// Half the crashes at any operation, half during a sync (with commits written and
			// not yet synced).
			ops, n := faultfs.OpsMutating, 1+rng.Int64N(total)
			if iter%2 == 1 {
				ops, n = faultfs.OpSync, 1+rng.Int64N(syncs)
			}
			ffs := faultfs.New(storage.NewMem())
			ffs.AddRule(faultfs.Rule{Ops: ops, Nth: n, Action: faultfs.Crash})
			log := &crashLog{flushed: map[string]uint64{}}
			burstWorkload(ffs, log, set)
			after, _ := ffs.CrashClone(storage.CrashOptions{Rand: rng, Pages: true})
			if _, r, err := replayAll(t, after, crashOpts.Dir, ReplayOptions{}); err == nil {
				for _, tt := range r.TornTails() {
					if validRecordAfter(t, after, tt) {
						holes++
					}
				}
			}
			checkRecovered(t, after, log, fmt.Sprintf("iteration %d, crash at op %d", iter, n))
		}
		if holes == 0 {
			t.Fatal("no crash image had a lost page before a kept one: the test proves nothing")
		}
		t.Logf("%d crash images with valid records after a lost page", holes)
	})
}

// TestCrashDuringConcurrentAppends crashes concurrent SYNC_WAL appenders at
// random operations.
func TestCrashDuringConcurrentAppends(t *testing.T) {
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		rng := rand.New(rand.NewPCG(7, 7))
		dry := faultfs.New(storage.NewMem())
		concurrentWorkload(dry, &crashLog{flushed: map[string]uint64{}}, set, 15, 1)
		total := dry.Count(faultfs.OpsMutating)
		for iter := 0; iter < 60; iter++ {
			n := 1 + rng.Int64N(total)
			ffs := faultfs.New(storage.NewMem())
			ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: n, Action: faultfs.Crash})
			log := &crashLog{flushed: map[string]uint64{}}
			concurrentWorkload(ffs, log, set, 15, 1)
			after, _ := ffs.CrashClone(storage.CrashOptions{Rand: rng})
			checkRecovered(t, after, log, fmt.Sprintf("iteration %d, crash at op %d", iter, n))
		}
	})
}

// TestCrashAfterFailedSync: a sync fails, the WAL recovers with Roll, then
// the machine crashes; acknowledged edits from before and after survive.
func TestCrashAfterFailedSync(t *testing.T) {
	for n := int64(1); n <= 12; n++ {
		mem := storage.NewMem()
		ffs := faultfs.New(mem)
		opts := crashOpts
		opts.FS = ffs
		w := mustOpen(t, opts)
		log := &crashLog{flushed: map[string]uint64{}}
		ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync | faultfs.OpWrite, Path: "wal/rs1/*.wal", Nth: n, Action: faultfs.ShortWrite})
		failures := 0
		for i := 0; i < 30; i++ {
			e := testEdit("r", i)
			if _, err := w.Append(e, SyncWAL); err != nil {
				failures++
				if err := w.Roll(); err != nil {
					t.Fatalf("roll after failure: %v", err)
				}
				continue
			}
			log.ack(cloneEdit(e))
		}
		if failures != 1 {
			t.Fatalf("op %d: %d failures", n, failures)
		}
		after, _ := ffs.CrashClone(storage.CrashOptions{})
		checkRecovered(t, after, log, fmt.Sprintf("failed op %d then crash", n))
	}
}

// validRecordAfter reports whether a valid record follows a torn tail (which the former rule,
// still that of segments without commit markers, took for corruption).
func validRecordAfter(t *testing.T, fs storage.FS, tt TornTail) bool {
	t.Helper()
	f, err := fs.Open(tt.File)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	found, err := (&fileReader{f: f, name: tt.File, size: size}).validRecordAfter(tt.Offset)
	if err != nil {
		t.Fatal(err)
	}
	return found
}
