package client

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// TestWriteBackoff: a write to a region waits MaxWriteBackoff × (percent/100)^4 of the pressure its
// last write answer reported; an answer without pressure clears it; a negative MaxWriteBackoff
// never waits; a wait ends with the write's context.
func TestWriteBackoff(t *testing.T) {
	c := &Client{cfg: Config{MaxWriteBackoff: 800 * time.Millisecond}}
	for _, tc := range []struct {
		percent uint32
		want    time.Duration
	}{{0, 0}, {50, 50 * time.Millisecond}, {100, 800 * time.Millisecond}, {250, 800 * time.Millisecond}} {
		c.notePressure("r1", &pb.WritePressure{Percent: tc.percent})
		if got := c.backoffFor("r1"); got != tc.want {
			t.Errorf("pressure %d: backoff %v, want %v", tc.percent, got, tc.want)
		}
	}
	if got := c.backoffFor("r2"); got != 0 {
		t.Errorf("a region never answered: backoff %v", got)
	}
	c.notePressure("r1", nil)
	if got := c.backoffFor("r1"); got != 0 {
		t.Errorf("after an answer without pressure: backoff %v", got)
	}
	c.notePressure("r1", &pb.WritePressure{Percent: 100})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.writeBackoff(ctx, "r2", "r1"); !errors.Is(err, context.Canceled) {
		t.Errorf("a wait whose context ends: %v", err)
	}
	if err := c.writeBackoff(context.Background(), "r2"); err != nil {
		t.Errorf("no pressure: %v", err)
	}
	c.cfg.MaxWriteBackoff = -1
	if got := c.backoffFor("r1"); got != 0 {
		t.Errorf("backoff off: %v", got)
	}
}
