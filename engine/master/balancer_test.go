package master

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// apply returns the layout after moves, checking that each move starts where the region is.
func apply(t *testing.T, regions []BalancerRegion, moves []Move) []BalancerRegion {
	t.Helper()
	out := append([]BalancerRegion(nil), regions...)
	idx := map[string]int{}
	for i, r := range out {
		idx[r.Name] = i
	}
	for _, m := range moves {
		i, ok := idx[m.Region]
		if !ok {
			t.Fatalf("move of unknown region %s", m.Region)
		}
		if out[i].Server != m.From {
			t.Fatalf("move %+v: region is on %q", m, out[i].Server)
		}
		out[i].Server = m.To
	}
	return out
}

// checkLayout asserts the balancer's contract on a final layout.
func checkLayout(t *testing.T, servers []BalancerServer, regions []BalancerRegion) {
	t.Helper()
	usable := map[string]BalancerServer{}
	for _, s := range servers {
		if !s.Draining {
			usable[s.Name] = s
		}
	}
	count := map[string]int{}
	groupOn := map[string]map[string]bool{}
	for _, r := range regions {
		if _, ok := usable[r.Server]; !ok {
			t.Errorf("region %s on %q, not a live non-draining server", r.Name, r.Server)
			continue
		}
		count[r.Server]++
		if groupOn[r.Group] == nil {
			groupOn[r.Group] = map[string]bool{}
		}
		if groupOn[r.Group][r.Server] {
			t.Errorf("two replicas of %s on %s", r.Group, r.Server)
		}
		groupOn[r.Group][r.Server] = true
	}
	lo, hi := len(regions), 0
	for s := range usable {
		lo, hi = min(lo, count[s]), max(hi, count[s])
	}
	if hi-lo > 1 {
		t.Errorf("unbalanced: counts %v", count)
	}
}

func servers(n int, zones ...string) []BalancerServer {
	var out []BalancerServer
	for i := range n {
		s := BalancerServer{Name: fmt.Sprintf("rs%d", i)}
		if len(zones) > 0 {
			s.Zone = zones[i%len(zones)]
		}
		out = append(out, s)
	}
	return out
}

func TestBalanceEvensCounts(t *testing.T) {
	srv := servers(3)
	var regions []BalancerRegion
	for i := range 10 {
		regions = append(regions, BalancerRegion{Name: fmt.Sprintf("r%02d", i), Group: fmt.Sprintf("r%02d", i), Server: "rs0"})
	}
	moves := Balance(srv, regions)
	final := apply(t, regions, moves)
	checkLayout(t, srv, final)
	if len(moves) != 6 {
		t.Errorf("%d moves, want 6 (10 regions on 1 of 3 servers: 4/3/3)", len(moves))
	}
	if again := Balance(srv, final); len(again) != 0 {
		t.Errorf("balanced layout still moves: %v", again)
	}
}

func TestDrainingServerEmptiesAndUnassignedAreAssigned(t *testing.T) {
	srv := servers(3)
	srv[2].Draining = true
	regions := []BalancerRegion{
		{Name: "a", Group: "a", Server: "rs2"}, {Name: "b", Group: "b", Server: "rs2"},
		{Name: "c", Group: "c", Server: ""}, {Name: "d", Group: "d", Server: "dead-server"},
	}
	final := apply(t, regions, Balance(srv, regions))
	checkLayout(t, srv, final)
}

func TestReplicasApartAndAcrossZones(t *testing.T) {
	srv := servers(4, "z1", "z2")
	// Both replicas of each region start on the same server.
	var regions []BalancerRegion
	for i := range 4 {
		g := fmt.Sprintf("r%d", i)
		regions = append(regions, BalancerRegion{Name: g, Group: g, Server: "rs0"}, BalancerRegion{Name: g + "_1", Group: g, Server: "rs0"})
	}
	final := apply(t, regions, Balance(srv, regions))
	checkLayout(t, srv, final)
	zone := map[string]string{}
	for _, s := range srv {
		zone[s.Name] = s.Zone
	}
	byGroup := map[string][]string{}
	for _, r := range final {
		byGroup[r.Group] = append(byGroup[r.Group], zone[r.Server])
	}
	for g, zs := range byGroup {
		if zs[0] == zs[1] {
			t.Errorf("replicas of %s both in zone %s although two zones exist", g, zs[0])
		}
	}
}

func TestAssignmentForAvoidsReplicaServers(t *testing.T) {
	srv := servers(2)
	regions := []BalancerRegion{{Name: "a", Group: "a", Server: "rs0"}, {Name: "b", Group: "b", Server: "rs1"}, {Name: "c", Group: "c", Server: "rs1"}}
	if got := AssignmentFor(srv, regions, BalancerRegion{Name: "a_1", Group: "a"}); got != "rs1" {
		t.Errorf("replica of a assigned to %q, want rs1 (rs0 holds the primary)", got)
	}
	if got := AssignmentFor(srv[:1], regions, BalancerRegion{Name: "a_1", Group: "a"}); got != "" {
		t.Errorf("replica of a assigned to %q although the only server holds its primary", got)
	}
}

// Property test: random layouts always end valid, balanced and stable.
func TestBalanceRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		n := 2 + rng.IntN(6)
		srv := servers(n, "a", "b", "c")
		for i := range srv {
			srv[i].Draining = rng.IntN(8) == 0
		}
		live := 0
		for _, s := range srv {
			if !s.Draining {
				live++
			}
		}
		if live < 2 {
			continue
		}
		var regions []BalancerRegion
		for g := range rng.IntN(40) {
			reps := 1 + rng.IntN(min(live, 3))
			for r := range reps {
				name := fmt.Sprintf("g%d_%d", g, r)
				server := ""
				if rng.IntN(5) > 0 {
					server = srv[rng.IntN(n)].Name
				}
				regions = append(regions, BalancerRegion{Name: name, Group: fmt.Sprintf("g%d", g), Server: server})
			}
		}
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			final := apply(t, regions, Balance(srv, regions))
			checkLayout(t, srv, final)
			if again := Balance(srv, final); len(again) != 0 {
				t.Errorf("not stable: %v", again)
			}
		})
	}
}
