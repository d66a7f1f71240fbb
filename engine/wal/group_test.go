package wal

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// The committer acknowledges in staging order whatever order commits finish in, stops at the
// first failure in that order (later successes are never acknowledged) until reset, and bounds
// the commits under way by its slots.
func TestCommitterOrder(t *testing.T) {
	c := newCommitter[int](2)
	if r1, r2, r3 := c.reserve(), c.reserve(), c.reserve(); !r1 || !r2 || r3 {
		t.Fatal("two slots: two reservations, not three")
	}
	c.release()
	c.release()
	var acked []int
	var failures []error
	ack := func(r int, err error) {
		if err != nil {
			failures = append(failures, err)
			return
		}
		acked = append(acked, r)
	}
	t1, t2, t3 := c.issue(), c.issue(), c.issue()
	c.complete(t3, 3, nil, ack)
	c.complete(t2, 2, nil, ack)
	if len(acked) != 0 {
		t.Fatalf("acknowledged %v before commit 1 finished", acked)
	}
	c.complete(t1, 1, nil, ack)
	if !slices.Equal(acked, []int{1, 2, 3}) {
		t.Fatalf("acknowledged %v, want 1 2 3", acked)
	}

	boom := errors.New("sync failed")
	t4, t5, t6 := c.issue(), c.issue(), c.issue()
	c.complete(t5, 5, nil, ack)
	c.complete(t4, 4, boom, ack)
	c.complete(t6, 6, nil, ack)
	if !slices.Equal(acked, []int{1, 2, 3}) || len(failures) != 1 {
		t.Fatalf("after a failure: acknowledged %v, failures %v; want nothing after 3 and one failure", acked, failures)
	}
	c.reset()
	t7 := c.issue()
	c.complete(t7, 7, nil, ack)
	if !slices.Equal(acked, []int{1, 2, 3, 7}) {
		t.Fatalf("after reset: acknowledged %v", acked)
	}
}

// With a commit delay, writers that take turns at the log end up sharing one commit: a leader
// waits for as many writers as waited at once lately. A lone writer never waits for others.
func TestCommitDelay(t *testing.T) {
	t.Run("lone writer", func(t *testing.T) {
		w := mustOpen(t, Options{FS: storage.NewMem(), Dir: "wal/rs1", CommitDelay: 100 * time.Millisecond})
		done := make(chan error, 1)
		go func() {
			for i := range 50 {
				if _, err := w.Append(testEdit("r", i), SyncWAL); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a lone writer took more than 30 s for 50 appends")
		}
		if st := w.Stats(); st.CommitsDelayed+st.CommitDelaysExpired != 0 {
			t.Fatalf("a lone writer's commits waited: %d delayed, %d expired", st.CommitsDelayed, st.CommitDelaysExpired)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("writers share commits", func(t *testing.T) {
		mem := storage.NewMem()
		ffs := faultfs.New(mem)
		// A sync that takes time, as on a disk, so that the writers overlap at all.
		ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Action: faultfs.Delay, Delay: 200 * time.Microsecond})
		w := mustOpen(t, Options{FS: ffs, Dir: "wal/rs1", CommitDelay: 100 * time.Millisecond})
		const writers, each = 4, 300
		appendFrom(t, writers, each, func(e *Edit) error { _, err := w.Append(e, SyncWAL); return err })
		st := w.Stats()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d appends, %d syncs, %d commits delayed, %d delays expired", st.Appends, st.Syncs, st.CommitsDelayed, st.CommitDelaysExpired)
		// Without a delay the 4 writers alternate in two groups, 2 appends per sync; with it the
		// learned target is the most that waited at once, which can settle at 3 of the 4.
		if st.CommitsDelayed == 0 || st.Syncs*5 > writers*each*2 {
			t.Fatalf("%d syncs for %d appends (%d commits delayed): want at least 2.5 appends per sync", st.Syncs, writers*each, st.CommitsDelayed)
		}
		if got := mustReplay(t, mem, "wal/rs1"); len(got) != writers*each {
			t.Fatalf("replayed %d edits, want %d", len(got), writers*each)
		}
	})
}
