package sfile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
)

// Benchmarks on 1M cells: rows user0000000000.., family "f", qualifier
// "q", 100-byte values (50 random letters then 50 repeated: about 2:1
// compressible). Files live in a temporary directory on the local disk.
//
//	go test -run '^$' -bench . -benchtime 1x ./engine/sfile/          (writes: one file per run)
//	go test -run '^$' -bench 'Seek|Get|Scan' ./engine/sfile/

const benchCells = 1_000_000

var benchData = sync.OnceValue(func() (d struct{ keys, values [][]byte }) {
	rng := rand.New(rand.NewPCG(7, 7))
	d.keys = make([][]byte, benchCells)
	d.values = make([][]byte, benchCells)
	for i := range d.keys {
		d.keys[i] = cell.AppendKey(nil, fmt.Appendf(nil, "user%010d", i), []byte("f"), []byte("q"), 1_700_000_000_000, cell.Put)
		v := make([]byte, 100)
		for j := 0; j < 50; j++ {
			v[j] = byte('a' + rng.IntN(26))
		}
		for j := 50; j < 100; j++ {
			v[j] = v[j%10]
		}
		d.values[i] = v
	}
	return d
})

var (
	benchDirOnce sync.Once
	benchDir     string
	benchFS      storage.FS
)

func benchStorage(b *testing.B) storage.FS {
	benchDirOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sfile-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		if benchFS, err = storage.NewLocal(dir); err != nil {
			b.Fatal(err)
		}
	})
	return benchFS
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func writeBenchFile(b *testing.B, fs storage.FS, name string, opts WriterOptions) Meta {
	d := benchData()
	f, err := fs.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(f, opts)
	if err != nil {
		b.Fatal(err)
	}
	for i := range d.keys {
		if err := w.Append(d.keys[i], d.values[i], uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	m, err := w.Finish()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkWrite writes 1M cells per iteration.
func BenchmarkWrite(b *testing.B) {
	d := benchData()
	var raw int64
	for i := range d.keys {
		raw += int64(len(d.keys[i]) + len(d.values[i]))
	}
	fs := benchStorage(b)
	for enc := EncodingNone; enc < numEncodings; enc++ {
		for comp := CompressionNone; comp < numCompressions; comp++ {
			b.Run(fmt.Sprintf("%s-%s", enc, comp), func(b *testing.B) {
				name := fmt.Sprintf("w-%s-%s", enc, comp)
				var m Meta
				for b.Loop() {
					fs.RemoveAll(name)
					m = writeBenchFile(b, fs, name, WriterOptions{Encoding: enc, Compression: comp, Bloom: BloomRow})
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(benchCells/sec, "cells/s")
				b.ReportMetric(float64(raw)/sec/1e6, "MB/s")
				b.ReportMetric(float64(m.Size)/1e6, "file-MB")
				fs.RemoveAll(name)
			})
		}
	}
}

// cpuTime returns the process's user+system CPU time. Benchmarks report
// it per operation (cpu-ns/op) next to wall time: on a shared machine the
// CPU time is the steadier number.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type benchReader struct {
	r     *Reader
	cache *blockcache.Combined
}

var benchReaders sync.Map // name -> *benchReader

// openBenchFile writes (once) and opens a 1M-cell file with a cache that
// holds all of it, warmed by a full scan.
func openBenchFile(b *testing.B, opts WriterOptions) *benchReader {
	name := fmt.Sprintf("r-%s-%s-%s", opts.Encoding, opts.Compression, opts.Bloom)
	if br, ok := benchReaders.Load(name); ok {
		return br.(*benchReader)
	}
	fs := benchStorage(b)
	writeBenchFile(b, fs, name, opts)
	l1, err := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	l2, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: 320 << 20, Hugepages: offheap.HugepagesAuto,
		Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("L2 cache backing: %v", l2.Backing())
	cache := blockcache.NewCombined(l1, l2)
	r, err := Open(fs, name, ReaderOptions{Cache: cache, FileID: 1})
	if err != nil {
		b.Fatal(err)
	}
	s := r.NewScanner(ScanOptions{CacheBlocks: true})
	n := 0
	for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
		n++
	}
	s.Close()
	if n != benchCells || s.Err() != nil {
		b.Fatalf("warm-up scan: %d cells, %v", n, s.Err())
	}
	if st := l2.Stats(); st.Blocks != int64(r.Meta().DataBlocks) {
		b.Fatalf("cache holds %d of %d blocks", st.Blocks, r.Meta().DataBlocks)
	}
	br := &benchReader{r: r, cache: cache}
	benchReaders.Store(name, br)
	return br
}

// BenchmarkSeek: random Seek (first cell of a row) + Value from the cache.
func BenchmarkSeek(b *testing.B) {
	for enc := EncodingNone; enc < numEncodings; enc++ {
		b.Run(enc.String(), func(b *testing.B) {
			br := openBenchFile(b, WriterOptions{Encoding: enc, Compression: CompressionSnappy, Bloom: BloomRow})
			s := br.r.NewScanner(ScanOptions{CacheBlocks: true})
			defer s.Close()
			rng := rand.New(rand.NewPCG(1, 1))
			var key, row []byte
			var sink int
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				row = fmt.Appendf(row[:0], "user%010d", rng.IntN(benchCells))
				key = cell.AppendFirstOnRow(key[:0], row)
				if !s.Seek(key) {
					b.Fatal(s.Err())
				}
				sink += len(s.Value())
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
			if sink != 100*b.N {
				b.Fatal("wrong values")
			}
		})
	}
}

// BenchmarkGet: a point read as the region does it: bloom check, then seek.
func BenchmarkGet(b *testing.B) {
	br := openBenchFile(b, WriterOptions{Encoding: EncodingDiff, Compression: CompressionSnappy, Bloom: BloomRow})
	s := br.r.NewScanner(ScanOptions{CacheBlocks: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	var key, row []byte
	b.ReportAllocs()
	c0 := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op") }()
	for b.Loop() {
		row = fmt.Appendf(row[:0], "user%010d", rng.IntN(benchCells))
		if !br.r.MayContainRow(row) {
			b.Fatal("bloom false negative")
		}
		key = cell.AppendFirstOnRow(key[:0], row)
		if !s.Seek(key) || len(s.Value()) != 100 {
			b.Fatal(s.Err())
		}
	}
}

// BenchmarkMayContainRow: bloom checks of absent rows.
func BenchmarkMayContainRow(b *testing.B) {
	br := openBenchFile(b, WriterOptions{Encoding: EncodingDiff, Compression: CompressionSnappy, Bloom: BloomRow})
	rng := rand.New(rand.NewPCG(1, 1))
	var row []byte
	fp := 0
	b.ReportAllocs()
	for b.Loop() {
		row = fmt.Appendf(row[:0], "user%010dx", rng.IntN(benchCells))
		if br.r.MayContainRow(row) {
			fp++
		}
	}
	b.ReportMetric(float64(fp)/float64(b.N), "fp-rate")
}

// BenchmarkScan: full scan of 1M cells from the cache.
func BenchmarkScan(b *testing.B) {
	for enc := EncodingNone; enc < numEncodings; enc++ {
		b.Run(enc.String(), func(b *testing.B) {
			br := openBenchFile(b, WriterOptions{Encoding: enc, Compression: CompressionSnappy, Bloom: BloomRow})
			s := br.r.NewScanner(ScanOptions{CacheBlocks: true})
			defer s.Close()
			start := cell.AppendFirstOnRow(nil, nil)
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				n := 0
				for ok := s.Seek(start); ok; ok = s.Next() {
					n += len(s.Key()) & 1
				}
				_ = n
			}
			b.ReportMetric(benchCells*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
			b.ReportMetric(benchCells*float64(b.N)/(cpuTime()-c0).Seconds(), "cells/cpu-s")
		})
	}
}

// BenchmarkScanUncached: full scan without the cache (the compaction
// path: read, checksum, decompress, validate), with prefetch.
func BenchmarkScanUncached(b *testing.B) {
	for enc := EncodingNone; enc < numEncodings; enc++ {
		for _, comp := range []Compression{CompressionNone, CompressionSnappy, CompressionLZ4, CompressionZstd} {
			b.Run(fmt.Sprintf("%s-%s", enc, comp), func(b *testing.B) {
				fs := benchStorage(b)
				name := fmt.Sprintf("u-%s-%s", enc, comp)
				if ok, _ := storage.Exists(fs, name); !ok {
					writeBenchFile(b, fs, name, WriterOptions{Encoding: enc, Compression: comp})
				}
				r, err := Open(fs, name, ReaderOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				s := r.NewScanner(ScanOptions{Prefetch: true})
				defer s.Close()
				start := cell.AppendFirstOnRow(nil, nil)
				b.ReportAllocs()
				for b.Loop() {
					n := 0
					for ok := s.Seek(start); ok; ok = s.Next() {
						n++
					}
					if n != benchCells {
						b.Fatal(n, s.Err())
					}
				}
				b.ReportMetric(benchCells*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
			})
		}
	}
}
