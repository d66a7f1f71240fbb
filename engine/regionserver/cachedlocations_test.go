package regionserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/lease"
	"github.com/cellstore/cellstore/engine/master"
)

// A master change is invisible to clients that know where their regions are: with no master at
// all (the old one gone, no standby active yet), a client's reads, writes and scans of the regions
// it located before go on at the region servers, none of them asking a master (there is none to
// answer: a request that asked would fail at the client's operation timeout). Writes go on while
// the servers' leases last, the time a standby has to take over (4 s in production; 30 s here, so
// that what is tested is the client's cache, not how fast this machine writes).
func TestCachedLocationsOutliveTheMaster(t *testing.T) {
	long := lease.Config{Lease: 30 * time.Second, HeartbeatInterval: time.Second, SelfFenceMargin: time.Second, DeadMargin: 2 * time.Second}
	c := startClusterWith(t, 2, nil, func(cfg *master.Config) { cfg.Lease = long })
	createTable(t, c, "cached", [][]byte{rowKey(25), rowKey(50), rowKey(75)})
	cl, err := client.New(client.Config{Masters: []string{c.master.Addr}, OperationTimeout: 3 * time.Second,
		RPCTimeout: time.Second, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tb := cl.Table("cached")
	ctx := context.Background()
	write := func(round int) {
		t.Helper()
		for i := range 100 {
			if err := tb.Put(ctx, client.NewPut(rowKey(i)).Add("f", "q", cell.LatestTimestamp, []byte(fmt.Sprint(round)))); err != nil {
				t.Fatalf("round %d: put of row %d: %v", round, i, err)
			}
		}
	}
	read := func(round int) {
		t.Helper()
		for i := range 100 {
			r, err := tb.Get(ctx, &pb.Get{Row: rowKey(i)})
			if err != nil {
				t.Fatalf("round %d: get of row %d: %v", round, i, err)
			}
			if got := string(r.Value("f", "q")); got != fmt.Sprint(round) {
				t.Fatalf("round %d: row %d is %q", round, i, got)
			}
		}
		sc := tb.Scan(ctx, &pb.Scan{})
		defer sc.Close()
		rows := 0
		for r, ok := sc.Next(); ok; r, ok = sc.Next() {
			if got := string(r.Value("f", "q")); got != fmt.Sprint(round) {
				t.Fatalf("round %d: the scan read row %q as %q", round, r.Row, got)
			}
			rows++
		}
		if err := sc.Err(); err != nil || rows != 100 {
			t.Fatalf("round %d: the scan read %d rows (%v), want 100", round, rows, err)
		}
	}
	write(1)
	read(1) // every region located

	c.master.Close()
	write(2)
	read(2)

	// A client with nothing cached has no master to ask: what the first one did came from its cache.
	fresh, err := client.New(client.Config{Masters: []string{c.master.Addr}, OperationTimeout: 500 * time.Millisecond,
		RPCTimeout: 200 * time.Millisecond, Pause: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := fresh.Table("cached").Get(ctx, &pb.Get{Row: rowKey(1)}); err == nil {
		t.Fatal("a client with no cached location read a row with the master gone")
	}
}
