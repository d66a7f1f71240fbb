package regionserver

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/cellstore/cellstore/engine/aggregate"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/quota"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/rpc"
)

// The built-in endpoints (docs/endpoints.md): aggregation and bulk delete, each a call over one
// region's part of a scan that gives up after a time budget and says where to go on, so that no
// call holds a handler thread for long whatever the scan's filter skips.

// defaultEndpointBudget is an endpoint call's time budget when the client sets none; a client's
// is capped at maxEndpointBudget and at half the time its call has left.
const (
	defaultEndpointBudget = time.Second
	maxEndpointBudget     = 30 * time.Second
	defaultBulkDeleteRows = 1000
	maxBulkDeleteRows     = 100000
)

func endpointDeadline(ctx context.Context, limitMs int64) time.Time {
	budget := defaultEndpointBudget
	if limitMs > 0 {
		budget = min(time.Duration(limitMs)*time.Millisecond, maxEndpointBudget)
	}
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, dl.Sub(now)/2)
	}
	return now.Add(max(budget, 10*time.Millisecond))
}

// readableRegion finds the region an endpoint call names, open for reads and admitted by the
// caller's quotas.
func (s *Server) readableRegion(c *rpc.Call, name string) (*onlineRegion, *region.Region, *pb.ErrorDetail) {
	or, r, d := s.lookupUntil(name, time.Now().Add(openingWait), true)
	if d == nil {
		d = s.checkRead(or)
	}
	if d == nil {
		d = s.admit(c, or, false, 0)
	}
	return or, r, d
}

// endpointScan opens a region scanner for an endpoint call: the scan checked, narrowed to what the
// caller may read and bounded by deadline.
func (s *Server) endpointScan(c *rpc.Call, or *onlineRegion, r *region.Region, ps *pb.Scan, deadline time.Time) (*region.RegionScanner, *pb.ErrorDetail) {
	if ps.GetReversed() || ps.GetRaw() || ps.GetLimit() > 0 {
		return nil, invalid("endpoint scans go forward, not raw, without a row limit")
	}
	rscan, err := convertScan(ps)
	if err != nil {
		return nil, s.errDetail(err, or.name)
	}
	var d *pb.ErrorDetail
	if rscan.Columns, rscan.CellCheck, d = s.readable(c, or, rscan.Columns, ps.GetAttributes()); d != nil {
		return nil, d
	}
	rscan.Batch, rscan.AllowPartialResults, rscan.MaxResultSize = 0, false, 4<<20
	rscan.Caching, rscan.ReuseResults = 1000, true
	rscan.TimeLimit = max(time.Until(deadline), time.Millisecond)
	rs, err := r.Scanner(rscan)
	if err != nil {
		return nil, s.errDetail(err, or.name)
	}
	s.m.readRequests.Add(1)
	return rs, nil
}

// scanFor runs rs, which starts at row start, until the region is done or deadline passes,
// handing every whole row to each. It returns the row to resume from (nil: the region is done),
// never start itself: a call that could not finish its first row in time reads on, or the next
// call would start at that row again, and time out in it again, for ever.
func scanFor(rs *region.RegionScanner, start []byte, deadline time.Time, each func(res *region.Result) *pb.ErrorDetail) ([]byte, *pb.ErrorDetail, error) {
	var last []byte
	for {
		b, err := rs.Next()
		if err != nil {
			return nil, nil, err
		}
		for i := range b.Results {
			if d := each(&b.Results[i]); d != nil {
				return nil, d, nil
			}
			last = append(last[:0], b.Results[i].Row...)
		}
		if !b.More {
			return nil, nil, nil
		}
		if time.Now().After(deadline) {
			if b.Heartbeat && len(b.Cursor) > 0 && !bytes.Equal(b.Cursor, start) {
				// The cursor row was not returned: start again at it.
				return slices.Clone(b.Cursor), nil, nil
			}
			if last != nil {
				return append(last, 0), nil, nil // the row just after the last one read
			}
			// Nothing to say where to go on from yet: read on.
		}
	}
}

func (s *Server) handleAggregate(ctx context.Context, c *rpc.Call) {
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.AggregateRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad AggregateRequest: %v", err))
		return
	}
	if len(req.GetScan().GetColumns()) > 1 {
		fail(c, &answered, invalid("an aggregation reads one column family (and one qualifier, as HBase's clients ask)"))
		return
	}
	fold, err := aggregate.NewFold(req.GetValueType(), req.GetHistogram())
	if err != nil {
		fail(c, &answered, invalid("%v", err))
		return
	}
	name := req.GetRegion().GetName()
	or, r, d := s.readableRegion(c, name)
	if d != nil {
		fail(c, &answered, d)
		return
	}
	deadline := endpointDeadline(ctx, req.GetTimeLimitMs())
	rs, d := s.endpointScan(c, or, r, req.GetScan(), deadline)
	if d != nil {
		fail(c, &answered, d)
		return
	}
	defer rs.Close()
	var read int64
	resume, d, err := scanFor(rs, req.GetScan().GetStartRow(), deadline, func(res *region.Result) *pb.ErrorDetail {
		if len(res.Cells) > 0 {
			fold.Row()
		}
		for i := range res.Cells {
			fold.Add(res.Cells[i].Value)
			read += int64(len(res.Cells[i].Key) + len(res.Cells[i].Value))
		}
		return nil
	})
	if err != nil {
		d = s.errDetail(err, name)
	}
	if d != nil {
		fail(c, &answered, d)
		return
	}
	s.limiters.Charge(quota.Request{User: c.User, Table: or.tkey, Namespace: or.ns}, read)
	resp := fold.Response()
	resp.ResumeRow = resume
	reply(c, &answered, resp)
	s.m.aggregates.Add(1)
}

func (s *Server) handleBulkDelete(ctx context.Context, c *rpc.Call) {
	answered := false
	defer s.safe(c, &answered)
	req, err := rpc.Request[pb.BulkDeleteRequest](c)
	if err != nil {
		fail(c, &answered, invalid("bad BulkDeleteRequest: %v", err))
		return
	}
	per := int(req.GetRowsPerBatch())
	if per == 0 {
		per = defaultBulkDeleteRows
	}
	if per < 0 || per > maxBulkDeleteRows {
		fail(c, &answered, invalid("rows_per_batch %d (1 to %d)", per, maxBulkDeleteRows))
		return
	}
	typ := req.GetDeleteType()
	if _, ok := pb.BulkDeleteRequest_DeleteType_name[int32(typ)]; !ok {
		fail(c, &answered, invalid("unknown delete type %d", typ))
		return
	}
	ts := cell.LatestTimestamp
	if req.Timestamp != nil {
		if ts = req.GetTimestamp(); ts < 0 {
			fail(c, &answered, invalid("negative timestamp %d", ts))
			return
		}
	}
	name := req.GetRegion().GetName()
	or, r, d := s.lookup(name)
	if d == nil {
		d = s.checkWrite(or)
	}
	if d == nil {
		d = s.mayWrite(c, or, nil) // table-wide WRITE: what is deleted is known only while scanning
	}
	if d == nil {
		d = s.admit(c, or, false, 0) // it scans first: a read; each batch of deletes is admitted as writes (apply)
	}
	if d != nil {
		fail(c, &answered, d)
		return
	}
	dur, err := convertDurability(or.table.GetDurability())
	if err != nil {
		fail(c, &answered, s.errDetail(err, name))
		return
	}
	deadline := endpointDeadline(ctx, req.GetTimeLimitMs())
	rs, d := s.endpointScan(c, or, r, req.GetScan(), deadline)
	if d != nil {
		fail(c, &answered, d)
		return
	}
	defer rs.Close()
	var resp pb.BulkDeleteResponse
	var pending []*region.Mutation
	var versions int64
	var done []byte // the row after the last batch applied
	apply := func() *pb.ErrorDetail {
		if len(pending) == 0 {
			return nil
		}
		// Each batch's rows count against the write quotas (a bulk delete is many writes);
		// throttled after a batch, the call answers how far it got (below).
		if d := s.admitN(c, or, true, 0, len(pending)); d != nil {
			return d
		}
		s.m.writeRequests.Add(int64(len(pending)))
		for _, err := range r.Batch(pending) {
			if err != nil {
				return s.errDetail(err, name)
			}
		}
		resp.RowsDeleted += int64(len(pending))
		resp.VersionsDeleted += versions
		done = append(bytes.Clone(pending[len(pending)-1].Row), 0)
		pending, versions = pending[:0], 0
		return nil
	}
	var read int64
	resume, d, err := scanFor(rs, req.GetScan().GetStartRow(), deadline, func(res *region.Result) *pb.ErrorDetail {
		if len(res.Cells) == 0 {
			return nil
		}
		read += resultSize(res)
		m := &region.Mutation{Row: bytes.Clone(res.Row), Durability: dur}
		switch typ {
		case pb.BulkDeleteRequest_DELETE_TYPE_ROW:
			m.DeleteRow(ts)
		case pb.BulkDeleteRequest_DELETE_TYPE_FAMILY:
			for i := range res.Cells {
				f := res.Cells[i].Family()
				if i == 0 || !bytes.Equal(f, res.Cells[i-1].Family()) {
					m.DeleteFamily(bytes.Clone(f), ts)
				}
			}
		case pb.BulkDeleteRequest_DELETE_TYPE_COLUMN:
			for i := range res.Cells {
				f, q := res.Cells[i].Family(), res.Cells[i].Qualifier()
				if i == 0 || !bytes.Equal(f, res.Cells[i-1].Family()) || !bytes.Equal(q, res.Cells[i-1].Qualifier()) {
					m.DeleteColumn(bytes.Clone(f), bytes.Clone(q), ts)
				}
			}
		case pb.BulkDeleteRequest_DELETE_TYPE_VERSION:
			for i := range res.Cells {
				f, q := res.Cells[i].Family(), res.Cells[i].Qualifier()
				if req.Timestamp != nil {
					// The version at the timestamp, once per column.
					if i > 0 && bytes.Equal(f, res.Cells[i-1].Family()) && bytes.Equal(q, res.Cells[i-1].Qualifier()) {
						continue
					}
					m.DeleteVersion(bytes.Clone(f), bytes.Clone(q), ts)
				} else {
					m.DeleteVersion(bytes.Clone(f), bytes.Clone(q), res.Cells[i].Timestamp())
				}
				versions++
			}
		}
		pending = append(pending, m)
		if len(pending) >= per {
			return apply()
		}
		return nil
	})
	if err != nil {
		d = s.errDetail(err, name)
	}
	if d == nil {
		d = apply()
	}
	s.limiters.Charge(quota.Request{User: c.User, Table: or.tkey, Namespace: or.ns}, read) // what it scanned
	if fd := s.fenceClosed(or.name); fd != nil {
		d = fd // applied, but the lease may have run out meanwhile: acknowledge nothing
	} else if d != nil && d.GetRetryable() && done != nil {
		// The region is going (a move, a split): what was applied is durable, so say so and
		// where to go on rather than lose the counts; the next call finds the region's new place.
		d, resume = nil, done
	}
	if d != nil {
		fail(c, &answered, d)
		return
	}
	resp.ResumeRow = resume
	reply(c, &answered, &resp)
	s.m.bulkDeletes.Add(1)
	s.m.bulkDeletedRows.Add(resp.RowsDeleted)
}
