package wal

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

func editsDir(region string) string { return "data/default/t1/" + region + "/recovered.edits" }

func readRecovered(t *testing.T, fs storage.FS, region string, opts ReplayOptions) []Edit {
	t.Helper()
	r, err := NewRecoveredEditsReader(fs, editsDir(region), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Edit
	for r.Next() {
		out = append(out, cloneEdit(r.Edit()))
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deadServer writes a WAL over several segments for regions a, b, c and
// fences it like the master does.
func deadServer(t *testing.T, mem *storage.Mem) map[string][]Edit {
	t.Helper()
	w := mustOpen(t, Options{FS: mem, Dir: "wal/rs1", SegmentSize: 2048})
	want := map[string][]Edit{}
	for i := 0; i < 60; i++ {
		region := []string{"a", "b", "c"}[i%3]
		if i%7 == 0 {
			region = "a"
		}
		e := testEdit(region, i)
		if _, err := w.Append(e, SyncWAL); err != nil {
			t.Fatal(err)
		}
		want[region] = append(want[region], cloneEdit(e))
	}
	w.Close()
	if err := mem.Rename("wal/rs1", "wal/rs1-splitting"); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("wal"); err != nil { // fencing is durable
		t.Fatal(err)
	}
	return want
}

func TestSplit(t *testing.T) {
	mem := storage.NewMem()
	want := deadServer(t, mem)
	res, err := Split(SplitOptions{FS: mem, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Edits != 60 || len(res.Files) != 3 || len(res.TornTails) != 0 {
		t.Fatalf("result %+v", res)
	}
	for region, edits := range want {
		got := readRecovered(t, mem, region, ReplayOptions{})
		if len(got) != len(edits) {
			t.Fatalf("region %s: %d edits, want %d", region, len(got), len(edits))
		}
		for i := range got {
			if !sameEdit(&got[i], &edits[i]) {
				t.Fatalf("region %s edit %d differs", region, i)
			}
		}
		if max := edits[len(edits)-1].Seq; res.MaxSeq[region] != max {
			t.Fatalf("region %s max seq %d, want %d", region, res.MaxSeq[region], max)
		}
		// The file is named by its max sequence id and no temp is left.
		names, _ := mem.List(editsDir(region))
		if len(names) != 1 || names[0] != fmt.Sprintf("%020d.edits", res.MaxSeq[region]) {
			t.Fatalf("region %s files %v", region, names)
		}
		// FromSeq filtering for a region that flushed part of it.
		from := edits[len(edits)/2].Seq
		if got := readRecovered(t, mem, region, ReplayOptions{FromSeq: from}); len(got) != len(edits)-len(edits)/2 {
			t.Fatalf("region %s from %d: %d edits", region, from, len(got))
		}
	}
	// Splitting again (say the master died mid-split) gives the same files.
	res2, err := Split(SplitOptions{FS: mem, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
	if err != nil || strings.Join(res2.Files, ",") != strings.Join(res.Files, ",") {
		t.Fatalf("second split: %v %v", res2, err)
	}
	if got := readRecovered(t, mem, "a", ReplayOptions{}); len(got) != len(want["a"]) {
		t.Fatalf("after second split: %d", len(got))
	}
	// A region without recovered edits.
	if got := readRecovered(t, mem, "zzz", ReplayOptions{}); len(got) != 0 {
		t.Fatal("edits for an unknown region")
	}
}

func TestSplitSkipsFlushed(t *testing.T) {
	mem := storage.NewMem()
	want := deadServer(t, mem)
	flushedA := want["a"][len(want["a"])-3].Seq
	res, err := Split(SplitOptions{FS: mem, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir,
		FlushedSeq: func(region string) uint64 {
			switch region {
			case "a":
				return flushedA
			case "b":
				return 1 << 40 // fully flushed: no file
			}
			return 0
		}})
	if err != nil {
		t.Fatal(err)
	}
	if got := readRecovered(t, mem, "a", ReplayOptions{}); len(got) != 2 || got[0].Seq <= flushedA {
		t.Fatalf("region a: %d edits", len(got))
	}
	if _, ok := res.MaxSeq["b"]; ok || len(readRecovered(t, mem, "b", ReplayOptions{})) != 0 {
		t.Fatal("fully flushed region got recovered edits")
	}
	if len(readRecovered(t, mem, "c", ReplayOptions{})) != len(want["c"]) {
		t.Fatal("region c")
	}
}

func TestSplitTornTailAndCorruption(t *testing.T) {
	mem := storage.NewMem()
	deadServer(t, mem)
	names, _ := mem.List("wal/rs1-splitting")
	last := path.Join("wal/rs1-splitting", names[len(names)-1])
	first := path.Join("wal/rs1-splitting", names[0])
	// A torn tail: a partial record at the end of the last segment.
	rewrite(t, mem, last, func(d []byte) []byte { return append(d, 0x11, 0x22, 0x33) })
	res, err := Split(SplitOptions{FS: mem, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
	if err != nil || len(res.TornTails) != 1 || res.Edits != 60 {
		t.Fatalf("torn tail: %+v %v", res, err)
	}
	// Corruption: nothing committed.
	mem2 := storage.NewMem()
	deadServer(t, mem2)
	rewrite(t, mem2, first, func(d []byte) []byte { d[headerSize+40] ^= 0xff; return d })
	_, err = Split(SplitOptions{FS: mem2, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), first) {
		t.Fatalf("corrupt split: %v", err)
	}
	for _, region := range []string{"a", "b", "c"} {
		names, _ := mem2.List(editsDir(region))
		if len(names) != 0 {
			t.Fatalf("region %s has files after a failed split: %v", region, names)
		}
	}
}

func TestSplitCrash(t *testing.T) {
	base := storage.NewMem()
	want := deadServer(t, base)
	// Crash the split at each operation; the committed files are whole,
	// and a rerun completes.
	for n := int64(1); ; n++ {
		mem := base.CrashClone(storage.CrashOptions{}) // synced state of the dead server
		ffs := faultfs.New(mem)
		ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: n, Action: faultfs.Crash})
		_, err := Split(SplitOptions{FS: ffs, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
		after, _ := ffs.CrashClone(storage.CrashOptions{})
		for region := range want {
			got := readRecovered(t, after, region, ReplayOptions{})
			if len(got) != 0 && len(got) != len(want[region]) {
				t.Fatalf("crash at %d: region %s has %d of %d edits", n, region, len(got), len(want[region]))
			}
		}
		if _, err := Split(SplitOptions{FS: after, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir}); err != nil {
			t.Fatalf("crash at %d: rerun: %v", n, err)
		}
		for region := range want {
			if got := readRecovered(t, after, region, ReplayOptions{}); len(got) != len(want[region]) {
				t.Fatalf("crash at %d: after rerun region %s has %d", n, region, len(got))
			}
		}
		if err == nil {
			break
		}
	}
}

// A region's recovered edits from two dead servers overlap in sequence ids when it was on one of
// them twice: server 1's log holds its edits 100..109 and 301..310, server 2's (a stint in
// between) 201..210. Each split writes its own file; reading them all must not take the drop from
// one file to the next for corruption (the region could not open, on any server).
func TestRecoveredEditsOfTwoStintsOverlapAcrossFiles(t *testing.T) {
	mem := storage.NewMem()
	write := func(dir string, stints ...[2]uint64) {
		t.Helper()
		w := mustOpen(t, Options{FS: mem, Dir: dir})
		for _, st := range stints {
			w.AdvanceSeq(st[0] - 1)
			for i := range st[1] {
				if _, err := w.Append(testEdit("a", int(st[0]+i)), SyncWAL); err != nil {
					t.Fatal(err)
				}
			}
		}
		w.Close()
	}
	write("wal/rs1", [2]uint64{100, 10}, [2]uint64{301, 10})
	write("wal/rs2", [2]uint64{201, 10})
	for _, dir := range []string{"wal/rs1", "wal/rs2"} {
		if err := mem.Rename(dir, dir+"-splitting"); err != nil {
			t.Fatal(err)
		}
		if _, err := Split(SplitOptions{FS: mem, Dir: dir + "-splitting", RecoveredEditsDir: editsDir}); err != nil {
			t.Fatal(err)
		}
	}
	got := readRecovered(t, mem, "a", ReplayOptions{})
	seqs := map[uint64]bool{}
	for _, e := range got {
		seqs[e.Seq] = true
	}
	if len(got) != 30 || len(seqs) != 30 || !seqs[100] || !seqs[201] || !seqs[310] {
		t.Fatalf("read %d edits (%d distinct sequence ids), want the 30 of both servers", len(got), len(seqs))
	}
}
