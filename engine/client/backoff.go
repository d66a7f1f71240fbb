package client

import (
	"context"
	"math"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Write backoff: a region server reports with each write's answer how close the region is to
// blocking writes for lack of memstore room (pb.WritePressure, 0–100). A write to a region under
// pressure waits before it is sent, the longer the nearer the region is to blocking
// (Config.MaxWriteBackoff × (percent/100)^4: by default 31 ms at 50 %, 205 ms at 80 %, 500 ms at 100 %):
// writers slow down while the region's flush catches up, rather than running into a block and
// its error.

// notePressure records what a write answer for region said.
func (c *Client) notePressure(region string, p *pb.WritePressure) {
	if pct := p.GetPercent(); pct > 0 {
		c.pressure.Store(region, min(pct, 100))
	} else {
		c.pressure.Delete(region)
	}
}

// backoffFor is how long a write to region waits before it is sent.
func (c *Client) backoffFor(region string) time.Duration {
	if c.cfg.MaxWriteBackoff <= 0 {
		return 0
	}
	v, ok := c.pressure.Load(region)
	if !ok {
		return 0
	}
	return time.Duration(math.Pow(float64(v.(uint32))/100, 4) * float64(c.cfg.MaxWriteBackoff))
}

// writeBackoff waits the longest backoff of the regions a write goes to (see backoffFor); it fails
// when ctx ends first.
func (c *Client) writeBackoff(ctx context.Context, regions ...string) error {
	var wait time.Duration
	for _, r := range regions {
		wait = max(wait, c.backoffFor(r))
	}
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
