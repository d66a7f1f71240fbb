package wal

import (
	"errors"
	"slices"
	"testing"
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
