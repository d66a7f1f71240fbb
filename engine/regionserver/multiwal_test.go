package regionserver

import (
	"context"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/wal"
)

// Servers with three WAL groups (multiwal) on real sockets: regions' edits spread over the
// groups, and a crash is recovered from all of them — every acknowledged write is read back.
func TestMultiWALRecovery(t *testing.T) {
	c := startTunedCluster(t, 2, func(cfg *Config) { cfg.WALGroups = 3 })
	ctx := context.Background()
	var splits [][]byte
	for i := 1; i < 8; i++ {
		splits = append(splits, rowKey(i*100))
	}
	createTable(t, c, "mw", splits)
	c.waitOpen("mw", 8, "", 30*time.Second)
	tbl := c.client.Table("mw")
	const rows = 800
	for i := range rows {
		if err := tbl.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, fmt.Appendf(nil, "v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	victim := c.servers[0]
	s := victim.serverName()
	dir := path.Join("wal", layout.WALDirName(victim.Name(), s.GetStartCode()))
	used := 0
	for k := range 3 {
		names, err := c.fs.List(wal.GroupDir(dir, k))
		if err != nil {
			t.Fatalf("group %d of %s: %v", k, dir, err)
		}
		if len(names) > 0 {
			used++
		}
	}
	if used != 3 {
		t.Fatalf("%d of 3 WAL groups hold segments", used)
	}
	if st := victim.currentWAL().(*wal.MultiWAL).Stats(); st.Appends == 0 {
		t.Fatal("no appends counted")
	}
	name := victim.Name()
	victim.Abort() // no flush: everything it acknowledged is only in its WAL groups
	c.waitOpen("mw", 8, name, 60*time.Second)
	checkScan(t, tbl, rows, false)

	// Too many groups, and groups on object storage (its log already overlaps PUTs), are refused.
	for _, cfg := range []Config{{FS: c.fs, WALGroups: wal.MaxGroups + 1}, {Bucket: newDirBucket(t), WALGroups: 2}} {
		cfg.Masters = []string{"127.0.0.1:1"}
		if err := cfg.fill(); err == nil {
			t.Fatalf("%d WAL groups accepted (bucket: %v)", cfg.WALGroups, cfg.Bucket != nil)
		}
	}
}
