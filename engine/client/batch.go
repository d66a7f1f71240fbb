package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// BatchOp is one operation of a batch: a Get or a Mutation.
type BatchOp struct {
	Get      *pb.Get
	Mutation *Mutation
}

// BatchResult is the outcome of one BatchOp.
type BatchResult struct {
	Result *Result
	Err    error
}

// Batch runs operations on many rows. They are grouped by region and server, sent as one multi
// request per server (servers in parallel), and the ones that fail with a retryable answer are
// regrouped and retried. Each row's operation is atomic; the batch as a whole is not.
func (t *Table) Batch(ctx context.Context, ops []BatchOp) []BatchResult {
	c := t.c
	ctx, cancel := c.opContext(ctx)
	defer cancel()
	results := make([]BatchResult, len(ops))
	type prepared struct {
		action *pb.Action
		cells  []byte
		row    []byte
	}
	prep := make([]prepared, len(ops))
	var pending []int
	for i, op := range ops {
		switch {
		case op.Mutation != nil:
			if err := op.Mutation.validate(c.cfg.MaxCellSize); err != nil {
				results[i].Err = err
				continue
			}
			msg, cells := op.Mutation.encode(nil, c.nonce(op.Mutation))
			prep[i] = prepared{action: &pb.Action{Index: uint32(i), Mutation: msg}, cells: cells, row: op.Mutation.Row}
		case op.Get != nil && len(op.Get.Row) > 0:
			prep[i] = prepared{action: &pb.Action{Index: uint32(i), Get: op.Get}, row: op.Get.Row}
		default:
			results[i].Err = errors.New("client: batch operation without a Get (with a row) or a Mutation")
			continue
		}
		pending = append(pending, i)
	}

	for attempt := 0; len(pending) > 0; attempt++ {
		// Group by server, then region.
		servers := map[string]map[string]*regionGroup{}
		var retry []int
		var lastErr error
		for _, i := range pending {
			loc, err := c.locate(ctx, t, prep[i].row, false, true)
			if err != nil {
				if permanent(err) {
					results[i].Err = err
				} else {
					retry, lastErr = append(retry, i), err
				}
				continue
			}
			if servers[loc.addr] == nil {
				servers[loc.addr] = map[string]*regionGroup{}
			}
			g := servers[loc.addr][loc.region]
			if g == nil {
				g = &regionGroup{loc: loc}
				servers[loc.addr][loc.region] = g
			}
			g.idx = append(g.idx, i)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for addr, regions := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := &pb.MultiRequest{NonceGroup: c.nonceGroup}
				var block []byte
				var order [][]int
				for _, g := range regions {
					ra := &pb.RegionAction{Region: &pb.RegionSpecifier{Name: g.loc.region}}
					for _, i := range g.idx {
						ra.Actions = append(ra.Actions, prep[i].action)
						block = append(block, prep[i].cells...)
					}
					req.RegionActions = append(req.RegionActions, ra)
					order = append(order, g.idx)
				}
				failed, err := c.sendMulti(ctx, t, addr, req, block, regions, results)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					lastErr = err
					for _, idx := range order {
						retry = append(retry, idx...)
					}
					return
				}
				retry = append(retry, failed...)
			}()
		}
		wg.Wait()
		if len(retry) == 0 {
			break
		}
		// Non-retryable answers were recorded by sendMulti; the rest wait and go again.
		pending = pending[:0]
		for _, i := range retry {
			if results[i].Err == nil || isRetryable(results[i].Err) {
				results[i].Err = nil
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
		if err := c.backoff(ctx, attempt, lastErr); err != nil {
			for _, i := range pending {
				results[i].Err = fmt.Errorf("client: gave up on row %q: %w (last error: %v)", prep[i].row, err, lastErr)
			}
			break
		}
	}
	return results
}

func isRetryable(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && retryable(d)
}

// regionGroup is a batch's actions for one region.
type regionGroup struct {
	loc *location
	idx []int
}

// sendMulti sends one server's share of a batch. It fills the results of the actions that ended
// (success, or an error a retry cannot mend) and returns the indexes to retry; err is a transport
// error, after which every action of the request is retried.
func (c *Client) sendMulti(ctx context.Context, t *Table, addr string, req *pb.MultiRequest, block []byte,
	regions map[string]*regionGroup, results []BatchResult) ([]int, error) {
	conn, err := c.conn(ctx, addr)
	if err != nil {
		c.cache.invalidateServer(addr)
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var resp pb.MultiResponse
	cells, err := conn.Call(actx, pb.Method_METHOD_MULTI, req, block, &resp, nil)
	if err != nil {
		if d, ok := pb.DetailOf(err); ok && !retryable(d) {
			for _, g := range regions {
				for _, i := range g.idx {
					results[i].Err = d
				}
			}
			return nil, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			c.cache.invalidateServer(addr)
		}
		return nil, err
	}
	if len(resp.Results) != len(req.RegionActions) {
		return nil, fmt.Errorf("client: server %s answered %d region results for %d region actions", addr, len(resp.Results), len(req.RegionActions))
	}
	var retry []int
	for ri, rr := range resp.Results {
		ra := req.RegionActions[ri]
		g := regions[ra.Region.Name]
		if rr.Exception != nil {
			c.noteRegionError(t, g.loc, rr.Exception)
			for _, i := range g.idx {
				results[i].Err = rr.Exception
			}
			if retryable(rr.Exception) {
				retry = append(retry, g.idx...)
			}
			continue
		}
		for _, roe := range rr.Results {
			i := int(roe.Index)
			if i < 0 || i >= len(results) {
				return retry, fmt.Errorf("client: server %s answered for unknown action %d", addr, i)
			}
			if roe.Exception != nil {
				c.noteRegionError(t, g.loc, roe.Exception)
				results[i].Err = roe.Exception
				if retryable(roe.Exception) {
					retry = append(retry, i)
				}
				continue
			}
			var row []byte
			if op := req.RegionActions[ri]; op != nil {
				for _, a := range op.Actions {
					if a.Index == roe.Index {
						if a.Get != nil {
							row = a.Get.Row
						} else {
							row = a.Mutation.GetRow()
						}
						break
					}
				}
			}
			n := int(roe.GetResult().GetCellCount())
			var rc []byte
			if n > 0 {
				var rest []byte
				if _, rest, err = decodeCells(cells, n); err != nil {
					return retry, err
				}
				rc, cells = cells[:len(cells)-len(rest)], rest
			}
			res, err := decodeResult(row, roe.GetResult(), rc)
			results[i] = BatchResult{Result: res, Err: err}
		}
	}
	return retry, nil
}

// noteRegionError updates the location cache after a region's error answer.
func (c *Client) noteRegionError(t *Table, loc *location, d *pb.ErrorDetail) {
	switch d.GetCode() {
	case pb.ErrorCode_ERROR_CODE_REGION_MOVED:
		if a := serverAddr(d.GetNewLocation()); a != "" {
			c.cache.moved(t.name, loc.region, a)
			return
		}
		c.cache.invalidate(t.name, loc.region)
	case pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION, pb.ErrorCode_ERROR_CODE_WRONG_REGION:
		c.cache.invalidate(t.name, loc.region)
	}
}
