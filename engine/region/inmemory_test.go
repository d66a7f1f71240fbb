//go:build linux

package region

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
)

func inMemFamily(name string, p InMemoryCompaction, versions int) Family {
	return Family{Name: name, BlockSize: 1024, MaxVersions: versions, InMemoryCompaction: p}
}

// The same random writes (puts at chosen and current timestamps, deletes) into regions with
// NONE, BASIC and EAGER memstores, in-memory flushes between them: every read that names no time
// range returns the same, before and after the flush to disk. BASIC drops nothing, so it is
// checked with every kind of delete; EAGER, like HBase's compactions, forgets versions beyond
// VERSIONS, which a later delete of one version (Delete, DeleteFamilyVersion) would otherwise
// bring back: its runs delete columns and families only.
func TestInMemoryCompactionReadsTheSame(t *testing.T) {
	for seed := range uint64(16) {
		versionDeletes := seed%2 == 0
		policies := []InMemoryCompaction{InMemoryNone, InMemoryBasic, InMemoryEager}
		if versionDeletes {
			policies = policies[:2]
		}
		envs := make([]*env, len(policies))
		for i, p := range policies {
			envs[i] = newEnv(t, inMemFamily("f", p, 2), inMemFamily("g", InMemoryNone, 1))
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		for step := range 600 {
			row := []byte(fmt.Sprintf("r%d", rng.IntN(6)))
			fam := []byte([]string{"f", "f", "f", "g"}[rng.IntN(4)])
			q := []byte(fmt.Sprintf("q%d", rng.IntN(3)))
			ts := int64(rng.IntN(8) + 1)
			if rng.IntN(3) == 0 {
				ts = cell.LatestTimestamp
			}
			m := NewMutation(row)
			switch x := rng.IntN(100); {
			case x < 75:
				m.Put(fam, q, ts, fmt.Appendf(nil, "v%d", step))
			case x < 83 && versionDeletes:
				m.DeleteVersion(fam, q, ts)
			case x < 91:
				m.DeleteColumn(fam, q, ts)
			case x < 96 || !versionDeletes:
				m.DeleteFamily(fam, ts)
			default:
				m.DeleteFamilyVersion(fam, ts)
			}
			for _, e := range envs {
				if err := e.r.Mutate(m); err != nil {
					t.Fatal(err)
				}
				if step%25 == 24 {
					if err := e.r.InMemoryFlush(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		read := func(e *env) string {
			var b strings.Builder
			for _, s := range []*Scan{{}, {MaxVersions: 2}, {MaxVersions: 5, Columns: []Column{{Family: []byte("f")}}}} {
				fmt.Fprintln(&b, strings.Join(observedScan(t, e.r, s), " "))
			}
			for i := range 6 {
				res, err := e.r.Get(&Get{Row: []byte(fmt.Sprintf("r%d", i)), MaxVersions: 3})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range res.Cells {
					fmt.Fprint(&b, fmtKV(c), " ")
				}
			}
			return b.String()
		}
		want := read(envs[0])
		for i, e := range envs[1:] {
			if got := read(e); got != want {
				t.Fatalf("seed %d: %v memstore reads\n%s\nNONE reads\n%s", seed, policies[i+1], got, want)
			}
		}
		if envs[len(envs)-1].r.Metrics().InMemoryMerges.Load() == 0 {
			t.Fatal("no in-memory merge happened")
		}
		for _, e := range envs {
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		for i, e := range envs[1:] {
			if got := read(e); got != want {
				t.Fatalf("seed %d: after the flush, %v reads\n%s\nNONE reads\n%s", seed, policies[i+1], got, want)
			}
		}
	}
}

// EAGER drops overwritten versions in memory: the flush writes the newest version of each cell
// only, while a scanner opened before the merge keeps its view (MVCC).
func TestInMemoryCompactionEager(t *testing.T) {
	e := newEnv(t, inMemFamily("f", InMemoryEager, 1))
	put := func(round int) {
		for i := range 100 {
			if err := e.r.Put(NewMutation(fmt.Appendf(nil, "row%03d", i)).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, fmt.Appendf(nil, "v%d", round))); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0)
	sc, err := e.r.Scanner(&Scan{})
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 10; round++ {
		put(round)
		if err := e.r.InMemoryFlush(); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.r.MemstoreStats().Cells; got != 100 {
		t.Fatalf("the memstore holds %d cells after EAGER merges, want 100", got)
	}
	if d := e.r.Metrics().InMemoryDroppedCells.Load(); d != 1000 {
		t.Fatalf("%d cells dropped, want 1000", d)
	}
	b, err := sc.Next()
	if err != nil {
		t.Fatal(err)
	}
	if v := string(b.Results[0].Cells[0].Value); v != "v0" {
		t.Fatalf("a scanner opened before the merges reads %q, want v0", v)
	}
	sc.Close()
	res, err := e.r.Flush()
	if err != nil {
		t.Fatal(err)
	}
	if res.Cells != 100 {
		t.Fatalf("the flush wrote %d cells, want 100", res.Cells)
	}
	if got := observedScan(t, e.r, &Scan{Raw: true, StopRow: []byte("row001")}); strings.Join(got, " ") != "row000/f:q@1000000=v10" {
		t.Fatalf("stored: %q", got)
	}
}

// A read that opens while an EAGER family's in-memory merge swaps in its result sees the column.
// It took its read point before it waited for the view lock, and the merge swapped in a segment
// keeping only the version newer than that point: the read found neither (nothing). The read point
// is taken under the view lock, and the merge swaps under it.
func TestEagerMergeDuringAReadsOpen(t *testing.T) {
	e := newEnv(t, inMemFamily("f", InMemoryEager, 1))
	put := func(v string) {
		t.Helper()
		if err := e.r.Put(NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	put("v1")
	if err := e.r.InMemoryFlush(); err != nil {
		t.Fatal(err)
	}
	e.r.viewMu.Lock()
	got := make(chan string, 1)
	go func() {
		res, err := e.r.Get(&Get{Row: []byte("r")})
		switch {
		case err != nil:
			got <- err.Error()
		case len(res.Cells) != 1:
			got <- fmt.Sprintf("%d cells", len(res.Cells))
		default:
			got <- string(res.Cells[0].Value)
		}
	}()
	// Wait until the read waits for the view lock (one goroutine's stack shows both).
	deadline := time.Now().Add(10 * time.Second)
	for buf := make([]byte, 1<<20); ; {
		n := runtime.Stack(buf, true)
		waiting := false
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			if bytes.Contains(g, []byte("RLock")) && bytes.Contains(g, []byte("region.(*Region).Get")) {
				waiting = true
			}
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			e.r.viewMu.Unlock()
			t.Fatal("the read never waited for the view lock")
		}
		runtime.Gosched()
	}
	put("v2")
	merged := make(chan error, 1)
	go func() { merged <- e.r.InMemoryFlush() }() // a merge keeping v2 only
	select {
	case err := <-merged:
		// (Swapped in without the view lock: the fault this test is about.)
		if err != nil {
			t.Error(err)
		}
	case <-time.After(200 * time.Millisecond): // waits for the view lock: released below
	}
	e.r.viewMu.Unlock()
	if v := <-got; v != "v1" && v != "v2" {
		t.Fatalf("a read opened across an EAGER merge read %s; want a version", v)
	}
	if err := <-merged; err != nil {
		t.Fatal(err)
	}
}

// An EAGER merge skips a put past its own TTL without counting it as a version, as reads do: the
// older version shows (it was dropped as beyond VERSIONS 1, and the column read nothing).
func TestEagerMergeSkipsExpiredCellTTL(t *testing.T) {
	e := newEnv(t, inMemFamily("f", InMemoryEager, 1))
	e.clock.now.Store(1_000_000)
	put := func(ts, ttl int64, v string) {
		t.Helper()
		m := NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), ts, []byte(v))
		m.TTL = ttl
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	put(999_000, 0, "v1")
	put(999_500, 1000, "v2") // expires at 1_000_500
	e.clock.now.Store(1_000_600)
	read := func(when string) {
		t.Helper()
		if got := strings.Join(observedScan(t, e.r, &Scan{}), " "); got != "r/f:q@999000=v1" {
			t.Fatalf("%s: read %q, want v1 (v2 expired)", when, got)
		}
	}
	read("before the merge")
	if err := e.r.InMemoryFlush(); err != nil {
		t.Fatal(err)
	}
	read("after the in-memory merge")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	read("after the flush")
}

// A region whose log holds more than the server's memstore memory opens all the same: replay
// writes store files at the flush size, as HBase's does. An EAGER family's overwrites kept its
// memstore small (the in-memory merges dropped the old versions, so it never reached the flush
// size), while the log kept every version: replaying them all into memory failed for want of
// memory, on every server, for good.
func TestReplayLargerThanTheMemstoreMemory(t *testing.T) {
	e := newEnv(t, inMemFamily("f", InMemoryEager, 1))
	// 24 MiB of memstore memory for the whole "server"; a 4 MiB flush size.
	e.close()
	b, _ := offheap.NewBudget("memstore", 24<<20, nil)
	pool, err := offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", ChunkSize: 256 << 10, SlabSize: 4 << 20,
		Hugepages: offheap.HugepagesOff, Budget: b, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.pool, e.cfg.Pool, e.cfg.FlushSize = pool, pool, 4<<20
	e.openWAL()
	e.open()
	value := bytes.Repeat([]byte("v"), 8<<10)
	const rows, rounds = 10, 600 // 48 MiB of puts, twice the memory
	for round := range rounds {
		for i := range rows {
			v := append(fmt.Appendf(nil, "%04d:", round), value...)
			if err := e.r.Put(NewMutation(fmt.Appendf(nil, "row%02d", i)).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, v)); err != nil {
				t.Fatal(err)
			}
		}
		if round%20 == 19 {
			if err := e.r.InMemoryFlush(); err != nil { // the merge the background would run
				t.Fatal(err)
			}
		}
	}
	if got := e.r.FlushedSeq(); got != 0 {
		t.Fatalf("flushed to %d before the crash: the test needs all of it in the log only", got)
	}
	e.r.Abort() // the server dies
	e.r = nil
	e.open() // on another server: replay from the log
	for i := range rows {
		res, err := e.r.Get(&Get{Row: fmt.Appendf(nil, "row%02d", i)})
		if err != nil || len(res.Cells) != 1 || !bytes.HasPrefix(res.Cells[0].Value, fmt.Appendf(nil, "%04d:", rounds-1)) {
			t.Fatalf("row %d after the replay: %v %v", i, res, err)
		}
	}
	if e.r.FlushedSeq() == 0 {
		t.Fatal("the replayed edits are not recorded flushed")
	}
	// Opened again from its files alone: the same.
	e.reopen()
	got := observedScan(t, e.r, &Scan{})
	if len(got) != rows || !strings.Contains(got[0], fmt.Sprintf("=%04d:", rounds-1)) {
		t.Fatalf("a scan after the reopen: %d cells, first %.40q", len(got), got[0])
	}
}
