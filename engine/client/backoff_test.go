package client

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// TestWriteBackoff: an answer with pressure p holds writes to its region for MaxWriteBackoff ×
// (p/100)^4; an answer without pressure clears the hold; a hold ends by itself; a wait ends with
// the write's context; a negative MaxWriteBackoff never holds; the holds kept stay bounded.
func TestWriteBackoff(t *testing.T) {
	for _, tc := range []struct {
		percent uint32
		want    time.Duration
	}{{0, 0}, {50, 50 * time.Millisecond}, {100, 800 * time.Millisecond}, {250, 800 * time.Millisecond}} {
		if got := backoffFor(800*time.Millisecond, tc.percent); got != tc.want {
			t.Errorf("pressure %d: backoff %v, want %v", tc.percent, got, tc.want)
		}
	}
	if got := backoffFor(-1, 100); got != 0 {
		t.Errorf("backoff off: %v", got)
	}

	c := &Client{cfg: Config{MaxWriteBackoff: time.Hour}}
	c.notePressure("r1", &pb.WritePressure{Percent: 100})
	if d := c.heldFor("r2", "r1"); d < 59*time.Minute || d > time.Hour {
		t.Errorf("held for %v after an answer at 100 %% with an hour's backoff", d)
	}
	if d := c.heldFor("r2"); d != 0 {
		t.Errorf("a region never answered with pressure: held %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.writeBackoff(ctx, "r2", "r1"); !errors.Is(err, context.Canceled) {
		t.Errorf("a wait whose context ends: %v", err)
	}
	c.notePressure("r1", nil)
	if err := c.writeBackoff(ctx, "r1"); err != nil || c.heldFor("r1") != 0 {
		t.Errorf("after an answer without pressure: %v, held %v", err, c.heldFor("r1"))
	}

	// A hold ends by itself, and expired holds are dropped once there are many.
	c.cfg.MaxWriteBackoff = time.Nanosecond
	for i := range 3 * maxHolds {
		c.notePressure(string(rune('a'+i%26))+string(rune(i)), &pb.WritePressure{Percent: 100})
	}
	if n := len(c.holds.until); n > maxHolds {
		t.Errorf("%d holds kept, bound %d", n, maxHolds)
	}
	if err := c.writeBackoff(ctx, "a"+string(rune(0))); err != nil {
		t.Errorf("an expired hold still held the write: %v", err)
	}
}

// A batch's writes to the regions of one server go in groups by their holds: a region held back
// by write pressure does not delay the writes to the server's other regions, which leave at once,
// and its own writes go when its hold ends.
func TestBatchSendsAServersRegionsByTheirHolds(t *testing.T) {
	_, ss, c := newCluster(t, 1, "h", "p") // r1 [, h), r2 [h, p), r3 [p, ), all on one server
	const hold = 1500 * time.Millisecond
	c.cfg.MaxWriteBackoff = hold
	c.notePressure("r2", &pb.WritePressure{Percent: 100})
	tb := c.Table("t")
	var ops []BatchOp
	for _, r := range []string{"a", "i", "q"} {
		ops = append(ops, BatchOp{Mutation: NewPut([]byte(r)).Add("f", "q", 1, []byte("v-"+r))})
	}
	start := time.Now()
	done := make(chan []BatchResult, 1)
	go func() { done <- tb.Batch(context.Background(), ops) }()
	has := func(row string) bool {
		ss[0].mu.Lock()
		defer ss[0].mu.Unlock()
		return len(ss[0].rows[row]) > 0
	}
	for !has("a") || !has("q") {
		if time.Since(start) > hold*2/3 {
			t.Fatalf("the writes to regions not held were not applied within %v (a: %v, q: %v)", hold*2/3, has("a"), has("q"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if has("i") && time.Since(start) < hold-100*time.Millisecond {
		t.Fatal("the held region's write went before its hold ended")
	}
	for i, r := range <-done {
		if r.Err != nil {
			t.Errorf("op %d: %v", i, r.Err)
		}
	}
	if took := time.Since(start); !has("i") || took < hold-100*time.Millisecond {
		t.Fatalf("the held region's write: applied %v after %v (hold %v)", has("i"), took, hold)
	}
}
