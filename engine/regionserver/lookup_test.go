package regionserver

import (
	"context"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
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
		if _, _, d := s.lookupUntil(name, until); d.GetCode() != pb.ErrorCode_ERROR_CODE_REGION_OPENING {
			t.Fatalf("%s still opening: %v", name, d)
		}
	}
	if waited := time.Since(start); waited < 150*time.Millisecond || waited >= openingWait {
		t.Fatalf("three opening regions with one deadline 150 ms away took %v", waited)
	}
}
