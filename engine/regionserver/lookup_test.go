package regionserver

import (
	"context"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
)

// A request for a region that is opening here waits a little for the open: answered with the
// region once it opens, with REGION_OPENING (retryable) when it is still opening after the wait,
// and NOT_SERVING_REGION when the open failed.
func TestLookupWaitsForAnOpeningRegion(t *testing.T) {
	s := &Server{moved: map[string]movedEntry{}}
	or := &onlineRegion{name: "r1", settled: make(chan struct{})}
	s.regions.Store("r1", or)

	start := time.Now()
	if _, _, d := s.lookup("r1"); d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_OPENING || !d.GetRetryable() {
		t.Fatalf("a region still opening: %v", d)
	}
	if waited := time.Since(start); waited < openingWait {
		t.Fatalf("answered after %v, before the open wait of %v", waited, openingWait)
	}

	type answer struct {
		r *region.Region
		d *pb.ErrorDetail
	}
	got := make(chan answer, 1)
	go func() {
		_, r, d := s.lookup("r1")
		got <- answer{r, d}
	}()
	opened := new(region.Region)
	or.r.Store(opened)
	or.state.Store(stateOpen)
	close(or.settled)
	if a := <-got; a.d != nil || a.r != opened {
		t.Fatalf("a request during the open got %v, %v; want the region", a.r, a.d)
	}

	failed := &onlineRegion{name: "r2", settled: make(chan struct{})}
	s.regions.Store("r2", failed)
	go func() {
		s.regions.CompareAndDelete("r2", failed) // as a failed open does
		failed.state.Store(stateClosing)
		close(failed.settled)
	}()
	if _, _, d := s.lookup("r2"); d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_SERVING_REGION {
		t.Fatalf("a failed open answered %v", d)
	}
}

// A request waits for opening regions until one deadline: openingWait from its start, or its own
// deadline when that comes first; a multi naming several opening regions waits once, not once
// per region.
func TestOpeningWaitEndsAtTheRequestsDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	if got := openingDeadline(ctx); !got.Equal(dl) {
		t.Fatalf("opening deadline %v for a request due at %v", got, dl)
	}
	if got := time.Until(openingDeadline(context.Background())); got > openingWait || got < openingWait-time.Second/2 {
		t.Fatalf("opening deadline %v away without a request deadline, want about %v", got, openingWait)
	}
	s := &Server{moved: map[string]movedEntry{}}
	for _, name := range []string{"r1", "r2", "r3"} {
		s.regions.Store(name, &onlineRegion{name: name, settled: make(chan struct{})})
	}
	start := time.Now()
	until := start.Add(150 * time.Millisecond)
	for _, name := range []string{"r1", "r2", "r3"} {
		if _, _, d := s.lookupUntil(name, until, false); d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_OPENING {
			t.Fatalf("%s still opening: %v", name, d)
		}
	}
	if waited := time.Since(start); waited < 150*time.Millisecond || waited >= openingWait {
		t.Fatalf("three opening regions with one deadline 150 ms away took %v", waited)
	}
}

// A region that closeRegion is closing for a move: reads are served while its region still
// serves them; a write waits for the close to be reported and is then sent to the destination
// (REGION_MOVED), not at once to a destination that is not opening the region yet. After the
// region left the map and before its CLOSED report was answered, requests wait too.
func TestLookupWaitsForAClosingRegion(t *testing.T) {
	s := &Server{moved: map[string]movedEntry{}, cfg: Config{MovedTTL: time.Minute}}
	or := &onlineRegion{name: "r1", settled: make(chan struct{}), closeDone: make(chan struct{})}
	close(or.settled)
	serving := new(region.Region) // a region that still serves reads
	or.r.Store(serving)
	or.state.Store(stateClosing)
	or.closing.Store(true)
	s.regions.Store("r1", or)
	dest := &pb.ServerName{Host: "rs2", Port: 16020, StartCode: 7}
	s.rememberMoved("r1", dest, 3, or.closeDone)

	if _, r, d := s.lookupUntil("r1", time.Now().Add(time.Minute), true); d != nil || r != serving {
		t.Fatalf("a read of a closing region that still serves reads got %v, %v; want the region", r, d)
	}

	type answer struct {
		d     *pb.ErrorDetail
		after time.Duration
	}
	write := func() chan answer {
		got := make(chan answer, 1)
		go func() {
			start := time.Now()
			_, _, d := s.lookupUntil("r1", start.Add(time.Minute), false)
			got <- answer{d, time.Since(start)}
		}()
		return got
	}
	early := write()
	// The close ends: the region leaves the map, the report is under way.
	s.regions.CompareAndDelete("r1", or)
	late := write()
	for _, got := range []chan answer{early, late} {
		select {
		case a := <-got:
			t.Fatalf("a write answered %v after %v while the close was not reported", a.d, a.after)
		case <-time.After(200 * time.Millisecond):
		}
	}
	close(or.closeDone)
	for _, got := range []chan answer{early, late} {
		select {
		case a := <-got:
			if a.d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_MOVED || a.d.GetNewLocation().GetHost() != "rs2" {
				t.Fatalf("a write after the close was reported got %v; want REGION_MOVED to rs2", a.d)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write still waited 30 s after the close was reported")
		}
	}

	// A close that does not end within the request's wait: REGION_MOVED at the deadline.
	or2 := &onlineRegion{name: "r2", settled: make(chan struct{}), closeDone: make(chan struct{})}
	or2.state.Store(stateClosing)
	or2.closing.Store(true)
	s.regions.Store("r2", or2)
	s.rememberMoved("r2", dest, 4, or2.closeDone)
	start := time.Now()
	if _, _, d := s.lookupUntil("r2", start.Add(150*time.Millisecond), true); d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_MOVED {
		t.Fatalf("a read of a closing region with no region to read answered %v; want REGION_MOVED", d)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("answered after %v, before the request's wait of 150 ms", waited)
	}
}

// The HBase protocol finds a region that moved away by its name, so the data path answers
// REGION_MOVED (after a close under way is reported) instead of "not online here", which sent the
// stock client to look the region up again after its pause.
func TestHBaseBackendFindsARegionThatMovedAway(t *testing.T) {
	s := &Server{moved: map[string]movedEntry{}, cfg: Config{MovedTTL: time.Minute}}
	b := &hbaseBackend{s: s}
	tbl := &pb.TableName{Namespace: "default", Name: "t"}
	if name, ok := b.Region(tbl, 0x1a2b, 0); ok {
		t.Fatalf("a region never here found as %q", name)
	}
	s.rememberMoved(layout.RegionName(0x1a2b), &pb.ServerName{Host: "rs2", Port: 16020, StartCode: 7}, 3, nil)
	name, ok := b.Region(tbl, 0x1a2b, 0)
	if !ok || name != layout.RegionName(0x1a2b) {
		t.Fatalf("a region that moved away: %q %v, want %q", name, ok, layout.RegionName(0x1a2b))
	}
	if _, _, d := s.lookupUntil(name, time.Now(), false); d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_MOVED || d.GetNewLocation().GetHost() != "rs2" {
		t.Fatalf("the data path answered %v for it; want REGION_MOVED to rs2", d)
	}
}

// A region that is open here and serves while its OPENED report is on its way is returned at once,
// for writes as for reads; once a stop has switched it to closing it is not.
func TestLookupServesAnOpenedRegionBeforeItsReport(t *testing.T) {
	s := &Server{moved: map[string]movedEntry{}}
	or := &onlineRegion{name: "r1", settled: make(chan struct{})}
	s.regions.Store("r1", or)
	opened := new(region.Region)
	or.r.Store(opened)
	or.serving.Store(true) // settled stays open: the lookup must not wait on it
	start := time.Now()
	for _, reads := range []bool{false, true} {
		if _, r, d := s.lookupUntil("r1", time.Now().Add(openingWait), reads); d != nil || r != opened {
			t.Fatalf("reads=%v: a serving region still reporting OPENED got %v, %v; want the region", reads, r, d)
		}
	}
	if waited := time.Since(start); waited >= openingWait {
		t.Fatalf("answered after %v: a serving region must not be waited for", waited)
	}
	or.settle()
	or.settle()                  // once only: a second call must not panic
	or.state.Store(stateClosing) // as a graceful stop does
	if _, r, d := s.lookupUntil("r1", time.Now(), false); d == nil || r != nil {
		t.Fatalf("a serving region a stop took: got %v, %v; want it refused", r, d)
	}
}
