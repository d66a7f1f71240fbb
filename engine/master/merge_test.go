package master_test

import (
	"context"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/storage"
)

func (c *cluster) merge(ctx context.Context, a, b string) (string, error) {
	resp, err := c.mc.MergeRegions(ctx, &pb.MergeRegionsRequest{Regions: []string{a, b}})
	return resp.GetMerged(), err
}

// The MERGE procedure against fake servers and real region directories: both parents (and
// their replicas) closed with a flush, resumed by a new master at its MERGE step, the merged
// region (and its replicas) assigned where the first parent was and reading every row of both,
// bad requests refused, a merge that cannot be done rolled back, and the parents' directories
// archived by the janitor once the merged region compacted.
func TestMergeProcedure(t *testing.T) {
	c := newCluster(t, 3, nil, func(cfg *master.Config) { cfg.JanitorInterval = 50 * time.Millisecond })
	rf := newRegionFiles(t, c.fs)
	if _, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t1", 2),
		SplitKeys: [][]byte{[]byte("row030"), []byte("row060")}}); err != nil {
		t.Fatal(err)
	}
	locs := primaryLocs(c.waitAllOpen("t1", 10*time.Second))
	if len(locs) != 3 {
		t.Fatalf("regions: %v", locs)
	}
	a, b, z := locs[0].GetRegion(), locs[1].GetRegion(), locs[2].GetRegion()
	aserver := layout.ServerName(locs[0].GetServer())

	// Bad requests, refused before anything moves.
	for _, tc := range []struct {
		x, y string
		code pb.ErrorCode
	}{
		{a.GetName(), z.GetName(), pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}, // not adjacent
		{a.GetName(), a.GetName(), pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{a.GetName(), layout.ReplicaName(b.GetRegionId(), 1), pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{a.GetName(), "00000000000000ff", pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	} {
		if _, err := c.merge(c.ctx(), tc.x, tc.y); errCode(err) != tc.code {
			t.Errorf("merge %s and %s: %v, want %v", tc.x, tc.y, err, tc.code)
		}
	}
	if _, err := c.mc.MergeRegions(c.ctx(), &pb.MergeRegionsRequest{Regions: []string{a.GetName()}}); errCode(err) != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Errorf("merge of one region: %v", err)
	}

	// The parents' directories do not exist yet: the MERGE step cannot read them and retries;
	// a new master resumes it once they are there.
	ctx, cancel := context.WithTimeout(c.ctx(), time.Second)
	_, err := c.merge(ctx, b.GetName(), a.GetName()) // either order
	cancel()
	if err != nil {
		t.Fatalf("merge still under way: %v", err)
	}
	c.waitFor("both parents MERGING", 10*time.Second, func() (bool, string) {
		n := 0
		for _, rit := range c.status().GetRegionsInTransition() {
			if (rit.GetRegion() == a.GetName() || rit.GetRegion() == b.GetName()) && rit.GetState() == pb.RegionState_REGION_STATE_MERGING {
				n++
			}
		}
		return n == 2, fmt.Sprint(c.status().GetRegionsInTransition())
	})
	c.m.Close()
	c.startMaster()
	rows := testRows(60)
	for _, p := range []*pb.RegionInfo{a, b} {
		rf.with(p, func(r *region.Region) {
			for _, row := range rows {
				if info := r.Info(); !info.ContainsRow([]byte(row)) {
					continue
				}
				if err := r.Mutate(region.NewMutation([]byte(row)).Put([]byte("f"), []byte("q"), 1, []byte(row))); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	locs = primaryLocs(c.waitAllOpen("t1", 10*time.Second))
	if len(locs) != 2 || len(locs[0].GetRegion().GetStartKey()) != 0 || string(locs[0].GetRegion().GetEndKey()) != "row060" ||
		locs[1].GetRegion().GetName() != z.GetName() {
		t.Fatalf("after the merge: %v", locs)
	}
	merged := locs[0].GetRegion()
	if got := layout.ServerName(locs[0].GetServer()); got != aserver {
		t.Errorf("merged region opened on %s, want the first parent's server %s", got, aserver)
	}
	if n := len(c.regions("t1")); n != 4 {
		t.Errorf("%d regions with replicas after the merge, want 4 (2 primaries × 2)", n)
	}
	var closed []string
	for _, s := range c.servers {
		for _, call := range s.Calls() {
			if !call.Open && call.Flush {
				closed = append(closed, call.Region)
			}
		}
	}
	for _, p := range []string{a.GetName(), b.GetName()} {
		if !slices.Contains(closed, p) {
			t.Errorf("parent %s was not closed with a flush (closes: %v)", p, closed)
		}
	}
	// The merged region reads every row of both parents, through links, then compacts them
	// into its own files.
	rf.with(merged, func(r *region.Region) {
		if got := rf.rows(r); !slices.Equal(got, rows) || !r.HasReferences() {
			t.Errorf("merged region rows %v (references %v)", got, r.HasReferences())
		}
	})
	// It cannot merge again before it compacted.
	if _, err := c.merge(c.ctx(), merged.GetName(), z.GetName()); errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Errorf("merge of a region that still reads its parents' files: %v, want FAILED_PRECONDITION", err)
	}
	rf.with(merged, func(r *region.Region) {
		if _, err := r.Compact(true); err != nil {
			t.Fatal(err)
		}
	})
	c.waitFor("the parents archived", 10*time.Second, func() (bool, string) {
		dirs, err := c.fs.List("data/default/t1")
		if err != nil {
			return false, err.Error()
		}
		return !slices.Contains(dirs, a.GetName()) && !slices.Contains(dirs, b.GetName()), fmt.Sprint(dirs)
	})
	for _, p := range []string{a.GetName(), b.GetName()} {
		if ok, err := storage.Exists(c.fs, path.Join("archive/data/default/t1", p, ".regioninfo")); err != nil || !ok {
			t.Errorf("parent %s not in archive/: %v %v", p, ok, err)
		}
	}
	rf.with(merged, func(r *region.Region) {
		if got := rf.rows(r); !slices.Equal(got, rows) || r.HasReferences() {
			t.Errorf("merged region after the cleanup: rows %v (references %v)", got, r.HasReferences())
		}
	})

	// A merge that cannot be done (the other region's directory holds references, as a split
	// daughter's does) is rolled back: both regions reopen.
	rf.with(z, func(r *region.Region) {
		if err := r.Mutate(region.NewMutation([]byte("row070")).Put([]byte("f"), []byte("q"), 1, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	})
	zfiles := region.Storage{FS: c.fs}
	_, refs, err := region.RegionFiles(zfiles, layout.StorageInfo(z))
	if err != nil {
		t.Fatal(err)
	}
	if err := region.CreateLinked(zfiles, region.TableDescriptor{Namespace: "default", Name: "t1", Families: []region.Family{{Name: "f"}}},
		layout.StorageInfo(z), refs); err != nil {
		t.Fatal(err)
	}
	_, err = c.merge(c.ctx(), merged.GetName(), z.GetName())
	if errCode(err) != pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION {
		t.Fatalf("merge with a region holding references: %v, want FAILED_PRECONDITION (rolled back)", err)
	}
	locs = primaryLocs(c.waitAllOpen("t1", 10*time.Second))
	if len(locs) != 2 || locs[0].GetRegion().GetName() != merged.GetName() || locs[1].GetRegion().GetName() != z.GetName() {
		t.Fatalf("after the rollback: %v", locs)
	}
}

// A truncate of a table whose merged region still reads its parents' files archives the parents'
// directories too: the merge janitor would have, from the merged region's row, which the
// truncate deletes (they stayed under data/ until the table was dropped).
func TestTruncateArchivesMergedParents(t *testing.T) {
	c := newCluster(t, 1, nil, nil)
	rf := newRegionFiles(t, c.fs)
	if _, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: descriptor("t1", 1),
		SplitKeys: [][]byte{[]byte("row030")}}); err != nil {
		t.Fatal(err)
	}
	locs := primaryLocs(c.waitAllOpen("t1", 10*time.Second))
	a, b := locs[0].GetRegion(), locs[1].GetRegion()
	for _, p := range []*pb.RegionInfo{a, b} {
		rf.with(p, func(r *region.Region) {
			for _, row := range [][]byte{[]byte("row010"), []byte("row040")} {
				if info := r.Info(); !info.ContainsRow(row) {
					continue
				}
				if err := r.Mutate(region.NewMutation(row).Put([]byte("f"), []byte("q"), 1, row)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := c.merge(c.ctx(), a.GetName(), b.GetName()); err != nil {
		t.Fatal(err)
	}
	if locs := primaryLocs(c.waitAllOpen("t1", 10*time.Second)); len(locs) != 1 {
		t.Fatalf("after the merge: %v", locs)
	}
	if _, err := c.mc.DisableTable(c.ctx(), &pb.TableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mc.TruncateTable(c.ctx(), &pb.TruncateTableRequest{Table: tableName("t1")}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the merged parents archived", 10*time.Second, func() (bool, string) {
		var left []string
		for _, p := range []*pb.RegionInfo{a, b} {
			if ok, _ := storage.Exists(c.fs, layout.RegionDir(p)); ok {
				left = append(left, p.GetName())
			}
		}
		return len(left) == 0, fmt.Sprint("still under data/: ", left)
	})
	for _, p := range []*pb.RegionInfo{a, b} {
		if ok, _ := storage.Exists(c.fs, path.Join("archive", layout.RegionDir(p))); !ok {
			t.Errorf("parent %s is not in archive/", p.GetName())
		}
	}
}
