package sfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
)

var updateSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite the seed corpora in testdata/fuzz")

// seedCells is a small set of cells with several rows, versions and types.
func seedCells() []tcell {
	var cells []tcell
	for i := 0; i < 12; i++ {
		row := fmt.Sprintf("r%02d", i/3)
		cells = append(cells, tcell{key: mkKey(row, "f", fmt.Sprintf("q%d", i%3), int64(100-i), cellTypes[i%len(cellTypes)]),
			value: bytes.Repeat([]byte{'x'}, i%4), seq: uint64(i % 5)})
		if i%4 == 1 && cells[i].key.Type() == cell.Put {
			cells[i].tags = cell.AppendTTLTag(nil, 1000)
		}
	}
	return sortCells(cells)
}

func seedBlock(enc Encoding) []byte {
	b := blockBuilder{enc: enc, interval: 3}
	for _, c := range seedCells() {
		stored, vlField := cell.StoredValue(nil, c.value, c.tags)
		b.add(c.key, stored, vlField, c.seq)
	}
	return bytes.Clone(b.finish())
}

func seedFile(t testing.TB, enc Encoding, comp Compression, bloom BloomType) []byte {
	fs := storage.NewMem()
	writeFile(t, fs, "s", WriterOptions{Encoding: enc, Compression: comp, Bloom: bloom, BlockSize: 64, IndexBlockSize: 64,
		BloomBlockSize: 8, RestartInterval: 2}, seedCells())
	data, err := storage.ReadFile(fs, "s")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func seedIndexBlock() []byte {
	var b indexBuilder
	for i, c := range seedCells() {
		b.add(c.key, blockHandle{off: uint64(i * 100), size: 90})
	}
	return bytes.Clone(b.finish(1))
}

// TestWriteFuzzSeeds rewrites testdata/fuzz with -update-fuzz-seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*updateSeeds {
		t.Skip("run with -update-fuzz-seeds to rewrite the seed corpora")
	}
	write := func(fuzzer, name string, data []byte) {
		dir := filepath.Join("testdata", "fuzz", fuzzer)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for enc := EncodingNone; enc < numEncodings; enc++ {
		write("FuzzDataBlock", "block-"+enc.String(), seedBlock(enc))
	}
	write("FuzzIndexBlock", "leaf", seedIndexBlock())
	write("FuzzOpen", "none-none-none", seedFile(t, EncodingNone, CompressionNone, BloomNone))
	write("FuzzOpen", "prefix-snappy-row", seedFile(t, EncodingPrefix, CompressionSnappy, BloomRow))
	write("FuzzOpen", "diff-lz4-rowcol", seedFile(t, EncodingDiff, CompressionLZ4, BloomRowCol))
	write("FuzzOpen", "diff-zstd-row", seedFile(t, EncodingDiff, CompressionZstd, BloomRow))
	empty := storage.NewMem()
	writeFile(t, empty, "e", WriterOptions{}, nil)
	data, _ := storage.ReadFile(empty, "e")
	write("FuzzOpen", "empty", data)
	fi := fileInfo{entryCount: 1, firstKey: seedCells()[0].key, lastKey: seedCells()[0].key,
		info: map[string][]byte{"k": []byte("v")}}
	write("FuzzMetaBlocks", "fileinfo", fi.encode())
	bi := bloomIndex{typ: BloomRow, k: 3, totalKeys: 2, chunks: []bloomChunkRef{{firstKey: seedCells()[0].key,
		h: blockHandle{off: 0, size: 76}, keys: 2}}}
	write("FuzzMetaBlocks", "bloomindex", bi.encode())
}

// FuzzDataBlock: the block validator never panics; a block it accepts
// decodes identically with the fast decoder, and seeks within it land on
// the first cell >= the sought key.
func FuzzDataBlock(f *testing.F) {
	for enc := EncodingNone; enc < numEncodings; enc++ {
		f.Add(seedBlock(enc))
	}
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var v validator
		if validateDataBlock(data, &v) != "" {
			return
		}
		var keys [][]byte
		var seqs []uint64
		var it blockIter
		it.init(data)
		for o := 0; o < it.end; o = it.next {
			it.decode(o)
			keys = append(keys, bytes.Clone(it.key))
			seqs = append(seqs, it.seq)
			if len(keys) > len(data) {
				t.Fatal("decoder does not advance")
			}
		}
		// The checked decoder agrees.
		it2 := &v.it
		prev := 0
		for i, o := 0, 0; o < it2.end; i++ {
			isRestart := false
			for r := 0; r < it2.nRestarts; r++ {
				if it2.restart(r) == o {
					isRestart = true
				}
			}
			next, reason := it2.decodeChecked(o, isRestart, prev)
			if reason != "" || !bytes.Equal(it2.key, keys[i]) || it2.seq != seqs[i] {
				t.Fatalf("cell %d: checked decoder disagrees (%s)", i, reason)
			}
			prev, o = len(it2.key), next
		}
		s := &scanner{}
		s.it.init(data)
		for _, k := range keys {
			for _, probe := range [][]byte{k, cell.AppendFirstOnRow(nil, cell.Key(k).Row()), cell.AppendLastOnRow(nil, cell.Key(k).Row())} {
				want := 0
				for want < len(keys) && cell.Compare(keys[want], probe) < 0 {
					want++
				}
				found := s.seekInBlock(probe)
				if found != (want < len(keys)) || found && !bytes.Equal(s.it.key, keys[want]) {
					t.Fatalf("seek %v: found %v at %v, want cell %d", cell.Key(probe), found, cell.Key(s.it.key), want)
				}
			}
		}
	})
}

// FuzzIndexBlock: the index block parser never panics and accepted blocks
// can be searched.
func FuzzIndexBlock(f *testing.F) {
	f.Add(seedIndexBlock())
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		ib, reason := parseIndexBlock(data, 1<<40)
		if reason != "" {
			return
		}
		for i := 0; i < ib.n; i++ {
			k, _ := ib.entry(i)
			if j := ib.searchLT(k); j >= i {
				t.Fatalf("searchLT(entry %d) = %d", i, j)
			}
		}
		ib.searchLT(cell.AppendFirstOnRow(nil, nil))
	})
}

// FuzzMetaBlocks: the file info and bloom index decoders never panic.
func FuzzMetaBlocks(f *testing.F) {
	fi := fileInfo{entryCount: 1, firstKey: seedCells()[0].key, lastKey: seedCells()[0].key, info: map[string][]byte{"k": nil}}
	f.Add(fi.encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeFileInfo(data)
		if bi, reason := decodeBloomIndex(data, 1<<20); reason == "" {
			bi.chunkFor(cell.AppendFirstOnRow(nil, []byte("r")))
		}
		if len(data) >= bloomLineBytes {
			bloomChunkMayContain(data[:len(data)/bloomLineBytes*bloomLineBytes], 12345, 7)
		}
	})
}

// FuzzOpen: Open and every read path on arbitrary bytes never panic and
// fail only with corruption (or an unsupported version).
func FuzzOpen(f *testing.F) {
	f.Add(seedFile(f, EncodingPrefix, CompressionSnappy, BloomRow))
	f.Add([]byte(magic))
	f.Add(make([]byte, trailerSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := storage.NewMem()
		if err := storage.WriteFile(fs, "f", data); err != nil {
			t.Fatal(err)
		}
		err := fuzzReadAll(fs)
		if err != nil && !errors.Is(err, ErrCorruption) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

func fuzzReadAll(fs storage.FS) error {
	r, err := Open(fs, "f", ReaderOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{Prefetch: true})
	defer s.Close()
	var rows [][]byte
	for ok, n := s.Seek(cell.AppendFirstOnRow(nil, nil)), 0; ok && n < 100000; ok, n = s.Next(), n+1 {
		rows = append(rows, bytes.Clone(s.Key().Row()))
	}
	if s.Err() != nil {
		return s.Err()
	}
	for ok, n := s.SeekToLastRow(), 0; ok && n < 1000; ok, n = s.SeekToPreviousRow(s.Key()), n+1 {
	}
	if s.Err() != nil {
		return s.Err()
	}
	for _, row := range rows {
		r.MayContainRow(row)
		r.MayContainRowCol(row, []byte("f"), []byte("q"))
		if _, err := r.bloomChunkFor(row); err != nil {
			return err
		}
	}
	if _, err := r.MidKey(); err != nil && !errors.Is(err, ErrEmpty) {
		return err
	}
	return Dump(io.Discard, fs, "f", DumpOptions{Meta: true, Index: true, Blocks: true, Cells: true})
}

// allHandles returns the handle of every block of a healthy file.
func allHandles(r *Reader) ([]blockHandle, error) {
	hs := []blockHandle{r.tr.rootIndex, r.tr.fileInfo}
	if r.bloom != nil {
		hs = append(hs, r.tr.bloomIndex)
		for _, c := range r.bloom.chunks {
			hs = append(hs, c.h)
		}
	}
	var walk func(ib indexBlock) error
	walk = func(ib indexBlock) error {
		for i := 0; i < ib.n; i++ {
			_, h := ib.entry(i)
			hs = append(hs, h)
			if ib.level > 1 {
				var buf []byte
				child, err := r.loadIndexBlock(h, ib.level-1, &buf)
				if err != nil {
					return err
				}
				if err := walk(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return hs, walk(r.root)
}

var (
	patchedSeeds = sync.OnceValues(func() ([][]byte, [][]blockHandle) {
		var files [][]byte
		var handles [][]blockHandle
		for _, o := range []struct {
			e Encoding
			c Compression
			b BloomType
		}{{EncodingNone, CompressionNone, BloomRow}, {EncodingPrefix, CompressionNone, BloomRowCol},
			{EncodingDiff, CompressionNone, BloomNone}, {EncodingDiff, CompressionSnappy, BloomRow}} {
			fs := storage.NewMem()
			f, _ := fs.Create("s")
			w, _ := NewWriter(f, WriterOptions{Encoding: o.e, Compression: o.c, Bloom: o.b, BlockSize: 64,
				IndexBlockSize: 64, BloomBlockSize: 8, RestartInterval: 2})
			for _, c := range seedCells() {
				w.AppendTagged(c.key, c.value, c.tags, c.seq)
			}
			w.Finish()
			data, _ := storage.ReadFile(fs, "s")
			r, err := Open(fs, "s", ReaderOptions{})
			if err != nil {
				panic(err)
			}
			hs, err := allHandles(r)
			if err != nil {
				panic(err)
			}
			r.Close()
			files = append(files, data)
			handles = append(handles, hs)
		}
		return files, handles
	})
	fuzzCache = sync.OnceValue(func() *blockcache.Combined {
		l1, _ := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 1 << 20})
		l2, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: 4 << 20,
			Hugepages: offheap.HugepagesOff, Logger: quietLogger()})
		if err != nil {
			panic(err)
		}
		return blockcache.NewCombined(l1, l2)
	})
	fuzzFileID atomic.Uint64
)

// FuzzOpenPatched damages a valid file with the fuzzer's patches and then
// recomputes every checksum, so the damage reaches the block decoders and
// validators behind the checksums. Every read path, cached and uncached,
// must fail cleanly or succeed; cached blocks must be released.
func FuzzOpenPatched(f *testing.F) {
	f.Add(uint8(0), []byte{10, 0, 0xff})
	f.Add(uint8(1), []byte{200, 1, 0x01, 17, 0, 0x80})
	f.Add(uint8(2), []byte{0, 0, 0x10, 1, 0, 0x7f})
	f.Add(uint8(3), []byte{3, 0, 1})
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		files, handles := patchedSeeds()
		i := int(which) % len(files)
		data := bytes.Clone(files[i])
		// Patches: (offset u16, xor byte) triples.
		for len(patch) >= 3 {
			off := int(binary.LittleEndian.Uint16(patch)) % len(data)
			data[off] ^= patch[2]
			patch = patch[3:]
		}
		for _, h := range handles[i] {
			body := data[h.off : h.off+h.size-blockTrailerSize]
			binary.LittleEndian.PutUint32(data[h.off+h.size-blockTrailerSize:], crc32.Checksum(body, castagnoli))
		}
		tr := data[len(data)-trailerSize:]
		binary.LittleEndian.PutUint32(tr[48:], trailerChecksum(tr))

		fs := storage.NewMem()
		if err := storage.WriteFile(fs, "f", data); err != nil {
			t.Fatal(err)
		}
		if err := fuzzReadAll(fs); err != nil && !errors.Is(err, ErrCorruption) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("unexpected error class: %v", err)
		}
		cache := fuzzCache()
		id := fuzzFileID.Add(1)
		r, err := Open(fs, "f", ReaderOptions{Cache: cache, FileID: id, EvictOnClose: true})
		if err != nil {
			return
		}
		for pass := 0; pass < 2; pass++ {
			s := r.NewScanner(ScanOptions{CacheBlocks: true})
			for ok, n := s.Seek(cell.AppendFirstOnRow(nil, nil)), 0; ok && n < 10000; ok, n = s.Next(), n+1 {
				r.MayContainRowCol(s.Key().Row(), s.Key().Family(), s.Key().Qualifier())
			}
			for ok, n := s.SeekToLastRow(), 0; ok && n < 100; ok, n = s.SeekToPreviousRow(s.Key()), n+1 {
			}
			s.Close()
		}
		r.MidKey()
		r.Close()
		if p := cache.L2.Stats().PendingFree; p != 0 {
			t.Fatalf("%d blocks still referenced", p)
		}
	})
}

// TestFuzzSeedsReadable: the FuzzOpen seed files are healthy store files.
func TestFuzzSeedsReadable(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 3)
		lit, ok := strings.CutPrefix(strings.TrimSpace(lines[1]), "[]byte(")
		if !ok {
			t.Fatalf("%s: unexpected corpus line %q", e.Name(), lines[1])
		}
		data, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		fs := storage.NewMem()
		if err := storage.WriteFile(fs, "f", []byte(data)); err != nil {
			t.Fatal(err)
		}
		if err := fuzzReadAll(fs); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
}
