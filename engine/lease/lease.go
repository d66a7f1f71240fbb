// Package lease is the timing contract between the master and a region server: how long a
// server's lease runs from a heartbeat, when the server must stop acknowledging writes (its
// Fence), and when the master may declare it dead. Both sides use it; neither owns it.
package lease

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Lease timing. A region server's lease runs Lease from the master's receipt of each heartbeat.
// The server stops acknowledging writes Lease - SelfFenceMargin after it sent the heartbeat the
// master last acknowledged (its own clock, measured from before the send, so it stops first even
// if the master received that heartbeat instantly); the master declares it dead only
// Lease + DeadMargin after the last heartbeat it received. Between the two, no write can be
// acknowledged by a server the master is about to fence.
type Config struct {
	Lease             time.Duration
	HeartbeatInterval time.Duration
	SelfFenceMargin   time.Duration
	DeadMargin        time.Duration
}

// Default: a server that misses heartbeats for about 6 s is declared dead, which keeps
// its regions' recovery within the 10 s the cluster aims for.
var Default = Config{
	Lease:             4 * time.Second,
	HeartbeatInterval: 1 * time.Second,
	SelfFenceMargin:   1 * time.Second,
	DeadMargin:        2 * time.Second,
}

// Validate checks that the margins keep a fenced server from acknowledging writes.
func (c Config) Validate() error {
	switch {
	case c.HeartbeatInterval <= 0 || c.Lease <= 0:
		return fmt.Errorf("lease: lease %v and heartbeat interval %v must be positive", c.Lease, c.HeartbeatInterval)
	case c.HeartbeatInterval*2 > c.Lease:
		return fmt.Errorf("lease: heartbeat interval %v must be at most half the lease %v, or one lost heartbeat fences a server", c.HeartbeatInterval, c.Lease)
	case c.SelfFenceMargin <= 0 || c.SelfFenceMargin >= c.Lease:
		return fmt.Errorf("lease: self-fence margin %v must be in (0, lease %v)", c.SelfFenceMargin, c.Lease)
	case c.DeadMargin <= 0:
		return fmt.Errorf("lease: dead margin %v must be positive", c.DeadMargin)
	}
	return nil
}

// Fence is a region server's side of the lease: it may acknowledge writes only until its fence
// time, which each acknowledged heartbeat moves to (send time + Lease - SelfFenceMargin).
type Fence struct {
	cfg   Config
	clock func() time.Time
	base  time.Time // untilNs is measured from it (monotonic with time.Now)

	mu    sync.Mutex
	until time.Time
	sent  time.Time // of the acknowledged heartbeat until comes from (zero: none, or closed since)
	// untilNs mirrors until for Open, which every read and write calls: no lock.
	untilNs atomic.Int64
}

// NewFence makes a fence that is closed until the first acknowledged heartbeat.
func NewFence(cfg Config, clock func() time.Time) *Fence {
	if clock == nil {
		clock = time.Now
	}
	f := &Fence{cfg: cfg, clock: clock, base: clock()}
	f.untilNs.Store(math.MinInt64)
	return f
}

// Renewed records that the heartbeat sent at sentAt was acknowledged.
func (f *Fence) Renewed(sentAt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := sentAt.Add(f.cfg.Lease - f.cfg.SelfFenceMargin); t.After(f.until) {
		f.until, f.sent = t, sentAt
		f.untilNs.Store(int64(t.Sub(f.base)))
	}
}

// Adopt takes the master's lease timing, which a new active master may have changed (its
// heartbeat answers say its lease): the fence time becomes what the last acknowledged heartbeat
// gives under it — earlier at once when the lease shrank, so the server stops acknowledging writes
// before this master can declare it dead. A margin not under the lease is a quarter of it.
func (f *Fence) Adopt(lease, margin time.Duration) {
	if lease <= 0 {
		return
	}
	if margin <= 0 || margin >= lease {
		margin = lease / 4
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if lease == f.cfg.Lease && margin == f.cfg.SelfFenceMargin {
		return
	}
	f.cfg.Lease, f.cfg.SelfFenceMargin = lease, margin
	if f.sent.IsZero() {
		return // closed, or never renewed
	}
	f.until = f.sent.Add(lease - margin)
	f.untilNs.Store(int64(f.until.Sub(f.base)))
}

// Timing is the lease timing the fence uses now.
func (f *Fence) Timing() (lease, margin time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg.Lease, f.cfg.SelfFenceMargin
}

// Open says whether writes may be acknowledged now.
func (f *Fence) Open() bool {
	return int64(f.clock().Sub(f.base)) < f.untilNs.Load()
}

// Close shuts the fence at once (the master said this server is unknown).
func (f *Fence) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until, f.sent = time.Time{}, time.Time{}
	f.untilNs.Store(math.MinInt64)
}
