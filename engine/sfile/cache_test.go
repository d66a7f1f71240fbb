package sfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

func userCells(n, valueLen int) []tcell {
	cells := make([]tcell, n)
	for i := range cells {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, valueLen)
		cells[i] = tcell{key: mkKey(fmt.Sprintf("user%010d", i), "f", "q", 1000, cell.Put), value: v, seq: uint64(i + 1)}
	}
	return cells
}

// within reports whether b lies inside the memory of block.
func within(b, block []byte) bool {
	if len(b) == 0 || len(block) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s := uintptr(unsafe.Pointer(unsafe.SliceData(block)))
	return p >= s && p+uintptr(len(b)) <= s+uintptr(len(block))
}

// TestZeroCopyAndReferences: a scanner's values point into the off-heap
// L2 slot of the block, the scanner holds exactly one reference while on
// a block and none after it moves on or closes.
func TestZeroCopyAndReferences(t *testing.T) {
	for _, comp := range []Compression{CompressionNone, CompressionSnappy, CompressionZstd} {
		for _, enc := range []Encoding{EncodingNone, EncodingDiff} {
			t.Run(fmt.Sprintf("%s-%s", enc, comp), func(t *testing.T) {
				cells := userCells(5000, 100)
				fs := storage.NewMem()
				m := writeFile(t, fs, "z", WriterOptions{Encoding: enc, Compression: comp, BlockSize: 8 << 10}, cells)
				cache := newCache(t, 16<<20, false)
				const id = 42
				r, err := Open(fs, "z", ReaderOptions{Cache: cache, FileID: id})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()

				s := r.NewScanner(ScanOptions{CacheBlocks: true})
				target := cells[2500]
				if !s.Seek(target.key) || !bytes.Equal(s.Value(), target.value) {
					t.Fatalf("Seek: %v %v", s.Key(), s.Err())
				}
				sc := s.(*scanner)
				if !sc.blockOffHeap() {
					t.Fatal("the current block is not an off-heap L2 block")
				}
				ref, ok := cache.L2.Get(blockcache.Key{File: id, Offset: int64(sc.blkOff)})
				if !ok {
					t.Fatal("block not cached")
				}
				if !ref.OffHeap() || !within(s.Value(), ref.Bytes()) {
					t.Fatal("Value does not point into the cached off-heap block")
				}
				if enc == EncodingNone && !within(s.Key(), ref.Bytes()) {
					t.Fatal("Key does not point into the cached block (NONE encoding)")
				}
				ref.Release()

				// While the scanner holds the block, evicting the file
				// leaves exactly that block pending; the bytes stay valid.
				if n := cache.L2.EvictFile(id); n == 0 {
					t.Fatal("nothing evicted")
				}
				if p := cache.L2.Stats().PendingFree; p != 1 {
					t.Fatalf("%d referenced blocks pending, want 1 (the scanner's)", p)
				}
				if !bytes.Equal(s.Value(), target.value) {
					t.Fatal("value changed after eviction while referenced")
				}
				// Moving through the rest of the file releases each block
				// in turn; past the last cell none is held.
				n := 0
				for s.Next() {
					n++
				}
				if n != len(cells)-2501 || s.Err() != nil {
					t.Fatalf("Next: %d cells, err %v", n, s.Err())
				}
				if p := cache.L2.Stats().PendingFree; p != 0 {
					t.Fatalf("%d evicted blocks still referenced after moving on", p)
				}
				s.Close()
				s.Close() // idempotent
				checkNoReferences(t, cache, id)

				// Many scanners at random positions, then all closed.
				var scanners []cell.Scanner
				rng := rand.New(rand.NewPCG(3, 4))
				for i := 0; i < 20; i++ {
					s := r.NewScanner(ScanOptions{CacheBlocks: true})
					scanners = append(scanners, s)
					c := cells[rng.IntN(len(cells))]
					if !s.Seek(c.key) || !bytes.Equal(s.Key(), c.key) {
						t.Fatalf("Seek(%v): %v", c.key, s.Err())
					}
				}
				st := cache.L2.Stats()
				if st.Hits == 0 || st.Blocks == 0 || st.Blocks > int64(m.DataBlocks) {
					t.Fatalf("cache stats %+v", st)
				}
				for _, s := range scanners {
					s.Close()
				}
				checkNoReferences(t, cache, id)
			})
		}
	}
}

// TestCacheOnWrite: blocks written with a cache-on-write L2 are read
// without a single L2 miss or file read of a data block.
func TestCacheOnWrite(t *testing.T) {
	cells := userCells(3000, 100)
	fs := storage.NewMem()
	cache := newCache(t, 16<<20, true)
	m := writeFile(t, fs, "w", WriterOptions{Compression: CompressionLZ4, BlockSize: 4096, IndexBlockSize: 512,
		Bloom: BloomRow, BloomBlockSize: 256, Cache: cache, FileID: 7}, cells)
	if m.IndexLevels < 2 {
		t.Fatalf("index levels %d", m.IndexLevels)
	}
	if st := cache.L2.Stats(); st.Blocks != int64(m.DataBlocks) {
		t.Fatalf("%d blocks cached on write, want %d", st.Blocks, m.DataBlocks)
	}
	l1Before := cache.L1.Stats()
	r, err := Open(fs, "w", ReaderOptions{Cache: cache, FileID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{CacheBlocks: true})
	defer s.Close()
	sameCells(t, scanAll(t, s), cells)
	for _, c := range cells {
		if !r.MayContainRow(c.key.Row()) {
			t.Fatal("false negative")
		}
	}
	if st := cache.L2.Stats(); st.Misses != 0 {
		t.Fatalf("%d L2 misses after cache-on-write", st.Misses)
	}
	if st := cache.L1.Stats(); st.Misses != l1Before.Misses {
		t.Fatalf("%d L1 misses after cache-on-write", st.Misses-l1Before.Misses)
	}
}

// TestCacheBlocksFalse: a compaction-style scanner uses cached blocks but
// caches nothing itself.
func TestCacheBlocksFalse(t *testing.T) {
	cells := userCells(2000, 100)
	fs := storage.NewMem()
	m := writeFile(t, fs, "c", WriterOptions{Compression: CompressionSnappy, BlockSize: 4096}, cells)
	cache := newCache(t, 16<<20, false)
	r, err := Open(fs, "c", ReaderOptions{Cache: cache, FileID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{Prefetch: true})
	sameCells(t, scanAll(t, s), cells)
	s.Close()
	if st := cache.L2.Stats(); st.Blocks != 0 {
		t.Fatalf("compaction scan cached %d blocks", st.Blocks)
	}
	u := r.NewScanner(ScanOptions{CacheBlocks: true})
	sameCells(t, scanAll(t, u), cells)
	u.Close()
	if st := cache.L2.Stats(); st.Blocks != int64(m.DataBlocks) {
		t.Fatalf("user scan cached %d blocks, want %d", st.Blocks, m.DataBlocks)
	}
	before := cache.L2.Stats().Hits
	s = r.NewScanner(ScanOptions{})
	sameCells(t, scanAll(t, s), cells)
	s.Close()
	if hits := cache.L2.Stats().Hits - before; hits < int64(m.DataBlocks) {
		t.Fatalf("compaction scan made %d cache hits, want %d", hits, m.DataBlocks)
	}
	checkNoReferences(t, cache, 1)
}

// TestLargeBlocksNotCached: blocks larger than the largest L2 slot are
// read into the scanner's own memory.
func TestLargeBlocksNotCached(t *testing.T) {
	cells := userCells(20, 700<<10)
	fs := storage.NewMem()
	writeFile(t, fs, "l", WriterOptions{Compression: CompressionZstd}, cells)
	cache := newCache(t, 8<<20, false)
	r, err := Open(fs, "l", ReaderOptions{Cache: cache, FileID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{CacheBlocks: true})
	sameCells(t, scanAll(t, s), cells)
	if s.(*scanner).blockOffHeap() {
		t.Fatal("oversized block claims to be cached")
	}
	s.Close()
	checkNoReferences(t, cache, 1)
}

// TestL1OnlyCache: without L2 data blocks are cached on-heap in L1.
func TestL1OnlyCache(t *testing.T) {
	cells := userCells(2000, 50)
	fs := storage.NewMem()
	writeFile(t, fs, "l1", WriterOptions{Encoding: EncodingPrefix, BlockSize: 2048, IndexBlockSize: 300}, cells)
	l1, _ := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 8 << 20})
	cache := blockcache.NewCombined(l1, nil)
	r, err := Open(fs, "l1", ReaderOptions{Cache: cache, FileID: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 2; i++ {
		s := r.NewScanner(ScanOptions{CacheBlocks: true})
		sameCells(t, scanAll(t, s), cells)
		s.Close()
	}
	if st := l1.Stats(); st.Hits == 0 || st.Blocks == 0 {
		t.Fatalf("L1 stats %+v", st)
	}
}

// TestEvictOnClose evicts the file's blocks when the reader closes.
func TestEvictOnClose(t *testing.T) {
	cells := userCells(2000, 100)
	fs := storage.NewMem()
	writeFile(t, fs, "e", WriterOptions{BlockSize: 4096}, cells)
	cache := newCache(t, 16<<20, false)
	r, err := Open(fs, "e", ReaderOptions{Cache: cache, FileID: 9, EvictOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	s := r.NewScanner(ScanOptions{CacheBlocks: true})
	scanAll(t, s)
	s.Close()
	if cache.L2.Stats().Blocks == 0 {
		t.Fatal("nothing cached")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if b := cache.L2.Stats().Blocks; b != 0 {
		t.Fatalf("%d blocks left after EvictOnClose", b)
	}
}

// TestConcurrentScanners: scanners of one reader on many goroutines (run
// with -race).
func TestConcurrentScanners(t *testing.T) {
	cells := userCells(4000, 60)
	fs := storage.NewMem()
	writeFile(t, fs, "p", WriterOptions{Encoding: EncodingDiff, Compression: CompressionLZ4, BlockSize: 2048,
		Bloom: BloomRow}, cells)
	cache := newCache(t, 4<<20, false)
	r, err := Open(fs, "p", ReaderOptions{Cache: cache, FileID: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			s := r.NewScanner(ScanOptions{CacheBlocks: g%2 == 0})
			// Closed before reporting, so the check below sees no references.
			var err error
			defer func() { s.Close(); errs <- err }()
			for i := 0; i < 2000; i++ {
				c := cells[rng.IntN(len(cells))]
				if !r.MayContainRow(c.key.Row()) {
					err = fmt.Errorf("bloom false negative")
					return
				}
				if !s.Seek(c.key) || !bytes.Equal(s.Value(), c.value) {
					err = fmt.Errorf("Seek(%v): %v", c.key, s.Err())
					return
				}
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkNoReferences(t, cache, 5)
}

// TestNoAllocations: once warm, seeks, Next across blocks and bloom checks
// allocate nothing (the invariants build tracks references with
// allocations, so the check is skipped there).
func TestNoAllocations(t *testing.T) {
	if cell.Invariants {
		t.Skip("the invariants build allocates reference tokens")
	}
	cells := userCells(3000, 100)
	fs := storage.NewMem()
	writeFile(t, fs, "a", WriterOptions{Encoding: EncodingDiff, Compression: CompressionSnappy, BlockSize: 4096,
		Bloom: BloomRow}, cells)
	cache := newCache(t, 16<<20, false)
	r, err := Open(fs, "a", ReaderOptions{Cache: cache, FileID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{CacheBlocks: true})
	defer s.Close()
	scanAll(t, s) // warm the cache and the scanner's buffers
	start := cell.AppendFirstOnRow(nil, nil)
	i := 0
	allocs := testing.AllocsPerRun(20, func() {
		n := 0
		for ok := s.Seek(start); ok; ok = s.Next() {
			n++
		}
		for j := 0; j < 50; j++ {
			c := cells[(i*7919+j*104729)%len(cells)]
			if !r.MayContainRow(c.key.Row()) || !s.Seek(c.key) {
				t.Fatal("lookup failed")
			}
			s.SeekToPreviousRow(s.Key())
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per scan", allocs)
	}
}

// A block read for the first time and put into the L2 is no hit there: a file scanned once shows
// only misses, and scanned again only hits. (The read after the put counted a hit and made every
// block a multi-access one, which left the single-access group, and scan resistance, empty.)
func TestFirstReadOfABlockIsNoL2Hit(t *testing.T) {
	cells := userCells(3000, 100)
	fs := storage.NewMem()
	m := writeFile(t, fs, "z", WriterOptions{BlockSize: 8 << 10}, cells)
	cache := newCache(t, 16<<20, false)
	r, err := Open(fs, "z", ReaderOptions{Cache: cache, FileID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for pass, want := range []struct{ hits, misses int64 }{{0, int64(m.DataBlocks)}, {int64(m.DataBlocks), int64(m.DataBlocks)}} {
		s := r.NewScanner(ScanOptions{CacheBlocks: true})
		scanAll(t, s)
		s.Close()
		if st := cache.L2.Stats(); st.Hits != want.hits || st.Misses != want.misses {
			t.Errorf("after scan %d of %d blocks: %d hits, %d misses; want %d and %d", pass+1, m.DataBlocks, st.Hits, st.Misses, want.hits, want.misses)
		}
	}
}
