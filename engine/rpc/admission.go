package rpc

import (
	"bufio"
	"io"
	"net"
	"sync"
	"time"
)

// byteQueue accounts the bytes a server holds for its clients: request frames being read or
// served and answers not yet sent. Readers wait for room before taking a frame's bytes off their
// connection; answers are added without waiting (a handler never blocks on it), so the total can
// pass the limit by the answers of the calls in flight, which per-connection bounds keep small.
//
// A frame's bytes are admitted as they arrive, never on the strength of its declared length: a
// client that announces a large frame and then sends nothing (or dribbles) holds only about what
// it sent. Frames that fit a connection's read buffer are admitted whole once they are in it; a
// larger frame holds the buffer it is read into, which grows as its bytes arrive (readBody), and
// while it arrives it is "arriving". The arriving frames could otherwise fill the queue and wait
// for each other for ever, so two rules keep them moving:
//   - arriving frames other than the one holding the most ("the leader") together hold at most
//     half the queue (a frame takes what room there is, so it can grow past the leader and lead);
//   - the leader waits only for the bytes of calls being served and answers (which drain on their
//     own), never for other arriving frames, so it always completes if its client sends it.
//
// A dribbler can lead only by holding more than every other arriving frame, so stalling the
// others' large frames costs dribblers half the queue held, a quarter of it sent. The total stays
// within 1.5 × max (the leader's bound plus the others' half) plus answers.
type byteQueue struct {
	mu   sync.Mutex
	cond sync.Cond
	used int64
	max  int64

	// arriving is the bytes held by arriving frames other than leader; leader is the arriving
	// frame holding the most (nil: none arriving).
	arriving int64
	frames   map[*arrival]struct{}
	leader   *arrival
}

// arrival is a frame being read in chunks.
type arrival struct {
	held int64
}

// acquire waits until n more bytes fit (anything up to max fits an empty queue) or gone() says
// the waiter's connection ended (false). For frames already read off the connection and answers.
func (q *byteQueue) acquire(n int64, gone func() bool, waited func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for first := true; q.used > 0 && q.used+n > q.max; first = false {
		if gone() {
			return false
		}
		if first {
			waited()
		}
		q.cond.Wait()
	}
	q.used += n
	return true
}

func (q *byteQueue) add(n int64) {
	q.mu.Lock()
	q.used += n
	q.mu.Unlock()
}

func (q *byteQueue) release(n int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.used -= n
	q.mu.Unlock()
	q.cond.Broadcast()
}

// wake wakes the waiters to check whether their connection ended. Under mu: a waiter checks
// gone() and starts waiting while holding it, so it cannot miss this.
func (q *byteQueue) wake() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *byteQueue) load() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used
}

// begin starts an arriving frame.
func (q *byteQueue) begin() *arrival {
	a := &arrival{}
	q.mu.Lock()
	if q.frames == nil {
		q.frames = map[*arrival]struct{}{}
	}
	q.frames[a] = struct{}{}
	if q.leader == nil {
		q.leader = a
	}
	q.mu.Unlock()
	return a
}

// room says how many more bytes arriving frame a may take now (up to want). Under mu.
func (q *byteQueue) room(a *arrival, want int64) int64 {
	if a == q.leader {
		// Only what is being served and answered counts against the leader.
		base := q.used - q.arriving
		if base == 0 {
			return want
		}
		return min(want, q.max-base)
	}
	return min(want, q.max-q.used, q.max/2-q.arriving)
}

// take waits until at least least (at most want) more bytes of arriving frame a fit, holds as
// many as fit up to want and returns how many; 0 once gone() says its connection ended (a's bytes
// stay held until end). Taking part of what it wants lets a frame grow past the frame that leads
// and lead in turn.
func (q *byteQueue) take(a *arrival, want, least int64, gone func() bool, waited func()) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	least = min(least, want)
	k := q.room(a, want)
	for first := true; k < least; first = false {
		if gone() {
			return 0
		}
		if first {
			waited()
		}
		q.cond.Wait()
		k = q.room(a, want)
	}
	q.used += k
	a.held += k
	if a == q.leader {
		return k
	}
	q.arriving += k
	if a.held > q.leader.held {
		// a leads now: the former leader's bytes count among the others' (which lose a's, more,
		// so they stay within their half).
		q.arriving += q.leader.held - a.held
		q.leader = a
		q.cond.Broadcast() // the others hold less now
	}
	return k
}

// end ends arriving frame a: arrived (its bytes stay held, as a whole frame's, until released)
// or abandoned (released).
func (q *byteQueue) end(a *arrival, arrived bool) {
	q.mu.Lock()
	delete(q.frames, a)
	if a == q.leader {
		// The frame holding the most of the others leads now.
		q.leader = nil
		for f := range q.frames {
			if q.leader == nil || f.held > q.leader.held {
				q.leader = f
			}
		}
		if q.leader != nil {
			q.arriving -= q.leader.held
		}
	} else {
		q.arriving -= a.held
	}
	if !arrived {
		q.used -= a.held
	}
	q.mu.Unlock()
	q.cond.Broadcast()
}

// readBody reads the n-byte body of a frame whose length was just read from r into buf (grown as
// needed; it may be reallocated), admitting its bytes into the server's queue as they arrive (see
// byteQueue). On success the queue holds n bytes for the frame, to be released once it is
// served; on an error it holds none of them. The frame must arrive within opts.ReadTimeout, not
// counting time spent waiting for room.
func (s *Server) readBody(c *serverConn, r *bufio.Reader, n int64, buf []byte) ([]byte, error) {
	throttled := func() { s.throttled.Add(1) }
	deadline := time.Now().Add(s.opts.ReadTimeout)
	if n <= int64(r.Size()) {
		// The frame fits the connection's read buffer: wait for all of it there, then for room.
		_ = c.nc.SetReadDeadline(deadline)
		if _, err := r.Peek(int(n)); err != nil {
			return buf, err
		}
		if !s.queue.acquire(n, c.gone, throttled) {
			return buf, net.ErrClosed
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		_, _ = io.ReadFull(r, buf) // buffered by Peek
		return buf, nil
	}
	// A larger frame holds in the queue the buffer it is read into, which grows only as its bytes
	// arrive: when full, to twice what arrived (read, or waiting in the kernel) and at least
	// twice its size (4 KiB at first), so that a client holds at most about twice what it sent
	// and a fast one's frame is read with few copies. Reads fill that buffer.
	a := s.queue.begin()
	fail := func(err error) ([]byte, error) {
		s.queue.end(a, false)
		return buf[:0], err
	}
	var held int64
	buf = buf[:0]
	for int64(len(buf)) < n {
		have := int64(len(buf))
		if have == held {
			if have == 0 { // the first byte before any room
				_ = c.nc.SetReadDeadline(deadline)
				if _, err := r.Peek(1); err != nil {
					return fail(err)
				}
			}
			// Twice what arrived: in the read buffer and, not yet read, in the kernel.
			arrived := have + int64(r.Buffered()) + pendingBytes(c.nc)
			want := min(n, max(2*held, 2*arrived, 4<<10)) - held
			waitStart := time.Now()
			k := s.queue.take(a, want, 64<<10, c.gone, throttled)
			if k == 0 {
				return fail(net.ErrClosed)
			}
			deadline = deadline.Add(time.Since(waitStart))
			held += k
			if int64(cap(buf)) < held {
				nb := make([]byte, have, held)
				copy(nb, buf)
				buf = nb
			}
		}
		_ = c.nc.SetReadDeadline(deadline)
		k, err := r.Read(buf[have:held])
		if err != nil {
			return fail(err)
		}
		buf = buf[:have+int64(k)]
	}
	s.queue.end(a, true)
	return buf, nil
}
