package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/rpc"
)

// Defaults of a scan that sets none.
const (
	DefaultScanCaching       = 100
	DefaultScanMaxResultSize = 2 << 20
)

// Scanner streams a scan's rows across regions. It fetches Caching rows (or MaxResultSize bytes)
// per call, moves from region to region, assembles partial results into rows unless the scan allows
// partial results, and after a retryable error (a region moved, a server died) reopens the scan
// just after the last row it returned. Use Next until it returns false, then check Err; Close
// releases the server-side scanner early.
type Scanner struct {
	t    *Table
	ctx  context.Context
	scan *pb.Scan

	loc       *location
	conn      *rpc.Conn
	region    string // the region (replica) the server-side scanner is open on
	scannerID uint64
	nextSeq   uint64

	queue   []*Result
	partial *Result // a row being assembled from partial results
	// Where to reopen: after the last whole row received (exclusive), or at a region boundary.
	resume          []byte
	resumeExclusive bool
	// partKey is the key of the last cell returned of a row still partial (AllowPartialResults):
	// the scan reopens at that row and drops its cells up to this one, as HBase's client does.
	partKey []byte
	rows    int
	done    bool
	err     error
}

// Scan starts a scan; nothing is sent until the first Next.
func (t *Table) Scan(ctx context.Context, s *pb.Scan) *Scanner {
	s = proto.Clone(s).(*pb.Scan)
	if s.Caching <= 0 {
		s.Caching = DefaultScanCaching
	}
	if s.MaxResultSize <= 0 {
		s.MaxResultSize = DefaultScanMaxResultSize
	}
	return &Scanner{t: t, ctx: ctx, scan: s}
}

// Next returns the next row (or part of a row when the scan allows partial results).
func (s *Scanner) Next() (*Result, bool) {
	for len(s.queue) == 0 {
		if s.done || s.err != nil {
			return nil, false
		}
		s.err = s.fetch()
	}
	r := s.queue[0]
	s.queue = s.queue[1:]
	if !r.Partial {
		s.rows++
		if s.scan.Limit > 0 && s.rows >= int(s.scan.Limit) {
			s.queue = nil
			s.finish()
		}
	}
	return r, true
}

// Err is the error that ended the scan early, if any.
func (s *Scanner) Err() error { return s.err }

// Close ends the scan and releases its server-side scanner.
func (s *Scanner) Close() error {
	s.finish()
	return nil
}

func (s *Scanner) finish() {
	s.done = true
	s.closeRemote()
}

func (s *Scanner) closeRemote() {
	if s.scannerID != 0 && s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.t.c.cfg.RPCTimeout)
		_, _ = s.conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: s.region},
			ScannerId: s.scannerID, CloseScanner: true}, nil, nil, nil)
		cancel()
	}
	s.scannerID, s.conn, s.region = 0, nil, ""
}

// closeRemoteAsync closes the server's scanner in the background (a fetch giving up on it must
// not wait for a server that may not answer), and forgets it: else it stays open there until its
// lease ends, holding one of the server's scanner slots.
func (s *Scanner) closeRemoteAsync() {
	if s.scannerID != 0 && s.conn != nil {
		conn, region, id, timeout := s.conn, s.region, s.scannerID, s.t.c.cfg.RPCTimeout
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, _ = conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: region},
				ScannerId: id, CloseScanner: true}, nil, nil, nil)
		}()
	}
	s.scannerID, s.conn, s.region = 0, nil, ""
}

// fetch gets the next batch of results, opening a scanner on the right region when needed and
// retrying what can be retried until the context's deadline.
func (s *Scanner) fetch() error {
	c := s.t.c
	ctx, cancel := c.opContext(s.ctx)
	defer cancel()
	var lastErr error
	for attempt := 0; ; attempt++ {
		err := s.fetchOnce(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		d, typed := pb.DetailOf(err)
		// A read replica served this region (TIMELINE): its errors say nothing of the primary's
		// location, which is all s.loc names; the region is looked up again, replicas with it.
		replica := s.loc != nil && s.region != "" && s.region != s.loc.region
		switch {
		case replica && (typed && retryable(d) && d.GetCode() != pb.ErrorCode_ERROR_CODE_THROTTLED || !typed && transient(err) && ctx.Err() == nil):
			c.cache.invalidate(s.t.name, s.loc.region)
			s.closeRemoteAsync()
		case typed && d.GetCode() == pb.ErrorCode_ERROR_CODE_UNKNOWN_SCANNER,
			typed && d.GetCode() == pb.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SCANNER_NEXT:
			// The server lost the scanner (lease expired, region moved, a retried next): reopen.
		case typed && !retryable(d):
			return d
		case typed && d.GetCode() == pb.ErrorCode_ERROR_CODE_THROTTLED:
			// Over a read quota: the server keeps the scanner, and the same call goes again
			// after the wait.
			if err := c.backoff(ctx, attempt, lastErr); err != nil {
				return fmt.Errorf("client: scan of %s gave up: %w (last error: %v)", s.t.name, err, lastErr)
			}
			continue
		case typed:
			if s.loc != nil {
				c.noteRegionError(s.t, s.loc, d)
			}
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			s.closeRemoteAsync() // the attempt timed out: the scanner may still be open there
		case ctx.Err() != nil:
			// The operation's deadline passed (or its caller went away): the server's cached
			// regions stay, and its scanner is closed rather than left to its lease.
			s.closeRemoteAsync()
			return fmt.Errorf("client: scan of %s: %w (last error: %v)", s.t.name, ctx.Err(), lastErr)
		case !transient(err):
			return err
		default:
			if s.loc != nil {
				c.cache.invalidateServer(s.loc.addr)
			}
		}
		s.reset()
		if err := c.backoff(ctx, attempt, lastErr); err != nil {
			return fmt.Errorf("client: scan of %s gave up: %w (last error: %v)", s.t.name, err, lastErr)
		}
	}
}

// reset forgets the server-side scanner and any half-assembled row: the scan reopens after the
// last whole row received.
func (s *Scanner) reset() {
	s.scannerID, s.conn, s.loc, s.partial, s.region = 0, nil, nil, nil, ""
}

func (s *Scanner) fetchOnce(ctx context.Context) error {
	c := s.t.c
	// The server answers within half the call's timeout, with a heartbeat when its filter found
	// nothing yet (HBASE-13090): a scan that skips rows for minutes never times out.
	req := &pb.ScanRequest{NumberOfRows: s.scan.Caching, ClientHandlesPartials: true, ClientHandlesHeartbeats: true,
		TimeLimitMs: max(c.cfg.RPCTimeout/2, time.Millisecond).Milliseconds()}
	timeline := false
	if s.scannerID == 0 {
		open, ok, err := s.openRequest(ctx)
		if err != nil || !ok {
			return err
		}
		req.Scan = open
		s.region = s.loc.region
		timeline = s.scan.Consistency == pb.Consistency_CONSISTENCY_TIMELINE && len(s.loc.replicas) > 0
	} else {
		req.ScannerId = s.scannerID
		req.NextCallSeq = s.nextSeq
	}
	resp := &pb.ScanResponse{}
	var cells []byte
	if timeline {
		// TIMELINE: the first replica to answer the open serves the rest of this region.
		a, err := s.timelineOpen(ctx, req)
		if err != nil {
			return err
		}
		s.conn, s.region, cells, resp = a.conn, a.region, a.cells, a.resp
	} else {
		req.Region = &pb.RegionSpecifier{Name: s.region}
		if s.conn == nil {
			conn, err := c.conn(ctx, s.loc.addr)
			if err != nil {
				return err
			}
			s.conn = conn
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
		defer cancel()
		var err error
		if cells, err = s.conn.Call(actx, pb.Method_METHOD_SCAN, req, nil, resp, nil); err != nil {
			return err
		}
	}
	if s.scannerID == 0 {
		s.scannerID, s.nextSeq = resp.ScannerId, 0
	}
	s.nextSeq++
	if err := s.take(resp, cells); err != nil {
		return err
	}
	if !resp.MoreResultsInRegion || resp.ScannerId == 0 {
		// The region is done: the server closed the scanner. Move on, unless the table is.
		regionEnd := s.loc
		s.scannerID, s.conn, s.region = 0, nil, ""
		if !resp.MoreResults || s.lastRegion(regionEnd) {
			s.done = true
		} else {
			s.loc = nil
			s.nextRegionAfter(regionEnd)
		}
	}
	return nil
}

// take queues the response's results, assembling partial ones unless the scan allows them.
func (s *Scanner) take(resp *pb.ScanResponse, block []byte) error {
	for i, n := range resp.CellsPerResult {
		cells, rest, err := decodeCells(block, int(n))
		if err != nil {
			return err
		}
		block = rest
		if len(cells) == 0 {
			continue
		}
		partial := i < len(resp.PartialFlagPerResult) && resp.PartialFlagPerResult[i]
		r := &Result{Row: cells[0].Row, Cells: cells, Stale: resp.Stale, Partial: partial}
		if s.scan.AllowPartialResults {
			if s.partKey != nil && bytes.Equal(cell.Key(s.partKey).Row(), r.Row) {
				// The row's first cells were returned before the scanner was reopened.
				r.Cells = slices.DeleteFunc(r.Cells, func(c cell.Cell) bool {
					return cell.Compare(c.AppendKey(nil), s.partKey) <= 0
				})
			}
			if partial {
				if len(r.Cells) > 0 {
					s.partKey = r.Cells[len(r.Cells)-1].AppendKey(s.partKey[:0])
				}
				s.resume, s.resumeExclusive = r.Row, false
			} else {
				s.partKey = nil
				s.resume, s.resumeExclusive = r.Row, true
			}
			if len(r.Cells) > 0 {
				s.queue = append(s.queue, r)
			}
			continue
		}
		if s.partial != nil && !bytes.Equal(s.partial.Row, r.Row) {
			return fmt.Errorf("client: server sent row %q before finishing partial row %q", r.Row, s.partial.Row)
		}
		if s.partial != nil {
			s.partial.Cells = append(s.partial.Cells, r.Cells...)
			r = s.partial
		}
		if partial {
			r.Partial = true
			s.partial = r
			continue
		}
		r.Partial = false
		s.partial = nil
		s.queue = append(s.queue, r)
		s.resume, s.resumeExclusive = r.Row, true
	}
	if len(block) != 0 {
		return fmt.Errorf("client: %d stray bytes after a scan response's cells", len(block))
	}
	return nil
}

// openRequest positions the scan on its next region and returns the Scan to open it with; ok is
// false when the scan is over.
func (s *Scanner) openRequest(ctx context.Context) (*pb.Scan, bool, error) {
	open := proto.Clone(s.scan).(*pb.Scan)
	if s.resume != nil {
		open.StartRow, open.ExcludeStartRow = s.resume, s.resumeExclusive
	}
	if s.loc == nil {
		// Reversed scans look for the region holding the rows below the start: below a region
		// boundary (exclusive) or the table's end (empty start row).
		before := s.scan.Reversed && (len(open.StartRow) == 0 || open.ExcludeStartRow)
		loc, err := s.t.c.locate(ctx, s.t, open.StartRow, before, true)
		if err != nil {
			return nil, false, err
		}
		s.loc = loc
	}
	if s.scan.Limit > 0 {
		open.Limit = s.scan.Limit - int32(s.rows+len(s.queue))
		if open.Limit <= 0 {
			return nil, false, nil
		}
	}
	return open, true, nil
}

// lastRegion says whether loc is the last region the scan needs.
func (s *Scanner) lastRegion(loc *location) bool {
	if s.scan.Reversed {
		return len(loc.start) == 0 || (len(s.scan.StopRow) > 0 && bytes.Compare(s.scan.StopRow, loc.start) >= 0)
	}
	// A stop row that is the region's end key is in the next region: an inclusive one goes on there.
	c := bytes.Compare(s.scan.StopRow, loc.end)
	return len(loc.end) == 0 || (len(s.scan.StopRow) > 0 && (c < 0 || c == 0 && !s.scan.IncludeStopRow))
}

// nextRegionAfter points the scan at the region after loc (before it, for reversed scans).
func (s *Scanner) nextRegionAfter(loc *location) {
	if s.scan.Reversed {
		// Continue just below this region: its start row belongs to it, so it is excluded.
		s.resume, s.resumeExclusive = loc.start, true
	} else {
		s.resume, s.resumeExclusive = loc.end, false
	}
}

type scanAnswer struct {
	conn   *rpc.Conn
	region string
	resp   *pb.ScanResponse
	cells  []byte
}

// timelineOpen opens the scan on the primary and, when it has not answered within the hedge delay
// (or failed), on every replica too; the first to answer wins and the others' scanners are closed.
func (s *Scanner) timelineOpen(ctx context.Context, req *pb.ScanRequest) (*scanAnswer, error) {
	c := s.t.c
	try := func(addr, region string) func(context.Context) (*scanAnswer, error) {
		return func(ctx context.Context) (*scanAnswer, error) {
			a := &scanAnswer{region: region, resp: &pb.ScanResponse{}}
			var err error
			if a.conn, err = c.conn(ctx, addr); err != nil {
				return nil, err
			}
			r := proto.Clone(req).(*pb.ScanRequest)
			r.Region = &pb.RegionSpecifier{Name: region}
			// Not cut short when another open wins: a losing open that succeeds is closed (discard).
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RPCTimeout)
			defer cancel()
			if a.cells, err = a.conn.Call(actx, pb.Method_METHOD_SCAN, r, nil, a.resp, nil); err != nil {
				return nil, err
			}
			return a, nil
		}
	}
	loc := s.loc
	return hedged(ctx, c.cfg.HedgeDelay, try(loc.addr, loc.region), func() []func(context.Context) (*scanAnswer, error) {
		var out []func(context.Context) (*scanAnswer, error)
		for _, r := range loc.replicas {
			out = append(out, try(r.addr, r.region))
		}
		return out
	}, func(a *scanAnswer) { // a losing open left a scanner on its server
		if a.resp.ScannerId == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
		defer cancel()
		_, _ = a.conn.Call(ctx, pb.Method_METHOD_SCAN, &pb.ScanRequest{Region: &pb.RegionSpecifier{Name: a.region},
			ScannerId: a.resp.ScannerId, CloseScanner: true}, nil, nil, nil)
	})
}
