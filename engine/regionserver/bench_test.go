package regionserver

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/client"
)

// BenchmarkServerPut: single-row puts from 4 client goroutines through a real region server over
// loopback (the request path from socket to memstore and back), ASYNC_WAL so that the disk is out
// of it. It reports the process's allocations per put, client and server together (the client
// is the same code in every run, so a change shows as a change of the figure).
//
//	go test -run '^$' -bench ServerPut -benchtime 20000x ./engine/regionserver/
func BenchmarkServerPut(b *testing.B) {
	c := startClusterWith(b, 1, nil, nil)
	ctx := context.Background()
	td := &pb.TableDescriptor{Name: &pb.TableName{Namespace: "default", Name: "bench"},
		Families: []*pb.ColumnFamilyDescriptor{{Name: []byte("f"), MaxVersions: 1}}}
	if _, err := c.client.CreateTable(ctx, td, nil); err != nil {
		b.Fatal(err)
	}
	c.waitOpen("bench", 1, "", 30*time.Second)
	tbl := c.client.Table("bench")
	value := make([]byte, 100)
	put := func(i int) error {
		m := client.NewPut(fmt.Appendf(nil, "row%010d", i))
		m.Durability = pb.Durability_DURABILITY_ASYNC_WAL
		m.Add("f", "q", cell.LatestTimestamp, value)
		return tbl.Put(ctx, m)
	}
	for i := range 2000 { // connections, locations, pools
		if err := put(i); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	b.SetParallelism(2) // 4 goroutines on 2 cores
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			if err := put(int(next.Add(1) * 7919 % 1_000_000)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/put")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N), "B/put")
}
