package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// BatchOp is one operation of a batch: a Get, a Mutation, or RowMutations — mutations of one row
// applied together (HBase's RowMutations in a batch), under Condition when one is given (HBase's
// CheckAndMutate in a batch: a column compared with a value, or a filter over the row).
type BatchOp struct {
	Get          *pb.Get
	Mutation     *Mutation
	RowMutations []*Mutation
	Condition    *pb.Condition
}

// BatchResult is the outcome of one BatchOp.
type BatchResult struct {
	Result *Result
	Err    error
	// Processed: RowMutations were applied (false when their condition did not hold).
	Processed bool
}

// Batch runs operations on many rows. They are grouped by region and server, sent as one multi
// request per server (servers in parallel; a server's regions held back by write pressure in
// requests of their own, splitByHold), and the ones that fail with a retryable answer are
// regrouped and retried. Each row's operation is atomic; the batch as a whole is not.
func (t *Table) Batch(ctx context.Context, ops []BatchOp) []BatchResult {
	c := t.c
	ctx, cancel := c.opContext(ctx)
	defer cancel()
	results := make([]BatchResult, len(ops))
	prep := make([]prepared, len(ops))
	var pending []int
	for i, op := range ops {
		if op.Condition != nil && len(op.RowMutations) == 0 {
			results[i].Err = errors.New("client: a batch condition applies to RowMutations")
			continue
		}
		switch {
		case len(op.RowMutations) > 0:
			if op.Mutation != nil || op.Get != nil {
				results[i].Err = errors.New("client: a batch operation holds one of Get, Mutation or RowMutations")
				continue
			}
			p, err := c.prepareRowMutations(op.RowMutations, op.Condition)
			if err != nil {
				results[i].Err = err
				continue
			}
			prep[i] = p
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
		for _, sd := range c.splitByHold(servers, prep) {
			addr, regions := sd.addr, sd.regions
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := &pb.MultiRequest{NonceGroup: c.nonceGroup}
				var block []byte
				var sent []sentAction
				for _, g := range regions {
					// The region's plain operations in one region action, then each RowMutations
					// in one of its own; the cell block follows the region actions' order.
					ra := &pb.RegionAction{Region: &pb.RegionSpecifier{Name: g.loc.region}}
					var plain, atomic []int
					for _, i := range g.idx {
						if prep[i].atomic != nil {
							atomic = append(atomic, i)
							continue
						}
						ra.Actions = append(ra.Actions, prep[i].action)
						block = append(block, prep[i].cells...)
						plain = append(plain, i)
					}
					if len(plain) > 0 {
						req.RegionActions = append(req.RegionActions, ra)
						sent = append(sent, sentAction{loc: g.loc, idx: plain})
					}
					for _, i := range atomic {
						p := prep[i]
						req.RegionActions = append(req.RegionActions, &pb.RegionAction{Region: ra.Region, Atomic: true,
							Actions: p.atomic, Condition: p.cond})
						block = append(block, p.cells...)
						sent = append(sent, sentAction{loc: g.loc, idx: []int{i}, atomic: true})
					}
				}
				failed, err := c.sendMulti(ctx, t, addr, req, block, sent, results)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					lastErr = err
					for _, sa := range sent {
						retry = append(retry, sa.idx...)
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
		// Non-retryable answers were recorded by sendMulti; the rest wait and go again — at once
		// when all of them are actions a full answer left out (RESULT_TOO_LARGE).
		pending = pending[:0]
		leftOut := true
		for _, i := range retry {
			if results[i].Err == nil || isRetryable(results[i].Err) {
				if d, ok := pb.DetailOf(results[i].Err); !ok || d.GetCode() != pb.ErrorCode_ERROR_CODE_RESULT_TOO_LARGE {
					leftOut = false
				}
				results[i].Err = nil
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
		if leftOut && lastErr == nil {
			if err := ctx.Err(); err != nil {
				for _, i := range pending {
					results[i].Err = fmt.Errorf("client: gave up on row %q: %w", prep[i].row, err)
				}
				break
			}
			attempt-- // not a failed try: later pauses do not grow for it (as HBase's client)
			continue
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

// finalCallError says whether a multi call's error (not an action's) would come back if the call
// were sent again: a typed answer that is not retryable, or an error neither transient nor one
// attempt's timeout.
func finalCallError(ctx context.Context, err error) bool {
	if d, ok := pb.DetailOf(err); ok {
		return !retryable(d)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return false
	}
	return !transient(err)
}

func isRetryable(err error) bool {
	d, ok := pb.DetailOf(err)
	return ok && retryable(d)
}

// prepared is a batch operation ready to send: one action, or RowMutations' actions (atomic)
// with their condition.
type prepared struct {
	action *pb.Action
	atomic []*pb.Action
	cond   *pb.Condition
	cells  []byte
	row    []byte
}

// prepareRowMutations checks and encodes RowMutations of a batch.
func (c *Client) prepareRowMutations(ms []*Mutation, cond *pb.Condition) (prepared, error) {
	row := ms[0].Row
	p := prepared{row: row, cond: cond}
	var err error
	if p.atomic, p.cells, err = c.encodeAtomic(ms, "RowMutations", true, true); err != nil {
		return p, err
	}
	if cond != nil && len(cond.GetRow()) == 0 {
		p.cond = proto.CloneOf(cond) // the caller's condition stays as it was
		p.cond.Row = row
	}
	return p, nil
}

// regionGroup is a batch's actions for one region.
type regionGroup struct {
	loc *location
	idx []int
}

// multiSend is one multi request of a batch: regions of one server.
type multiSend struct {
	addr    string
	regions []*regionGroup
}

// holdGranularity: regions whose write holds end within this of each other share a request.
const holdGranularity = 10 * time.Millisecond

// splitByHold makes the requests of a batch's round: one per server, or several when regions
// there are held back by write pressure (backoff.go) — the regions not held go at once, the held
// ones grouped by when their holds end (to holdGranularity), each group after its longest hold.
// So a write to a region not held leaves at once, not after another region's hold, as HBase's
// client sends a server's regions grouped by their backoff (the round, and with it the retries
// and the batch's return, still ends after the longest). Regions the batch only reads are never
// held.
func (c *Client) splitByHold(servers map[string]map[string]*regionGroup, prep []prepared) []multiSend {
	var sends []multiSend
	for addr, regions := range servers {
		var byHold map[time.Duration]int // hold bucket → index in sends
		for _, g := range regions {
			var bucket time.Duration
			if writesTo(g, prep) {
				if wait := c.heldFor(g.loc.region); wait > 0 {
					bucket = (wait + holdGranularity - 1) / holdGranularity
				}
			}
			if byHold == nil {
				byHold = map[time.Duration]int{}
			}
			i, ok := byHold[bucket]
			if !ok {
				i = len(sends)
				byHold[bucket] = i
				sends = append(sends, multiSend{addr: addr})
			}
			sends[i].regions = append(sends[i].regions, g)
		}
	}
	return sends
}

// writesTo says whether a region's share of a batch writes (a Mutation or RowMutations).
func writesTo(g *regionGroup, prep []prepared) bool {
	for _, i := range g.idx {
		if prep[i].atomic != nil || prep[i].action.GetMutation() != nil {
			return true
		}
	}
	return false
}

// sentAction is what one region action of a multi request holds: batch operations of a region,
// or (atomic) one operation's RowMutations.
type sentAction struct {
	loc    *location
	idx    []int
	atomic bool
}

// sendMulti sends one server's share of a batch (or of its regions held alike). It fills the
// results of the actions that ended (success, or an error a retry cannot mend) and returns the
// indexes to retry; err is a transport error, after which every action of the request is retried.
func (c *Client) sendMulti(ctx context.Context, t *Table, addr string, req *pb.MultiRequest, block []byte,
	sent []sentAction, results []BatchResult) ([]int, error) {
	var writes []string // the regions this request writes to
	for i, sa := range sent {
		if req.RegionActions[i].Writes() {
			writes = append(writes, sa.loc.region)
		}
	}
	if err := c.writeBackoff(ctx, writes...); err != nil {
		return nil, err
	}
	// failed answers a call that failed: one that would fail the same way if sent again
	// (credentials refused, a request the server refuses) fails its actions now, not at the
	// deadline; the caller sends the others again.
	failed := func(err error) ([]int, error) {
		if !finalCallError(ctx, err) {
			return nil, err
		}
		if d, ok := pb.DetailOf(err); ok {
			err = d
		}
		for _, sa := range sent {
			for _, i := range sa.idx {
				results[i].Err = err
			}
		}
		return nil, nil
	}
	// The connection after the hold: one taken before it may have been replaced meanwhile.
	conn, err := c.conn(ctx, addr)
	if err != nil {
		if ctx.Err() == nil { // (a dial given up by the caller says nothing of the server)
			c.cache.invalidateServer(addr)
		}
		return failed(err)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	var resp pb.MultiResponse
	cells, err := conn.Call(actx, pb.Method_METHOD_MULTI, req, block, &resp, nil)
	if err != nil {
		if d, typed := pb.DetailOf(err); (!typed || retryable(d)) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			c.cache.invalidateServer(addr)
		}
		return failed(err)
	}
	if len(resp.Results) != len(req.RegionActions) {
		return nil, fmt.Errorf("client: server %s answered %d region results for %d region actions", addr, len(resp.Results), len(req.RegionActions))
	}
	var retry []int
	var answered []bool // by action index, for the region actions answered one by one
	for ri, rr := range resp.Results {
		g := sent[ri]
		if req.RegionActions[ri].Writes() { // its answer says the region's write pressure, none meaning none
			c.notePressure(g.loc.region, rr.Pressure)
		}
		if rr.Exception == nil && g.atomic {
			for _, roe := range rr.Results {
				if roe.Exception != nil {
					rr.Exception = roe.Exception
					break
				}
			}
		}
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
		if g.atomic {
			i := g.idx[0]
			results[i] = BatchResult{Result: &Result{Row: req.RegionActions[ri].Actions[0].Mutation.GetRow()}, Processed: rr.Processed}
			continue
		}
		op := req.RegionActions[ri]
		actions := newActionFinder(op.GetActions())
		if answered == nil {
			answered = make([]bool, len(results))
		}
		for _, roe := range rr.Results {
			i := int(roe.Index)
			a := actions.find(roe.Index)
			if a == nil || i >= len(results) || answered[i] {
				return retry, fmt.Errorf("client: server %s answered for action %d, which its region action does not hold (or twice)", addr, i)
			}
			answered[i] = true
			if roe.Exception != nil {
				c.noteRegionError(t, g.loc, roe.Exception)
				results[i].Err = roe.Exception
				if retryable(roe.Exception) {
					retry = append(retry, i)
				}
				continue
			}
			row := a.Mutation.GetRow()
			if a.Get != nil {
				row = a.Get.Row
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
		// An action the server did not answer may or may not have been applied: an error, not a
		// retry (an increment or append applied twice would be wrong) and not a success.
		for _, i := range g.idx {
			if !answered[i] {
				results[i].Err = fmt.Errorf("client: server %s answered no result for action %d: it may or may not have been applied", addr, i)
			}
		}
	}
	return retry, nil
}

// actionFinder finds a region action's actions by their index: in order while the results come in
// the order of the actions (as servers answer), through a map built once otherwise. A batch of
// HBase's default 2 MiB write buffer holds about ten thousand actions, so a search per result
// would cost the client more than everything else it does.
type actionFinder struct {
	actions []*pb.Action
	next    int
	byIndex map[uint32]*pb.Action
}

func newActionFinder(actions []*pb.Action) actionFinder { return actionFinder{actions: actions} }

func (f *actionFinder) find(index uint32) *pb.Action {
	if f.next < len(f.actions) && f.actions[f.next].Index == index {
		f.next++
		return f.actions[f.next-1]
	}
	if f.byIndex == nil {
		f.byIndex = make(map[uint32]*pb.Action, len(f.actions))
		for _, a := range f.actions {
			f.byIndex[a.Index] = a
		}
	}
	return f.byIndex[index]
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
