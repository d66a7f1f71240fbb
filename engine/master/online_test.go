package master

import (
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

// TestReconfigure: a running master's settings change by the start-up rules (zero is the
// default: a zero balancer period is not a balancer run every tick), keep their refusals, and a
// refused change changes nothing.
func TestReconfigure(t *testing.T) {
	m, err := New(Config{FS: storage.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Reconfigure(func(c *Config) { c.BalancerInterval, c.MaxMovesInFlight, c.ArchiveTTL = 0, 4, 0 }); err != nil {
		t.Fatal(err)
	}
	if m.cfg.BalancerInterval != 5*time.Minute || m.cfg.MaxMovesInFlight != 4 || m.cfg.ArchiveTTL != 5*time.Minute {
		t.Fatalf("after a change: balancer %v, moves %d, archive TTL %v; want the defaults for zero", m.cfg.BalancerInterval, m.cfg.MaxMovesInFlight, m.cfg.ArchiveTTL)
	}
	for name, fn := range map[string]func(c *Config){
		"a zero open timeout":     func(c *Config) { c.OpenTimeout = 0 },
		"negative moves":          func(c *Config) { c.MaxMovesInFlight = -1 },
		"a zero split size":       func(c *Config) { c.SplitSize = 0 },
		"no regions per server":   func(c *Config) { c.MaxRegionsPerServer = 0 },
		"a negative hedge delay":  func(c *Config) { c.HedgeDelay = -time.Second },
		"moves and a bad timeout": func(c *Config) { c.MaxMovesInFlight, c.CloseTimeout = 8, -1 },
	} {
		if err := m.Reconfigure(fn); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if m.cfg.MaxMovesInFlight != 4 {
		t.Fatalf("a refused change changed the settings: moves %d", m.cfg.MaxMovesInFlight)
	}
}
