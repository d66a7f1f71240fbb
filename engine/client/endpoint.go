package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/cellstore/cellstore/engine/aggregate"
	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/rpc"
)

// The built-in endpoints (docs/endpoints.md): calls over a scan's rows that run in the region
// servers, one region at a time, the answers merged here.

// overRegions runs call on each region of the scan's rows in order. A call answers the row to go
// on from when it ran out of time inside its region (nil: the region is done). The scan's start
// row is honoured on the first call only; the later ones start where the previous stopped.
func (t *Table) overRegions(ctx context.Context, s *pb.Scan, call func(ctx context.Context, conn *rpc.Conn, region string, scan *pb.Scan) (resume []byte, err error)) error {
	if s.GetReversed() {
		return errors.New("client: endpoint calls scan forward; unset Reversed")
	}
	scan := proto.CloneOf(s)
	from := scan.GetStartRow()
	stop := scan.GetStopRow()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var served *location
		var resume []byte
		err := t.c.withRegion(ctx, t, from, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
			r, err := call(ctx, conn, loc.region, scan)
			if err == nil {
				served, resume = loc, r
			}
			return err
		})
		if err != nil {
			return err
		}
		scan.ExcludeStartRow = false
		if len(resume) > 0 {
			if bytes.Compare(resume, from) <= 0 {
				return fmt.Errorf("client: region %s answered a resume row %q that is not past %q", served.region, resume, from)
			}
			from, scan.StartRow = resume, resume
			continue
		}
		end := served.end
		if len(end) == 0 || len(stop) > 0 && (bytes.Compare(stop, end) < 0 || bytes.Equal(stop, end) && !scan.GetIncludeStopRow()) {
			return nil
		}
		from, scan.StartRow = end, end
	}
}

// Aggregate folds the values of one column over a scan (HBase's AggregationClient): the scan
// names one family and at most one qualifier, and its filter, time range and versions apply;
// each value is read as vt (8 bytes; others are counted as skipped). The result has the count,
// sum, min, max, mean and standard deviation; Median finds the median.
func (t *Table) Aggregate(ctx context.Context, s *pb.Scan, vt pb.ValueType) (*aggregate.Totals, error) {
	return t.aggregate(ctx, s, vt, nil, nil)
}

func (t *Table) aggregate(ctx context.Context, s *pb.Scan, vt pb.ValueType, h *pb.Histogram, each func(*pb.AggregateResponse) error) (*aggregate.Totals, error) {
	if err := aggregate.CheckType(vt); err != nil {
		return nil, err
	}
	if cols := s.GetColumns(); len(cols) != 1 || len(cols[0].GetQualifiers()) > 1 {
		return nil, errors.New("client: an aggregation reads one column: the scan names one family and at most one qualifier")
	}
	tot := &aggregate.Totals{Type: vt}
	err := t.overRegions(ctx, s, func(ctx context.Context, conn *rpc.Conn, region string, scan *pb.Scan) ([]byte, error) {
		req := &pb.AggregateRequest{Region: &pb.RegionSpecifier{Name: region}, Scan: scan, ValueType: vt, Histogram: h,
			TimeLimitMs: (t.c.cfg.RPCTimeout / 4).Milliseconds()}
		var resp pb.AggregateResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_AGGREGATE, req, nil, &resp, nil); err != nil {
			return nil, err
		}
		tot.Merge(&resp)
		if each != nil {
			if err := each(&resp); err != nil {
				return nil, err
			}
		}
		return resp.GetResumeRow(), nil
	})
	if err != nil {
		return nil, err
	}
	return tot, nil
}

// Median is the median of the values Aggregate would fold (the middle value, or the mean of the
// two middle ones), exact: after a first pass for the count and range, each pass asks every
// region for a histogram of the range that holds the middle and narrows it, until the values in
// it are few enough to come back whole (a handful of passes over the scan's rows). ok is false
// when there are no values. Writes to the rows during the passes can fail it with
// aggregate.ErrChanged.
func (t *Table) Median(ctx context.Context, s *pb.Scan, vt pb.ValueType) (median float64, ok bool, err error) {
	tot, err := t.Aggregate(ctx, s, vt)
	if err != nil || tot.Values == 0 {
		return 0, false, err
	}
	find := func(rank int64) (float64, error) {
		search, err := aggregate.NewSearch(rank, tot)
		if err != nil {
			return 0, err
		}
		for {
			if _, err := t.aggregate(ctx, s, vt, search.Histogram(), search.Add); err != nil {
				return 0, err
			}
			k, done, err := search.Next()
			if err != nil {
				return 0, err
			}
			if done {
				return aggregate.FromKey(k, vt).Float(), nil
			}
		}
	}
	lo, err := find((tot.Values - 1) / 2)
	if err != nil {
		return 0, false, err
	}
	if tot.Values%2 == 1 {
		return lo, true, nil
	}
	hi, err := find(tot.Values / 2)
	if err != nil {
		return 0, false, err
	}
	return lo + (hi-lo)/2, true, nil
}

// MutateRows applies mutations of several rows of one region atomically, all or none (HBase's
// MultiRowMutationEndpoint), when every condition holds (each names its row); it reports
// whether it applied them. Rows in different regions are refused (FAILED_PRECONDITION): keep
// them together with a KeyPrefixRegionSplitPolicy or DelimitedKeyPrefixRegionSplitPolicy.
func (t *Table) MutateRows(ctx context.Context, conds []*pb.Condition, ms ...*Mutation) (bool, error) {
	if len(ms) == 0 {
		return false, errors.New("client: MutateRows without mutations")
	}
	actions, block, err := t.c.encodeAtomic(ms, "MutateRows", false, true)
	if err != nil {
		return false, err
	}
	for i, c := range conds {
		if len(c.GetRow()) == 0 {
			return false, fmt.Errorf("client: MutateRows condition %d names no row", i)
		}
	}
	return t.sendAtomic(ctx, ms[0].Row, block, func(region *pb.RegionSpecifier) *pb.RegionAction {
		return &pb.RegionAction{Region: region, Atomic: true, MultiRow: true, Actions: actions, Conditions: conds}
	})
}

// BulkDeleteResult counts what BulkDelete deleted.
type BulkDeleteResult struct {
	// Rows deleted in (whole or in part); Versions deleted, for VERSION deletes.
	Rows, Versions int64
}

// BulkDeleteOptions tune BulkDelete.
type BulkDeleteOptions struct {
	// Timestamp of the delete markers; nil: now, or each version's own for VERSION deletes.
	Timestamp *int64
	// RowsPerBatch is how many rows each atomic delete holds (0: the server's 1000).
	RowsPerBatch int32
}

// BulkDelete deletes what a scan matches (HBase's BulkDeleteEndpoint): the rows, or the families,
// columns or versions the scan returned, region by region in batches of rows. A region that
// moves or splits midway answers what it deleted and the call goes on where it stopped; should an
// answer be lost (a connection dropped), the retry deletes again what is already deleted, which
// changes nothing, but the counts miss what that answer would have said.
func (t *Table) BulkDelete(ctx context.Context, s *pb.Scan, typ pb.BulkDeleteRequest_DeleteType, o BulkDeleteOptions) (BulkDeleteResult, error) {
	var res BulkDeleteResult
	err := t.overRegions(ctx, s, func(ctx context.Context, conn *rpc.Conn, region string, scan *pb.Scan) ([]byte, error) {
		req := &pb.BulkDeleteRequest{Region: &pb.RegionSpecifier{Name: region}, Scan: scan, DeleteType: typ, Timestamp: o.Timestamp,
			RowsPerBatch: o.RowsPerBatch, TimeLimitMs: (t.c.cfg.RPCTimeout / 4).Milliseconds()}
		var resp pb.BulkDeleteResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_BULK_DELETE, req, nil, &resp, nil); err != nil {
			return nil, err
		}
		res.Rows += resp.GetRowsDeleted()
		res.Versions += resp.GetVersionsDeleted()
		return resp.GetResumeRow(), nil
	})
	return res, err
}

// FunctionResult is what a table function's endpoint answered for one call: a region, or the
// part of one the call covered before its time budget ran out.
type FunctionResult struct {
	Region string
	// StartRow is where the call's rows began.
	StartRow []byte
	Output   []byte
	// Rows the endpoint was handed; Stopped: it asked to stop before the region's end.
	Rows    int64
	Stopped bool
}

// CallFunction runs an endpoint of a table's WebAssembly function (docs/functions.md) over the
// rows of the scan, region by region in row order, and returns each call's output for the
// caller to merge (endpoints that answer row by row concatenate: see Concat). The scan goes
// forward, not raw, without a row limit; its filters, columns and time range apply.
func (t *Table) CallFunction(ctx context.Context, s *pb.Scan, function, endpoint string, arg []byte) ([]FunctionResult, error) {
	if s == nil {
		s = &pb.Scan{}
	}
	var out []FunctionResult
	err := t.overRegions(ctx, s, func(ctx context.Context, conn *rpc.Conn, region string, scan *pb.Scan) ([]byte, error) {
		req := &pb.CallFunctionRequest{Region: &pb.RegionSpecifier{Name: region}, Scan: scan, Function: function, Endpoint: endpoint,
			Argument: arg, TimeLimitMs: (t.c.cfg.RPCTimeout / 4).Milliseconds()}
		var resp pb.CallFunctionResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_CALL_FUNCTION, req, nil, &resp, nil); err != nil {
			return nil, err
		}
		out = append(out, FunctionResult{Region: region, StartRow: bytes.Clone(scan.GetStartRow()), Output: resp.GetOutput(),
			Rows: resp.GetRows(), Stopped: resp.GetStopped()})
		return resp.GetResumeRow(), nil
	})
	return out, err
}

// Concat joins the outputs of results in order.
func Concat(results []FunctionResult) []byte {
	var b []byte
	for _, r := range results {
		b = append(b, r.Output...)
	}
	return b
}
