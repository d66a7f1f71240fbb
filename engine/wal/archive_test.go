package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// readArchive returns copies of every archived edit, in the order ReadArchive gives them.
func readArchive(t testing.TB, b storage.Bucket) []Edit {
	t.Helper()
	var out []Edit
	if _, err := ReadArchive(context.Background(), b, func(_ string, e *Edit) error {
		out = append(out, cloneEdit(e))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func countKeys(t testing.TB, b storage.Bucket, prefix string) int {
	t.Helper()
	objs, err := b.List(context.Background(), prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// An object log with an archive keeps a flushed object until it is archived, archives each
// acknowledged edit once, and deletes what is both flushed and archived.
func TestObjectLogArchive(t *testing.T) {
	ctx := context.Background()
	b, dst := dirBucket(t), dirBucket(t)
	l, err := OpenObjectLog(ctx, ObjectLogOptions{Bucket: b, Prefix: "wal/rs1_1", Writer: "test",
		Archive: &ArchiveTarget{Bucket: dst, Log: "rs1_1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var want []Edit
	for i := range 10 {
		e := testEdit("r1", i)
		seq, err := l.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = seq
		want = append(want, cloneEdit(e))
	}
	if err := l.MarkFlushed("r1", l.LastSeq()); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, b, "wal/rs1_1/"); n != 10 {
		t.Fatalf("%d objects left after a flush, want all 10 (none archived yet)", n)
	}
	n, err := l.Archive(ctx)
	if err != nil || n != 10 {
		t.Fatalf("Archive = %d, %v; want 10 objects", n, err)
	}
	if n := countKeys(t, b, "wal/rs1_1/"); n != 1 {
		t.Fatalf("%d objects left once flushed and archived, want the highest only (a fence starts from it)", n)
	}
	// More edits, archived before they are flushed: kept until the flush.
	for i := 10; i < 15; i++ {
		e := testEdit("r1", i)
		seq, err := l.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = seq
		want = append(want, cloneEdit(e))
	}
	if n, err := l.Archive(ctx); err != nil || n != 5 {
		t.Fatalf("second Archive = %d, %v; want 5", n, err)
	}
	if n := countKeys(t, b, "wal/rs1_1/"); n != 5 {
		t.Fatalf("%d objects left archived but not flushed, want 5", n)
	}
	if n, err := l.Archive(ctx); err != nil || n != 0 {
		t.Fatalf("Archive with nothing new = %d, %v", n, err)
	}
	got := readArchive(t, dst)
	if len(got) != len(want) {
		t.Fatalf("archive has %d edits, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameEdit(&got[i], &want[i]) {
			t.Fatalf("archived edit %d differs", i)
		}
	}
	if through, err := ArchivedThrough(ctx, dst, "rs1_1"); err != nil || through != 15 {
		t.Fatalf("ArchivedThrough = %d, %v; want 15", through, err)
	}
	// The master archives what a dead server left: nothing twice.
	if n, err := ArchiveDeadObjectLog(ctx, b, "wal/rs1_1", ArchiveTarget{Bucket: dst, Log: "rs1_1"}, nil); err != nil || n != 0 {
		t.Fatalf("ArchiveDeadObjectLog after the server archived everything = %d, %v", n, err)
	}
}

// A directory WAL with an archive: Archive rolls the active segment so everything acknowledged is
// archived; a flushed segment stays until archived; the master archives a dead directory's rest,
// torn tail left out.
func TestDirWALArchive(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	fs, err := storage.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	dst := dirBucket(t)
	target := &ArchiveTarget{Bucket: dst, Log: "rs1_1"}
	w := mustOpen(t, Options{FS: fs, Dir: "wal/rs1_1", Archive: target})
	var want []Edit
	appendN := func(from, to int) {
		for i := from; i < to; i++ {
			e := testEdit("r1", i)
			seq, err := w.Append(e, SyncWAL)
			if err != nil {
				t.Fatal(err)
			}
			e.Seq = seq
			want = append(want, cloneEdit(e))
		}
	}
	appendN(0, 20)
	if err := w.MarkFlushed("r1", w.LastSeq()); err != nil {
		t.Fatal(err)
	}
	if err := w.Roll(); err != nil {
		t.Fatal(err)
	}
	segs, _ := w.Segments()
	if len(segs) != 2 {
		t.Fatalf("%d segments after a flush and a roll, want 2 (the flushed one kept until archived)", len(segs))
	}
	appendN(20, 25)
	if n, err := w.Archive(ctx); err != nil || n != 2 {
		t.Fatalf("Archive = %d, %v; want 2 segments (the active one rolled)", n, err)
	}
	segs, _ = w.Segments()
	if len(segs) != 2 {
		t.Fatalf("%d segments after archiving, want 2 (unflushed + active)", len(segs))
	}
	appendN(25, 30)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The server died: its last segment ends in garbage (a torn write).
	segs2, err := fs.List("wal/rs1_1")
	if err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(root, "wal/rs1_1", segs2[len(segs2)-1])
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, err := ArchiveDeadDir(ctx, fs, "wal/rs1_1", *target, nil); err != nil || n < 1 {
		t.Fatalf("ArchiveDeadDir = %d, %v; want the last segment", n, err)
	}
	got := readArchive(t, dst)
	if len(got) != len(want) {
		t.Fatalf("archive has %d edits, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameEdit(&got[i], &want[i]) {
			t.Fatalf("archived edit %d differs", i)
		}
	}
}

// ReadArchive merges logs by sequence id: a region that moved from one server to another reads
// back in the order it was written; damage is reported as corruption.
func TestReadArchiveMergesLogs(t *testing.T) {
	ctx := context.Background()
	dst := dirBucket(t)
	mk := func(log string, first uint64, seqs ...uint64) {
		var p archivePack
		for i, s := range seqs {
			e := testEdit("r1", int(s))
			e.Seq = s
			rec := appendRecord(nil, e, s, time.Now().UnixMilli(), payloadSize(e))
			p.add(first+uint64(i), rec)
		}
		if err := p.put(ctx, &ArchiveTarget{Bucket: dst, Log: log}); err != nil {
			t.Fatal(err)
		}
	}
	mk("a_1", 1, 1, 2, 3)
	mk("b_1", 1, 4, 7, 9)
	mk("a_1", 4, 5, 6, 8)
	mk("a_1", 6, 8, 10) // overlaps the previous object: 8 is given once
	got := readArchive(t, dst)
	var seqs []uint64
	for _, e := range got {
		seqs = append(seqs, e.Seq)
	}
	if len(seqs) != 10 {
		t.Fatalf("seqs %v, want 1..10", seqs)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs %v, want 1..10 in order", seqs)
		}
	}
	// Flip a byte of one object.
	key := ArchiveKey("b_1", 1, 3)
	data, _, err := dst.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-5] ^= 0xff
	if err := dst.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Put(ctx, key, data, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	_, err = ReadArchive(ctx, dst, func(string, *Edit) error { return nil })
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != key {
		t.Fatalf("ReadArchive over a damaged object = %v, want a CorruptionError naming %s", err, key)
	}
	// Regions and pruning.
	if err := RecordRegion(ctx, dst, "00000000000000aa", "ns:t"); err != nil {
		t.Fatal(err)
	}
	if err := RecordRegion(ctx, dst, "00000000000000aa", "ns:other"); err != nil {
		t.Fatal(err)
	}
	regions, err := ArchivedRegions(ctx, dst)
	if err != nil || regions["00000000000000aa"] != "ns:t" {
		t.Fatalf("ArchivedRegions = %v, %v", regions, err)
	}
	if n, err := PruneArchive(ctx, dst, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneArchive of nothing old = %d, %v", n, err)
	}
	if through, err := ArchivePrunedThrough(ctx, dst); err != nil || !through.IsZero() {
		t.Fatalf("an archive never pruned is pruned through %v (%v)", through, err)
	}
	// How far it was pruned: the newest object deleted.
	var newest time.Time
	if err := storage.Walk(ctx, dst, ArchivePrefix+"/", func(o storage.ObjectInfo) error {
		if o.ModTime.After(newest) {
			newest = o.ModTime
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := PruneArchive(ctx, dst, time.Now().Add(time.Hour)); err != nil || n != 4 {
		t.Fatalf("PruneArchive of everything = %d, %v", n, err)
	}
	if through, err := ArchivePrunedThrough(ctx, dst); err != nil || !through.Equal(newest) {
		t.Fatalf("pruned through %v (%v), want the newest object deleted, %v", through, err, newest)
	}
	if n, err := PruneArchive(ctx, dst, time.Now().Add(2*time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneArchive of an empty archive = %d, %v", n, err)
	}
	if through, err := ArchivePrunedThrough(ctx, dst); err != nil || !through.Equal(newest) {
		t.Fatalf("a prune that deleted nothing moved the mark to %v (%v)", through, err)
	}
	if _, err := dst.Put(ctx, ArchivePrunedKey, []byte("garbage"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ArchivePrunedThrough(ctx, dst); !errors.As(err, new(*CorruptionError)) {
		t.Fatalf("a corrupt mark: %v, want a CorruptionError", err)
	}
}

// racingPruner is a backup location where another pruner records a later pruned mark just
// before this one writes its own (once).
type racingPruner struct {
	storage.Bucket
	later time.Time
	raced bool
}

func (r *racingPruner) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	if key == ArchivePrunedKey && !r.raced {
		r.raced = true
		if _, err := r.Bucket.Put(ctx, key, []byte(r.later.UTC().Format(time.RFC3339Nano)), storage.Condition{}); err != nil {
			return "", err
		}
	}
	return r.Bucket.Put(ctx, key, body, cond)
}

// Two pruners at once never move the pruned mark back: the one that deleted less (an earlier
// newest object) and wrote last must not leave its time over the other's.
func TestPruneArchiveNeverMovesTheMarkBack(t *testing.T) {
	ctx := context.Background()
	for _, marked := range []bool{false, true} { // with and without an earlier mark
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			dst := dirBucket(t)
			if marked {
				if _, err := dst.Put(ctx, ArchivePrunedKey, []byte(time.Now().Add(-48*time.Hour).UTC().Format(time.RFC3339Nano)), storage.Condition{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := dst.Put(ctx, ArchivePrefix+"/rs1_1/00000000000000000001-00000000000000000002.log", []byte("x"), storage.Condition{}); err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
			r := &racingPruner{Bucket: dst, later: later}
			if n, err := PruneArchive(ctx, r, time.Now().Add(time.Hour)); err != nil || n != 1 {
				t.Fatalf("PruneArchive = %d, %v", n, err)
			}
			if !r.raced {
				t.Fatal("the prune wrote no mark")
			}
			if through, err := ArchivePrunedThrough(ctx, dst); err != nil || !through.Equal(later) {
				t.Fatalf("pruned through %v (%v), want the other pruner's later %v", through, err, later)
			}
		})
	}
}

// benchLogs writes logs object logs of edits edits each (100-byte values, 8 edits per object) into
// b and returns their prefixes.
func benchLogs(t testing.TB, b storage.Bucket, logs, edits int) []string {
	var prefixes []string
	for l := range logs {
		prefix := fmt.Sprintf("wal/rs%d_1", l)
		lg, err := OpenObjectLog(context.Background(), ObjectLogOptions{Bucket: b, Prefix: prefix, Writer: "bench", FirstSeq: uint64(l + 1)})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < edits; i += 8 {
			var seqs []uint64
			for j := range 8 {
				seq, err := lg.AppendNoWait(testEdit(fmt.Sprintf("r%d", l), i+j))
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, seq)
			}
			if err := lg.WaitDurable(seqs[len(seqs)-1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := lg.Close(); err != nil {
			t.Fatal(err)
		}
		prefixes = append(prefixes, prefix)
	}
	return prefixes
}

// The cost of the archive next to what a crash recovery reads: archiving 4 logs of 10,000 edits
// (what a dead server's or a live one's round does: read each object, pack, one PUT per 16 MiB),
// reading the archive back merged in sequence order (what a recovery does), and reading the same
// logs with ReadObjectLog (what a split does). Run side by side:
//
//	go test ./engine/wal -run '^$' -bench 'Archive|ReadLogs' -benchtime 5x
func BenchmarkArchiveLogs(b *testing.B) {
	src := dirBucket(b)
	prefixes := benchLogs(b, src, 4, 10000)
	b.ResetTimer()
	for range b.N {
		dst := dirBucket(b)
		for i, p := range prefixes {
			if _, err := ArchiveDeadObjectLog(context.Background(), src, p, ArchiveTarget{Bucket: dst, Log: fmt.Sprintf("rs%d_1", i)}, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(4*10000*b.N)/b.Elapsed().Seconds(), "edits/s")
}

func BenchmarkReadArchive(b *testing.B) {
	src, dst := dirBucket(b), dirBucket(b)
	for i, p := range benchLogs(b, src, 4, 10000) {
		if _, err := ArchiveDeadObjectLog(context.Background(), src, p, ArchiveTarget{Bucket: dst, Log: fmt.Sprintf("rs%d_1", i)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		n := 0
		if _, err := ReadArchive(context.Background(), dst, func(string, *Edit) error { n++; return nil }); err != nil || n != 40000 {
			b.Fatalf("%d edits, %v", n, err)
		}
	}
	b.ReportMetric(float64(4*10000*b.N)/b.Elapsed().Seconds(), "edits/s")
}

func BenchmarkReadLogs(b *testing.B) {
	src := dirBucket(b)
	prefixes := benchLogs(b, src, 4, 10000)
	b.ResetTimer()
	for range b.N {
		n := 0
		for _, p := range prefixes {
			if _, err := ReadObjectLog(context.Background(), src, p, func(*Edit) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
		}
		if n != 40000 {
			b.Fatalf("%d edits", n)
		}
	}
	b.ReportMetric(float64(4*10000*b.N)/b.Elapsed().Seconds(), "edits/s")
}

// rangeCounter records how the archive is read: whole-object Gets, and the largest ranged read.
type rangeCounter struct {
	storage.Bucket
	gets, ranges int
	largest      int64
}

func (r *rangeCounter) Get(ctx context.Context, key string) ([]byte, storage.ObjectInfo, error) {
	r.gets++
	return r.Bucket.Get(ctx, key)
}

func (r *rangeCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	r.ranges++
	r.largest = max(r.largest, n)
	return r.Bucket.GetRange(ctx, key, off, n)
}

// setWindows makes ReadArchive's windows these sizes for the test.
func setWindows(t *testing.T, budget, lo, hi int) {
	b, l, h := archiveReadBudget, archiveMinWindow, archiveMaxWindow
	archiveReadBudget, archiveMinWindow, archiveMaxWindow = budget, lo, hi
	t.Cleanup(func() { archiveReadBudget, archiveMinWindow, archiveMaxWindow = b, l, h })
}

// packEdits archives edits of the given sequence ids (and sizes of value) as one object of log.
func packEdits(t *testing.T, dst storage.Bucket, log string, first uint64, writeTime int64, seqs []uint64, valueSize func(uint64) int) {
	t.Helper()
	var p archivePack
	for i, s := range seqs {
		e := testEdit("r1", int(s))
		if valueSize != nil {
			e.Cells = []cell.KeyValue{cell.AppendKeyValue(nil, []byte(fmt.Sprintf("row%08d", s)), []byte("f"), []byte("q"), int64(s), cell.Put,
				bytes.Repeat([]byte{byte('a' + s%26)}, valueSize(s)))}
		}
		e.Seq = s
		p.add(first+uint64(i), appendRecord(nil, e, s, writeTime+int64(s), payloadSize(e)))
	}
	if err := p.put(context.Background(), &ArchiveTarget{Bucket: dst, Log: log}); err != nil {
		t.Fatal(err)
	}
}

// The archive is read a window at a time per log, records spanning windows (and larger than
// one) included, with the same edits in the same order as in one read per object; no object is
// read whole.
func TestReadArchiveInWindows(t *testing.T) {
	dst := dirBucket(t)
	size := func(s uint64) int { return []int{10, 300, 5000, 40}[s%4] } // 5,000 > the window
	var seqs [3][]uint64
	for s := uint64(1); s <= 120; s++ {
		seqs[s%3] = append(seqs[s%3], s)
	}
	for l, ss := range seqs {
		log := fmt.Sprintf("rs%d_1", l)
		packEdits(t, dst, log, 1, 1e18, ss[:20], size)
		packEdits(t, dst, log, 21, 1e18, ss[20:], size)
	}
	want := readArchive(t, dst)
	if len(want) != 120 {
		t.Fatalf("%d edits, want 120", len(want))
	}
	setWindows(t, 3*1000, 997, 997) // an odd window: headers and records split anywhere
	rc := &rangeCounter{Bucket: dst}
	got := readArchive(t, rc)
	if len(got) != len(want) {
		t.Fatalf("%d edits in windows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Cells[0], want[i].Cells[0]) {
			t.Fatalf("edit %d: seq %d, want %d (or its cell differs)", i, got[i].Seq, want[i].Seq)
		}
	}
	if rc.gets != 0 || rc.ranges < 6*5 || rc.largest > 6000 {
		t.Errorf("%d whole reads, %d ranged reads, the largest %d bytes: want none, many, and none much past the largest record", rc.gets, rc.ranges, rc.largest)
	}
	// A record whose length runs past its object is corruption, found without reading more than
	// the object holds.
	key := ArchiveKey("rs0_1", 1, 20)
	data, _, err := dst.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(data[headerSize+4:], 0xfffffff0)
	if err := dst.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Put(context.Background(), key, data, storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	rc = &rangeCounter{Bucket: dst}
	_, err = ReadArchive(context.Background(), rc, func(string, *Edit) error { return nil })
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != key || ce.Offset != headerSize || rc.largest > int64(len(data)) {
		t.Fatalf("a record longer than its object: %v, the largest read %d bytes (the object has %d)", err, rc.largest, len(data))
	}
}

// A log missing units between two of its objects is an error saying which, unless the caller
// needs only edits written before the last one ahead of the gap.
func TestReadArchiveRefusesAGap(t *testing.T) {
	dst := dirBucket(t)
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).UnixNano()
	packEdits(t, dst, "a_1", 1, base, []uint64{1, 2, 3}, nil)
	packEdits(t, dst, "a_1", 6, base, []uint64{9, 10}, nil) // units 4 and 5 are gone
	packEdits(t, dst, "b_1", 1, base, []uint64{4, 5, 6}, nil)
	_, err := ReadArchive(context.Background(), dst, func(string, *Edit) error { return nil })
	var gap *ArchiveGapError
	if !errors.As(err, &gap) || gap.Log != "a_1" || gap.From != 4 || gap.To != 5 || gap.After.UnixNano() != base+3 {
		t.Fatalf("ReadArchive over a gap = %v, want units 4-5 of a_1 missing after the edit written at %d", err, base+3)
	}
	for _, want := range []string{"lacks units 4-5 of log a_1", "a recovery to a time before"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// A caller that needs only what was written before the gap's last edit: no error.
	var seqs []uint64
	_, err = ReadArchiveSince(context.Background(), dst, time.Time{}, time.Unix(0, base+3), func(_ string, e *Edit) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil || len(seqs) != 6 {
		t.Fatalf("read up to the gap: %v, %v; want 1..6 and no error", seqs, err)
	}
	// One that needs later edits gets the error.
	if _, err := ReadArchiveSince(context.Background(), dst, time.Time{}, time.Unix(0, base+4), func(string, *Edit) error { return nil }); !errors.As(err, &gap) {
		t.Fatalf("read past the gap: %v, want an ArchiveGapError", err)
	}
}

// agedBucket lists the objects in old as last modified at then.
type agedBucket struct {
	storage.Bucket
	old  map[string]bool
	then time.Time
}

func (a *agedBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]storage.ObjectInfo, error) {
	objs, err := a.Bucket.List(ctx, prefix, startAfter, limit)
	for i := range objs {
		if a.old[objs[i].Key] {
			objs[i].ModTime = a.then
		}
	}
	return objs, err
}

// A read from a time on (a recovery from a backup) finds the objects lost just after that time:
// the first object it reads must follow the last one it left out as older.
func TestReadArchiveSinceRefusesALeadingGap(t *testing.T) {
	dst := dirBucket(t)
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).UnixNano()
	packEdits(t, dst, "a_1", 1, base, []uint64{1, 2, 3}, nil)
	packEdits(t, dst, "a_1", 4, base, []uint64{4, 5}, nil)
	packEdits(t, dst, "a_1", 6, base, []uint64{6, 7}, nil)
	since := time.Now().Add(-time.Hour)
	b := &agedBucket{Bucket: dst, old: map[string]bool{ArchiveKey("a_1", 1, 3): true}, then: since.Add(-time.Hour)}
	var seqs []uint64
	if _, err := ReadArchiveSince(context.Background(), b, since, time.Time{}, func(_ string, e *Edit) error {
		seqs = append(seqs, e.Seq)
		return nil
	}); err != nil || fmt.Sprint(seqs) != "[4 5 6 7]" {
		t.Fatalf("read since the old object left out: %v, %v; want [4 5 6 7]", seqs, err)
	}
	if err := dst.Delete(context.Background(), ArchiveKey("a_1", 4, 5)); err != nil {
		t.Fatal(err)
	}
	_, err := ReadArchiveSince(context.Background(), b, since, time.Time{}, func(string, *Edit) error { return nil })
	var gap *ArchiveGapError
	if !errors.As(err, &gap) || gap.Log != "a_1" || gap.From != 4 || gap.To != 5 {
		t.Fatalf("read since with the first object after it lost = %v, want units 4-5 of a_1 missing", err)
	}
}
