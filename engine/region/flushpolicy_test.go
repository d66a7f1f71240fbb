//go:build linux

package region

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

func TestParseFlushPolicy(t *testing.T) {
	for _, c := range []struct {
		attrs map[string]string
		want  FlushPolicy
		err   string
	}{
		{attrs: nil, want: FlushPolicy{}},
		{attrs: map[string]string{"FLUSH_POLICY": "org.apache.hadoop.hbase.regionserver.FlushAllStoresPolicy"}, want: FlushPolicy{Name: "FlushAllStoresPolicy", AllStores: true}},
		{attrs: map[string]string{"FLUSH_POLICY": "FlushAllLargeStoresPolicy", FlushLowerBoundAttribute: "1048576"}, want: FlushPolicy{Name: "FlushAllLargeStoresPolicy", LowerBound: 1 << 20}},
		{attrs: map[string]string{"FLUSH_POLICY": "FlushNonSloppyStoresFirstPolicy"}, want: FlushPolicy{Name: "FlushNonSloppyStoresFirstPolicy", NonSloppyFirst: true}},
		{attrs: map[string]string{"FLUSH_POLICY": "FlushSomething"}, err: "unknown FLUSH_POLICY"},
		{attrs: map[string]string{FlushLowerBoundAttribute: "-1"}, err: "not a positive number"},
		{attrs: map[string]string{FlushLowerBoundAttribute: "16MB"}, err: "not a positive number"},
	} {
		got, err := ParseFlushPolicy(c.attrs)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want one saying %q", c.attrs, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v; want %+v", c.attrs, got, err, c.want)
		}
	}
}

func TestFlushPolicyChoose(t *testing.T) {
	fams := []Family{fam("a"), inMemFamily("b", InMemoryBasic, 1), fam("c")}
	sizes := func(n ...int64) []memstore.Stats {
		out := make([]memstore.Stats, len(n))
		for i, b := range n {
			out[i].DataBytes = b
		}
		return out
	}
	for _, c := range []struct {
		p     FlushPolicy
		sizes []memstore.Stats
		want  []bool // nil: all
	}{
		{FlushPolicy{LowerBound: 100}, sizes(500, 10, 20), []bool{true, false, false}},
		{FlushPolicy{LowerBound: 100}, sizes(500, 200, 20), []bool{true, true, false}},
		{FlushPolicy{LowerBound: 100}, sizes(50, 10, 20), nil}, // none large: all
		{FlushPolicy{AllStores: true, LowerBound: 100}, sizes(500, 10, 20), nil},
		{FlushPolicy{NonSloppyFirst: true, LowerBound: 100}, sizes(500, 200, 20), []bool{true, false, false}},
		{FlushPolicy{NonSloppyFirst: true, LowerBound: 100}, sizes(50, 200, 20), []bool{false, true, false}},
		// No lower bound: the flush size (3000) by the family count, but at least 16 MiB.
		{FlushPolicy{}, sizes(1001, 10, 10), nil},
		{FlushPolicy{}, sizes(DefaultFlushLowerBoundMin+1, 10, 10), []bool{true, false, false}},
	} {
		if got := c.p.choose(fams, c.sizes, 3000); !slices.Equal(got, c.want) {
			t.Errorf("%+v over %v: %v, want %v", c.p, c.sizes, got, c.want)
		}
	}
	if got := (FlushPolicy{LowerBound: 1}).choose(fams[:1], sizes(500), 3000); got != nil {
		t.Errorf("one family: %v, want all", got)
	}
}

// A region flushing by size writes only its large family: the small one stays in memory, the
// manifest records both families' flushed sequence ids, the WAL is told the lower, reads see
// everything, and a crash replays the small family's cells only.
func TestPerFamilyFlush(t *testing.T) {
	e := newEnv(t, fam("big"), fam("small"))
	e.r.cfg.FlushPolicy = FlushPolicy{LowerBound: 8 << 10}
	big := strings.Repeat("x", 1000)
	write := func(round int) {
		for i := range 20 {
			row := fmt.Appendf(nil, "row%02d", i)
			m := NewMutation(row).Put([]byte("big"), []byte("q"), cell.LatestTimestamp, fmt.Appendf(nil, "%s%d", big, round))
			if err := e.r.Put(m); err != nil {
				t.Fatal(err)
			}
			m = NewMutation(row).Put([]byte("small"), []byte("q"), cell.LatestTimestamp, fmt.Appendf(nil, "s%d", round))
			if err := e.r.Put(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0)
	firstSmall := e.r.FlushedSeq() + 2 // the first write is big's, then small's
	res, err := e.r.FlushBySize()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Families, []string{"big"}) {
		t.Fatalf("the flush wrote %v, want [big]", res.Families)
	}
	if n := e.r.StoreFileCount(); n["big"] != 1 || n["small"] != 0 {
		t.Fatalf("store files %v, want one of big's", n)
	}
	if c := e.r.MemstoreStats().Cells; c != 20 {
		t.Fatalf("the memstores hold %d cells, want small's 20", c)
	}
	if got := e.r.FlushedSeq(); got != firstSmall-1 {
		t.Fatalf("region flushed to %d, want %d (just below small's oldest cell)", got, firstSmall-1)
	}
	man := e.r.man
	if got := man.familyFlushed("big"); got != res.Seq {
		t.Fatalf("big flushed to %d, want %d", got, res.Seq)
	}
	want := visibleDump(t, e.r)
	if len(want) == 0 || !strings.Contains(strings.Join(want, " "), "small") {
		t.Fatalf("reads miss a family: %q", want)
	}

	// A second round: big flushes again, small keeps growing in memory.
	write(1)
	if res, err := e.r.FlushBySize(); err != nil || !slices.Equal(res.Families, []string{"big"}) {
		t.Fatalf("second flush: %v, %v", res.Families, err)
	}
	want = visibleDump(t, e.r)
	wantRaw := rawDump(t, e.r)

	// A crash: the region reopens from its files and the WAL.
	e.r.Abort()
	before := e.r.Metrics().FlushedCells.Load()
	e.open()
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after the crash reads\n%q\nwant\n%q", got, want)
	}
	if got := rawDump(t, e.r); !slices.Equal(got, wantRaw) {
		t.Fatalf("after the crash raw reads\n%q\nwant\n%q", got, wantRaw)
	}
	// The replay flushed what it applied: small's 40 cells, none of big's.
	if got := e.r.Metrics().FlushedCells.Load(); got != 40 {
		t.Fatalf("the replay applied %d cells, want small's 40 (before the crash: %d)", got, before)
	}
	if n := e.r.StoreFileCount(); n["big"] != 2 || n["small"] != 1 {
		t.Fatalf("store files after the replay %v, want 2 of big's and 1 of small's", n)
	}
	if man := e.r.man; man.FamilyFlushedSeq != nil {
		t.Fatalf("after a full flush the manifest still has family flushed ids %v", man.FamilyFlushedSeq)
	}
}

// With every family small, a flush by size writes them all; Flush (an admin's, a close's) always
// does; a family with nothing in memory does not hold the region's flushed id back.
func TestFlushAllFamilies(t *testing.T) {
	e := newEnv(t, fam("a"), fam("b"), fam("idle"))
	e.r.cfg.FlushPolicy = FlushPolicy{LowerBound: 1 << 20}
	for i := range 10 {
		m := NewMutation(fmt.Appendf(nil, "r%d", i)).Put([]byte("a"), []byte("q"), cell.LatestTimestamp, []byte("v")).
			Put([]byte("b"), []byte("q"), cell.LatestTimestamp, []byte("v"))
		if err := e.r.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.r.FlushBySize()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Families, []string{"a", "b"}) {
		t.Fatalf("the flush wrote %v, want [a b]", res.Families)
	}
	if got := e.r.FlushedSeq(); got != res.Seq {
		t.Fatalf("region flushed to %d, want %d", got, res.Seq)
	}
	// Big a, small b: Flush writes both anyway.
	e.r.cfg.FlushPolicy = FlushPolicy{LowerBound: 100}
	if err := e.r.Put(NewMutation([]byte("x")).Put([]byte("a"), []byte("q"), cell.LatestTimestamp, []byte(strings.Repeat("v", 500))).
		Put([]byte("b"), []byte("q"), cell.LatestTimestamp, []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if res, err := e.r.Flush(); err != nil || !slices.Equal(res.Families, []string{"a", "b"}) {
		t.Fatalf("Flush wrote %v, %v; want [a b]", res.Families, err)
	}
}

// failingFlushEnv is a region of families big and small (lower bound 1,000 bytes) on a
// filesystem whose next store file creation fails when failNext is called.
func failingFlushEnv(t *testing.T) (e *env, failNext func()) {
	e = newEnv(t, fam("big"), fam("small"))
	ffs := faultfs.New(e.fs)
	e.cfg.FS = ffs
	e.cfg.FlushPolicy = FlushPolicy{LowerBound: 1000}
	e.reopen()
	return e, func() { ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Nth: 1, Action: faultfs.Fail}) }
}

// putFamilyRows puts n-byte values to family f of five rows named prefix0..prefix4.
func putFamilyRows(t *testing.T, r *Region, prefix, f string, n int) {
	t.Helper()
	for i := range 5 {
		m := NewMutation(fmt.Appendf(nil, "%s%d", prefix, i)).Put([]byte(f), []byte("q"), cell.LatestTimestamp, []byte(strings.Repeat("v", n)))
		if err := r.Put(m); err != nil {
			t.Fatal(err)
		}
	}
}

// A flush that fails after taking its snapshots is retried as it was by the next one, whatever
// that one would have chosen.
func TestPerFamilyFlushRetried(t *testing.T) {
	e, failNext := failingFlushEnv(t)
	putFamilyRows(t, e.r, "r", "big", 500)
	putFamilyRows(t, e.r, "r", "small", 1)
	failNext()
	if _, err := e.r.FlushBySize(); err == nil {
		t.Fatal("the flush succeeded although its file could not be created")
	}
	if p := e.r.pending; p == nil || p.snaps[0] == nil || p.snaps[1] != nil {
		t.Fatalf("pending flush %+v, want big's snapshot only", p)
	}
	// Now small is the large one, big holds nothing new: the retry still writes big alone.
	putFamilyRows(t, e.r, "r", "small", 500)
	want := visibleDump(t, e.r)
	res, err := e.r.FlushBySize()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Families, []string{"big"}) {
		t.Fatalf("the retry wrote %v, want [big]", res.Families)
	}
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("reads %q, want %q", got, want)
	}
	res, err = e.r.FlushBySize()
	if err != nil || !slices.Equal(res.Families, []string{"small"}) {
		t.Fatalf("the next flush wrote %v, %v; want [small]", res.Families, err)
	}
	if got := e.r.FlushedSeq(); got != res.Seq {
		t.Fatalf("region flushed to %d after both families flushed, want %d", got, res.Seq)
	}
}

// A flush of every family (an admin's, a close's) after a failed per-family flush writes the
// failed flush's snapshot and then everything else: nothing stays in memory.
func TestFlushAfterFailedPerFamilyFlush(t *testing.T) {
	e, failNext := failingFlushEnv(t)
	failedFlush := func(prefix string) {
		t.Helper()
		putFamilyRows(t, e.r, prefix, "big", 500)
		putFamilyRows(t, e.r, prefix, "small", 1)
		failNext()
		if _, err := e.r.FlushBySize(); err == nil {
			t.Fatal("the flush succeeded although its file could not be created")
		}
	}
	failedFlush("r")
	want := visibleDump(t, e.r)
	res, err := e.r.Flush()
	if err != nil || !slices.Equal(res.Families, []string{"big", "small"}) {
		t.Fatalf("Flush wrote %v, %v; want both families", res.Families, err)
	}
	if c := e.r.MemstoreStats().Cells; c != 0 {
		t.Fatalf("%d cells still in memory after Flush", c)
	}
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after the flush %q, want %q", got, want)
	}
	// A close after such a failure leaves nothing in memory either: a reopen that replays no WAL
	// (another server, after a clean close) reads everything from the files.
	failedFlush("s")
	want = visibleDump(t, e.r)
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	e.cfg.ReplayWALDirs = nil
	e.open()
	if got := visibleDump(t, e.r); !slices.Equal(got, want) {
		t.Fatalf("after the close and a reopen without replay\n%q\nwant\n%q", got, want)
	}
}
