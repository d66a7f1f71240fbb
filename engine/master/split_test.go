package master_test

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
	"github.com/cellstore/cellstore/engine/wal"
)

// regionFiles opens a region's directory on the shared storage the way a region server would
// (the fakes do not touch storage), for writing a parent's data and checking its daughters.
type regionFiles struct {
	t    *testing.T
	fs   storage.FS
	pool *offheap.ChunkPool
}

func newRegionFiles(t *testing.T, fs storage.FS) *regionFiles {
	b, err := offheap.NewBudget("memstore", 64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", ChunkSize: 256 << 10, SlabSize: 4 << 20,
		Hugepages: offheap.HugepagesOff, Budget: b, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &regionFiles{t: t, fs: fs, pool: p}
}

// with opens the region (creating it), runs fn and closes it with a flush.
func (rf *regionFiles) with(ri *pb.RegionInfo, fn func(r *region.Region)) {
	rf.t.Helper()
	rf.withClose(ri, fn, (*region.Region).Close)
}

// withClose is with, the region closed by closeFn (a move's close: CloseForMove).
func (rf *regionFiles) withClose(ri *pb.RegionInfo, fn func(r *region.Region), closeFn func(*region.Region) error) {
	rf.t.Helper()
	td := region.TableDescriptor{Namespace: ri.GetTable().GetNamespace(), Name: ri.GetTable().GetName(),
		Families: []region.Family{{Name: "f", BlockSize: 512}}}
	info := layout.StorageInfo(ri)
	if err := region.Create(rf.fs, td, info); err != nil {
		rf.t.Fatal(err)
	}
	w, err := wal.Open(wal.Options{FS: rf.fs, Dir: "wal/test-" + ri.GetName(), SyncInterval: time.Millisecond})
	if err != nil {
		rf.t.Fatal(err)
	}
	defer w.Close()
	r, err := region.Open(region.Config{FS: rf.fs, WAL: w, Pool: rf.pool, DisableAutoCompaction: true, DisableAutoFlush: true,
		Logger: slog.New(slog.DiscardHandler)}, info)
	if err != nil {
		rf.t.Fatal(err)
	}
	fn(r)
	if err := closeFn(r); err != nil {
		rf.t.Fatal(err)
	}
}

func (rf *regionFiles) rows(r *region.Region) []string {
	rf.t.Helper()
	sc, err := r.Scanner(&region.Scan{})
	if err != nil {
		rf.t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	for {
		b, err := sc.Next()
		if err != nil {
			rf.t.Fatal(err)
		}
		for _, res := range b.Results {
			out = append(out, string(res.Row))
		}
		if !b.More {
			return out
		}
	}
}

func testRows(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("row%03d", i))
	}
	return out
}

func (c *cluster) split(ctx context.Context, region string, key string) error {
	_, err := c.mc.SplitRegion(ctx, &pb.SplitRegionRequest{Region: region, SplitKey: []byte(key)})
	return err
}

func primaryLocs(locs []*pb.RegionLocation) []*pb.RegionLocation {
	return slices.DeleteFunc(slices.Clone(locs), func(l *pb.RegionLocation) bool { return l.GetRegion().GetReplicaId() != 0 })
}

// The SPLIT procedure against fake servers and real region directories: resumed by a new master
// at its SPLIT step, daughters (and their replicas) assigned with the parent's halves, a split
// that cannot be done rolled back, bad requests refused, the parent cleaned up by the janitor
// once the daughters compacted, and split parents removed with their table.
func TestSplitProcedure(t *testing.T) {
	c := newCluster(t, 3, nil, func(cfg *master.Config) { cfg.JanitorInterval = 50 * time.Millisecond })
	rf := newRegionFiles(t, c.fs)
	c.createTable("t1", 1, 2)
	locs := c.waitAllOpen("t1", 10*time.Second)
	parent := primaryLocs(locs)[0]
	pname, pserver := parent.GetRegion().GetName(), layout.ServerName(parent.GetServer())

	// The parent's directory does not exist yet: the SPLIT step cannot read it and retries.
	ctx, cancel := context.WithTimeout(c.ctx(), time.Second)
	err := c.split(ctx, pname, "row050")
	cancel()
	if err != nil {
		t.Fatalf("split still under way: %v", err)
	}
	c.waitFor("the parent SPLITTING", 10*time.Second, func() (bool, string) {
		for _, rit := range c.status().GetRegionsInTransition() {
			if rit.GetRegion() == pname && rit.GetState() == pb.RegionState_REGION_STATE_SPLITTING {
				return true, ""
			}
		}
		return false, fmt.Sprint(c.status().GetRegionsInTransition())
	})
	// A new master resumes the procedure (its split key is only in the catalog) once the parent's
	// files are there.
	c.m.Close()
	c.startMaster()
	rf.with(parent.GetRegion(), func(r *region.Region) {
		for _, row := range testRows(100) {
			if err := r.Mutate(region.NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), 1, []byte(row))); err != nil {
				t.Fatal(err)
			}
		}
	})
	locs = c.waitAllOpen("t1", 10*time.Second)
	daughters := primaryLocs(locs)
	if len(locs) != 4 || len(daughters) != 2 || string(daughters[0].GetRegion().GetEndKey()) != "row050" ||
		string(daughters[1].GetRegion().GetStartKey()) != "row050" || len(daughters[1].GetRegion().GetEndKey()) != 0 {
		t.Fatalf("after the split: %v", locs)
	}
	for _, d := range daughters {
		if got := layout.ServerName(d.GetServer()); got != pserver {
			t.Errorf("daughter %s opened on %s, want the parent's server %s", d.GetRegion().GetName(), got, pserver)
		}
	}
	var closedParent, closedReplica bool
	for _, s := range c.servers {
		for _, call := range s.Calls() {
			if !call.Open && call.Region == pname && call.Flush {
				closedParent = true
			}
			if !call.Open && call.Region == layout.ReplicaName(parent.GetRegion().GetRegionId(), 1) {
				closedReplica = true
			}
		}
	}
	if !closedParent || !closedReplica {
		t.Errorf("parent closed with a flush: %v, its replica closed: %v", closedParent, closedReplica)
	}
	// The split parent is not assigned again by a move (it would serve its pre-split rows beside
	// its daughters, and take writes they never see).
	opens := func() (n int) {
		for _, s := range c.servers {
			for _, call := range s.Calls() {
				if call.Open && call.Region == pname {
					n++
				}
			}
		}
		return n
	}
	before := opens()
	if _, err := c.mc.MoveRegion(c.ctx(), &pb.MoveRegionRequest{Region: pname}); errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Errorf("a move of the split parent: %v, want FAILED_PRECONDITION", err)
	}
	if after := opens(); after != before {
		t.Errorf("the split parent was opened %d times after its split", after-before)
	}
	// Each daughter reads its half of the parent's files.
	lo, hi := daughters[0].GetRegion(), daughters[1].GetRegion()
	rf.with(lo, func(r *region.Region) {
		if got := rf.rows(r); !slices.Equal(got, testRows(50)) || !r.HasReferences() {
			t.Errorf("bottom daughter rows %v (references %v)", got, r.HasReferences())
		}
		if _, err := r.Compact(true); err != nil {
			t.Fatal(err)
		}
	})
	rf.with(hi, func(r *region.Region) {
		if got := rf.rows(r); !slices.Equal(got, testRows(100)[50:]) {
			t.Errorf("top daughter rows %v", got)
		}
	})

	// The top daughter still holds references: its split is rolled back and it reopens where
	// it was, with its replica.
	err = c.split(c.ctx(), hi.GetName(), "")
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("split of a region with references: %v, want FAILED_PRECONDITION (rolled back)", err)
	}
	locs = c.waitAllOpen("t1", 10*time.Second)
	if p := primaryLocs(locs); len(locs) != 4 || p[1].GetRegion().GetName() != hi.GetName() || layout.ServerName(p[1].GetServer()) != pserver {
		t.Fatalf("after the rollback: %v", locs)
	}
	// Bad requests.
	for _, tc := range []struct {
		region, key string
		code        pb.ErrorCode
	}{
		{layout.ReplicaName(lo.GetRegionId(), 1), "", pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{lo.GetName(), "row070", pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}, // beyond its end
		{hi.GetName(), "row050", pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}, // its start key
		{"00000000000000ff", "", pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	} {
		if err := c.split(c.ctx(), tc.region, tc.key); errCode(err) != tc.code {
			t.Errorf("split %s at %q: %v, want %v", tc.region, tc.key, err, tc.code)
		}
	}

	// Once both daughters compacted their references away the janitor archives the parent.
	regionsBefore := c.status().GetRegions()
	rf.with(hi, func(r *region.Region) {
		if _, err := r.Compact(true); err != nil {
			t.Fatal(err)
		}
	})
	c.waitFor("the parent cleaned up", 10*time.Second, func() (bool, string) {
		n := c.status().GetRegions()
		return n == regionsBefore-1, fmt.Sprintf("%d regions in the catalog", n)
	})
	dirs, err := c.fs.List("data/default/t1")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	if want := []string{lo.GetName(), hi.GetName()}; !slices.Equal(dirs, want) {
		t.Errorf("table directory holds %v, want the daughters %v", dirs, want)
	}
	if ok, err := storage.Exists(c.fs, path.Join("archive/data/default/t1", pname, ".regioninfo")); err != nil || !ok {
		t.Errorf("parent not in archive/: %v %v", ok, err)
	}

	// A table dropped while it has a split parent leaves no row behind.
	c.createTable("t2", 1, 1)
	p2 := primaryLocs(c.waitAllOpen("t2", 10*time.Second))[0].GetRegion()
	rf.with(p2, func(r *region.Region) {
		if err := r.Mutate(region.NewMutation([]byte("a")).Put([]byte("f"), []byte("q"), 1, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	})
	if err := c.split(c.ctx(), p2.GetName(), "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.DeleteTable(c.ctx(), &pb.TableRequest{Table: tableName("t2")}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("t2's rows gone", 10*time.Second, func() (bool, string) {
		n := c.status().GetRegions()
		return n == regionsBefore-1, fmt.Sprintf("%d regions in the catalog", n)
	})
}

// A split whose storage step wrote one daughter, failed, and on its retry found the split
// impossible is rolled back, and the daughter directory it wrote goes to archive/: no catalog row
// names it, so nothing else would ever remove it.
func TestRolledBackSplitArchivesItsDaughters(t *testing.T) {
	mem := storage.NewMem()
	ffs := faultfs.New(mem)
	c := newClusterOn(t, ffs, 1, nil)
	rf := newRegionFiles(t, ffs)
	c.createTable("t1", 1, 1)
	parent := primaryLocs(c.waitAllOpen("t1", 10*time.Second))[0].GetRegion()
	rf.with(parent, func(r *region.Region) {
		for _, row := range testRows(100) {
			if err := r.Mutate(region.NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), 1, []byte(row))); err != nil {
				t.Fatal(err)
			}
		}
	})
	pdir := layout.RegionDir(parent)
	tdir := path.Dir(pdir)
	// The second daughter's manifest fails, once; by then edits to replay appeared in the parent
	// (as a dead server's log split writes them), so the retry finds the split impossible.
	manifests := tdir + "/*/MANIFEST.tmp"
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Path: manifests, Nth: 2, Action: faultfs.Call, Fn: func() {
		if err := mem.MkdirAll(path.Join(pdir, "recovered.edits")); err != nil {
			t.Error(err)
		}
		edits, err := wal.AppendEditRecord(wal.RecoveredEditsHeader(nil), &wal.Edit{Region: []byte(parent.GetName()), Seq: 1 << 40,
			Cells: []cell.KeyValue{cell.AppendKeyValue(nil, []byte("row001"), []byte("f"), []byte("q"), 1, cell.Put, []byte("v"))}})
		if err == nil {
			err = storage.WriteFile(mem, path.Join(pdir, "recovered.edits", wal.RecoveredEditsName(1)), edits)
		}
		if err != nil {
			t.Error(err)
		}
	}})
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpSync, Path: manifests, Nth: 2, Action: faultfs.Fail})
	if err := c.split(c.ctx(), parent.GetName(), "row050"); errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("split that became impossible: %v, want FAILED_PRECONDITION (rolled back)", err)
	}
	written := func(dir string) []string {
		names, err := mem.List(dir)
		if err != nil {
			return nil
		}
		var with []string
		for _, n := range names {
			if ok, _ := storage.Exists(mem, path.Join(dir, n, "MANIFEST")); ok && n != path.Base(pdir) {
				with = append(with, n)
			}
		}
		return with
	}
	c.waitFor("the daughter written by the failed attempt in archive/", 10*time.Second, func() (bool, string) {
		left, archived := written(tdir), written(path.Join("archive", tdir))
		return len(left) == 0 && len(archived) == 1, fmt.Sprintf("left in %s: %v; archived: %v", tdir, left, archived)
	})
}
