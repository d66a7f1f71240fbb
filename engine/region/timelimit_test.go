package region

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region/filter"
)

// slowFilter stands for a filter that costs a lot per cell (a regular expression over large
// values): each cell takes d and none passes.
type slowFilter struct {
	filter.Base
	d     time.Duration
	cells int
}

func (f *slowFilter) Name() string { return "SlowFilter" }
func (f *slowFilter) FilterCell(cell.Key, []byte) filter.ReturnCode {
	f.cells++
	time.Sleep(f.d) // the cost of the cell, not a synchronisation
	return filter.Skip
}

// With the system clock, a scan's time limit is checked at every cell, not every 64: a filter
// that takes 2 ms a cell gets a heartbeat after about 10 ms, not after 64 cells (128 ms).
func TestTimeLimitIsCheckedByTime(t *testing.T) {
	e := newEnv(t, fam("f"))
	e.r.Close()
	e.cfg.Clock = nil // the system clock
	e.open()
	for i := range 200 {
		if err := e.r.Put(NewMutation(fmt.Appendf(nil, "r%03d", i)).Put([]byte("f"), []byte("q"), 1, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	f := &slowFilter{d: 2 * time.Millisecond}
	sc, err := e.r.Scanner(&Scan{Filter: f, TimeLimit: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	b, err := sc.Next()
	if err != nil {
		t.Fatal(err)
	}
	if !b.Heartbeat || len(b.Results) != 0 || !b.More {
		t.Fatalf("first batch: heartbeat %v, %d results, more %v; want a heartbeat", b.Heartbeat, len(b.Results), b.More)
	}
	if f.cells >= 32 {
		t.Fatalf("the heartbeat came after %d cells: the time limit was checked by cell count", f.cells)
	}
	// The scan goes on from there and reads every cell once.
	for b.More {
		if b, err = sc.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if f.cells != 200 {
		t.Fatalf("the filter saw %d cells over the heartbeats, want 200", f.cells)
	}
}
