package client

import (
	"bytes"
	"slices"
	"sort"
	"sync"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// location is a cached region location: the region's row range and the data-path address of the
// server that serves its primary (and, when known, its replicas).
type location struct {
	region   string
	start    []byte
	end      []byte // empty: to the end of the table
	addr     string
	seq      uint64
	replicas []replica // replica_id 1..N-1
}

type replica struct {
	region string
	addr   string
}

func (l *location) contains(row []byte) bool {
	return bytes.Compare(row, l.start) >= 0 && (len(l.end) == 0 || bytes.Compare(row, l.end) < 0)
}

// locationCache holds the known regions of each table, sorted by start row, like HBase's
// MetaCache. Entries are replaced by newer ones that overlap them and dropped on
// NOT_SERVING_REGION answers.
type locationCache struct {
	mu     sync.RWMutex
	tables map[string][]*location // by table, sorted by start
}

func newLocationCache() *locationCache {
	return &locationCache{tables: map[string][]*location{}}
}

// lookup returns the cached region that contains row, or nil.
func (c *locationCache) lookup(table string, row []byte) *location {
	c.mu.RLock()
	defer c.mu.RUnlock()
	locs := c.tables[table]
	// The last region whose start is <= row.
	i := sort.Search(len(locs), func(i int) bool { return bytes.Compare(locs[i].start, row) > 0 }) - 1
	if i < 0 || !locs[i].contains(row) {
		return nil
	}
	return locs[i]
}

// lookupBefore returns the cached region that holds the rows just before row (for reversed scans):
// the region whose end is row, or that contains row when row is inside it and not its start.
func (c *locationCache) lookupBefore(table string, row []byte) *location {
	c.mu.RLock()
	defer c.mu.RUnlock()
	locs := c.tables[table]
	for i := len(locs) - 1; i >= 0; i-- {
		l := locs[i]
		if len(row) == 0 { // before the end of the table: the last region
			if len(l.end) == 0 {
				return l
			}
			return nil
		}
		if bytes.Compare(l.start, row) < 0 && (len(l.end) == 0 || bytes.Compare(row, l.end) <= 0) {
			return l
		}
	}
	return nil
}

// add caches locations returned by the master, replacing every cached entry they overlap.
func (c *locationCache) add(table string, locs []*pb.RegionLocation) []*location {
	var primaries []*location
	byStart := map[string]*location{}
	for _, rl := range locs {
		ri := rl.GetRegion()
		addr := serverAddr(rl.GetServer())
		if ri.GetReplicaId() != 0 {
			continue
		}
		l := &location{region: ri.GetName(), start: ri.GetStartKey(), end: ri.GetEndKey(), addr: addr, seq: rl.GetSeq()}
		primaries = append(primaries, l)
		byStart[string(l.start)] = l
	}
	for _, rl := range locs {
		ri := rl.GetRegion()
		if ri.GetReplicaId() == 0 || rl.GetServer() == nil {
			continue
		}
		if p := byStart[string(ri.GetStartKey())]; p != nil {
			p.replicas = append(p.replicas, replica{region: ri.GetName(), addr: serverAddr(rl.GetServer())})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.tables[table]
	for _, l := range primaries {
		kept := cur[:0:0]
		for _, o := range cur {
			if !overlaps(o, l) {
				kept = append(kept, o)
			}
		}
		cur = append(kept, l)
	}
	sort.Slice(cur, func(i, j int) bool { return bytes.Compare(cur[i].start, cur[j].start) < 0 })
	c.tables[table] = cur
	return primaries
}

// pickLocation finds, among the primaries of one answer of the master, the region holding row (or,
// with before, the rows just before it), as the cache's lookups would.
func pickLocation(table string, locs []*location, row []byte, before bool) *location {
	sorted := slices.Clone(locs)
	sort.Slice(sorted, func(i, j int) bool { return bytes.Compare(sorted[i].start, sorted[j].start) < 0 })
	one := &locationCache{tables: map[string][]*location{table: sorted}}
	if before {
		return one.lookupBefore(table, row)
	}
	return one.lookup(table, row)
}

// moved records that region now lives at addr (a REGION_MOVED answer).
func (c *locationCache) moved(table, region, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, l := range c.tables[table] {
		if l.region == region {
			n := *l
			n.addr = addr
			c.tables[table][i] = &n
			return
		}
	}
}

// invalidate forgets a region (NOT_SERVING_REGION, a broken connection).
func (c *locationCache) invalidate(table, region string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	locs := c.tables[table]
	for i, l := range locs {
		if l.region == region {
			c.tables[table] = append(locs[:i:i], locs[i+1:]...)
			return
		}
	}
}

// invalidateServer forgets every region of a server (its connection broke).
func (c *locationCache) invalidateServer(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, locs := range c.tables {
		kept := locs[:0:0]
		for _, l := range locs {
			if l.addr != addr {
				kept = append(kept, l)
			}
		}
		c.tables[t] = kept
	}
}

// forgetTable drops a table's entries (after DDL that changes its regions).
func (c *locationCache) forgetTable(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tables, table)
}

func overlaps(a, b *location) bool {
	aEndsBeforeB := len(a.end) != 0 && bytes.Compare(a.end, b.start) <= 0
	bEndsBeforeA := len(b.end) != 0 && bytes.Compare(b.end, a.start) <= 0
	return !aEndsBeforeB && !bEndsBeforeA
}

func serverAddr(s *pb.ServerName) string {
	if s == nil || s.GetHost() == "" {
		return ""
	}
	return s.Address()
}
