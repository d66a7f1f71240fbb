package master

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cellstore/cellstore/engine/lease"
)

// ServerState is the registry's record of one region server.
type ServerState struct {
	Name         string // host:port of its data path; the server's identity
	StartCode    int64  // tells a restarted process from its predecessor
	AdminAddress string
	Zone         string
	Draining     bool
	Live         bool
	LastSeen     time.Time // the master's clock
	Regions      int
	// Expelled: the master stopped renewing the lease (the server did not answer its orders). Its
	// heartbeats are answered "unknown server" and it is declared dead when the lease and margin
	// pass since the last heartbeat the master accepted.
	Expelled bool
}

// Registry tracks region servers and their leases. Clock is injectable for tests.
type Registry struct {
	cfg   lease.Config
	clock func() time.Time

	mu      sync.Mutex
	servers map[string]*ServerState
}

// NewRegistry makes an empty registry.
func NewRegistry(cfg lease.Config, clock func() time.Time) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = time.Now
	}
	return &Registry{cfg: cfg, clock: clock, servers: map[string]*ServerState{}}, nil
}

// Register records a server that started. A new start code for a known name means the old process
// is gone: the caller must treat its regions as those of a dead server (returned as replaced).
func (r *Registry) Register(name string, startCode int64, adminAddr, zone string) (replaced *ServerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	if old := r.servers[name]; old != nil {
		if old.StartCode == startCode && old.Live {
			old.LastSeen, old.AdminAddress = now, adminAddr
			if zone != "" {
				old.Zone = zone
			}
			return nil
		}
		if old.Live && old.StartCode != startCode {
			c := *old
			replaced = &c
		}
		if zone == "" {
			zone = old.Zone // a zone the operator set survives a restart
		}
		// Draining is an operator's decision about the server name: it survives restarts.
		r.servers[name] = &ServerState{Name: name, StartCode: startCode, AdminAddress: adminAddr, Zone: zone,
			Draining: old.Draining, Live: true, LastSeen: now}
		return replaced
	}
	r.servers[name] = &ServerState{Name: name, StartCode: startCode, AdminAddress: adminAddr, Zone: zone, Live: true, LastSeen: now}
	return nil
}

// Heartbeat renews a live server's lease. false means the master does not know this process (it
// was declared dead, or restarted): it must stop serving and register again.
func (r *Registry) Heartbeat(name string, startCode int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	if s == nil || !s.Live || s.StartCode != startCode || s.Expelled {
		return false
	}
	s.LastSeen = r.clock()
	return true
}

// Reset forgets every server (a master becoming active starts from what its catalog says).
func (r *Registry) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.servers = map[string]*ServerState{}
}

// Config returns the lease timing.
func (r *Registry) Config() lease.Config { return r.cfg }

// Restore records a server known from the catalog, after a master failover, as live with its
// lease starting now: if the process is still there it goes on heartbeating with the same start
// code; if not, it is declared dead when the lease and margin pass. Starting the lease now is
// safe: the server's own fence can only have been renewed before this moment.
func (r *Registry) Restore(name string, startCode int64, adminAddr, zone string, draining bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.servers[name]; old != nil && old.Live {
		return
	}
	r.servers[name] = &ServerState{Name: name, StartCode: startCode, AdminAddress: adminAddr, Zone: zone,
		Draining: draining, Live: true, LastSeen: r.clock()}
}

// Expel stops renewing the lease of a live server process (see ServerState.Expelled). false when
// that process is not live.
func (r *Registry) Expel(name string, startCode int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	if s == nil || !s.Live || s.StartCode != startCode || s.Expelled {
		return false // (expelled already: said once)
	}
	s.Expelled = true
	return true
}

// IsExpelled reports whether this process of the server was expelled and is not dead yet.
func (r *Registry) IsExpelled(name string, startCode int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	return s != nil && s.Live && s.StartCode == startCode && s.Expelled
}

// Expire declares dead every live server whose lease plus the dead margin has passed, and returns
// them. The caller fences and recovers them.
func (r *Registry) Expire() []ServerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	var dead []ServerState
	for _, s := range r.servers {
		if s.Live && now.Sub(s.LastSeen) > r.cfg.Lease+r.cfg.DeadMargin {
			s.Live = false
			dead = append(dead, *s)
		}
	}
	slices.SortFunc(dead, func(a, b ServerState) int { return compareStrings(a.Name, b.Name) })
	return dead
}

// MarkDead declares a server dead now (it said it stopped, or was replaced).
func (r *Registry) MarkDead(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.servers[name]; s != nil {
		s.Live = false
	}
}

// SetDraining marks a server draining (no regions assigned to it; the balancer moves its regions
// away) or not.
func (r *Registry) SetDraining(name string, draining bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	if s == nil {
		return fmt.Errorf("master: unknown region server %q", name)
	}
	s.Draining = draining
	return nil
}

// SetZone records a server's zone (the operator reports it from the node's topology label).
func (r *Registry) SetZone(name, zone string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	if s == nil {
		return fmt.Errorf("master: unknown region server %q", name)
	}
	s.Zone = zone
	return nil
}

// Get returns a copy of a server's record.
func (r *Registry) Get(name string) (ServerState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[name]
	if s == nil {
		return ServerState{}, false
	}
	return *s, true
}

// All returns copies of every record, sorted by name.
func (r *Registry) All() []ServerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ServerState, 0, len(r.servers))
	for _, s := range r.servers {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ServerState) int { return compareStrings(a.Name, b.Name) })
	return out
}

// Forget removes a dead server's record once its recovery is complete.
func (r *Registry) Forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.servers[name]; s != nil && !s.Live {
		delete(r.servers, name)
	}
}

// BalancerServers is the live servers as the balancer sees them (expelled ones left out).
func (r *Registry) BalancerServers() []BalancerServer {
	var out []BalancerServer
	for _, s := range r.All() {
		if s.Live && !s.Expelled {
			out = append(out, BalancerServer{Name: s.Name, Zone: s.Zone, Draining: s.Draining})
		}
	}
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
