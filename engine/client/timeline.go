package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/rpc"
)

// timelineGet reads with TIMELINE consistency (HBASE-10070): it asks the primary and, when no answer
// came within the hedge delay (or the primary failed), also every read replica; the first answer
// wins. An answer from a replica has Stale set.
func (t *Table) timelineGet(ctx context.Context, g *pb.Get) (*Result, error) {
	c := t.c
	ctx, cancel := c.opContext(ctx)
	defer cancel() // stops the attempts that lost

	type answer struct {
		res *Result
		err error
	}
	answers := make(chan answer)
	send := func(a answer) { // the losers' answers are dropped once the winner returned
		select {
		case answers <- a:
		case <-ctx.Done():
		}
	}
	primary := proto.Clone(g).(*pb.Get)
	primary.ReplicaId = 0
	go func() {
		var res *Result
		err := c.withRegion(ctx, t, g.Row, func(ctx context.Context, conn *rpc.Conn, loc *location) error {
			var err error
			res, err = getOnce(ctx, conn, loc.region, primary)
			return err
		})
		send(answer{res, err})
	}()

	hedge := time.NewTimer(c.cfg.HedgeDelay)
	defer hedge.Stop()
	outstanding, hedged := 1, false
	var lastErr error
	startReplicas := func() {
		hedged = true
		loc, err := c.locate(ctx, t, g.Row, false)
		if err != nil {
			return
		}
		for i, r := range loc.replicas {
			outstanding++
			req := proto.Clone(g).(*pb.Get)
			req.ReplicaId = int32(i + 1)
			go func() {
				res, err := c.replicaGet(ctx, r, req)
				send(answer{res, err})
			}()
		}
	}
	for {
		select {
		case <-hedge.C:
			if !hedged {
				startReplicas()
			}
		case a := <-answers:
			outstanding--
			if a.err == nil {
				return a.res, nil
			}
			lastErr = a.err
			if !hedged {
				startReplicas() // the primary failed: do not wait for the hedge delay
			}
			if outstanding == 0 {
				return nil, lastErr
			}
		case <-ctx.Done():
			if lastErr == nil {
				lastErr = ctx.Err()
			}
			return nil, lastErr
		}
	}
}

// replicaGet reads from one replica, retrying while the operation has time: replicas move too.
func (c *Client) replicaGet(ctx context.Context, r replica, g *pb.Get) (*Result, error) {
	for attempt := 0; ; attempt++ {
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
		if d, ok := pb.DetailOf(err); ok && !retryable(d) {
			return nil, d
		}
		d, _ := pb.DetailOf(err)
		if berr := c.backoff(ctx, attempt, d); berr != nil {
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
