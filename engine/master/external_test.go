package master_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/storage"
)

// The external addresses are set on the active master, refused when malformed, answered by a
// standby once it has reported, and kept over a failover (they are in the catalog).
func TestExternalAddresses(t *testing.T) {
	lease := newMemLease()
	fs := storage.NewMem()
	cfg := testConfig(fs)
	cfg.StandbyReportInterval = 50 * time.Millisecond
	cfg.Version = "v1.4.0"
	start := electedStarter(t, cfg, lease.elector)
	ctx1, kill1 := context.WithCancel(context.Background())
	defer kill1()
	m1 := start(ctx1)
	if err := m1.WaitActive(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	m2 := start(context.Background())
	c := &cluster{t: t, fs: fs, cfg: cfg, m: m1}
	active, standby := pb.NewMasterClient(dial(t, m1.Addr)), pb.NewMasterClient(dial(t, m2.Addr))

	if resp, err := active.GetExternalAddresses(c.ctx(), &pb.GetExternalAddressesRequest{}); err != nil || len(resp.GetAddresses()) != 0 {
		t.Fatalf("before any is set: %v, %v; want none", resp.GetAddresses(), err)
	}
	for _, bad := range []map[string]string{
		{"rs-0:16020": "no-port"},
		{"rs-0:16020": "10.0.0.1:0"},
		{":16020": "10.0.0.1:30001"},
		{"rs-0:16020": "10.0.0.1:70000"},
	} {
		_, err := active.SetExternalAddresses(c.ctx(), &pb.SetExternalAddressesRequest{Addresses: bad})
		if d, _ := pb.DetailOf(err); d.GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
			t.Errorf("SetExternalAddresses(%v): %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	want := map[string]string{m1.Addr: "203.0.113.7:30001", m2.Addr: "203.0.113.7:30002", "rs-0.rs.db.svc:16020": "203.0.113.7:30003"}
	if _, err := standby.SetExternalAddresses(c.ctx(), &pb.SetExternalAddressesRequest{Addresses: want}); func() bool {
		d, _ := pb.DetailOf(err)
		return d.GetCode() != pb.ErrorCode_ERROR_CODE_NOT_ACTIVE_MASTER
	}() {
		t.Errorf("SetExternalAddresses on the standby: %v, want NOT_ACTIVE_MASTER", err)
	}
	if _, err := active.SetExternalAddresses(c.ctx(), &pb.SetExternalAddressesRequest{Addresses: want}); err != nil {
		t.Fatal(err)
	}
	got := func(mc pb.MasterClient) func() (bool, string) {
		return func() (bool, string) {
			resp, err := mc.GetExternalAddresses(c.ctx(), &pb.GetExternalAddressesRequest{})
			return err == nil && maps.Equal(resp.GetAddresses(), want), fmt.Sprint(resp.GetAddresses(), err)
		}
	}
	c.waitFor("the active master to answer them", 5*time.Second, got(active))
	c.waitFor("the standby to answer them", 10*time.Second, got(standby))
	// The standby's report carries its version too.
	if st, err := active.ClusterStatus(c.ctx(), &pb.ClusterStatusRequest{}); err != nil || st.GetMasterVersions()[m2.Addr] != "v1.4.0" || st.GetMasterVersions()[m1.Addr] != "v1.4.0" {
		t.Errorf("master versions %v (%v)", st.GetMasterVersions(), err)
	}

	kill1()
	<-m1.Done()
	if err := m2.WaitActive(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.m = m2
	c.waitFor("the new active master to answer them from its catalog", 10*time.Second, got(standby))
	// An empty map removes them.
	if _, err := standby.SetExternalAddresses(c.ctx(), &pb.SetExternalAddressesRequest{}); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{}
	c.waitFor("none after they were removed", 5*time.Second, got(standby))
}
