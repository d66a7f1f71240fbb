package lease

import (
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{Lease: time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: 100 * time.Millisecond, DeadMargin: time.Second},
		{Lease: 4 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: 4 * time.Second, DeadMargin: time.Second},
		{Lease: 4 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: time.Second},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("config %d accepted: %+v", i, c)
		}
	}
	if err := Default.Validate(); err != nil {
		t.Error(err)
	}
}

// A fence takes a new lease from the master's answers: a shorter one closes it at once by the new
// timing of the last acknowledged heartbeat (a new active master with a shorter lease declares a
// silent server dead sooner), a longer one lets it stay open longer; a closed fence stays closed.
func TestFenceAdoptsTheMastersLease(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	f := NewFence(Config{Lease: 8 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: time.Second, DeadMargin: 2 * time.Second}, clock)
	sent := now
	f.Renewed(sent)
	now = sent.Add(3100 * time.Millisecond)
	if !f.Open() {
		t.Fatal("closed 3.1 s after a heartbeat with an 8 s lease")
	}
	f.Adopt(4*time.Second, time.Second) // open until sent + 3 s
	if f.Open() {
		t.Fatal("open 3.1 s after the last acknowledged heartbeat under a 4 s lease with a 1 s margin")
	}
	f.Adopt(8*time.Second, time.Second)
	if !f.Open() {
		t.Fatal("a longer lease did not apply to the last heartbeat")
	}
	f.Adopt(2*time.Second, 4*time.Second) // a margin not under the lease: a quarter of it
	if l, m := f.Timing(); l != 2*time.Second || m != 500*time.Millisecond {
		t.Fatalf("timing %v %v, want 2s and 500ms", l, m)
	}
	f.Close()
	f.Adopt(8*time.Second, time.Second)
	if f.Open() {
		t.Fatal("a closed fence opened on a new lease")
	}
}
