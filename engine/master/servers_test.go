package master

import (
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/lease"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestLeaseExpiryAndRestart(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	cfg := lease.Default
	r, err := NewRegistry(cfg, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	r.Register("rs1:16020", 1, "rs1:16021", "z1")
	r.Register("rs2:16020", 1, "rs2:16021", "")
	clk.Advance(cfg.Lease + cfg.DeadMargin)
	if !r.Heartbeat("rs1:16020", 1) {
		t.Fatal("heartbeat of a live server refused")
	}
	if dead := r.Expire(); len(dead) != 0 {
		t.Fatalf("declared dead exactly at lease + margin: %v", dead)
	}
	clk.Advance(time.Millisecond)
	dead := r.Expire()
	if len(dead) != 1 || dead[0].Name != "rs2:16020" {
		t.Fatalf("want rs2 dead, got %v", dead)
	}
	if r.Heartbeat("rs2:16020", 1) {
		t.Error("a dead server's heartbeat was accepted: it must register again")
	}
	// rs1 restarts (new start code) while still live: the old process's regions need recovery.
	if err := r.SetDraining("rs1:16020", true); err != nil {
		t.Fatal(err)
	}
	replaced := r.Register("rs1:16020", 2, "rs1:16021", "")
	if replaced == nil || replaced.StartCode != 1 {
		t.Fatalf("restart not reported as a replacement: %v", replaced)
	}
	s, _ := r.Get("rs1:16020")
	if !s.Draining || s.Zone != "z1" || !s.Live {
		t.Errorf("restarted server lost its draining mark or zone: %+v", s)
	}
	if r.Heartbeat("rs1:16020", 1) {
		t.Error("the old process's heartbeat was accepted after the restart")
	}
}

func TestFenceClosesBeforeMasterDeclaresDeath(t *testing.T) {
	cfg := lease.Default
	clk := &fakeClock{now: time.Unix(1000, 0)}
	reg, _ := NewRegistry(cfg, clk.Now)
	fence := lease.NewFence(cfg, clk.Now)
	if fence.Open() {
		t.Fatal("fence open before any heartbeat")
	}
	reg.Register("rs:1", 1, "", "")
	// Heartbeats every interval, the master receiving each one 300 ms after it was sent.
	var lastSent time.Time
	for range 5 {
		lastSent = clk.Now()
		clk.Advance(300 * time.Millisecond)
		reg.Heartbeat("rs:1", 1)
		fence.Renewed(lastSent)
		clk.Advance(cfg.HeartbeatInterval - 300*time.Millisecond)
	}
	// The server is cut off now. Step time and check at every step that the server's fence has
	// closed before the master would declare it dead.
	for step := 0; step < 200; step++ {
		clk.Advance(50 * time.Millisecond)
		dead := len(reg.Expire()) > 0
		if dead && fence.Open() {
			t.Fatalf("at %v after the last heartbeat the master declared the server dead while it could still acknowledge writes", clk.Now().Sub(lastSent))
		}
		if dead {
			return
		}
	}
	t.Fatal("the master never declared the silent server dead")
}
