package regionserver

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/storage"
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

// A commit delay the WAL cannot honour is refused with the flags to change, before any WAL opens;
// the delay --wal-commit-delay=auto gives a directory tree (leader commit, one slot) is taken.
func TestConfigRefusesACommitDelayItCannotHonour(t *testing.T) {
	fs, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	delay := 200 * time.Microsecond
	for _, c := range []struct {
		cfg  Config
		want string // "" for accepted
	}{
		{Config{FS: fs, WALCommitDelay: delay}, ""},
		{Config{FS: fs, WALCommitDelay: delay, WALGroups: 3}, ""},
		{Config{FS: fs, WALCommitDelay: delay, WALGroupCommit: wal.SyncerCommit}, "--wal-group-commit leader"},
		{Config{FS: fs, WALCommitDelay: delay, WALSyncSlots: 2}, "--wal-sync-slots 1"},
		{Config{FS: fs, WALGroupCommit: wal.SyncerCommit, WALSyncSlots: 2}, ""},
		{Config{Bucket: newDirBucket(t), WALCommitDelay: 2 * time.Millisecond, WALSyncSlots: 2}, "one PUT in flight"},
	} {
		cfg := c.cfg
		cfg.Masters = []string{"127.0.0.1:1"}
		err := cfg.fill()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("delay %v, mode %v, %d slots, %d groups: %v", c.cfg.WALCommitDelay, c.cfg.WALGroupCommit, c.cfg.WALSyncSlots, c.cfg.WALGroups, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("delay %v, mode %v, %d slots: %v, want an error naming %q", c.cfg.WALCommitDelay, c.cfg.WALGroupCommit, c.cfg.WALSyncSlots, err, c.want)
		}
	}
}
