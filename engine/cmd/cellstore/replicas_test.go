package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
	"github.com/cellstore/cellstore/engine/layout"
	"github.com/cellstore/cellstore/engine/processtest"
	"github.com/cellstore/cellstore/engine/rpc"
)

// readDirect gets a row from one region (replica) on one server: the value, or nil.
func readDirect(ctx context.Context, conn *rpc.Conn, region string, row []byte) ([]byte, error) {
	var resp pb.GetResponse
	block, err := conn.Call(ctx, pb.Method_METHOD_GET, &pb.GetRequest{Region: &pb.RegionSpecifier{Name: region},
		Get: &pb.Get{Row: row}}, nil, &resp, nil)
	if err != nil {
		return nil, err
	}
	if resp.GetResult().GetCellCount() == 0 {
		return nil, nil
	}
	kv, _, err := cell.ParseKeyValue(block)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(kv.Value()), nil
}

// Read replicas with real processes: a table with REGION_REPLICATION 2 on three region server
// processes; kill -9 the primary's server during a TIMELINE read load (and a write load): the reads
// keep answering (stale after the kill) with no error reaching the caller while the region is
// recovered, the replica then converges to the new primary, and the replicas of the region are
// never on one server.
func TestReadReplicasKill9(t *testing.T) {
	bin := cellstoreBinary(t)
	dir := t.TempDir()
	masterAddr, masterHTTP := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	m := processtest.Start(t, bin, "master", "--storage-dir", dir, "--grpc-addr", masterAddr, "--http-addr", masterHTTP,
		"--advertise-host", "127.0.0.1", "--server-lease", "2s", "--heartbeat-interval", "400ms", "--self-fence-margin", "600ms",
		"--dead-margin", "500ms", "--balancer-period", "-1s", "--log-level", "warn")
	m.HTTP = masterHTTP
	m.WaitReady(t, 60*time.Second)
	servers := map[string]*processtest.Proc{} // data address → process
	for range 3 {
		data, httpAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		p := processtest.Start(t, bin, "regionserver", "--storage-dir", dir, "--masters", masterAddr, "--data-addr", data,
			"--admin-addr", "127.0.0.1:"+freePort(t), "--http-addr", httpAddr, "--advertise-host", "127.0.0.1",
			"--memstore-offheap-size", "64Mi", "--blockcache-offheap-size", "16Mi", "--blockcache-onheap-size", "16Mi", "--log-level", "warn")
		p.HTTP, p.Data = httpAddr, data
		servers[data] = p
	}
	for _, p := range servers {
		p.WaitReady(t, 60*time.Second)
	}

	ctx := context.Background()
	cl, err := client.New(client.Config{Masters: []string{masterAddr}, OperationTimeout: 60 * time.Second,
		RPCTimeout: 3 * time.Second, Pause: 20 * time.Millisecond, MaxPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "rt"}, RegionReplication: 2,
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f")}}}
	if _, err := cl.CreateTable(ctx, td, nil); err != nil {
		t.Fatal(err)
	}
	locsNow := func(not string) []*pb.RegionLocation {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if locs := processtest.TableLocations(ctx, cl, "rt"); len(locs) == 2 {
				a, b := layout.ServerName(locs[0].GetServer()), layout.ServerName(locs[1].GetServer())
				if a == b {
					t.Fatalf("the primary and the replica are both on %s", a)
				}
				if a != not && b != not {
					return locs
				}
			}
			time.Sleep(50 * time.Millisecond) // polling the master
		}
		t.Fatal("the table's regions did not open")
		return nil
	}
	tbl := cl.Table("rt")
	row := func(i int) []byte { return fmt.Appendf(nil, "row%06d", i) }
	val := func(i int) []byte { return fmt.Appendf(nil, "value-%d", i) }
	const loaded = 2000
	for b := 0; b < loaded; b += 200 {
		var ops []client.BatchOp
		for i := b; i < b+200; i++ {
			ops = append(ops, client.BatchOp{Mutation: client.NewPut(row(i)).Add("f", "q", cell.LatestTimestamp, val(i))})
		}
		for _, r := range tbl.Batch(ctx, ops) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	locs := locsNow("")
	var primary, replica *pb.RegionLocation
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() == 0 {
			primary = l
		} else {
			replica = l
		}
	}
	victim := servers[layout.ServerName(primary.GetServer())]
	// The readers check values, so let the replica catch up with the load first: the last row's write
	// was acknowledged after every other, so once the replica shows it, it shows them all.
	rconn, err := rpc.Dial(ctx, layout.ServerName(replica.GetServer()), rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if v, err := readDirect(ctx, rconn, replica.GetRegion().GetName(), row(loaded-1)); err == nil && bytes.Equal(v, val(loaded-1)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not receive the load")
		}
		time.Sleep(20 * time.Millisecond) // polling the replica
	}

	// Load: readers (TIMELINE gets of loaded rows) and one writer (new rows, acknowledged ones noted).
	var reads, stale, failures, writes atomic.Int64
	var firstErr atomic.Value
	var ackMu sync.Mutex
	var acked []int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(loaded)
				res, err := tbl.Get(ctx, &pb.Get{Row: row(i), Consistency: pb.Consistency_CONSISTENCY_TIMELINE})
				reads.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case len(res.Cells) != 1 || !bytes.Equal(res.Cells[0].Value, val(i)):
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("row %d: %v", i, res.Cells))
				case res.Stale:
					stale.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := loaded; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tbl.Put(ctx, client.NewPut(row(i)).Add("f", "q", cell.LatestTimestamp, val(i))); err == nil {
				ackMu.Lock()
				acked = append(acked, i)
				ackMu.Unlock()
				writes.Add(1)
			}
		}
	}()
	for reads.Load() < 300 || writes.Load() < 100 {
		time.Sleep(10 * time.Millisecond) // the load is running
	}
	staleBefore := stale.Load()
	killed := time.Now()
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.Exited
	locs = locsNow(victim.Data)
	recovered := time.Since(killed)
	time.Sleep(time.Second) // keep the load running a little after the recovery
	close(stop)
	wg.Wait()
	stopped := time.Now()
	t.Logf("TIMELINE reads %d (stale %d, %d of them before the kill), failed %d; writes acknowledged %d; region recovered %v after kill -9",
		reads.Load(), stale.Load(), staleBefore, failures.Load(), writes.Load(), recovered)
	if failures.Load() != 0 {
		t.Fatalf("%d TIMELINE reads failed: %v", failures.Load(), firstErr.Load())
	}
	if stale.Load() == staleBefore {
		t.Fatal("no read was answered by the replica after the kill")
	}

	// After the writes stop, the replica converges to the (new) primary: every acknowledged write.
	for _, l := range locs {
		if l.GetRegion().GetReplicaId() != 0 {
			replica = l
		}
	}
	conn, err := rpc.Dial(ctx, layout.ServerName(replica.GetServer()), rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := append(slices.Clone(acked), 0, loaded-1)
	deadline := time.Now().Add(60 * time.Second)
	for _, i := range check {
		for {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			v, err := readDirect(rctx, conn, replica.GetRegion().GetName(), row(i))
			cancel()
			if err == nil && bytes.Equal(v, val(i)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica did not converge: row %d is %q (%v)", i, v, err)
			}
			time.Sleep(20 * time.Millisecond) // polling the replica
		}
	}
	t.Logf("replica holds every acknowledged write %v after the writes stopped", time.Since(stopped))
}
