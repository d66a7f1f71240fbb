//go:build linux

package region

import (
	"fmt"
	"testing"
)

// TestSetCompaction: compaction settings changed while the region is open take effect at the
// next selection, and settings no region can use are refused.
func TestSetCompaction(t *testing.T) {
	e := newEnv(t, fam("f"))
	for i := range 2 {
		if err := e.r.Mutate(NewMutation(fmt.Appendf(nil, "r%d", i)).Put([]byte("f"), []byte("q"), 1, []byte("v"))); err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := e.r.Compact(false); err != nil || res.FilesIn != 0 {
		t.Fatalf("a minor compaction of 2 files with a minimum of 3: %+v, %v", res, err)
	}
	cc := e.r.compactionConfig()
	cc.MinFiles = 2
	if err := e.r.SetCompaction(cc); err != nil {
		t.Fatal(err)
	}
	if res, err := e.r.Compact(false); err != nil || res.FilesIn != 2 || res.FilesOut != 1 {
		t.Fatalf("a minor compaction of 2 files with a minimum of 2: %+v, %v", res, err)
	}
	for _, bad := range []CompactionConfig{{MinFiles: 1, MaxFiles: 10, Ratio: 1}, {MinFiles: 5, MaxFiles: 4, Ratio: 1}, {MinFiles: 3, MaxFiles: 10, Ratio: 0},
		{MinFiles: 3, MaxFiles: 10, Ratio: 1, ThroughputLimit: -1}} {
		if err := e.r.SetCompaction(bad); err == nil {
			t.Errorf("compaction settings %+v accepted", bad)
		}
	}
	if got := e.r.compactionConfig(); got.MinFiles != 2 {
		t.Errorf("a refused change changed the settings: %+v", got)
	}
}
