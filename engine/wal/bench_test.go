package wal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/storage"
)

// benchAppend appends b.N edits (one cell, 100-byte value) from the given
// number of goroutines to a WAL on a real local directory.
func benchAppend(b *testing.B, goroutines int, d Durability, set func(*Options)) {
	fs, err := storage.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{FS: fs, Dir: "wal/rs1"}
	set(&opts)
	w, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(recordHeaderSize + payloadSize(testEdit("region-0", 0))))
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	before := w.Stats()
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := testEdit(fmt.Sprintf("region-%d", g%8), g)
			for next.Add(1) <= int64(b.N) {
				if _, err := w.Append(e, d); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if d == AsyncWAL {
		if err := w.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	b.StopTimer()
	st := w.Stats()
	syncs := float64(st.Syncs - before.Syncs)
	b.ReportMetric(float64(b.N)/elapsed, "appends/s")
	b.ReportMetric(syncs/elapsed, "syncs/s")
	if syncs > 0 {
		b.ReportMetric(float64(b.N)/syncs, "appends/sync")
		b.ReportMetric(float64(st.SyncNanos-before.SyncNanos)/syncs/1e3, "µs/sync")
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAppendSyncWAL compares the group-commit configurations (who commits, syncs that
// overlap) side by side.
func BenchmarkAppendSyncWAL(b *testing.B) {
	for _, g := range []int{1, 4, 16, 64} {
		for _, c := range commitConfigs {
			b.Run(fmt.Sprintf("goroutines=%d/%s", g, c.name), func(b *testing.B) {
				benchAppend(b, g, SyncWAL, func(o *Options) { o.GroupCommit, o.SyncSlots, o.CommitDelay = c.mode, c.slots, c.delay })
			})
		}
	}
}

// BenchmarkZeroAhead: SYNC_WAL appends into preallocated segments with and without zeros written
// ahead of the log (Options.NoZeroAhead), side by side.
func BenchmarkZeroAhead(b *testing.B) {
	for _, g := range []int{1, 4, 16, 64} {
		for _, on := range []bool{true, false} {
			b.Run(fmt.Sprintf("goroutines=%d/zero-ahead=%v", g, on), func(b *testing.B) {
				benchAppend(b, g, SyncWAL, func(o *Options) { o.NoZeroAhead = !on })
			})
		}
	}
}

func BenchmarkAppendAsyncWAL(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) { benchAppend(b, g, AsyncWAL, func(*Options) {}) })
	}
}

// BenchmarkAppendNoWait measures the append path alone (encoding into the
// shared buffer) on the in-memory backend: no allocations per record.
func BenchmarkAppendNoWait(b *testing.B) {
	w, err := Open(Options{FS: storage.NewMem(), Dir: "wal/rs1", SyncInterval: time.Hour, FlushThreshold: 64 << 20, SegmentSize: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	e := testEdit("region-0", 1)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, err := w.AppendNoWait(e); err != nil {
			b.Fatal(err)
		}
		if n++; n%100000 == 0 {
			b.StopTimer()
			w.Sync() // keep the buffer bounded
			b.StartTimer()
		}
	}
}

// BenchmarkReplay measures reading a WAL back.
func BenchmarkReplay(b *testing.B) {
	mem := storage.NewMem()
	w, _ := Open(Options{FS: mem, Dir: "wal/rs1", SyncInterval: time.Hour})
	for i := 0; i < 10000; i++ {
		w.AppendNoWait(testEdit("region-0", i))
	}
	w.Close()
	b.ReportAllocs()
	for b.Loop() {
		r, _ := NewReader(mem, "wal/rs1", ReplayOptions{})
		n := 0
		for r.Next() {
			n++
		}
		if r.Err() != nil || n != 10000 {
			b.Fatal(r.Err(), n)
		}
		r.Close()
	}
	b.ReportMetric(10000, "edits/op")
}

// BenchmarkMultiWALSync compares SYNC_WAL appends to one WAL and to a MultiWAL of 2 and 4 groups
// side by side: 16 goroutines, each writing one of 16 regions (so every group has writers), on a
// real local directory, leader commit with one sync slot per group.
//
//	go test -run '^$' -bench MultiWALSync -benchtime 20000x ./engine/wal/
func BenchmarkMultiWALSync(b *testing.B) {
	for _, groups := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			fs, err := storage.NewLocal(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			m, err := OpenMulti(Options{FS: fs, Dir: "wal/rs1"}, groups)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					region := fmt.Sprintf("region-%d", g)
					w := m.For(region)
					e := testEdit(region, g)
					for next.Add(1) <= int64(b.N) {
						if _, err := w.Append(e, SyncWAL); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			b.StopTimer()
			st := m.Stats()
			b.ReportMetric(float64(b.N)/elapsed, "appends/s")
			if st.Syncs > 0 {
				b.ReportMetric(float64(b.N)/float64(st.Syncs), "appends/sync")
				b.ReportMetric(float64(st.SyncNanos)/float64(st.Syncs)/1e3, "µs/sync")
			}
			if err := m.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
