package client

import (
	"context"
	"math"
	"sync"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Write backoff: a region server reports with each write's answer how close the region is to
// blocking writes for lack of memstore room (pb.WritePressure, 0–100). An answer with pressure p
// holds the client's writes to that region back until MaxWriteBackoff × (p/100)^4 after it came
// (by default 31 ms at 50 %, 205 ms at 80 %, 500 ms at 100 %); the next answer sets the time
// again, one without pressure clears it. Writers slow down while the region's flush catches up,
// rather than running into a block and its error. A hold ends by itself: a client that no longer
// writes to a region, or whose writes were all held, is never stuck on an old answer.

// holds are the times until which writes to regions wait (region name → time), bounded: expired
// ones are dropped once there are many.
type holds struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// maxHolds is how many regions' holds the client keeps before it drops the expired ones.
const maxHolds = 1024

// notePressure records what a write answer for region said.
func (c *Client) notePressure(region string, p *pb.WritePressure) {
	wait := backoffFor(c.cfg.MaxWriteBackoff, p.GetPercent())
	h := &c.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if wait <= 0 {
		delete(h.until, region)
		return
	}
	now := time.Now()
	if h.until == nil {
		h.until = map[string]time.Time{}
	}
	if len(h.until) >= maxHolds {
		for r, t := range h.until {
			if !t.After(now) {
				delete(h.until, r)
			}
		}
	}
	h.until[region] = now.Add(wait)
}

// backoffFor is how long an answer with pressure percent holds writes back.
func backoffFor(maxBackoff time.Duration, percent uint32) time.Duration {
	if maxBackoff <= 0 || percent == 0 {
		return 0
	}
	return time.Duration(math.Pow(float64(min(percent, 100))/100, 4) * float64(maxBackoff))
}

// heldFor is how long writes to the regions must still wait (the latest of their holds).
func (c *Client) heldFor(regions ...string) time.Duration {
	h := &c.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	var until time.Time
	for _, r := range regions {
		if t, ok := h.until[r]; ok && t.After(until) {
			until = t
		}
	}
	if until.IsZero() {
		return 0
	}
	return time.Until(until)
}

// writeBackoff waits out the holds of the regions a write goes to; it fails when ctx ends first.
func (c *Client) writeBackoff(ctx context.Context, regions ...string) error {
	return sleep(ctx, c.heldFor(regions...))
}

// sleep waits d (nothing when d <= 0), or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
