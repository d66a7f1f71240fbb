package regionserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// TestWritePressureSlowsWriters: while a region's flush cannot finish (its store file's creation
// held back), writes that take its memstore past the flush size are answered with the region's
// write pressure, rising towards where writes block; the Go client then holds its next write to
// the region back — with a backoff longer than the write's deadline it fails at the deadline
// without reaching the server — and once the flush is done, answers say no pressure again.
func TestWritePressureSlowsWriters(t *testing.T) {
	c := startClusterWith(t, 0, nil, nil)
	var ffs *faultfs.FS
	c.tune = func(cfg *Config) { ffs = faultfs.New(cfg.FS); cfg.FS = ffs }
	c.startServer()
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: client.ParseTableName("wp"), MemstoreFlushSize: 64 << 10,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("wp", 1, "", 30*time.Second)

	// The region's flushes write their files under .tmp first: their creation waits for release.
	entered, release := make(chan struct{}), make(chan struct{})
	var enterOnce, releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpCreate, Path: "data/default/wp/*/.tmp/*", Action: faultfs.Call,
		Fn: func() { enterOnce.Do(func() { close(entered) }); <-release }})

	regionName, conn := locate(t, c, "wp", []byte("a"))
	put := func(row string, size int) uint32 {
		t.Helper()
		kv := cell.AppendKeyValue(nil, []byte(row), []byte("f"), []byte("q"), cell.LatestTimestamp, cell.Put, make([]byte, size))
		var resp pb.MutateResponse
		if _, err := conn.Call(ctx, pb.Method_METHOD_MUTATE, &pb.MutateRequest{Region: &pb.RegionSpecifier{Name: regionName},
			Mutation: &pb.MutationProto{Type: pb.MutationProto_TYPE_PUT, Row: []byte(row), CellCount: 1}}, kv, &resp, nil); err != nil {
			t.Fatalf("put %s: %v", row, err)
		}
		return resp.GetPressure().GetPercent()
	}
	if p := put("small", 100); p != 0 {
		t.Fatalf("pressure %d with a nearly empty memstore", p)
	}
	// Flush size 64 KiB, writes block at 4× (256 KiB): 96 KiB is a quarter of the way, 160 KiB
	// half of it.
	p1 := put("a1", 96<<10)
	select { // the write took the memstore past its flush size: the flush starts, and is held
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no flush began within 30 s of the memstore passing its flush size")
	}
	p2 := put("a2", 64<<10)
	if p1 == 0 || p2 <= p1 || p2 >= 100 {
		t.Fatalf("pressure %d then %d as the memstore grew past its flush size with the flush held back (want rising, under 100)", p1, p2)
	}

	// The Go client honours it: its next write to the region waits MaxWriteBackoff × (p/100)^4 —
	// an hour here, far beyond the write's deadline.
	cl, err := client.New(client.Config{Masters: []string{c.master.Addr}, MaxWriteBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tbl := cl.Table("wp")
	if err := tbl.Put(ctx, client.NewPut([]byte("a3")).Add("f", "q", cell.LatestTimestamp, []byte("x"))); err != nil {
		t.Fatal(err) // the client knows of no pressure yet: sent at once, answered with the pressure
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = tbl.Put(dctx, client.NewPut([]byte("a4")).Add("f", "q", cell.LatestTimestamp, []byte("x")))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write to the region under pressure, with a backoff longer than its deadline: want the deadline, got %v", err)
	}

	// The flush finishes: answers say no pressure again, and the held-back write was never sent.
	unblock()
	waitFor(t, "a write answered with no pressure after the flush", 30*time.Second, func() bool { return put("b", 10) == 0 })
	if r, err := c.client.Table("wp").Get(ctx, &pb.Get{Row: []byte("a4")}); err != nil || len(r.Cells) != 0 {
		t.Fatalf("the held-back write reached the region: %v, %v", r, err)
	}
}

// Cells too large for a memstore chunk (kept on the Go heap) count towards the server's memstore
// budget: writes of such cells to a region far below its flush size are flushed by the budget's
// pressure (they were not counted: the heap grew by a flush size per region).
func TestLargeCellsCountTowardsTheMemstoreBudget(t *testing.T) {
	c := startClusterWith(t, 0, nil, nil)
	c.tune = func(cfg *Config) { cfg.MemstoreBytes = 16 << 20 }
	srv := c.startServer()
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: client.ParseTableName("big"), MemstoreFlushSize: 1 << 30,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	c.waitOpen("big", 1, "", 30*time.Second)
	tbl := c.client.Table("big")
	value := make([]byte, 1<<20) // above a chunk's inline limit
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; srv.m.pressureFlushes.Load() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no pressure flush after %d MiB of large cells against a 16 MiB budget", i)
		}
		if err := tbl.Put(ctx, client.NewPut([]byte{byte(i), byte(i >> 8)}).Add("f", "q", cell.LatestTimestamp, value)); err != nil {
			t.Fatal(err)
		}
	}
}
