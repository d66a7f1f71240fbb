package master_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
	"github.com/cellstore/cellstore/engine/storage"
)

// gatedBucket holds every write of a store file (archive/...) until the gate opens or the
// writer's context ends: a copy that is under way when its master goes, at a chosen moment (a real
// store is slow, but not on cue).
type gatedBucket struct {
	storage.Bucket
	gate chan struct{}
}

func (g gatedBucket) Put(ctx context.Context, key string, body []byte, cond storage.Condition) (string, error) {
	if strings.HasPrefix(key, "archive/") {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Bucket.Put(ctx, key, body, cond)
}

// A backup copy under way when the active master goes is started again by the next master when
// asked (the operator asks again), and completes: backups keep working across a failover.
func TestExportSurvivesAMasterFailover(t *testing.T) {
	fs := storage.NewMem()
	dir, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	backup := gatedBucket{Bucket: dir, gate: make(chan struct{})}
	// A snapshot of two files, as a region's flushes leave them.
	st := region.Storage{FS: fs}
	files := []string{"data/default/t/0000000000000001/f/a", "data/default/t/0000000000000001/f/b"}
	for _, p := range files {
		if _, err := st.WriteStream(context.Background(), p, strings.NewReader(strings.Repeat(p, 1000))); err != nil {
			t.Fatal(err)
		}
	}
	man := &pb.SnapshotManifest{Name: "s1", Table: &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "t"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}},
		Regions: []*pb.SnapshotRegion{{RegionId: 1, Files: []*pb.SnapshotFile{{Family: "f", Path: files[0]}, {Family: "f", Path: files[1]}}}}}
	if err := snapshot.Write(st, man); err != nil {
		t.Fatal(err)
	}

	lease := newMemLease()
	cfg := testConfig(fs)
	cfg.Backup = backup
	start := electedStarter(t, cfg, lease.elector)
	ctx1, kill1 := context.WithCancel(context.Background())
	defer kill1()
	m1 := start(ctx1)
	if err := m1.WaitActive(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	m2 := start(context.Background())
	export := func(addr string) (*pb.CopySnapshotResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pb.NewMasterClient(dial(t, addr)).ExportSnapshot(ctx, &pb.CopySnapshotRequest{Name: "s1"})
	}
	resp, err := export(m1.Addr)
	if err != nil || resp.GetState() != pb.CopyState_COPY_STATE_RUNNING {
		t.Fatalf("export on the first master: %v %v", resp, err)
	}
	kill1() // the active master goes while its copy waits on the store
	if err := m2.WaitActive(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	close(backup.gate)
	c := &cluster{t: t, fs: fs, cfg: cfg, m: m2}
	var last *pb.CopySnapshotResponse
	c.waitFor("the export done on the new master", 20*time.Second, func() (bool, string) {
		last, err = export(m2.Addr)
		if last.GetState() == pb.CopyState_COPY_STATE_FAILED {
			t.Fatalf("the export failed on the new master: %s", last.GetError())
		}
		return err == nil && last.GetState() == pb.CopyState_COPY_STATE_DONE, fmt.Sprint(last, err)
	})
	if last.GetFilesTotal() != 2 {
		t.Fatalf("export: %v", last)
	}
	got, err := snapshot.Read(region.Storage{Bucket: dir}, snapshot.ManifestKey("s1"))
	if err != nil || got.GetName() != "s1" {
		t.Fatalf("the snapshot at the backup location: %v %v", got, err)
	}
	for _, p := range files {
		if _, err := (region.Storage{Bucket: dir}).ReadObject("archive/" + p); err != nil {
			t.Fatalf("%s at the backup location: %v", p, err)
		}
	}
}
