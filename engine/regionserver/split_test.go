package regionserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/storage"
)

// splitKey spreads ids over the key space (multiplying by an odd constant permutes uint32), so
// every region of a table gets writes.
func splitKey(id int) []byte { return fmt.Appendf(nil, "k%08x", uint32(id)*2654435761) }

func splitValue(id int) []byte { return fmt.Appendf(nil, "value-%d-%090d", id, id) }

// splitLoad writes batches of new rows, reads acknowledged rows back and scans the whole table,
// recording the first error any caller saw.
type splitLoad struct {
	tbl     *client.Table
	mu      sync.Mutex
	acked   []int
	next    atomic.Int64
	writes  atomic.Int64
	reads   atomic.Int64
	scans   atomic.Int64
	errMu   sync.Mutex
	errs    []string
	stop    chan struct{}
	stopped sync.WaitGroup
}

func (l *splitLoad) fail(format string, a ...any) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, a...))
	}
}

func (l *splitLoad) ackedCopy() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

func (l *splitLoad) run(writers, readers int) {
	l.stop = make(chan struct{})
	ctx := context.Background()
	running := func() bool {
		select {
		case <-l.stop:
			return false
		default:
			return true
		}
	}
	for range writers {
		l.stopped.Add(1)
		go func() {
			defer l.stopped.Done()
			for running() {
				var ops []client.BatchOp
				var ids []int
				for range 50 {
					id := int(l.next.Add(1))
					ids = append(ids, id)
					ops = append(ops, client.BatchOp{Mutation: client.NewPut(splitKey(id)).Add("f", "q", cell.LatestTimestamp, splitValue(id))})
				}
				ok := true
				for i, r := range l.tbl.Batch(ctx, ops) {
					if r.Err != nil {
						l.fail("put %d: %v", ids[i], r.Err)
						ok = false
					}
				}
				if ok {
					l.mu.Lock()
					l.acked = append(l.acked, ids...)
					l.mu.Unlock()
					l.writes.Add(int64(len(ids)))
				}
			}
		}()
	}
	for range readers {
		l.stopped.Add(1)
		go func() {
			defer l.stopped.Done()
			for running() {
				l.mu.Lock()
				n := len(l.acked)
				id := 0
				if n > 0 {
					id = l.acked[rand.IntN(n)]
				}
				l.mu.Unlock()
				if n == 0 {
					time.Sleep(time.Millisecond) // nothing acknowledged yet: the writers are starting
					continue
				}
				r, err := l.tbl.Get(ctx, &pb.Get{Row: splitKey(id)})
				switch {
				case err != nil:
					l.fail("get %d: %v", id, err)
				case len(r.Cells) != 1 || string(r.Cells[0].Value) != string(splitValue(id)):
					l.fail("get %d: acknowledged row read back as %v", id, r.Cells)
				}
				l.reads.Add(1)
			}
		}()
	}
	l.stopped.Add(1)
	go func() { // full scans: every row acknowledged before a scan starts is in it, in order, once
		defer l.stopped.Done()
		for running() {
			before := l.ackedCopy()
			seen := map[string]bool{}
			var last []byte
			sc := l.tbl.Scan(ctx, &pb.Scan{Caching: 500})
			for {
				r, ok := sc.Next()
				if !ok {
					break
				}
				if last != nil && string(r.Row) <= string(last) {
					l.fail("scan: row %q after %q", r.Row, last)
				}
				last = slices.Clone(r.Row)
				seen[string(r.Row)] = true
			}
			if err := sc.Err(); err != nil {
				l.fail("scan: %v", err)
			}
			sc.Close()
			missing := 0
			for _, id := range before {
				if !seen[string(splitKey(id))] {
					missing++
				}
			}
			if missing > 0 {
				l.fail("scan: %d of %d acknowledged rows missing", missing, len(before))
			}
			l.scans.Add(1)
		}
	}()
}

func (l *splitLoad) halt() {
	close(l.stop)
	l.stopped.Wait()
}

func (c *cluster) tableRegions(table string) []*pb.RegionLocation {
	c.t.Helper()
	locs, err := c.fetchRegions(table)
	if err != nil {
		c.t.Fatal(err)
	}
	return locs
}

func primaries(locs []*pb.RegionLocation) []*pb.RegionLocation {
	var out []*pb.RegionLocation
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 {
			out = append(out, l)
		}
	}
	return out
}

// Splits (asked for, then by the size policy), a move and a balance while writers, readers and
// full scans run: no error reaches a caller, every acknowledged row is read back, the daughters
// (and their replicas) open, compact their references away, and the janitor archives the parents.
func TestSplitsUnderLoad(t *testing.T) {
	c := startClusterWith(t, 3, nil, func(mc *master.Config) { mc.JanitorInterval = 200 * time.Millisecond })
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "s"}, RegionReplication: 2,
		MemstoreFlushSize: 256 << 10, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("s", 2, "", 30*time.Second)
	load := &splitLoad{tbl: c.client.Table("s")}
	load.run(2, 2)
	defer func() {
		select {
		case <-load.stop:
		default:
			load.halt()
		}
	}()
	waitForState(t, "3000 rows written", 60*time.Second, func() (bool, string) {
		return load.writes.Load() >= 3000, fmt.Sprint(load.writes.Load(), " rows")
	})

	// An asked-for split at the midpoint, with the rows still in the memstore (the close flushes).
	parent := primaries(c.tableRegions("s"))[0].GetRegion().GetName()
	start := time.Now()
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SplitRegion(ctx, &pb.SplitRegionRequest{Region: parent})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	locs := c.waitOpen("s", 4, "", 30*time.Second)
	t.Logf("SPLIT: region %s split in %v: %v", parent, time.Since(start).Round(time.Millisecond), describe(primaries(locs)))
	if p := primaries(locs); len(p) != 2 || len(p[0].GetRegion().GetStartKey()) != 0 ||
		string(p[0].GetRegion().GetEndKey()) != string(p[1].GetRegion().GetStartKey()) || len(p[1].GetRegion().GetEndKey()) != 0 {
		t.Fatalf("daughters do not cover the table: %s", describe(p))
	}
	// Bad splits: a replica, a key outside the region, an unknown region.
	for _, tc := range []struct {
		req  *pb.SplitRegionRequest
		code pb.ErrorCode
	}{
		{&pb.SplitRegionRequest{Region: layout.ReplicaName(locs[0].GetRegion().GetRegionId(), 1)}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{&pb.SplitRegionRequest{Region: primaries(locs)[1].GetRegion().GetName(), SplitKey: []byte("a")}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{&pb.SplitRegionRequest{Region: "0000000000000001"}, pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	} {
		err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
			_, err := m.SplitRegion(ctx, tc.req)
			return err
		})
		wantCode(t, fmt.Sprintf("split %v", tc.req), err, tc.code)
	}

	// A move under load, then the size policy: store files above 512 KiB split.
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.MoveRegion(ctx, &pb.MoveRegionRequest{Region: primaries(locs)[0].GetRegion().GetName()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetClusterConfig(ctx, &pb.SetClusterConfigRequest{Config: map[string]string{layout.ConfigRegionSplitSize: fmt.Sprint(512 << 10)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitForState(t, "the size policy splitting regions", 120*time.Second, func() (bool, string) {
		p := primaries(c.tableRegions("s"))
		return len(p) >= 5, fmt.Sprintf("%d rows written, regions %s", load.writes.Load(), describe(p))
	})
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.SetClusterConfig(ctx, &pb.SetClusterConfigRequest{Config: map[string]string{layout.ConfigSplitsEnabled: "false"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.client.Master(ctx, func(ctx context.Context, m pb.MasterClient) error {
		_, err := m.Balance(ctx, &pb.BalanceRequest{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitForState(t, "regions settled", 60*time.Second, func() (bool, string) {
		locs := c.tableRegions("s")
		for _, l := range locs {
			if l.GetState() != pb.RegionState_REGION_STATE_OPEN {
				return false, describe(locs)
			}
		}
		return len(locs) == 2*len(primaries(locs)), describe(locs)
	})
	load.halt()
	t.Logf("LOAD: %d rows written, %d gets, %d full scans during the splits", load.writes.Load(), load.reads.Load(), load.scans.Load())
	if len(load.errs) > 0 {
		t.Fatalf("errors reached callers:\n%s", fmt.Sprint(load.errs))
	}

	// Every acknowledged row, once, by a full scan and by gets.
	acked := load.ackedCopy()
	want := map[string]bool{}
	for _, id := range acked {
		want[string(splitKey(id))] = true
	}
	sc := load.tbl.Scan(ctx, &pb.Scan{Caching: 1000})
	n := 0
	for {
		r, ok := sc.Next()
		if !ok {
			break
		}
		if !want[string(r.Row)] {
			t.Fatalf("scan returned row %q, never acknowledged (or twice)", r.Row)
		}
		delete(want, string(r.Row))
		n++
	}
	if sc.Err() != nil || len(want) != 0 {
		t.Fatalf("final scan: %d rows, %d acknowledged rows missing, err %v", n, len(want), sc.Err())
	}
	var gets []client.BatchOp
	for _, id := range acked {
		gets = append(gets, client.BatchOp{Get: &pb.Get{Row: splitKey(id)}})
	}
	for i, r := range load.tbl.Batch(ctx, gets) {
		if r.Err != nil || r.Result == nil || len(r.Result.Cells) != 1 || string(r.Result.Cells[0].Value) != string(splitValue(acked[i])) {
			t.Fatalf("get of acknowledged row %d: %+v", acked[i], r)
		}
	}

	// The daughters compact their references away and the janitor archives every parent: the
	// table's directory holds exactly the current regions.
	waitForState(t, "split parents archived", 60*time.Second, func() (bool, string) {
		var names []string
		for _, l := range primaries(c.tableRegions("s")) {
			names = append(names, l.GetRegion().GetName())
		}
		dirs, err := c.fs.List("data/default/s")
		if err != nil {
			return false, err.Error()
		}
		dirs = slices.DeleteFunc(dirs, func(d string) bool { return d[0] == '.' })
		slices.Sort(names)
		slices.Sort(dirs)
		return slices.Equal(names, dirs), fmt.Sprintf("regions %v, directories %v", names, dirs)
	})
	if ok, err := storage.Exists(c.fs, path.Join("archive/data/default/s", parent)); err != nil || !ok {
		t.Errorf("the first parent %s is not in archive/: %v", parent, err)
	}
	t.Logf("regions at the end: %s", describe(primaries(c.tableRegions("s"))))
}

func describe(locs []*pb.RegionLocation) string {
	s := ""
	for _, l := range locs {
		s += fmt.Sprintf("[%s r%d %q-%q %s@%s] ", l.GetRegion().GetName(), l.GetRegion().GetReplicaId(), l.GetRegion().GetStartKey(),
			l.GetRegion().GetEndKey(), l.GetState().String()[13:], layout.ServerName(l.GetServer()))
	}
	return s
}
