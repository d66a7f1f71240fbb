package wal

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
)

// A MultiWAL's groups take writes of their regions concurrently, with sequence ids unique across
// them; its directory then reads, splits and archives as one WAL: every edit once, in id order,
// each region's in the order written, the torn tail of each group's last segment cut off.
func TestMultiWAL(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMem()
	dst := dirBucket(t)
	m, err := OpenMulti(Options{FS: mem, Dir: "wal/rs1", SegmentSize: 4096, Archive: &ArchiveTarget{Bucket: dst, Log: "rs1"}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	regions := make([]string, 12)
	for i := range regions {
		regions[i] = fmt.Sprintf("region%02d", i)
	}
	groupOf := map[*WAL]bool{}
	for _, r := range regions {
		groupOf[m.For(r)] = true
	}
	if len(groupOf) != 3 {
		t.Fatalf("12 regions hash to %d of 3 groups", len(groupOf))
	}
	var mu sync.Mutex
	want := map[string][]uint64{}
	var wg sync.WaitGroup
	for _, r := range regions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := m.For(r)
			for i := range 40 {
				e := testEdit(r, i)
				seq, err := w.AppendNoWait(e)
				if err == nil {
					err = w.WaitDurable(seq)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[r] = append(want[r], seq)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A region opening elsewhere advances every group's ids.
	m.For(regions[0]).AdvanceSeq(1 << 20)
	seq, err := m.For(regions[1]).NextSeq()
	if err != nil || seq <= 1<<20 {
		t.Fatalf("after AdvanceSeq another group assigned %d (%v)", seq, err)
	}
	if st := m.Stats(); st.Appends != 12*40 || st.Syncs == 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		names, err := mem.List(GroupDir("wal/rs1", k))
		if err != nil || len(names) == 0 {
			t.Fatalf("group %d: %v %v", k, names, err)
		}
	}

	// One read over the directory: ids strictly increasing, each region's in its order.
	r, err := NewReader(mem, "wal/rs1", ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	var all []uint64
	for r.Next() {
		e := r.Edit()
		got[string(e.Region)] = append(got[string(e.Region)], e.Seq)
		all = append(all, e.Seq)
	}
	r.Close()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if len(all) != 12*40 || !slices.IsSorted(all) {
		t.Fatalf("read %d edits (sorted: %v)", len(all), slices.IsSorted(all))
	}
	for _, reg := range regions {
		if !slices.Equal(got[reg], want[reg]) {
			t.Fatalf("region %s read %v, wrote %v", reg, got[reg], want[reg])
		}
	}

	// Killed mid-write: each group's last segment ends torn. The split cuts nothing it needs.
	for k := range 3 {
		dir := GroupDir("wal/rs1", k)
		names, _ := mem.List(dir)
		slices.Sort(names)
		rewrite(t, mem, path.Join(dir, names[len(names)-1]), func(d []byte) []byte { return append(d, 0x11, 0x22, 0x33) })
	}
	if err := mem.Rename("wal/rs1", "wal/rs1-splitting"); err != nil {
		t.Fatal(err)
	}
	res, err := Split(SplitOptions{FS: mem, Dir: "wal/rs1-splitting", RecoveredEditsDir: editsDir})
	if err != nil || res.Edits != 12*40 || len(res.TornTails) != 3 {
		t.Fatalf("split %+v, %v", res, err)
	}
	for _, reg := range regions {
		edits := readRecovered(t, mem, reg, ReplayOptions{})
		var seqs []uint64
		for _, e := range edits {
			seqs = append(seqs, e.Seq)
		}
		if !slices.Equal(seqs, want[reg]) {
			t.Fatalf("region %s recovered %v, wrote %v", reg, seqs, want[reg])
		}
	}

	// The archive: each group as its own log, merged back in id order.
	n, err := ArchiveDeadDir(ctx, mem, "wal/rs1-splitting", ArchiveTarget{Bucket: dst, Log: "rs1"}, nil)
	if err != nil || n == 0 {
		t.Fatalf("archived %d units: %v", n, err)
	}
	for k := range 3 {
		if c := countKeys(t, dst, path.Join(ArchivePrefix, GroupLog("rs1", k))+"/"); c == 0 {
			t.Fatalf("group %d has no archive object", k)
		}
	}
	archived := readArchive(t, dst)
	if len(archived) != 12*40 {
		t.Fatalf("the archive holds %d edits, want %d", len(archived), 12*40)
	}
	for i := 1; i < len(archived); i++ {
		if archived[i].Seq <= archived[i-1].Seq {
			t.Fatalf("archive out of order at %d: %d after %d", i, archived[i].Seq, archived[i-1].Seq)
		}
	}
}

func TestOpenMultiRefuses(t *testing.T) {
	for _, n := range []int{0, MaxGroups + 1} {
		if _, err := OpenMulti(Options{FS: storage.NewMem(), Dir: "wal/x"}, n); err == nil {
			t.Errorf("%d groups accepted", n)
		}
	}
	if _, ok := parseGroupDir("g01"); ok {
		t.Error("g01 taken for a group directory")
	}
}
