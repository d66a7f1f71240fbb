package master

import (
	"context"
	"testing"
	"time"

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
