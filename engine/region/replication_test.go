//go:build linux

package region

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/wal"
)

// shipper moves a primary's changes to one replica the way the region
// server does: numbered batches per session, a new session when asked.
type shipper struct {
	t       testing.TB
	p, r    *Region
	id      int32
	session uint64
	num     uint64
	// drop, when it returns true, loses the batch on the way (it is
	// acknowledged but never applied).
	drop     func() bool
	sessions int
	maxBatch int
}

func newShipper(t testing.TB, p, r *Region) *shipper {
	return &shipper{t: t, p: p, r: r, id: 1, maxBatch: 7}
}

// step ships one batch; it reports whether there was anything to do.
func (s *shipper) step() bool {
	s.t.Helper()
	b, _ := s.p.NextReplicationBatch(s.id, s.maxBatch, 1<<20)
	if b.NeedSession {
		s.sessions++
		if err := s.p.StartReplicationSession(s.id); err != nil {
			s.t.Fatalf("StartReplicationSession: %v", err)
		}
		return true
	}
	if len(b.Entries) == 0 {
		return false
	}
	if b.Entries[0].SessionStart {
		s.session, s.num = b.Session, 1
	} else {
		s.num++
	}
	if s.drop != nil && s.drop() {
		s.p.AckReplication(b)
		return true
	}
	res, err := s.r.ApplyReplication(b.Session, s.num, b.Entries, b.ReadPoint)
	if err != nil && !res.Resync {
		s.t.Fatalf("ApplyReplication: %v", err)
	}
	if res.Resync {
		s.sessions++
		if err := s.p.StartReplicationSession(s.id); err != nil {
			s.t.Fatalf("StartReplicationSession: %v", err)
		}
		return true
	}
	s.p.AckReplication(b)
	return true
}

func (s *shipper) drain() {
	s.t.Helper()
	for i := 0; s.step(); i++ {
		if i > 100000 {
			s.t.Fatal("replication does not converge")
		}
	}
}

// rawDump is every cell of the region, all versions and delete markers.
func rawDump(t testing.TB, r *Region) []string {
	t.Helper()
	out := scanAll([]*Region{r}, &Scan{Raw: true, MaxVersions: 1 << 20}, false)
	for _, l := range out {
		if len(l) > 6 && l[:6] == "error:" {
			t.Fatal(l)
		}
	}
	return out
}

func visibleDump(t testing.TB, r *Region) []string {
	t.Helper()
	return scanAll([]*Region{r}, &Scan{MaxVersions: 3}, false)
}

func (e *env) openReplica() *Region {
	e.t.Helper()
	cfg := e.cfg
	cfg.WAL = nil
	r, err := OpenReplica(cfg, e.info)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

func putRow(t testing.TB, r *Region, row, val string) {
	t.Helper()
	if err := r.Put(NewMutation([]byte(row)).Put([]byte("cf"), []byte("q"), cell.LatestTimestamp, []byte(val))); err != nil {
		t.Fatal(err)
	}
}

func TestReplicaFollowsFlushesAndCompactions(t *testing.T) {
	e := newEnv(t, fam("cf"))
	e.clock.tick.Store(1)
	if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
		t.Fatal(err)
	}
	putRow(t, e.r, "before", "in the primary's memstore before the replica opened")
	rep := e.openReplica()
	sh := newShipper(t, e.r, rep)

	// The replica refuses everything that writes.
	if err := rep.Put(NewMutation([]byte("x")).Put([]byte("cf"), []byte("q"), 1, []byte("v"))); !errors.Is(err, ErrReadOnlyReplica) {
		t.Fatalf("put on a replica: %v", err)
	}
	if _, err := rep.Flush(); !errors.Is(err, ErrReadOnlyReplica) {
		t.Fatalf("flush on a replica: %v", err)
	}
	if _, err := rep.Compact(true); !errors.Is(err, ErrReadOnlyReplica) {
		t.Fatalf("compact on a replica: %v", err)
	}

	sh.drain()
	if sh.sessions != 1 {
		t.Fatalf("sessions = %d, want 1", sh.sessions)
	}
	check := func(when string) {
		t.Helper()
		sh.drain()
		want, got := rawDump(t, e.r), rawDump(t, rep)
		if !slices.Equal(want, got) {
			t.Fatalf("%s: replica differs from primary\nprimary: %q\nreplica: %q", when, want, got)
		}
	}
	check("after the session start")

	putRow(t, e.r, "a", "1")
	if got := visibleDump(t, rep); slices.Contains(got, "a/cf:q") {
		t.Fatal("the replica saw a write before it was shipped")
	}
	check("after a put")
	for i := range 3 {
		for j := range 20 {
			putRow(t, e.r, fmt.Sprintf("r%02d", j), fmt.Sprintf("v%d", i))
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after flush %d", i))
	}
	// Writes between a flush's start and its commit stay in the replica's
	// memstore; a compaction (which archives the files) changes nothing a
	// read sees.
	putRow(t, e.r, "r05", "after")
	if err := e.r.Delete(NewMutation([]byte("r06")).DeleteColumn([]byte("cf"), []byte("q"), cell.LatestTimestamp)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Compact(true); err != nil {
		t.Fatal(err)
	}
	check("after a major compaction")
	if n := len(rep.files.Load().byFamily[0]); n != 1 {
		t.Fatalf("replica holds %d files after the major compaction, want 1", n)
	}
	if sh.sessions != 1 {
		t.Fatalf("sessions = %d, want 1 (nothing was lost)", sh.sessions)
	}
}

// A replica that is behind by several flushes and a compaction opens the
// files the primary has archived meanwhile.
func TestReplicaReadsArchivedFiles(t *testing.T) {
	e := newEnv(t, fam("cf"))
	e.clock.tick.Store(1)
	if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := e.openReplica()
	sh := newShipper(t, e.r, rep)
	sh.drain()
	for i := range 4 {
		putRow(t, e.r, fmt.Sprintf("row%d", i), "v")
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Compact(true); err != nil {
		t.Fatal(err)
	}
	if names, err := e.fs.List(path.Join("archive", e.info.Dir(), "cf")); err != nil || len(names) == 0 {
		t.Fatalf("the compaction archived nothing: %v %v", names, err)
	}
	sh.drain()
	if want, got := rawDump(t, e.r), rawDump(t, rep); !slices.Equal(want, got) {
		t.Fatalf("replica differs\nprimary: %q\nreplica: %q", want, got)
	}
	if sh.sessions != 1 {
		t.Fatalf("sessions = %d, want 1", sh.sessions)
	}
}

// Lost batches, a replica that reopens, and a queue that overflows all end
// in a new session after which the replica is the primary again.
func TestReplicaResyncs(t *testing.T) {
	e := newEnv(t, fam("cf"))
	e.clock.tick.Store(1)
	if err := e.r.EnableReplication(ReplicationOptions{MaxBytes: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	rep := e.openReplica()
	sh := newShipper(t, e.r, rep)
	sh.drain()
	same := func(when string) {
		t.Helper()
		sh.drain()
		if want, got := rawDump(t, e.r), rawDump(t, rep); !slices.Equal(want, got) {
			t.Fatalf("%s: replica differs\nprimary: %q\nreplica: %q", when, want, got)
		}
	}

	// A lost batch: the next one is out of order.
	dropped := false
	sh.drop = func() bool {
		if dropped {
			return false
		}
		dropped = true
		return true
	}
	for i := range 30 {
		putRow(t, e.r, fmt.Sprintf("lost%02d", i), "v")
	}
	before := sh.sessions
	same("after a lost batch")
	if sh.sessions == before {
		t.Fatal("a lost batch did not start a new session")
	}

	// The replica reopens: it has no session.
	rep.Close()
	rep = e.openReplica()
	sh.r = rep
	putRow(t, e.r, "after-reopen", "v")
	before = sh.sessions
	same("after the replica reopened")
	if sh.sessions == before {
		t.Fatal("a reopened replica did not get a new session")
	}

	// The queue overflows while nothing is shipped: the replica is dropped.
	for i := range 400 {
		putRow(t, e.r, fmt.Sprintf("flood%03d", i), "0123456789012345678901234567890123456789")
	}
	if st := e.r.ReplicationStats(1); st.Dropped == 0 {
		t.Fatalf("the queue kept %d bytes for a replica that shipped nothing: %+v", st.Bytes, st)
	}
	before = sh.sessions
	same("after the queue overflowed")
	if sh.sessions == before {
		t.Fatal("an overflowed queue did not start a new session")
	}
}

// Random writes, deletes, flushes, compactions, lost batches and pauses:
// after shipping everything the replica holds exactly what the primary
// holds, and at every point it never shows a write the primary has not
// made visible.
func TestReplicaRandom(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			e := newEnv(t, fam("cf"), fam("other"))
			e.clock.tick.Store(1)
			if err := e.r.EnableReplication(ReplicationOptions{MaxBytes: 64 << 10}); err != nil {
				t.Fatal(err)
			}
			rep := e.openReplica()
			sh := newShipper(t, e.r, rep)
			sh.maxBatch = 1 + rng.IntN(20)
			sh.drop = func() bool { return rng.IntN(100) == 0 }
			for range 600 {
				row := []byte(fmt.Sprintf("row%02d", rng.IntN(40)))
				f := []byte([]string{"cf", "other"}[rng.IntN(2)])
				switch n := rng.IntN(100); {
				case n < 55:
					m := NewMutation(row).Put(f, []byte{byte('a' + rng.IntN(3))}, cell.LatestTimestamp, fmt.Appendf(nil, "%d", rng.Int()))
					if err := e.r.Put(m); err != nil {
						t.Fatal(err)
					}
				case n < 65:
					if err := e.r.Delete(NewMutation(row).DeleteColumn(f, []byte("a"), cell.LatestTimestamp)); err != nil {
						t.Fatal(err)
					}
				case n < 70:
					if err := e.r.Delete(NewMutation(row).DeleteFamily(f, cell.LatestTimestamp)); err != nil {
						t.Fatal(err)
					}
				case n < 72:
					if _, err := e.r.Flush(); err != nil {
						t.Fatal(err)
					}
				case n < 75:
					// A per-family flush: the replica freezes that family's memstore only.
					if _, err := e.r.flush(false, onlyFamilies(e.r, string(f))); err != nil {
						t.Fatal(err)
					}
				case n < 78:
					if _, err := e.r.Compact(rng.IntN(2) == 0); err != nil {
						t.Fatal(err)
					}
				default:
					for range rng.IntN(4) {
						sh.step()
					}
				}
			}
			sh.drop = nil
			sh.drain()
			if want, got := rawDump(t, e.r), rawDump(t, rep); !slices.Equal(want, got) {
				t.Fatalf("replica differs\nprimary: %q\nreplica: %q", want, got)
			}
			if want, got := visibleDump(t, e.r), visibleDump(t, rep); !slices.Equal(want, got) {
				t.Fatalf("replica reads differ\nprimary: %q\nreplica: %q", want, got)
			}
		})
	}
}

// Concurrent writers and a shipper running beside them: what the replica
// shows at its read point is a state the primary went through (every
// acknowledged write below the read point is there), and in the end the
// two agree.
func TestReplicaConcurrentWriters(t *testing.T) {
	e := newEnv(t, fam("cf"))
	e.clock.tick.Store(1)
	if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := e.openReplica()
	sh := newShipper(t, e.r, rep)
	sh.maxBatch = 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]uint64{} // row → upper bound of its (only) write's sequence id
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				row := fmt.Sprintf("w%d-%03d", w, i)
				putRow(t, e.r, row, "v")
				mu.Lock()
				acked[row] = e.w.LastSeq() // at least the write's sequence id
				mu.Unlock()
				if i%100 == 99 && w == 0 {
					if _, err := e.r.Flush(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		sh.step()
		// Every write acknowledged at or below the replica's read point
		// when this check started is visible on the replica.
		rp := rep.ReadPoint()
		mu.Lock()
		var want []string
		for row, seq := range acked {
			if seq <= rp && seq > 0 {
				want = append(want, row)
			}
		}
		mu.Unlock()
		got := map[string]bool{}
		for _, l := range visibleDump(t, rep) {
			got[l[:6]] = true
		}
		for _, row := range want {
			if !got[row] {
				t.Fatalf("row %s was written at or below read point %d (acked at %d) but the replica does not show it (primary rp %d)\nreplica %+v %q\nprimary %q", row, rp, acked[row], e.r.ReadPoint(), rep.ReplicaState(), visibleDump(t, rep), visibleDump(t, e.r))
			}
		}
	}
	sh.drain()
	if want, got := rawDump(t, e.r), rawDump(t, rep); !slices.Equal(want, got) {
		t.Fatalf("replica differs: %d vs %d cells", len(want), len(got))
	}
}

// BenchmarkReplicationOverhead is what the change queue adds to a write: puts (WAL async) with no
// replica, and with one replica whose shipper drains the queue as it goes.
func BenchmarkReplicationOverhead(b *testing.B) {
	for _, withReplica := range []bool{false, true} {
		b.Run(fmt.Sprintf("replica=%v", withReplica), func(b *testing.B) {
			e := newEnv(b, fam("cf"))
			if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
				b.Fatal(err)
			}
			var sh *shipper
			if withReplica {
				sh = newShipper(b, e.r, e.openReplica())
				sh.maxBatch = 1024
				sh.drain()
			}
			val := make([]byte, 100)
			b.ResetTimer()
			for i := range b.N {
				m := NewMutation(fmt.Appendf(nil, "row%09d", i)).Put([]byte("cf"), []byte("q"), cell.LatestTimestamp, val)
				m.Durability = wal.AsyncWAL
				if err := e.r.Put(m); err != nil {
					b.Fatal(err)
				}
				if sh != nil && i%512 == 511 {
					sh.drain()
				}
				if i%50000 == 49999 { // the env turns automatic flushes off
					if _, err := e.r.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			if sh != nil {
				sh.drain()
			}
		})
	}
}

// A read replica opened after an alter takes the descriptor of its open order, not the primary's
// .regioninfo, which the primary's own reopen may not have rewritten yet: else it would serve the
// old families and settings (and fail every shipped cell of a new family) until its next open.
// It writes nothing to the primary's directory.
func TestReplicaOpensWithTheOrdersDescriptor(t *testing.T) {
	e := newEnv(t, fam("cf"))
	putRow(t, e.r, "r1", "v")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.WAL = nil
	cfg.Descriptor = &TableDescriptor{Namespace: "default", Name: "t", Families: []Family{fam("cf"), fam("x")}}
	r, err := OpenReplica(cfg, e.info)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if fams := r.Families(); len(fams) != 2 || fams[1].Name != "x" {
		t.Fatalf("the replica's families %v, want cf and x", fams)
	}
	if res, err := r.Get(&Get{Row: []byte("r1")}); err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != "v" {
		t.Fatalf("the replica reads r1 as %v, %v", res, err)
	}
	if _, table, err := readRegionInfo(filesOf(e.fs, nil), e.info.Dir()); err != nil || len(table.Families) != 1 {
		t.Fatalf("the primary's .regioninfo after the replica's open: %v %v, want it untouched", table, err)
	}
}

// A replica reopened by an alter that dropped a family, while its primary still runs the old
// descriptor, leaves that family's replicated cells and flushes out instead of failing the batch:
// each failure started a new session, which costs the primary a flush, until the primary reopened.
func TestReplicaLeavesOutAFamilyItDropped(t *testing.T) {
	e := newEnv(t, fam("cf"), fam("gone"))
	if err := e.r.EnableReplication(ReplicationOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.WAL = nil
	cfg.Descriptor = &TableDescriptor{Namespace: "default", Name: "t", Families: []Family{fam("cf")}}
	rep, err := OpenReplica(cfg, e.info)
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	sh := newShipper(t, e.r, rep)
	sh.drain()
	for i := range 5 {
		row := []byte(fmt.Sprintf("r%d", i))
		if err := e.r.Put(NewMutation(row).Put([]byte("cf"), []byte("q"), 1, []byte("v")).Put([]byte("gone"), []byte("q"), 1, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	putRow(t, e.r, "after", "v")
	sh.drain()
	if sh.sessions != 1 {
		t.Fatalf("%d replication sessions, want 1: the dropped family's cells restarted it", sh.sessions)
	}
	if got := visibleDump(t, rep); len(got) != 6 {
		t.Fatalf("the replica reads %v, want the 6 cells of cf", got)
	}
}
