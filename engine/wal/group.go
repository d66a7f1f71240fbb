package wal

// Group commit, the piece both WAL backends share (the directory WAL, where a commit is one write
// and one sync of the active segment, and ObjectLog, where it is one PUT):
//
//   - Appenders add records to the batch being filled and get sequence ids (each backend's own
//     buffer).
//   - A commit takes the whole batch and makes it durable. Up to a number of slots run at once: a
//     batch is staged in order (written to the segment; given its object number) under the
//     backend's order lock, then persisted concurrently (the sync; the PUT).
//   - Who commits: by default the appender that waits for its record and finds a free slot commits
//     itself and everything queued with it (leader-based: no hand-off to another goroutine, no
//     wake-up on the way in); a background goroutine commits only what nobody waits for
//     (ASYNC_WAL) and on request.
//   - committer acknowledges commits in the order they were staged, whatever order they finish
//     in: a record is durable only when its commit and every earlier one succeeded. The first
//     failure in that order stops acknowledgement until the backend recovers (the directory WAL's
//     Roll) or for good (ObjectLog).
//
// committer holds no lock of its own: its owner's mutex guards it.
type committer[R any] struct {
	slots    int // commits under way at most
	reserved int // slots taken
	issued   uint64
	acked    uint64 // every commit <= acked finished (successfully unless failed)
	done     map[uint64]commitDone[R]
	failed   bool // a commit failed: nothing later is acknowledged until reset
}

type commitDone[R any] struct {
	r   R
	err error
}

func newCommitter[R any](slots int) committer[R] {
	return committer[R]{slots: max(slots, 1), done: map[uint64]commitDone[R]{}}
}

// reserve takes a slot if one is free.
func (c *committer[R]) reserve() bool {
	if c.reserved >= c.slots {
		return false
	}
	c.reserved++
	return true
}

// release gives a slot back: its commit finished or found nothing to do.
func (c *committer[R]) release() {
	if c.reserved <= 0 {
		panic("wal: committer slot released twice")
	}
	c.reserved--
}

// busy reports whether any slot is taken.
func (c *committer[R]) busy() bool { return c.reserved > 0 }

// issue numbers a commit; call it in staging order.
func (c *committer[R]) issue() uint64 {
	c.issued++
	return c.issued
}

// complete records how commit t ended and calls ack, in staging order, for every commit now
// finished: with a nil error for successes, and once with the first failure — after which
// nothing more is acknowledged until reset (results of later commits are dropped).
func (c *committer[R]) complete(t uint64, r R, err error, ack func(R, error)) {
	if c.failed {
		return // a commit staged before the failure was acknowledged: this one never will be
	}
	if t <= c.acked || t > c.issued {
		panic("wal: committer completed a commit it did not issue")
	}
	c.done[t] = commitDone[R]{r, err}
	for {
		d, ok := c.done[c.acked+1]
		if !ok {
			return
		}
		delete(c.done, c.acked+1)
		c.acked++
		ack(d.r, d.err)
		if d.err != nil {
			c.failed = true
			clear(c.done)
			c.acked = c.issued // commits under way finish into nothing
			return
		}
	}
}

// reset accepts acknowledgements again after a failure; no commit may be under way.
func (c *committer[R]) reset() {
	c.failed = false
	clear(c.done)
	c.acked = c.issued
}
