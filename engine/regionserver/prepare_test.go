package regionserver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// A region prepared for an open that never comes is released after its time; prepares beyond the
// bound are refused (the source then closes without one); a stopping server keeps nothing.
func TestPreparedRegionsAreBoundedAndReleased(t *testing.T) {
	savedFor, savedMax := preparedFor, maxPrepared
	preparedFor, maxPrepared = 200*time.Millisecond, 1
	t.Cleanup(func() { preparedFor, maxPrepared = savedFor, savedMax })
	c := startCluster(t, 2)
	ctx := context.Background()
	createTable(t, c, "pr", nil)
	name, _ := locate(t, c, "pr", []byte("a"))
	host, other := c.servers[0], c.servers[1]
	if len(host.OnlineRegions()) == 0 {
		host, other = other, host
	}
	v, ok := host.regions.Load(name)
	if !ok {
		t.Fatal("the region is on neither server")
	}
	or := v.(*onlineRegion)
	req := &pb.PrepareRegionRequest{Region: or.info, Table: or.table}
	admin := &adminService{s: other}
	prepared := func() bool {
		other.preparedMu.Lock()
		defer other.preparedMu.Unlock()
		return other.prepared[name] != nil
	}
	if _, err := admin.PrepareRegion(ctx, req); err != nil || !prepared() {
		t.Fatalf("prepare: %v, kept %v", err, prepared())
	}
	if _, err := admin.PrepareRegion(ctx, req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a prepare beyond the bound answered %v; want ResourceExhausted", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for prepared() {
		if time.Now().After(deadline) {
			t.Fatal("the prepared region was kept past its time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// On the region's own server a prepare is nothing to do.
	if _, err := (&adminService{s: host}).PrepareRegion(ctx, req); err != nil {
		t.Fatal(err)
	}
	host.preparedMu.Lock()
	n := len(host.prepared)
	host.preparedMu.Unlock()
	if n != 0 {
		t.Fatal("the region's own server prepared it")
	}
	if _, err := admin.PrepareRegion(ctx, req); err != nil || !prepared() {
		t.Fatalf("prepare again: %v", err)
	}
	other.dropPrepared()
	if prepared() {
		t.Fatal("the stop kept a prepared region")
	}
	if _, err := admin.PrepareRegion(ctx, req); err != nil || prepared() {
		t.Fatalf("a prepare after the stop dropped them: %v, kept %v", err, prepared())
	}
}
