package wal

import (
	"sync"
	"sync/atomic"
	"time"
)

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

// commitRounds is how many commit rounds the commit delay remembers: the most writers that waited at
// once in any of them is how many a lingering leader waits for.
const commitRounds = 8

// The commit delay (Options.CommitDelay) learns how many writers to wait for from rounds in which
// the leader did not wait: the most writers waiting at once then — those of the commit under way
// and those queued for the next — is how many take turns at the log (with writers that each wait
// for their write before the next, all of them). Rounds in which a leader waited teach nothing (a
// commit made larger by waiting would only raise the target further: under a steady stream of new
// writers it would grow until every commit waited the whole delay). A wait that runs out lowers
// the target to the writers that came.

// commitDelay is a leader's commit delay (Options.CommitDelay, ObjectLogOptions.CommitDelay), shared
// by both backends; its owner's mutex guards it. A nil *commitDelay is none (newCommitDelay(0)).
type commitDelay struct {
	delay     time.Duration
	waiting   int               // WaitDurable callers now
	next      int               // of them, those whose record no commit staged yet
	stagedSeq uint64            // the highest sequence id a staged commit covers
	peaks     [commitRounds]int // the most waiting at once in each of the last rounds
	round     int               // index of the current round in peaks
	observing bool              // the current round's leader did not wait: learn its peak
	lingerFor int               // a lingering leader waits for this many waiters (0: none)
	wake      chan struct{}     // wakes the lingering leader
	timer     *time.Timer       // the lingering leader's deadline (one leader at a time)
	// joined counts commits whose leader waited and saw the writers come, expired those whose
	// delay ran out first.
	joined, expired atomic.Uint64
}

func newCommitDelay(delay time.Duration, stagedSeq uint64) *commitDelay {
	if delay <= 0 {
		return nil
	}
	d := &commitDelay{delay: delay, stagedSeq: stagedSeq, wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	d.timer.Stop()
	return d
}

// arrived counts a writer that starts waiting for its record seq to be durable (owner's lock
// held), and wakes a lingering leader once enough writers wait for the next commit. left undoes it
// when the writer stops waiting.
func (d *commitDelay) arrived(seq uint64) {
	d.waiting++
	if seq > d.stagedSeq {
		d.next++
	}
	if d.observing {
		d.peaks[d.round] = max(d.peaks[d.round], d.waiting)
	}
	if d.lingerFor > 0 && d.next >= d.lingerFor {
		d.lingerFor = 0
		kick(d.wake)
	}
}

func (d *commitDelay) left() { d.waiting-- }

// linger is a leader's commit delay: holding the only commit slot, it waits until as many writers
// wait for the next commit as the target (above), or the delay passes. With no more writers
// expected, or once quit says so, it returns at once. It is called without the owner's lock mu,
// which it takes to read and update its state.
func (d *commitDelay) linger(mu sync.Locker, quit func() bool) {
	mu.Lock()
	want := 0
	for _, p := range d.peaks {
		want = max(want, p)
	}
	if d.next >= want || quit() {
		d.nextRound(true)
		mu.Unlock()
		return
	}
	d.lingerFor = want
	select { // a wake-up left over from an earlier round
	case <-d.wake:
	default:
	}
	mu.Unlock()
	d.timer.Reset(d.delay)
	select {
	case <-d.wake:
	case <-d.timer.C:
	}
	d.timer.Stop()
	mu.Lock()
	d.lingerFor = 0
	if d.next >= want { // they came (also as the delay ran out)
		d.joined.Add(1)
	} else {
		d.expired.Add(1)
		for i := range d.peaks {
			d.peaks[i] = d.next
		}
	}
	d.nextRound(false)
	mu.Unlock()
}

// nextRound starts the next round (owner's lock held); observing: the leader did not wait, so the
// round's peak is learned from.
func (d *commitDelay) nextRound(observing bool) {
	d.observing = observing
	if observing {
		d.round = (d.round + 1) % commitRounds
		d.peaks[d.round] = d.waiting
	}
}

// staged notes that a commit staged every record up to seq (owner's lock held): the writers
// waiting for the next commit are those who arrive from now on.
func (d *commitDelay) staged(seq uint64) {
	d.stagedSeq = max(d.stagedSeq, seq)
	d.next = 0
}
