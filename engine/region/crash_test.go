//go:build linux

package region

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/sfile"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
	"github.com/cellstore/cellstore/engine/wal"
)

// crashWorkload writes rows through WAL appends, flushes and compactions
// until the filesystem crashes. Every put writes two columns with the same
// value (f:a and famB:b); acked records the values of acknowledged puts. With
// a second family (famB "g") most flushes write one family only.
func runWorkload(t *testing.T, fsys storage.FS, info Info, pool *offheap.ChunkPool, famB string, acked, inflight map[string]string) {
	w, err := wal.Open(wal.Options{FS: fsys, Dir: "wal/rs1", SyncInterval: time.Millisecond})
	if err != nil {
		return
	}
	defer w.Close()
	r, err := Open(Config{FS: fsys, WAL: w, Pool: pool, DisableAutoFlush: true, DisableAutoCompaction: true,
		Logger: quiet, ReplayWALDirs: []string{"wal/rs1"}, BlockingWait: 100 * time.Millisecond}, info)
	if err != nil {
		return
	}
	defer r.Abort()
	step := 0
	put := func() bool {
		row := fmt.Sprintf("row%02d", step%7)
		val := fmt.Sprintf("v%03d", step)
		step++
		inflight[row] = val
		m := NewMutation([]byte(row)).Put([]byte("f"), []byte("a"), cell.LatestTimestamp, []byte(val)).
			Put([]byte(famB), []byte("b"), cell.LatestTimestamp, []byte(val))
		if err := r.Mutate(m); err != nil {
			return false
		}
		acked[row] = val
		delete(inflight, row)
		return true
	}
	for round := 0; round < 4; round++ {
		for i := 0; i < 5; i++ {
			if !put() {
				return
			}
		}
		var err error
		switch {
		case famB == "f" || round == 3:
			_, err = r.Flush()
		case round == 1:
			_, err = r.flush(false, onlyFamilies(r, famB))
		default:
			_, err = r.flush(false, onlyFamilies(r, "f"))
		}
		if err != nil {
			return
		}
		if round%2 == 1 {
			if _, err := r.Compact(round == 3); err != nil {
				return
			}
		}
	}
}

func TestCrashAtEveryStep(t *testing.T) { crashAtEveryStep(t, "f") }

// A second family and per-family flushes: the families' flushed sequence ids survive every
// crash, so recovery neither loses a family's cells nor applies the other's twice.
func TestCrashAtEveryStepPerFamilyFlush(t *testing.T) { crashAtEveryStep(t, "g") }

// onlyFamilies is a flush chooser that picks the named families.
func onlyFamilies(r *Region, names ...string) chooser {
	return func([]memstore.Stats) []bool {
		pick := make([]bool, len(r.fams))
		for _, n := range names {
			pick[r.familyIndex([]byte(n))] = true
		}
		return pick
	}
}

func crashAtEveryStep(t *testing.T, famB string) {
	fams := []Family{fam("f")}
	if famB != "f" {
		fams = append(fams, fam(famB))
	}
	table := TableDescriptor{Namespace: "default", Name: "t", Families: fams}
	info := Info{Namespace: "default", Table: "t", ID: 1}
	pool := newPool(t)
	defer pool.Close()
	// Count the mutating operations of a full run.
	base := storage.NewMem()
	if err := Create(base, table, info); err != nil {
		t.Fatal(err)
	}
	counter := faultfs.New(base)
	runWorkload(t, counter, info, pool, famB, map[string]string{}, map[string]string{})
	total := counter.Count(faultfs.OpsMutating)
	if total < 50 {
		t.Fatalf("workload did only %d mutating operations", total)
	}
	t.Logf("workload: %d mutating operations; crashing at each", total)
	step := int64(1)
	if testing.Short() {
		step = 7
	}
	for n := int64(1); n <= total; n += step {
		mem := storage.NewMem()
		if err := Create(mem, table, info); err != nil {
			t.Fatal(err)
		}
		ffs := faultfs.New(mem)
		ffs.AddRule(faultfs.Rule{Ops: faultfs.OpsMutating, Nth: n, Action: faultfs.Crash})
		acked, inflight := map[string]string{}, map[string]string{}
		runWorkload(t, ffs, info, pool, famB, acked, inflight)
		after, err := ffs.CrashClone(storage.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(n), 1))})
		if err != nil {
			t.Fatal(err)
		}
		checkRecovered(t, n, after, info, pool, famB, acked, inflight)
	}
	if s := pool.Stats(); s.InUse != 0 {
		t.Fatalf("%d chunks still in use", s.InUse)
	}
	if n := memstore.OpenScanners(); n != 0 {
		t.Fatalf("%d memstore scanners open", n)
	}
}

func checkRecovered(t *testing.T, n int64, fsys storage.FS, info Info, pool *offheap.ChunkPool, famB string, acked, inflight map[string]string) {
	t.Helper()
	w, err := wal.Open(wal.Options{FS: fsys, Dir: "wal/rs1", SyncInterval: time.Millisecond})
	if err != nil {
		t.Fatalf("crash at op %d: WAL does not reopen: %v", n, err)
	}
	defer w.Close()
	r, err := Open(Config{FS: fsys, WAL: w, Pool: pool, DisableAutoFlush: true, DisableAutoCompaction: true,
		Logger: quiet, ReplayWALDirs: []string{"wal/rs1"}}, info)
	if err != nil {
		t.Fatalf("crash at op %d: region does not open: %v", n, err)
	}
	defer r.Abort()
	// Every version: a cell replayed over its flushed copy would show twice.
	sc, err := r.Scanner(&Scan{Raw: true, MaxVersions: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	got := map[string]string{}
	for {
		b, err := sc.Next()
		if err != nil {
			t.Fatalf("crash at op %d: scan: %v", n, err)
		}
		for _, res := range b.Results {
			seen := map[string]bool{}
			for _, c := range res.Cells {
				k := string(c.Key)
				if seen[k] {
					t.Fatalf("crash at op %d: row %s holds %s twice", n, res.Row, fmtKV(c))
				}
				seen[k] = true
			}
			a, bb := res.Value([]byte("f"), []byte("a")), res.Value([]byte(famB), []byte("b"))
			if !bytes.Equal(a, bb) {
				t.Fatalf("crash at op %d: row %s half-applied: a=%s b=%s", n, res.Row, a, bb)
			}
			got[string(res.Row)] = string(a)
		}
		if !b.More {
			break
		}
	}
	for row, v := range acked {
		g := got[row]
		if g != v && inflight[row] != g {
			t.Fatalf("crash at op %d: acknowledged %s=%s lost (found %q)\n%s", n, row, v, g, fsys.(*storage.Mem).String())
		}
	}
	for row, g := range got {
		if acked[row] != g && inflight[row] != g {
			t.Fatalf("crash at op %d: row %s=%s was never written or acknowledged", n, row, g)
		}
	}
}

var _ = errors.Is
var _ = strings.Contains
var _ = sync.Mutex{}
var _ atomic.Int64
var _ = path.Join
var _ = sfile.ErrCorruption

// A replayed edit both in a file (a flush during a replay that crashed) and in memory again (the
// next replay) is one cell to reads: same key, same sequence id.
func TestReplayedCellInAFileAndInMemoryIsOneCell(t *testing.T) {
	f := fam("f")
	f.MaxVersions = 5
	e := newEnv(t, f)
	if err := e.r.Put(NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), 10, []byte("v"))); err != nil {
		t.Fatal(err)
	}
	seq := e.r.mvcc.readPoint.Load()
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	kv := cell.KeyValue(cell.AppendKeyValue(nil, []byte("r"), []byte("f"), []byte("q"), 10, cell.Put, []byte("v")))
	if err := e.r.insertMem([]cell.KeyValue{kv}, seq); err != nil {
		t.Fatal(err)
	}
	res, err := e.r.Get(&Get{Row: []byte("r"), MaxVersions: 5})
	if err != nil || len(res.Cells) != 1 {
		t.Fatalf("get: %d cells, %v; want one", len(res.Cells), err)
	}
	if got := observedScan(t, e.r, &Scan{MaxVersions: 5}); len(got) != 1 {
		t.Fatalf("scan: %q; want one cell", got)
	}
}
