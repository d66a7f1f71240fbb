package master

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Region servers' transition reports (OPENED, CLOSED, FAILED_OPEN) are written to the catalog
// in groups. Each report is a catalog write, a round trip to storage (an object PUT on a bucket,
// 100–300 ms on a busy one), made with the master's lock held; a drain's regions open at once on
// their destinations, and their reports used to wait for one another's writes. Now a report
// queues, and the first of the waiting callers to get the lock applies the queued reports (up to
// maxReportGroup) and writes them all at once; the callers whose reports it took find their
// answers waiting.

// reportCall is one ReportRegionTransition waiting for its group's write.
type reportCall struct {
	server    string
	startCode int64
	req       *pb.ReportRegionTransitionRequest
	done      chan error // buffered: the group's writer never waits for the caller
	// sent, set by the group's writer before it answers, is closed once the order the report
	// started (a move's open at its destination) reached its region server: the caller answers
	// after that (ordersSentWait at most), so that a region server that tells its clients where
	// a region went, once its CLOSED report is answered, sends them to a server that already
	// knows it is opening the region (and waits for the open) instead of one that refuses them.
	sent <-chan struct{}
}

// ordersSentWait bounds how long a report's answer waits for the order it started to reach its
// region server.
const ordersSentWait = time.Second

// wait waits for the report's answer, then for the order it started to be sent.
func (c *reportCall) wait() error {
	err := <-c.done
	c.waitSent()
	return err
}

// waitSent waits for the order the report started (if any) to reach its region server; the
// caller must not hold the master's lock (the sender takes it once the call returns).
func (c *reportCall) waitSent() {
	if c.sent != nil {
		t := time.NewTimer(ordersSentWait)
		select {
		case <-c.sent:
		case <-t.C:
		}
		t.Stop()
	}
}

// reportQueue holds the reports that wait for the master's lock.
type reportQueue struct {
	mu      sync.Mutex
	calls   []*reportCall
	waiting prometheus.Gauge // reports received and not answered yet
}

// maxReportGroup bounds a group: its rows are one record of the catalog's log, which has a
// size limit (a region's row is a few hundred bytes; the group also stops at maxBatchBytes).
const maxReportGroup = 256

func (q *reportQueue) push(c *reportCall) {
	q.mu.Lock()
	q.calls = append(q.calls, c)
	q.mu.Unlock()
	q.waiting.Inc()
}

// putBack returns calls a group did not take (its write was full) to the front of the queue.
func (q *reportQueue) putBack(calls []*reportCall) {
	q.mu.Lock()
	q.calls = append(slices.Clip(calls), q.calls...)
	q.mu.Unlock()
}

// take takes up to maxReportGroup reports, the oldest first.
func (q *reportQueue) take() []*reportCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.calls), maxReportGroup)
	calls := q.calls[:n:n]
	q.calls = q.calls[n:]
	if len(q.calls) == 0 {
		q.calls = nil
	}
	return calls
}

// answer gives c its answer.
func (q *reportQueue) answer(c *reportCall, err error) {
	c.done <- err
	q.waiting.Dec()
}

// remove takes c out of the queue; false when a group took it.
func (q *reportQueue) remove(c *reportCall) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, o := range q.calls {
		if o == c {
			q.calls = append(q.calls[:i], q.calls[i+1:]...)
			q.waiting.Dec()
			return true
		}
	}
	return false
}

// report applies a region server's transition report, in a group with the others waiting.
func (m *Master) report(server string, startCode int64, req *pb.ReportRegionTransitionRequest) error {
	c := &reportCall{server: server, startCode: startCode, req: req, done: make(chan error, 1)}
	m.reports.push(c)
	if err := m.lock(); err != nil {
		if m.reports.remove(c) {
			return err
		}
		return c.wait() // a group took it: its writer answers before it lets the lock go
	}
	for {
		select {
		case err := <-c.done: // a group took it (perhaps the last one, if it was not among the first maxReportGroup)
			m.mu.Unlock()
			c.waitSent()
			return err
		default:
		}
		if !m.activeLocked() { // the group before failed its write
			if m.reports.remove(c) {
				err := m.notActive()
				m.mu.Unlock()
				return err
			}
			continue // answered meanwhile
		}
		m.reportGroupLocked()
	}
}

// reportGroupLocked applies the queued reports, each to the model the one before left, writes
// them to the catalog at once, sends the orders they start and answers their callers. A failed
// write answers every report of the group NOT_ACTIVE_MASTER, those that changed nothing included
// (they were judged on rows that may not be written): the master stops, and the region servers
// report again to the next one.
func (m *Master) reportGroupLocked() {
	calls := m.reports.take()
	errs := make([]error, len(calls))
	var g catalogGroup
	var send []string
	var sendBy []*reportCall // the report that started each of send
	staged := 0
	for i, c := range calls {
		if g.bytes >= maxBatchBytes {
			// The group's write is full (large regions' rows): the rest go in the next group.
			m.reports.putBack(calls[i:])
			calls, errs = calls[:i], errs[:i]
			break
		}
		if !m.serverLiveLocked(c.server, c.startCode) {
			errs[i] = errDetail(pb.ErrorCode_ERROR_CODE_LEASE_EXPIRED, false,
				"server %s (start code %d) is not a live region server of this master: stop serving and register again", c.server, c.startCode)
			continue
		}
		var b batch
		region, err := m.reportLocked(&b, c.server, c.startCode, c.req)
		if err == nil {
			err = m.stageLocked(&g, &b)
		}
		if errs[i] = err; err != nil {
			continue
		}
		if !b.empty() {
			staged++
		}
		if region != "" {
			send = append(send, region)
			sendBy = append(sendBy, c)
		}
	}
	if err := m.commitGroupLocked(&g); err != nil {
		// The master stops; the write may or may not have reached storage. Its servers report
		// again to the next master, which finds the region as it was (and applies the report) or
		// as the report left it (and takes it as a repeat).
		again := (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER, Retryable: true, RetryAfterMs: notActiveRetryMs,
			Message: fmt.Sprintf("this master is stopping (%v): report to the next active master", err)}).Status()
		for i := range errs {
			errs[i] = again
		}
	} else {
		if staged > 0 {
			m.metrics.reportsPerWrite.Observe(float64(staged))
		}
		for i, name := range send {
			if m.primaryOpenSentLocked(name) {
				sendBy[i].sent = m.sendOrderLocked(name)
			}
		}
	}
	for i, c := range calls {
		m.reports.answer(c, errs[i])
	}
}
