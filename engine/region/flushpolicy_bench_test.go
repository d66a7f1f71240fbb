//go:build linux

package region

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
)

// Per-family flush against flushing every family, side by side: each put writes a 1,000-byte
// value to the family "big" and a 10-byte one to "small" (distinct rows), with a 1 MiB flush
// size and a 256 KiB lower bound. With every family flushing together, each flush also writes a
// tiny file of small's; with FlushAllLargeStoresPolicy small stays in memory until the end (the
// last, full flush). Reported: small's files written per 1,000 puts, and flushes.
//
//	go test -run '^$' -bench PerFamilyFlush -benchtime 20000x ./engine/region/
func BenchmarkPerFamilyFlush(b *testing.B) {
	for _, p := range []FlushPolicy{{Name: "FlushAllStoresPolicy", AllStores: true, LowerBound: 256 << 10}, {Name: "FlushAllLargeStoresPolicy", LowerBound: 256 << 10}} {
		b.Run("policy="+p.Name, func(b *testing.B) {
			e := newEnv(b, fam("big"), fam("small"))
			e.cfg.DisableAutoFlush, e.cfg.FlushSize, e.cfg.FlushPolicy = false, 1<<20, p
			e.cfg.DisableAutoCompaction = true
			e.reopen()
			big, small := make([]byte, 1000), make([]byte, 10)
			var smallFiles int64
			b.ResetTimer()
			for i := range b.N {
				row := fmt.Appendf(nil, "row%08d", i)
				m := NewMutation(row).Put([]byte("big"), []byte("q"), cell.LatestTimestamp, big).
					Put([]byte("small"), []byte("q"), cell.LatestTimestamp, small)
				if err := e.r.Put(m); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for deadline := time.Now().Add(10 * time.Second); e.r.FlushRequested() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // polling the region's own background flush
			}
			if _, err := e.r.Flush(); err != nil {
				b.Fatal(err)
			}
			smallFiles = int64(e.r.StoreFileCount()["small"])
			b.ReportMetric(float64(smallFiles)*1000/float64(b.N), "small-files/1000puts")
			b.ReportMetric(float64(e.r.Metrics().Flushes.Load()), "flushes")
		})
	}
}
