package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/rpc"
)

// hedged runs a TIMELINE read (HBASE-10070): primary at once and, when it has not answered within
// the hedge delay (or failed), every one of replicas() too; the first success wins. Successful
// answers that come after the winner are handed to discard. With no success it returns the first
// error.
func hedged[T any](ctx context.Context, delay time.Duration, primary func(context.Context) (T, error),
	replicas func() []func(context.Context) (T, error), discard func(T)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	answers := make(chan answer)
	done := make(chan struct{}) // closed on return: later answers are discarded
	defer close(done)
	start := func(fn func(context.Context) (T, error)) {
		go func() {
			v, err := fn(ctx)
			select {
			case answers <- answer{v, err}:
			case <-done:
				if err == nil && discard != nil {
					discard(v)
				}
			}
		}()
	}
	start(primary)
	outstanding, hedging := 1, false
	startReplicas := func() {
		hedging = true
		for _, fn := range replicas() {
			outstanding++
			start(fn)
		}
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var zero T
	var firstErr error
	for outstanding > 0 {
		select {
		case <-timer.C:
			if !hedging {
				startReplicas()
			}
		case a := <-answers:
			outstanding--
			if a.err == nil {
				return a.v, nil
			}
			if firstErr == nil {
				firstErr = a.err
			}
			if !hedging {
				startReplicas() // the primary failed: do not wait for the hedge delay
			}
		case <-ctx.Done():
			if firstErr == nil {
				firstErr = ctx.Err()
			}
			return zero, firstErr
		}
	}
	return zero, firstErr
}

// timelineGet reads with TIMELINE consistency: an answer from a replica has Stale set.
func (t *Table) timelineGet(ctx context.Context, g *pb.Get) (*Result, error) {
	c := t.c
	ctx, cancel := c.opContext(ctx)
	defer cancel()
	primary := proto.Clone(g).(*pb.Get)
	primary.ReplicaId = 0
	return hedged(ctx, c.cfg.HedgeDelay, func(ctx context.Context) (*Result, error) {
		var res *Result
		err := c.withRegion(ctx, t, g.Row, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
			var err error
			res, err = getOnce(ctx, conn, loc.region, primary)
			return err
		})
		return res, err
	}, func() []func(context.Context) (*Result, error) {
		loc, err := c.locate(ctx, t, g.Row, false, false)
		if err != nil {
			return nil
		}
		var out []func(context.Context) (*Result, error)
		for i := range loc.replicas {
			req := proto.Clone(g).(*pb.Get)
			req.ReplicaId = int32(i + 1)
			out = append(out, func(ctx context.Context) (*Result, error) { return c.replicaGet(ctx, t, loc, i, req) })
		}
		return out
	}, nil)
}

// replicaGet reads from replica i+1 of loc's region, retrying while the operation has time:
// replicas move too, so a try that finds the replica gone (or its server unreachable) looks the
// region up again and the next goes where the replica is now.
func (c *Client) replicaGet(ctx context.Context, t *Table, loc *location, i int, g *pb.Get) (*Result, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if l, err := c.locate(ctx, t, g.Row, false, false); err == nil && l.region == loc.region && i < len(l.replicas) {
				loc = l
			}
		}
		r := loc.replicas[i]
		conn, err := c.conn(ctx, r.addr)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
			var res *Result
			res, err = getOnce(actx, conn, r.region, g)
			cancel()
			if err == nil {
				res.Stale = true
				return res, nil
			}
		}
		if ctx.Err() != nil {
			// Another answer came first (the hedge cancelled this one), or the caller gave up:
			// says nothing of where the replica is.
			return nil, err
		}
		d, ok := pb.DetailOf(err)
		if ok && !retryable(d) {
			return nil, d
		}
		if !ok || d.GetCode() == pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION || d.GetCode() == pb.ErrorCode_ERROR_CODE_REGION_MOVED {
			c.cache.invalidate(t.name, loc.region) // the next try looks the replica up again
		}
		if berr := c.backoff(ctx, attempt, err); berr != nil {
			return nil, errors.Join(berr, err)
		}
	}
}

func getOnce(ctx context.Context, conn *rpc.Conn, region string, g *pb.Get) (*Result, error) {
	var resp pb.GetResponse
	cells, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: region}, Get: g}, nil, &resp, nil)
	if err != nil {
		return nil, err
	}
	return decodeResult(g.Row, resp.GetResult(), cells)
}
