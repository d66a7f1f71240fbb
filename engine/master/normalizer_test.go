package master_test

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/master"
)

// The region normalizer against fake servers reporting region sizes: with NORMALIZATION_ENABLED
// it splits a region over twice the table's mean size and merges neighbours whose sizes
// together stay under it (not those under the minimum merge size), only for tables that ask for
// it unless named, only with every region's size known; the switch turns the periodic runs off.
func TestNormalizer(t *testing.T) {
	c := newCluster(t, 2, nil, func(cfg *master.Config) {
		cfg.NormalizerInterval = -1 // only when asked
		cfg.NormalizerMergeMinAge = time.Nanosecond
	})
	td := descriptor("n1", 1)
	td.Attributes = map[string]string{"NORMALIZATION_ENABLED": "true"}
	if _, err := c.mc.CreateTable(c.ctx(), &pb.CreateTableRequest{Table: td,
		SplitKeys: [][]byte{[]byte("b"), []byte("c"), []byte("d"), []byte("e"), []byte("f")}}); err != nil {
		t.Fatal(err)
	}
	c.createTable("other", 3, 1) // no NORMALIZATION_ENABLED
	locs := primaryLocs(c.waitAllOpen("n1", 10*time.Second))
	c.waitAllOpen("other", 10*time.Second)
	if len(locs) != 6 {
		t.Fatalf("regions %v", locs)
	}
	normalize := func(tables ...string) *pb.NormalizeResponse {
		t.Helper()
		req := &pb.NormalizeRequest{}
		for _, tn := range tables {
			req.Tables = append(req.Tables, tableName(tn))
		}
		resp, err := c.mc.Normalize(c.ctx(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// No sizes reported yet: nothing is planned.
	if r := normalize(); r.GetSplits()+r.GetMerges() != 0 {
		t.Fatalf("normalizer without region sizes: %v", r)
	}
	const mib = 1 << 20
	// Mean 16.5 MiB: the 60 MiB region splits; 2 + 3 MiB merge; 20 + 2 is over the mean; 0.5 MiB
	// is under the minimum merge size (1 MiB), so it and 13.5 MiB do not merge.
	sizes := []int64{20 * mib, 2 * mib, 3 * mib, 60 * mib, mib / 2, 13*mib + mib/2}
	for i, l := range locs {
		c.server(layout.ServerName(l.GetServer())).SetRegionBytes(l.GetRegion().GetName(), sizes[i])
	}
	before := map[string]int64{}
	for _, s := range c.servers {
		before[s.Name()] = s.Heartbeats()
	}
	c.waitFor("heartbeats with the sizes", 10*time.Second, func() (bool, string) {
		for _, s := range c.servers {
			if s.Heartbeats() < before[s.Name()]+2 {
				return false, s.Name()
			}
		}
		return true, ""
	})
	if r := normalize("other"); r.GetSplits()+r.GetMerges() != 0 {
		t.Fatalf("a table without region sizes: %v", r)
	}
	if r := normalize(); r.GetSplits() != 1 || r.GetMerges() != 1 {
		t.Fatalf("normalize = %v, want 1 split and 1 merge", r)
	}
	want := map[string]bool{locs[3].GetRegion().GetName(): true, locs[1].GetRegion().GetName(): true, locs[2].GetRegion().GetName(): true}
	c.waitFor("the split and the merge under way", 10*time.Second, func() (bool, string) {
		got := map[string]bool{}
		for _, rit := range c.status().GetRegionsInTransition() {
			got[rit.GetRegion()] = true
		}
		for name := range want {
			if !got[name] {
				return false, fmt.Sprint(c.status().GetRegionsInTransition())
			}
		}
		return len(got) == len(want), fmt.Sprint(c.status().GetRegionsInTransition())
	})
	// The table has regions in transition: the next run leaves it alone.
	if r := normalize(); r.GetSplits()+r.GetMerges() != 0 {
		t.Fatalf("normalize with regions in transition: %v", r)
	}
	// The switch.
	if !c.status().GetNormalizerOn() {
		t.Fatal("the normalizer is off by default")
	}
	if prev, err := c.mc.SetNormalizerRunning(c.ctx(), &pb.SetBalancerRunningRequest{On: false}); err != nil || !prev.GetPrevious() {
		t.Fatalf("normalizer_switch false: %v %v", prev, err)
	}
	if c.status().GetNormalizerOn() {
		t.Fatal("the normalizer is still on")
	}
	if _, err := c.mc.Normalize(c.ctx(), &pb.NormalizeRequest{Tables: []*pb.TableName{tableName("nope")}}); errCode(err) != pb.ErrorCode_ERROR_CODE_TABLE_NOT_FOUND {
		t.Fatalf("normalize of a missing table: %v", err)
	}
}
