package master

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/master"
	"github.com/cellstore/cellstore/engine/master/mastertest"
	"github.com/cellstore/cellstore/engine/storage"
)

// The operator's engine client against a real in-process master (fake region servers).
func TestEngineClientAgainstMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := mastertest.StartMaster(ctx, master.Config{FS: storage.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var servers []*mastertest.FakeServer
	for range 2 {
		s, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{m.Addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		servers = append(servers, s)
	}
	c, err := client.New(client.Config{Masters: []string{m.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	ec := NewEngineClient(c)
	defer ec.Close()

	var st *ClusterStatus
	for deadline := time.Now().Add(20 * time.Second); ; {
		st, err = ec.ClusterStatus(ctx)
		if err == nil && len(st.Servers) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers never showed up: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.ActiveMaster == "" {
		t.Error("no active master in the status")
	}
	name := servers[0].Name()
	if _, ok := st.Server(name); !ok {
		t.Fatalf("server %s not in %+v", name, st.Servers)
	}
	if err := ec.Drain(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := ec.SetServerZone(ctx, name, "zone-a"); err != nil {
		t.Fatal(err)
	}
	st, _ = ec.ClusterStatus(ctx)
	if s, _ := st.Server(name); !s.Draining || s.Zone != "zone-a" || s.State != ServerOnline {
		t.Errorf("after drain and zone: %+v", s)
	}
	if err := ec.Undrain(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := ec.Balance(ctx); err != nil {
		t.Fatal(err)
	}

	quotas := []Quota{
		{Subject: Subject{User: "alice"}, Type: RequestNumber, Limit: 100, TimeUnit: Second},
		{Subject: Subject{Table: "ns:t"}, Type: WriteSize, Limit: 10 << 20, TimeUnit: Minute},
	}
	for _, q := range quotas {
		if err := ec.SetQuota(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ec.ListQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("quotas %+v", got)
	}
	for _, want := range quotas {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("quota %+v not listed back (got %+v)", want, got)
		}
	}
	if err := ec.RemoveQuota(ctx, quotas[0].Key()); err != nil {
		t.Fatal(err)
	}
	if got, _ := ec.ListQuotas(ctx); len(got) != 1 {
		t.Errorf("after removal: %+v", got)
	}
	if err := ec.SetDefaultRegionReplication(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st, _ := ec.ClusterStatus(ctx); st.DefaultRegionReplication != 2 {
		t.Errorf("default region replication %d, want 2", st.DefaultRegionReplication)
	}
}

// The operator's backup calls against a real in-process master with a backup location (fake
// region servers: the snapshots name no files, the calls and their answers are real).
func TestEngineClientBackups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	backup, err := storage.NewDirBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	m, err := mastertest.StartMaster(ctx, master.Config{FS: storage.NewMem(), Backup: backup, RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := mastertest.StartFakeServer(mastertest.FakeServerOptions{Masters: []string{m.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := client.New(client.Config{Masters: []string{m.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	ec := NewEngineClient(c)
	defer ec.Close()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "sales", Name: "orders"}, Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	tables, err := ec.ListTables(ctx)
	if err != nil || len(tables) != 1 || tables[0] != "sales:orders" {
		t.Fatalf("tables: %v %v", tables, err)
	}
	if err := ec.Snapshot(ctx, "sales:nope", "x"); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("snapshot of a missing table: %v", err)
	}
	for range 2 { // the second finds the first's snapshot: no error
		err := retry(ctx, func() error { return ec.Snapshot(ctx, "sales:orders", "b1.sales.orders") })
		if err != nil {
			t.Fatal(err)
		}
	}
	waitCopy := func(export bool) CopyStatus {
		for {
			st, err := ec.CopySnapshot(ctx, "b1.sales.orders", export)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == CopyDone {
				return st
			}
			if st.State == CopyFailed {
				t.Fatalf("copy failed: %s", st.Error)
			}
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			time.Sleep(10 * time.Millisecond) // polling the master's job
		}
	}
	waitCopy(true)
	for range 2 {
		if err := ec.DeleteSnapshot(ctx, "b1.sales.orders"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Master(ctx, func(ctx context.Context, mc pb.MasterClient) error {
		if _, err := mc.DisableTable(ctx, &pb.TableRequest{Table: td.Name}); err != nil {
			return err
		}
		_, err := mc.DeleteTable(ctx, &pb.TableRequest{Table: td.Name})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitCopy(false)
	if err := ec.RestoreSnapshot(ctx, "b1.sales.orders", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if tables, _ := ec.ListTables(ctx); len(tables) != 1 {
		t.Fatalf("after the restore: %v", tables)
	}
	for range 2 {
		if err := ec.DeleteBackup(ctx, "b1.sales.orders"); err != nil {
			t.Fatal(err)
		}
	}
}

// retry repeats a call the master answers "retry" (regions still opening) until it succeeds.
func retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if d, ok := pb.DetailOf(err); !ok || !d.GetRetryable() || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // the master said retry
	}
}
