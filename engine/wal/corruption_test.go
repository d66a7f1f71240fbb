package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

type recordPos struct {
	file string
	off  int64
	seq  uint64
}

// writeWAL writes n edits with the given segment size and returns the
// record positions.
func writeWAL(t *testing.T, mem *storage.Mem, n int, segSize int64) []recordPos {
	t.Helper()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", SegmentSize: segSize})
	for i := 0; i < n; i++ {
		if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(mem, "wal/rs1", ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var pos []recordPos
	for r.Next() {
		f, off := r.Position()
		pos = append(pos, recordPos{f, off, r.Edit().Seq})
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	// A roll right after the last append leaves an empty last segment;
	// drop it so the last record is in the last segment.
	names, _ := mem.List("wal/rs1")
	for _, n := range names {
		if p := path.Join("wal/rs1", n); p > pos[len(pos)-1].file {
			if err := mem.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pos
}

// rewrite replaces a file's content through fn.
func rewrite(t *testing.T, mem *storage.Mem, name string, fn func([]byte) []byte) {
	t.Helper()
	data, err := storage.ReadFile(mem, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteFile(mem, name, fn(slices.Clone(data))); err != nil {
		t.Fatal(err)
	}
}

func lastFile(pos []recordPos) string { return pos[len(pos)-1].file }

func TestTornTail(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(data []byte, lastRec int64) []byte
		lost    int // edits lost from the end
		tornOff func(lastRec int64, size int) int64
	}{
		{"partial record", func(d []byte, last int64) []byte { return d[:last+20] }, 1, func(last int64, _ int) int64 { return last }},
		{"partial header", func(d []byte, last int64) []byte { return d[:last+5] }, 1, func(last int64, _ int) int64 { return last }},
		{"bad checksum at the end", func(d []byte, last int64) []byte { d[len(d)-1] ^= 0x40; return d }, 1, func(last int64, _ int) int64 { return last }},
		{"zero-filled tail", func(d []byte, _ int64) []byte { return append(d, make([]byte, 4096)...) }, 0, func(_ int64, size int) int64 { return int64(size) }},
		{"zeroed last record", func(d []byte, last int64) []byte { clear(d[last:]); return d }, 1, func(last int64, _ int) int64 { return last }},
		{"garbage length", func(d []byte, _ int64) []byte { return append(d, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0x7f, 9) }, 0, func(_ int64, size int) int64 { return int64(size) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := storage.NewMem()
			pos := writeWAL(t, mem, 30, 1024)
			last := pos[len(pos)-1]
			var size int
			rewrite(t, mem, last.file, func(d []byte) []byte { size = len(d); return tc.damage(d, last.off) })
			edits, r, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			if len(edits) != 30-tc.lost {
				t.Fatalf("replayed %d, want %d", len(edits), 30-tc.lost)
			}
			for i, e := range edits {
				if want := testEdit("r", i); e.Seq != uint64(i+1) || !slices.EqualFunc(e.Cells, want.Cells, func(a, b cell.KeyValue) bool { return string(a) == string(b) }) {
					t.Fatalf("edit %d damaged", i)
				}
			}
			torn, ok := r.TornTail()
			if !ok || torn.File != last.file || torn.Offset != tc.tornOff(last.off, size) {
				t.Fatalf("TornTail = %+v, %v (last record at %d, size %d)", torn, ok, last.off, size)
			}
			// Open repairs the tail and continues; the repaired segment
			// is no longer last and must read cleanly.
			w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1"})
			seq, err := w.Append(testEdit("r", 1000), SyncWAL)
			if err != nil {
				t.Fatal(err)
			}
			if seq != uint64(30-tc.lost+1) {
				t.Fatalf("seq after repair = %d", seq)
			}
			w.Close()
			edits, r, err = replayAll(t, mem, "wal/rs1", ReplayOptions{})
			if err != nil {
				t.Fatalf("replay after repair: %v", err)
			}
			if len(edits) != 30-tc.lost+1 {
				t.Fatalf("after repair: %d edits", len(edits))
			}
			if _, torn := r.TornTail(); torn {
				t.Fatal("torn tail still there after repair")
			}
		})
	}
}

func TestTornHeaderOfLastSegment(t *testing.T) {
	for _, keep := range []int{0, 7, headerSize - 1} {
		mem := storage.NewMem()
		pos := writeWAL(t, mem, 5, 1<<20)
		// A crash right after creating the next segment.
		next := path.Join("wal/rs1", segmentName(99))
		data := appendHeader(nil, kindSegment, 99)[:keep]
		if err := storage.WriteFile(mem, next, data); err != nil {
			t.Fatal(err)
		}
		edits, r, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
		if err != nil || len(edits) != 5 {
			t.Fatalf("keep %d: %d edits, %v", keep, len(edits), err)
		}
		if torn, ok := r.TornTail(); !ok || torn.File != next || torn.Offset != 0 {
			t.Fatalf("keep %d: torn %+v %v", keep, torn, ok)
		}
		w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1"})
		w.Append(testEdit("r", 5), SyncWAL)
		w.Close()
		if ok, _ := storage.Exists(mem, next); ok {
			t.Fatal("torn segment not removed by Open")
		}
		if got := mustReplay(t, mem, "wal/rs1"); len(got) != 6 {
			t.Fatalf("after reopen: %d", len(got))
		}
		_ = pos
	}
}

func TestCorruption(t *testing.T) {
	cases := []struct {
		name   string
		pick   func(pos []recordPos) recordPos // record to damage
		damage func(d []byte, off int64) []byte
		reason string
	}{
		{"flipped byte in a non-last segment", func(p []recordPos) recordPos { return p[3] },
			func(d []byte, off int64) []byte { d[off+30] ^= 1; return d }, "checksum mismatch"},
		{"flipped byte mid last segment", func(p []recordPos) recordPos {
			i := len(p) - 1
			for i > 0 && p[i-1].file == lastFile(p) {
				i--
			}
			if i == len(p)-1 {
				panic("the last segment holds a single record")
			}
			return p[i]
		},
			func(d []byte, off int64) []byte { d[off+30] ^= 1; return d }, "valid records follow"},
		{"bad length in a non-last segment", func(p []recordPos) recordPos { return p[1] },
			func(d []byte, off int64) []byte { d[off+4] = 0xff; d[off+5] = 0xff; return d }, "overruns"},
		{"zeroed record in a non-last segment", func(p []recordPos) recordPos { return p[2] },
			func(d []byte, off int64) []byte { clear(d[off : off+8]); return d }, "zeroed"},
		{"truncated non-last segment", func(p []recordPos) recordPos { return p[4] },
			func(d []byte, off int64) []byte { return d[:off+10] }, "overruns"},
		{"bad header of a non-last segment", func(p []recordPos) recordPos { return recordPos{file: p[0].file, off: 0} },
			func(d []byte, _ int64) []byte { d[3] ^= 1; return d }, "bad header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := storage.NewMem()
			pos := writeWAL(t, mem, 45, 2048)
			if pos[0].file == lastFile(pos) {
				t.Fatal("need several segments")
			}
			target := tc.pick(pos)
			if strings.Contains(tc.name, "non-last") && target.file == lastFile(pos) {
				t.Fatal("target in the last segment")
			}
			rewrite(t, mem, target.file, func(d []byte) []byte { return tc.damage(d, target.off) })
			edits, _, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
			var ce *CorruptionError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorruption) {
				t.Fatalf("replay error %v, want corruption", err)
			}
			if ce.File != target.file || ce.Offset != target.off || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("corruption %+v, want file %s offset %d reason %q", ce, target.file, target.off, tc.reason)
			}
			msg := err.Error()
			if !strings.Contains(msg, target.file) || !strings.Contains(msg, fmt.Sprintf("offset %d", target.off)) {
				t.Fatalf("error does not name file and offset: %s", msg)
			}
			// Replay stops at the damage: everything before is intact.
			for _, e := range edits {
				if e.Seq >= target.seq && target.off != 0 {
					t.Fatalf("replay went past the corruption (seq %d)", e.Seq)
				}
			}
			// Open refuses the directory with the same error.
			if _, err := Open(Options{FS: mem, Dir: "wal/rs1"}); !errors.As(err, &ce) {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

func TestSequenceOrderViolation(t *testing.T) {
	mem := storage.NewMem()
	mem.MkdirAll("wal/rs1")
	data := appendHeader(nil, kindSegment, 1)
	e := testEdit("r", 1)
	data = appendRecord(data, e, 5, 1, payloadSize(e))
	off := len(data)
	data = appendRecord(data, e, 5, 1, payloadSize(e))
	storage.WriteFile(mem, "wal/rs1/"+segmentName(1), data)
	_, _, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != int64(off) || !strings.Contains(ce.Reason, "not above") {
		t.Fatalf("got %v", err)
	}
}

func TestUndecodablePayload(t *testing.T) {
	mem := storage.NewMem()
	mem.MkdirAll("wal/rs1")
	data := appendHeader(nil, kindSegment, 1)
	// A record with a valid checksum whose payload is garbage: not a torn
	// write, so corruption even at the end of the last segment.
	rec := make([]byte, 8, 20)
	rec = append(rec, 9, 9, 9, 9)
	putRecordHeader(rec)
	data = append(data, rec...)
	storage.WriteFile(mem, "wal/rs1/"+segmentName(1), data)
	_, _, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "undecodable") {
		t.Fatalf("got %v", err)
	}
}

// A run of zeros in the middle of the last segment is not a torn tail when
// a valid record follows, however long the run (the search skips zeros).
func TestZerosBeforeValidRecordInLastSegment(t *testing.T) {
	mem := storage.NewMem()
	mem.MkdirAll("wal/rs1")
	data := appendHeader(nil, kindSegment, 1)
	e := testEdit("r", 1)
	data = appendRecord(data, e, 1, 1, payloadSize(e))
	hole := int64(len(data))
	for _, gap := range []int{1, 7, 8, 9, readWindow - 3, 3*readWindow + 5} {
		d := append(slices.Clone(data), make([]byte, gap)...)
		d = appendRecord(d, e, 2, 1, payloadSize(e))
		storage.WriteFile(mem, "wal/rs1/"+segmentName(1), d)
		_, _, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != hole || !strings.Contains(ce.Reason, "valid records follow") {
			t.Fatalf("gap %d: got %v, want corruption at %d with valid records following", gap, err, hole)
		}
	}
	// Zeros to the end: a torn tail.
	storage.WriteFile(mem, "wal/rs1/"+segmentName(1), append(slices.Clone(data), make([]byte, 3*readWindow)...))
	edits, r, err := replayAll(t, mem, "wal/rs1", ReplayOptions{})
	if torn, ok := r.TornTail(); err != nil || len(edits) != 1 || !ok || torn.Offset != hole {
		t.Fatalf("zeros to the end: %d edits, %v, torn %+v", len(edits), err, torn)
	}
}

// markedSegment builds a segment of format version 2: commits of the given sizes (edits each),
// each begun by a commit marker saying the segment was synced up to the previous commit's end.
// It returns the bytes and the offset of each commit and of each edit record.
func markedSegment(commits ...int) (data []byte, commitOffs, recOffs []int64) {
	data = appendVersionedHeader(nil, markedVersion, kindSegment, 1)
	seq := 0
	for _, n := range commits {
		synced := int64(len(data))
		commitOffs = append(commitOffs, synced)
		data = append(data, make([]byte, commitMarkerSize)...)
		putCommitMarker(data[synced:], synced)
		for range n {
			e := testEdit("r", seq)
			recOffs = append(recOffs, int64(len(data)))
			seq++
			data = appendRecord(data, e, uint64(seq), 1, payloadSize(e))
		}
	}
	return data, commitOffs, recOffs
}

// In a segment with commit markers, damage in the last segment is a torn tail unless a later
// commit's marker says that the damaged bytes had been synced: valid records of the commit being
// written (kept pages after a lost one) no longer make it corruption, a later commit still does.
func TestCommitMarkers(t *testing.T) {
	file := "wal/rs1/" + segmentName(1)
	replay := func(data []byte) ([]Edit, *Reader, error) {
		mem := storage.NewMem()
		mem.MkdirAll("wal/rs1")
		storage.WriteFile(mem, file, data)
		return replayAll(t, mem, "wal/rs1", ReplayOptions{})
	}
	t.Run("lost page before kept records of the last commit", func(t *testing.T) {
		data, commits, recs := markedSegment(2, 3)
		clear(data[commits[1] : recs[4]-1]) // the last commit's marker and first records read as zeros
		edits, r, err := replay(data)
		torn, ok := r.TornTail()
		if err != nil || len(edits) != 2 || !ok || torn.Offset != commits[1] || !validRecordAfter(t, r.fs, torn) {
			t.Fatalf("%d edits, %v, torn %+v %v: want the 2 edits of the first commit and a torn tail at %d", len(edits), err, torn, ok, commits[1])
		}
	})
	t.Run("damaged record of the last commit before its other records", func(t *testing.T) {
		data, commits, recs := markedSegment(1, 3)
		data[recs[1]+20] ^= 1
		edits, r, err := replay(data)
		if torn, ok := r.TornTail(); err != nil || len(edits) != 1 || !ok || torn.Offset != recs[1] {
			t.Fatalf("%d edits, %v, torn %+v: want 1 edit, torn at %d (commit at %d)", len(edits), err, torn, recs[1], commits[1])
		}
	})
	t.Run("damage before a later commit", func(t *testing.T) {
		data, commits, recs := markedSegment(2, 1, 1)
		data[recs[1]+20] ^= 1
		_, _, err := replay(data)
		var ce *CorruptionError
		want := fmt.Sprintf("the commit at offset %d was staged with the segment synced to %d", commits[1], commits[1])
		if !errors.As(err, &ce) || ce.Offset != recs[1] || !strings.Contains(ce.Reason, want) {
			t.Fatalf("got %v, want corruption at %d saying %q", err, recs[1], want)
		}
	})
	t.Run("damage in the commit before the last, two commits in flight", func(t *testing.T) {
		// With two sync slots a commit may be written before the one before it synced: its
		// marker then says less, and damage in either is a torn tail.
		data, commits, recs := markedSegment(2, 1, 1)
		putCommitMarker(data[commits[2]:], commits[1])
		data[recs[2]+20] ^= 1
		edits, r, err := replay(data)
		if torn, ok := r.TornTail(); err != nil || len(edits) != 2 || !ok || torn.Offset != recs[2] {
			t.Fatalf("%d edits, %v, torn %+v", len(edits), err, torn)
		}
	})
	t.Run("marker past itself", func(t *testing.T) {
		data, commits, _ := markedSegment(1, 1)
		putCommitMarker(data[commits[1]:], commits[1]+1)
		_, _, err := replay(data)
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "bad commit marker") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("marker in a segment of format version 1", func(t *testing.T) {
		data, _, _ := markedSegment(1)
		v1 := append(appendHeader(nil, kindSegment, 1), data[headerSize:]...)
		_, _, err := replay(v1)
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "at offset 24: undecodable record") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("version 2 is for segments only", func(t *testing.T) {
		if _, _, err := checkHeader(appendVersionedHeader(nil, markedVersion, kindRecovered, 0)); err == nil || !strings.Contains(err.Error(), "unsupported format version 2") {
			t.Fatalf("got %v", err)
		}
	})
}

// The markers the WAL writes vouch for what it acknowledged, in every group-commit configuration:
// damage to an early record of the last segment is corruption (later commits' markers say it was
// synced), and after a clean close so is damage to the very last record (the closing marker).
// Before the close nothing vouches for the last commit: its damage reads as a torn tail, as in any
// log.
func TestCommitMarkersVouch(t *testing.T) {
	forEachCommitConfig(t, func(t *testing.T, set func(*Options)) {
		mem := storage.NewMem()
		opts := Options{FS: mem, Dir: "wal/rs1", SegmentSize: 1 << 20}
		set(&opts)
		w := mustOpen(t, opts)
		appendFrom(t, 4, 50, func(e *Edit) error { _, err := w.Append(e, SyncWAL); return err })
		file := "wal/rs1/" + segmentName(1)
		open, err := storage.ReadFile(mem, file)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		closed, err := storage.ReadFile(mem, file)
		if err != nil {
			t.Fatal(err)
		}
		if len(closed) != len(open)+commitMarkerSize {
			t.Fatalf("closed segment %d bytes, open %d: want the closing marker's %d more", len(closed), len(open), commitMarkerSize)
		}
		r, err := NewReader(mem, "wal/rs1", ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for r.Next() {
			_, off := r.Position()
			offs = append(offs, off)
		}
		r.Close()
		if r.Err() != nil || len(offs) != 200 {
			t.Fatalf("%d edits, %v", len(offs), r.Err())
		}
		first, last := offs[0], offs[len(offs)-1]
		replayDamaged := func(image []byte, at int64) ([]Edit, *Reader, error) {
			d := slices.Clone(image)
			d[at+recordHeaderSize+5] ^= 0x10
			m := storage.NewMem()
			m.MkdirAll("wal/rs1")
			storage.WriteFile(m, file, d)
			return replayAll(t, m, "wal/rs1", ReplayOptions{})
		}
		var ce *CorruptionError
		if _, _, err := replayDamaged(open, first); !errors.As(err, &ce) || ce.Offset != first {
			t.Fatalf("first record damaged: %v, want corruption at %d", err, first)
		}
		if _, _, err := replayDamaged(closed, last); !errors.As(err, &ce) || ce.Offset != last {
			t.Fatalf("last record damaged after the close: %v, want corruption at %d", err, last)
		}
		got, r2, err := replayDamaged(open, last)
		if torn, ok := r2.TornTail(); err != nil || len(got) != 199 || !ok || torn.Offset != last {
			t.Fatalf("last record damaged before the close: %d edits, %v, torn %+v", len(got), err, torn)
		}
	})
}

// The search after damage reads each byte about once: a torn commit of 256 KiB of random bytes
// (a bulk load's record whose end was lost) before a zeroed tail costs a few window reads, not
// two per byte (the former scan re-read its 256 KiB window at every offset).
func TestTornTailScanIsLinear(t *testing.T) {
	data, _, _ := markedSegment(2)
	commit := int64(len(data))
	data = append(data, make([]byte, commitMarkerSize)...)
	putCommitMarker(data[commit:], commit)
	rng := rand.New(rand.NewPCG(3, 3))
	big := make([]byte, recordHeaderSize+256<<10)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	binary.LittleEndian.PutUint32(big[4:], uint32(len(big)-recordHeaderSize)) // a plausible length, a wrong checksum
	data = append(data, big...)
	data = append(data, make([]byte, 2<<20)...)
	ffs := faultfs.New(storage.NewMem())
	ffs.MkdirAll("wal/rs1")
	storage.WriteFile(ffs, "wal/rs1/"+segmentName(1), data)
	before := ffs.Count(faultfs.OpRead)
	edits, r, err := replayAll(t, ffs, "wal/rs1", ReplayOptions{})
	if torn, ok := r.TornTail(); err != nil || len(edits) != 2 || !ok || torn.Offset != commit+commitMarkerSize {
		t.Fatalf("%d edits, %v, torn %+v", len(edits), err, torn)
	}
	reads := ffs.Count(faultfs.OpRead) - before
	if limit := int64(2*len(data)/readWindow + 8); reads > limit {
		t.Fatalf("%d reads of a %d-byte segment, want at most %d", reads, len(data), limit)
	}
	t.Logf("%d reads of a %d-byte segment", reads, len(data))
}
