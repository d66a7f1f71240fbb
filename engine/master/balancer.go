package master

import (
	"cmp"
	"slices"
)

// BalancerServer is what the balancer knows of a region server.
type BalancerServer struct {
	Name     string
	Zone     string
	Draining bool
}

// BalancerRegion is one region replica and where it is.
type BalancerRegion struct {
	// Name of this replica (unique).
	Name string
	// Group is the same for every replica of one region (the primary's name): replicas of a group
	// never share a server, and spread over zones when servers report zones.
	Group string
	// Server is where it is assigned, or "" when unassigned (or its server is gone).
	Server string
}

// Move is one decision of the balancer: put Region on To (From is "" for an assignment).
type Move struct {
	Region string
	From   string
	To     string
}

// Balance decides moves that leave every region on a live, non-draining server, no two replicas
// of a region on one server (and, where zones allow, in one zone), and region counts per server
// within one of each other. Regions whose server is not in servers (dead) or is draining are
// moved first; then the most loaded servers give regions to the least loaded. It is a pure
// function: the same input gives the same moves.
func Balance(servers []BalancerServer, regions []BalancerRegion) []Move {
	b := newBalancerState(servers, regions)
	var moves []Move
	// 1. Everything on no server, a dead one or a draining one must go somewhere.
	for _, r := range b.regions {
		if s := b.servers[r.Server]; s != nil && !s.Draining {
			continue
		}
		to := b.pick(r, "")
		if to == "" {
			continue // no server can take it now (every candidate holds a replica of it)
		}
		moves = append(moves, Move{Region: r.Name, From: r.Server, To: to})
		b.place(r, to)
	}
	// 2. Two replicas of one region on one server: move one away.
	for _, r := range b.regions {
		if b.servers[r.Server] != nil && !b.fits(r, r.Server) {
			if to := b.pick(r, r.Server); to != "" {
				moves = append(moves, Move{Region: r.Name, From: r.Server, To: to})
				b.place(r, to)
			}
		}
	}
	// 3. Even out counts: move from a fuller server to an emptier one while they differ by more
	// than one, preferring moves that keep a region's replicas in distinct zones. Such a move
	// always exists: if every region of the fuller server had a replica on the emptier one, the
	// emptier one would hold at least as many regions.
	for range len(b.regions) * len(b.order) {
		m, ok := b.evenOut()
		if !ok {
			break
		}
		moves = append(moves, m)
	}
	// 4. Spread replicas that share a zone when another zone has a server with fewer regions (so
	// counts stay even). Each move lowers the number of clashes, so this ends.
	for changed := true; changed; {
		changed = false
		for _, r := range b.regions {
			if b.zoneClash(r) {
				if to := b.pickOtherZone(r); to != "" && len(b.on[to]) < len(b.on[r.Server]) {
					moves = append(moves, Move{Region: r.Name, From: r.Server, To: to})
					b.place(r, to)
					changed = true
				}
			}
		}
	}
	return compact(moves)
}

// AssignmentFor picks a server for a new or homeless region replica given the current layout:
// the least loaded live, non-draining server without a replica of its group, preferring a zone
// the group does not use yet. "" when none can take it.
func AssignmentFor(servers []BalancerServer, regions []BalancerRegion, r BalancerRegion) string {
	b := newBalancerState(servers, regions)
	return b.pick(&r, "")
}

type balancerState struct {
	servers map[string]*BalancerServer
	order   []string                     // live, non-draining servers, sorted
	regions []*BalancerRegion            // sorted by name
	on      map[string][]*BalancerRegion // by server
	groups  map[string][]*BalancerRegion // by group
}

func newBalancerState(servers []BalancerServer, regions []BalancerRegion) *balancerState {
	b := &balancerState{servers: map[string]*BalancerServer{}, on: map[string][]*BalancerRegion{}, groups: map[string][]*BalancerRegion{}}
	for i := range servers {
		s := servers[i]
		b.servers[s.Name] = &s
		if !s.Draining {
			b.order = append(b.order, s.Name)
		}
	}
	slices.Sort(b.order)
	for i := range regions {
		r := regions[i]
		b.regions = append(b.regions, &r)
	}
	slices.SortFunc(b.regions, func(x, y *BalancerRegion) int { return cmp.Compare(x.Name, y.Name) })
	for _, r := range b.regions {
		if b.servers[r.Server] != nil {
			b.on[r.Server] = append(b.on[r.Server], r)
		}
		b.groups[r.Group] = append(b.groups[r.Group], r)
	}
	return b
}

// fits: s is a live, non-draining server holding no other replica of r's group.
func (b *balancerState) fits(r *BalancerRegion, s string) bool {
	srv := b.servers[s]
	if srv == nil || srv.Draining {
		return false
	}
	for _, o := range b.on[s] {
		if o.Group == r.Group && o.Name != r.Name {
			return false
		}
	}
	return true
}

// zonesOfGroup counts the zones used by r's group, leaving r out.
func (b *balancerState) zonesOfGroup(r *BalancerRegion) map[string]int {
	zones := map[string]int{}
	for _, o := range b.groups[r.Group] {
		if o.Name != r.Name {
			if s := b.servers[o.Server]; s != nil && s.Zone != "" {
				zones[s.Zone]++
			}
		}
	}
	return zones
}

func (b *balancerState) zoneClash(r *BalancerRegion) bool {
	s := b.servers[r.Server]
	return s != nil && s.Zone != "" && b.zonesOfGroup(r)[s.Zone] > 0
}

// worsensZones: moving r to s puts it in a zone its group already uses while its current zone
// was free of the group.
func (b *balancerState) worsensZones(r *BalancerRegion, s string) bool {
	to := b.servers[s]
	if to == nil || to.Zone == "" {
		return false
	}
	zones := b.zonesOfGroup(r)
	return zones[to.Zone] > 0 && !b.zoneClash(r)
}

// pick: the least loaded fitting server, preferring zones unused by the group; ties by name.
func (b *balancerState) pick(r *BalancerRegion, exclude string) string {
	return b.pickAvoiding(r, func(s string) bool { return s == exclude })
}

// pickAvoiding is pick leaving out the servers avoid says (avoid may be nil).
func (b *balancerState) pickAvoiding(r *BalancerRegion, avoid func(string) bool) string {
	zones := b.zonesOfGroup(r)
	best, bestFree := "", false
	for _, s := range b.order {
		if (avoid != nil && avoid(s)) || !b.fits(r, s) {
			continue
		}
		z := b.servers[s].Zone
		free := z == "" || zones[z] == 0
		switch {
		case best == "",
			free && !bestFree,
			free == bestFree && len(b.on[s]) < len(b.on[best]),
			// A primary goes where fewer primaries are (they take the writes): replicas
			// placed in name order would otherwise put every primary on the first server.
			free == bestFree && len(b.on[s]) == len(b.on[best]) && r.Name == r.Group && b.primaries(s) < b.primaries(best):
			best, bestFree = s, free
		}
	}
	return best
}

// primaries counts the primaries on server s.
func (b *balancerState) primaries(s string) int {
	n := 0
	for _, o := range b.on[s] {
		if o.Name == o.Group {
			n++
		}
	}
	return n
}

// displacing is where a primary no server fits (every live, non-draining server holds a replica
// of its group: as many replicas as servers, and one of them draining or dead) may open all the
// same: the least loaded such server whose only replica of the group is a secondary, which gives
// up its place (the primary takes writes; the secondary waits for a server it fits). prefer is
// taken when it qualifies; avoid may be nil; movable says whether a secondary can give up its
// place now (open, nothing else under way). ("", "") when r is not a primary or none qualifies.
func (b *balancerState) displacing(r *BalancerRegion, prefer string, avoid, movable func(string) bool) (server, secondary string) {
	if r.Name != r.Group {
		return "", ""
	}
	only := func(s string) string {
		srv := b.servers[s]
		if srv == nil || srv.Draining {
			return ""
		}
		found := ""
		for _, o := range b.on[s] {
			if o.Group != r.Group || o.Name == r.Name {
				continue
			}
			if found != "" || o.Name == o.Group || !movable(o.Name) {
				return ""
			}
			found = o.Name
		}
		return found
	}
	if prefer != "" && (avoid == nil || !avoid(prefer)) {
		if sec := only(prefer); sec != "" {
			return prefer, sec
		}
	}
	for _, s := range b.order {
		if avoid != nil && avoid(s) {
			continue
		}
		if sec := only(s); sec != "" && (server == "" || len(b.on[s]) < len(b.on[server])) {
			server, secondary = s, sec
		}
	}
	return server, secondary
}

func (b *balancerState) pickOtherZone(r *BalancerRegion) string {
	zones := b.zonesOfGroup(r)
	best := ""
	for _, s := range b.order {
		z := b.servers[s].Zone
		if s == r.Server || !b.fits(r, s) || z == "" || zones[z] > 0 {
			continue
		}
		if best == "" || len(b.on[s]) < len(b.on[best]) {
			best = s
		}
	}
	return best
}

// add puts a region that is not in the layout yet on server to (an assignment decided while
// more are being decided from the same layout).
func (b *balancerState) add(r BalancerRegion, to string) {
	r.Server = to
	nr := &r
	b.regions = append(b.regions, nr)
	b.groups[r.Group] = append(b.groups[r.Group], nr)
	if b.servers[to] != nil {
		b.on[to] = append(b.on[to], nr)
	}
}

// moveTo moves the region named name to server to in the layout.
func (b *balancerState) moveTo(name, to string) {
	for _, r := range b.regions {
		if r.Name == name {
			b.place(r, to)
			return
		}
	}
}

func (b *balancerState) place(r *BalancerRegion, to string) {
	if from := r.Server; b.on[from] != nil {
		b.on[from] = slices.DeleteFunc(b.on[from], func(o *BalancerRegion) bool { return o == r })
	}
	r.Server = to
	b.on[to] = append(b.on[to], r)
	slices.SortFunc(b.on[to], func(x, y *BalancerRegion) int { return cmp.Compare(x.Name, y.Name) })
}

// evenOut makes one move from a server to one holding at least two fewer regions.
func (b *balancerState) evenOut() (Move, bool) {
	byCount := slices.Clone(b.order)
	slices.SortStableFunc(byCount, func(x, y string) int { return cmp.Compare(len(b.on[y]), len(b.on[x])) })
	for _, zoneAware := range []bool{true, false} {
		for _, hi := range byCount {
			for i := len(byCount) - 1; i >= 0; i-- {
				lo := byCount[i]
				if len(b.on[hi])-len(b.on[lo]) <= 1 {
					break
				}
				for _, r := range b.on[hi] {
					if b.fits(r, lo) && (!zoneAware || !b.worsensZones(r, lo)) {
						m := Move{Region: r.Name, From: hi, To: lo}
						b.place(r, lo)
						return m, true
					}
				}
			}
		}
	}
	return Move{}, false
}

// compact folds successive moves of one region into one (A→B then B→C is A→C) and drops moves
// that end where they started.
func compact(moves []Move) []Move {
	last := map[string]int{}
	var out []Move
	for _, m := range moves {
		if i, ok := last[m.Region]; ok {
			out[i].To = m.To
			continue
		}
		last[m.Region] = len(out)
		out = append(out, m)
	}
	return slices.DeleteFunc(out, func(m Move) bool { return m.From == m.To })
}
