//go:build linux

package region

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
)

// The compacting memstore against the default one, side by side: puts of 100-byte values
// overwriting 2,000 rows (VERSIONS 1) with a 4 MiB flush size and 256 KiB in-memory flushes.
// Write amplification is the bytes flushes wrote (the last one after the puts included) over the
// bytes the puts carried; gets then read random rows of a memstore that took 200,000 such puts
// and no flush.
//
//	go test -run '^$' -bench InMemoryCompaction -benchtime 200000x ./engine/region/
func BenchmarkInMemoryCompactionWrites(b *testing.B) {
	for _, p := range []InMemoryCompaction{InMemoryNone, InMemoryBasic, InMemoryEager} {
		b.Run("policy="+p.String(), func(b *testing.B) {
			e := newEnv(b, inMemFamily("f", p, 1))
			e.cfg.DisableAutoFlush, e.cfg.FlushSize, e.cfg.InMemoryFlushSize = false, 4<<20, 256<<10
			e.reopen()
			rng := rand.New(rand.NewPCG(1, 2))
			value := make([]byte, 100)
			var written int64
			b.ResetTimer()
			for i := range b.N {
				row := fmt.Appendf(nil, "row%05d", rng.IntN(2000))
				value[0] = byte(i)
				if err := e.r.Put(NewMutation(row).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, value)); err != nil {
					b.Fatal(err)
				}
				written += int64(len(row) + 1 + 1 + len(value))
			}
			b.StopTimer()
			m := e.r.Metrics()
			// Let a flush under way finish, then flush the rest: every put ends in a file.
			for deadline := time.Now().Add(10 * time.Second); e.r.FlushRequested() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // polling the region's own background flush
			}
			if _, err := e.r.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(m.FlushedBytes.Load())/float64(written), "flushed/written")
			b.ReportMetric(float64(m.Flushes.Load()), "flushes")
			b.ReportMetric(float64(m.InMemoryMerges.Load()), "merges")
		})
	}
}

func BenchmarkInMemoryCompactionGets(b *testing.B) {
	for _, p := range []InMemoryCompaction{InMemoryNone, InMemoryBasic, InMemoryEager} {
		b.Run("policy="+p.String(), func(b *testing.B) {
			e := newEnv(b, inMemFamily("f", p, 1))
			e.cfg.FlushSize, e.cfg.InMemoryFlushSize = 1<<30, 256<<10
			e.reopen()
			rng := rand.New(rand.NewPCG(1, 2))
			value := make([]byte, 100)
			for i := range 200000 {
				value[0] = byte(i)
				if err := e.r.Put(NewMutation(fmt.Appendf(nil, "row%05d", rng.IntN(2000))).Put([]byte("f"), []byte("q"), cell.LatestTimestamp, value)); err != nil {
					b.Fatal(err)
				}
				if i%2000 == 1999 && p != InMemoryNone {
					if err := e.r.InMemoryFlush(); err != nil { // as the writes would trigger, in step
						b.Fatal(err)
					}
				}
			}
			cells := e.r.MemstoreStats().Cells
			b.ResetTimer()
			for range b.N {
				res, err := e.r.Get(&Get{Row: fmt.Appendf(nil, "row%05d", rng.IntN(2000))})
				if err != nil || len(res.Cells) != 1 {
					b.Fatal(res, err)
				}
			}
			b.ReportMetric(float64(cells), "memstore-cells")
		})
	}
}
