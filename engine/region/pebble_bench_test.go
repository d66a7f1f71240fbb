//go:build linux

package region

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// Storage-core benchmarks against Pebble (test-only dependency), same keys
// (user%010d) and 100-byte values, both on in-memory filesystems so that
// the numbers compare the engines' CPU paths, not a disk:
//
//	go test -run XXX -bench 'Storage' -benchtime 2s ./engine/region/
const benchKeys = 100_000

func benchKey(i int) []byte { return fmt.Appendf(nil, "user%010d", i) }

var benchValue = func() []byte {
	v := make([]byte, 100)
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return v
}()

type benchRegion struct {
	r    *Region
	w    *wal.WAL
	pool *offheap.ChunkPool
	l2   *blockcache.BucketCache
}

// benchMemtable is the memtable size of both engines in the write
// benchmarks: the region flushes its memstore at this size, Pebble rotates
// its memtable at it (its default is 4 MiB, the region's 128 MiB).
const benchMemtable = 64 << 20

// newBenchRegion opens the benchmark region; flushSize 0 leaves flushes to
// the benchmark.
func newBenchRegion(b *testing.B, load bool, flushSize int64) *benchRegion {
	b.Helper()
	fsys := storage.NewMem()
	budget, _ := offheap.NewBudget("bench", 2<<30, nil)
	pool, err := offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", Hugepages: offheap.HugepagesAuto, Budget: budget, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	l1, _ := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 64 << 20})
	l2, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: 256 << 20, Hugepages: offheap.HugepagesOff, Budget: budget, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	table := TableDescriptor{Namespace: "default", Name: "usertable", Families: []Family{{Name: "f", Bloom: 1}}}
	info := Info{Namespace: "default", Table: "usertable", ID: 1}
	if err := Create(fsys, table, info); err != nil {
		b.Fatal(err)
	}
	w, err := wal.Open(wal.Options{FS: fsys, Dir: "wal/rs1"})
	if err != nil {
		b.Fatal(err)
	}
	r, err := Open(Config{FS: fsys, WAL: w, Pool: pool, Cache: blockcache.NewCombined(l1, l2), Logger: quiet,
		FlushSize: cmp.Or(flushSize, 1<<30), DisableAutoCompaction: true}, info)
	if err != nil {
		b.Fatal(err)
	}
	br := &benchRegion{r: r, w: w, pool: pool, l2: l2}
	if load {
		for i := 0; i < benchKeys; i += 1000 {
			ms := make([]*Mutation, 0, 1000)
			for j := i; j < i+1000; j++ {
				ms = append(ms, &Mutation{Row: benchKey(j), Ops: []Op{{Type: 4, Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1, Value: benchValue}}, Durability: wal.SkipWAL})
			}
			for _, err := range r.Batch(ms) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := r.Flush(); err != nil {
			b.Fatal(err)
		}
		// Warm the cache.
		sc, _ := r.Scanner(&Scan{Caching: 1000})
		for {
			bt, err := sc.Next()
			if err != nil {
				b.Fatal(err)
			}
			if !bt.More {
				break
			}
		}
		sc.Close()
	}
	return br
}

func (br *benchRegion) close() {
	br.r.Close()
	br.w.Close()
	br.l2.Close()
	br.pool.Close()
}

func newBenchPebble(b *testing.B, load bool) *pebble.DB {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Cache: pebble.NewCache(256 << 20), Logger: pebbleQuiet{}, MemTableSize: benchMemtable})
	if err != nil {
		b.Fatal(err)
	}
	if load {
		for i := 0; i < benchKeys; i += 1000 {
			bt := db.NewBatch()
			for j := i; j < i+1000; j++ {
				bt.Set(benchKey(j), benchValue, nil)
			}
			if err := bt.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
		it, _ := db.NewIter(nil)
		for it.First(); it.Valid(); it.Next() {
		}
		it.Close()
	}
	return db
}

type pebbleQuiet struct{}

func (pebbleQuiet) Infof(string, ...interface{})  {}
func (pebbleQuiet) Errorf(string, ...interface{}) {}
func (pebbleQuiet) Fatalf(f string, a ...interface{}) {
	panic(fmt.Sprintf(f, a...))
}

var benchOnce struct {
	sync.Mutex
	r *benchRegion
	p *pebble.DB
}

// loaded returns a region and a Pebble DB holding benchKeys rows, shared by
// the read benchmarks of one run.
func loaded(b *testing.B) (*benchRegion, *pebble.DB) {
	benchOnce.Lock()
	defer benchOnce.Unlock()
	if benchOnce.r == nil {
		benchOnce.r = newBenchRegion(b, true, 0)
		benchOnce.p = newBenchPebble(b, true)
	}
	return benchOnce.r, benchOnce.p
}

func BenchmarkStorageGet(b *testing.B) {
	br, db := loaded(b)
	b.Run("region", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		g := &Get{}
		b.ReportAllocs()
		for b.Loop() {
			g.Row = benchKey(rng.IntN(benchKeys))
			res, err := br.r.Get(g)
			if err != nil || len(res.Cells) != 1 {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("pebble", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		b.ReportAllocs()
		for b.Loop() {
			v, closer, err := db.Get(benchKey(rng.IntN(benchKeys)))
			if err != nil || len(v) != 100 {
				b.Fatal(err)
			}
			closer.Close()
		}
	})
}

func BenchmarkStorageScan(b *testing.B) {
	br, db := loaded(b)
	b.Run("region", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(benchKeys * 100)
		for b.Loop() {
			// As the region server scans: the batch as an RPC cell block,
			// its memory reused for the next batch.
			sc, err := br.r.Scanner(&Scan{Caching: 1000, CellBlock: true, ReuseResults: true})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				bt, err := sc.Next()
				if err != nil {
					b.Fatal(err)
				}
				n += len(bt.CellsPerResult)
				if !bt.More {
					break
				}
			}
			sc.Close()
			if n != benchKeys {
				b.Fatalf("%d rows", n)
			}
		}
	})
	b.Run("pebble", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(benchKeys * 100)
		for b.Loop() {
			it, _ := db.NewIter(nil)
			n := 0
			for it.First(); it.Valid(); it.Next() {
				_ = it.Value()
				n++
			}
			it.Close()
			if n != benchKeys {
				b.Fatalf("%d rows", n)
			}
		}
	})
}

// BenchmarkStoragePut: batches of 100 puts, WAL written but not synced
// (ASYNC_WAL / pebble.NoSync), both engines flushing at benchMemtable. The
// timed puts follow putWarmup untimed batches: Pebble starts with a 256 KiB
// memtable and doubles it up to its MemTableSize, so a short run would
// measure it searching far smaller skiplists than at steady state.
func BenchmarkStoragePut(b *testing.B) {
	const batch = 100
	b.Run("region", func(b *testing.B) {
		br := newBenchRegion(b, false, benchMemtable)
		defer br.close()
		rng := rand.New(rand.NewPCG(3, 4))
		ms := make([]*Mutation, batch)
		put := func() {
			for j := range ms {
				ms[j] = &Mutation{Row: benchKey(rng.IntN(1 << 30)), Ops: []Op{{Type: 4, Family: []byte("f"), Qualifier: []byte("q"), Timestamp: 1, Value: benchValue}}, Durability: wal.AsyncWAL}
			}
			for _, err := range br.r.Batch(ms) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		timeSteadyPuts(b, put, batch)
	})
	b.Run("pebble", func(b *testing.B) {
		db := newBenchPebble(b, false)
		defer db.Close()
		rng := rand.New(rand.NewPCG(3, 4))
		put := func() {
			bt := db.NewBatch()
			for j := 0; j < batch; j++ {
				bt.Set(benchKey(rng.IntN(1<<30)), benchValue, nil)
			}
			if err := bt.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
		}
		timeSteadyPuts(b, put, batch)
	})
}

// putWarmup batches (1.5 M puts, ~190 MB of cells) take Pebble past its
// memtable ramp-up (256 KiB doubling to 64 MiB: ~128 MiB written).
const putWarmup = 15_000

// timeSteadyPuts runs putWarmup untimed batches, then times put and reports
// the cost of one cell (batch cells per call).
func timeSteadyPuts(b *testing.B, put func(), batch int) {
	for range putWarmup {
		put()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		put()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/put")
}

// BenchmarkStorageIncrement: read-modify-write of 8-byte counters over
// 10000 keys (the region's atomic Increment, ASYNC_WAL; Pebble: Get + Set
// NoSync, no row lock).
func BenchmarkStorageIncrement(b *testing.B) {
	const counters = 10000
	b.Run("region", func(b *testing.B) {
		br := newBenchRegion(b, false, benchMemtable)
		defer br.close()
		rng := rand.New(rand.NewPCG(5, 6))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, err := br.r.Increment(&Increment{Row: benchKey(rng.IntN(counters)), Durability: wal.AsyncWAL,
				Columns: []IncrementColumn{{Family: []byte("f"), Qualifier: []byte("c"), Amount: 1}}})
			if err != nil {
				b.Fatal(err)
			}
			i++
			if i%200000 == 0 {
				b.StopTimer()
				br.r.Flush()
				br.r.Compact(true)
				b.StartTimer()
			}
		}
	})
	b.Run("pebble", func(b *testing.B) {
		db := newBenchPebble(b, false)
		defer db.Close()
		rng := rand.New(rand.NewPCG(5, 6))
		b.ReportAllocs()
		for b.Loop() {
			k := benchKey(rng.IntN(counters))
			var n uint64
			v, closer, err := db.Get(k)
			if err == nil {
				n = binary.BigEndian.Uint64(v)
				closer.Close()
			} else if err != pebble.ErrNotFound {
				b.Fatal(err)
			}
			if err := db.Set(k, binary.BigEndian.AppendUint64(nil, n+1), pebble.NoSync); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var _ = time.Second
