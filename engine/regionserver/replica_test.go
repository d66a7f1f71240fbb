package regionserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/region"
)

// regionOn is the open region named name on server (nil if not there).
func (c *cluster) regionOn(server, name string) *region.Region {
	for _, s := range c.servers {
		if s.Name() != server {
			continue
		}
		if v, ok := s.regions.Load(name); ok {
			or := v.(*onlineRegion)
			if or.state.Load() == stateOpen {
				return or.r.Load()
			}
		}
	}
	return nil
}

// dumpRegion is every visible cell of a region as "row/f:q=value".
func dumpRegion(r *region.Region) ([]string, error) {
	sc, err := r.Scanner(&region.Scan{})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var out []string
	for {
		b, err := sc.Next()
		if err != nil {
			return nil, err
		}
		for _, res := range b.Results {
			for _, kv := range res.Cells {
				out = append(out, fmt.Sprintf("%s/%s:%s=%s", kv.Row(), kv.Family(), kv.Qualifier(), kv.Value))
			}
		}
		if !b.More {
			return out, nil
		}
	}
}

// waitConverged waits until every replica of the table shows exactly what its primary shows.
func (c *cluster) waitConverged(table string, want int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		locs := c.waitOpen(table, want, "", timeout)
		primaries := map[uint64]*region.Region{}
		for _, l := range locs {
			if l.GetRegion().GetReplicaId() == 0 {
				primaries[l.GetRegion().GetRegionId()] = c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
			}
		}
		why = ""
		for _, l := range locs {
			if l.GetRegion().GetReplicaId() == 0 {
				continue
			}
			p, r := primaries[l.GetRegion().GetRegionId()], c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
			if p == nil || r == nil {
				why = "a region is not open yet"
				break
			}
			pd, err1 := dumpRegion(p)
			rd, err2 := dumpRegion(r)
			if err1 != nil || err2 != nil {
				why = fmt.Sprintf("reading: %v %v", err1, err2)
				break
			}
			if !slices.Equal(pd, rd) {
				why = fmt.Sprintf("replica %s shows %d cells, its primary %d", l.GetRegion().GetName(), len(rd), len(pd))
				break
			}
		}
		if why == "" {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling state, not synchronising on time
	}
	c.t.Fatalf("replicas of %s did not converge in %v: %s", table, timeout, why)
}

// Read replicas end to end on real servers over real sockets: placement, replication through
// flushes and compactions, writes refused, and TIMELINE reads that keep answering (stale) while the
// primary's server is crashed and its regions recovered; after that the replicas follow the new
// primaries.
func TestReadReplicas(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "rt"}, RegionReplication: 2,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 1}}}
	if _, err := c.client.CreateTable(ctx, td, [][]byte{rowKey(500)}); err != nil {
		t.Fatal(err)
	}
	locs := c.waitOpen("rt", 4, "", 30*time.Second)
	servers := map[uint64]map[string]bool{}
	for _, l := range locs {
		id := l.GetRegion().GetRegionId()
		if servers[id] == nil {
			servers[id] = map[string]bool{}
		}
		servers[id][layout.ServerName(l.GetServer())] = true
	}
	for id, s := range servers {
		if len(s) != 2 {
			t.Fatalf("region %x: primary and replica share a server: %v", id, s)
		}
	}

	tbl := c.client.Table("rt")
	put := func(i int, v string) {
		t.Helper()
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		put(i, "v1")
	}
	c.waitConverged("rt", 4, 20*time.Second)

	// Flushes and a compaction on the primaries reach the replicas too.
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() != 0 {
			continue
		}
		p := c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
		if _, err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			if i%3 == 0 {
				put(i, "v2")
			}
		}
		if _, err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Compact(true); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged("rt", 4, 20*time.Second)

	// A replica refuses writes with a clear error.
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 {
			continue
		}
		r := c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
		if err := r.Put(region.NewMutation(rowKey(1)).Put([]byte("f"), []byte("q"), 1, []byte("x"))); err == nil {
			t.Fatal("a replica accepted a write")
		}
		break
	}

	// TIMELINE reads of the first region while its primary's server crashes.
	victimName := ""
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 && len(l.GetRegion().GetStartKey()) == 0 {
			victimName = layout.ServerName(l.GetServer())
		}
	}
	var victim *Server
	for _, s := range c.servers {
		if s.Name() == victimName {
			victim = s
		}
	}
	var reads, stale, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(500)
				res, err := tbl.Get(ctx, &pb.Get{Row: rowKey(i), Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
				reads.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case len(res.Cells) != 1:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("row %d: %d cells", i, len(res.Cells)))
				case res.Stale:
					stale.Add(1)
				}
			}
		}()
	}
	var scans, staleScans atomic.Int64
	wg.Add(1)
	go func() { // and TIMELINE scans of it
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sc := tbl.Scan(ctx, &pb.Scan{StartRow: rowKey(0), StopRow: rowKey(500), Caching: 50, Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
			n, wasStale := 0, false
			for {
				r, ok := sc.Next()
				if !ok {
					break
				}
				n++
				wasStale = wasStale || r.Stale
			}
			scans.Add(1)
			if sc.Err() != nil || n != 500 {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("TIMELINE scan: %d rows, %v", n, sc.Err()))
			}
			if wasStale {
				staleScans.Add(1)
			}
		}
	}()
	for reads.Load() < 200 { // the readers are running
		time.Sleep(5 * time.Millisecond)
	}
	staleBefore := stale.Load()
	t.Logf("before the crash: scans %d, stale %d", scans.Load(), staleScans.Load())
	killed := time.Now()
	victim.Abort()
	c.waitOpen("rt", 4, victimName, 60*time.Second)
	recovered := time.Since(killed)
	close(stop)
	wg.Wait()
	t.Logf("TIMELINE gets: %d, stale %d (%d before the crash); scans %d, stale %d; failed %d; regions recovered %v after the crash",
		reads.Load(), stale.Load(), staleBefore, scans.Load(), staleScans.Load(), failures.Load(), recovered)
	if failures.Load() != 0 {
		t.Fatalf("%d TIMELINE reads failed while the primary's server was down: %v", failures.Load(), firstErr.Load())
	}
	if stale.Load() == staleBefore {
		t.Fatal("no read was answered by a replica while the primary was down")
	}

	// The new primaries ship to the replicas again.
	for i := range 1000 {
		if i%5 == 0 {
			put(i, "v3")
		}
	}
	c.waitConverged("rt", 4, 30*time.Second)
	final := c.waitOpen("rt", 4, victimName, 10*time.Second)
	per := map[uint64]map[string]bool{}
	for _, l := range final {
		id := l.GetRegion().GetRegionId()
		if per[id] == nil {
			per[id] = map[string]bool{}
		}
		s := layout.ServerName(l.GetServer())
		if per[id][s] {
			t.Fatalf("after recovery two replicas of region %x are on %s", id, s)
		}
		per[id][s] = true
	}
}

// Raising a table's REGION_REPLICATION while its primaries are open: the new replicas ask the
// primaries for their changes and converge; lowering it again stops the primaries' shippers.
func TestReplicationChangedOnOpenTable(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "alt", nil)
	tbl := c.client.Table("alt")
	for i := range 300 {
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	modify := func(n int32) {
		t.Helper()
		td := &pb.TableDescriptor{Name: client.ParseTableName("alt"), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}},
			RegionReplication: n}
		if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.ModifyTable(ctx, &pb.ModifyTableRequest{Table: td})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	modify(2)
	c.waitOpen("alt", 2, "", 30*time.Second)
	c.waitConverged("alt", 2, 30*time.Second)
	for i := 300; i < 400; i++ {
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged("alt", 2, 30*time.Second)

	modify(1)
	c.waitOpen("alt", 1, "", 30*time.Second)
	shippers := func() int {
		n := 0
		for _, s := range c.servers {
			s.shippers.Range(func(_, _ any) bool { n++; return true })
		}
		return n
	}
	// The next write makes the shipper look for its replica, which the table no longer has.
	if err := tbl.Put(ctx, client.NewPut(rowKey(0)).Add("f", "q", cell.LatestTimestamp, []byte("w"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shipper to the removed replica stops", 20*time.Second, func() bool { return shippers() == 0 })
}

// A table's per-family flush policy reaches its regions, and their replicas follow per-family
// flushes over the wire (KIND_FLUSH_START_FAMILIES): the region flushing by size writes only its
// large family, and the replica, which froze only that family's memstore, keeps showing the
// small family's cells after the files commit.
func TestPerFamilyFlushReplicated(t *testing.T) {
	c := startCluster(t, 2)
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "pf"}, RegionReplication: 2,
		MemstoreFlushSize: 64 << 10,
		Attributes:        map[string]string{region.FlushLowerBoundAttribute: "16384"},
		Families:          []*pb.ColumnFamilyDescriptor{{Name: []byte("big"), MaxVersions: 1}, {Name: []byte("small"), MaxVersions: 1}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	locs := c.waitOpen("pf", 2, "", 30*time.Second)
	var primary, replica *region.Region
	for _, l := range locs {
		r := c.regionOn(layout.ServerName(l.GetServer()), l.GetRegion().GetName())
		if l.GetRegion().GetReplicaId() == 0 {
			primary = r
		} else {
			replica = r
		}
	}
	if primary == nil || replica == nil {
		t.Fatal("the primary or the replica is not open")
	}
	// The replica's session starts with a full flush: let it start before the writes.
	for deadline := time.Now().Add(20 * time.Second); replica.ReplicaState().Session == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the replica's session did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling state
	}
	tbl := c.client.Table("pf")
	value := make([]byte, 1000)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; primary.StoreFileCount()["big"] == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no flush after %d rows: %v", i, primary.StoreFileCount())
		}
		p := client.NewPut(rowKey(i)).Add("big", "q", cell.LatestTimestamp, value).Add("small", "q", cell.LatestTimestamp, []byte("s"))
		if err := tbl.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged("pf", 2, 20*time.Second)
	if n := primary.StoreFileCount(); n["small"] != 0 {
		t.Fatalf("the flush by size wrote the small family too: %v", n)
	}
	if primary.MemstoreStats().Cells == 0 {
		t.Fatal("the small family's cells are not in memory")
	}
	if _, err := primary.Flush(); err != nil {
		t.Fatal(err)
	}
	c.waitConverged("pf", 2, 20*time.Second)
	if n := primary.StoreFileCount(); n["small"] != 1 {
		t.Fatalf("Flush did not write the small family: %v", n)
	}

	// A flush policy the master does not know, or a bad lower bound, is refused at creation.
	for _, attrs := range []map[string]string{
		{region.FlushPolicyAttribute: "com.example.MyFlushPolicy"},
		{region.FlushLowerBoundAttribute: "16MB"},
	} {
		td := &pb.TableDescriptor{Name: client.ParseTableName("bad"), Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}, Attributes: attrs}
		_, err := c.client.CreateTable(ctx, td, nil)
		wantCode(t, fmt.Sprint("create with ", attrs), err, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	}
}
