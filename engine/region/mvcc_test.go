package region

import (
	"testing"
	"time"
)

// A write that completes before an earlier one is not acknowledged (complete does not return)
// until the earlier one completes too: a read after the acknowledgement always sees it.
func TestMVCCCompleteWaitsForEarlierWrites(t *testing.T) {
	m := newMVCC(10)
	seq := uint64(10)
	next := func() (uint64, error) { seq++; return seq, nil }
	e1, _ := m.begin(next)
	e2, _ := m.begin(next)
	seen := make(chan uint64, 1)
	go func() {
		m.complete(e2)
		seen <- m.readPoint.Load()
	}()
	// Wait until the second write is marked done (it is then waiting), then complete the first.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		done := e2.done
		m.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second write never marked done")
		}
		time.Sleep(time.Millisecond) // polling the goroutine's progress
	}
	m.complete(e1)
	if rp := <-seen; rp < e2.seq {
		t.Fatalf("complete(write %d) returned with the read point at %d", e2.seq, rp)
	}
	if rp := m.readPoint.Load(); rp != 12 {
		t.Fatalf("read point %d after both writes, want 12", rp)
	}
	// A broken region releases waiters.
	e3, _ := m.begin(next)
	e4, _ := m.begin(next)
	released := make(chan struct{})
	go func() { m.complete(e4); close(released) }()
	m.breakWith(ErrBroken)
	<-released
	_ = e3
}
