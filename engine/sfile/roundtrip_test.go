package sfile

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// TestRoundTrip writes random cells with every encoding, compression and
// bloom type, with and without a cache, and reads them back through every
// scanner operation.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cells := genCells(rng, 2500, 3000)
	n := 0
	for enc := EncodingNone; enc < numEncodings; enc++ {
		for comp := CompressionNone; comp < numCompressions; comp++ {
			for bloom := BloomNone; bloom < numBloomTypes; bloom++ {
				n++
				opts := WriterOptions{Encoding: enc, Compression: comp, Bloom: bloom, BlockSize: 2048,
					RestartInterval: 1 + n%20, FileID: uint64(n)}
				if n%3 == 0 {
					opts.IndexBlockSize = 256 // force a multi-level index
				}
				if n%4 == 0 {
					opts.BloomBlockSize = 512 // force bloom chunks
				}
				cached := n%2 == 0
				name := fmt.Sprintf("%s-%s-%s-cached=%v", enc, comp, bloom, cached)
				t.Run(name, func(t *testing.T) {
					checkRoundTrip(t, rng, cells, opts, cached)
				})
			}
		}
	}
}

func checkRoundTrip(t *testing.T, rng *rand.Rand, cells []tcell, opts WriterOptions, cached bool) {
	fs := storage.NewMem()
	m := writeFile(t, fs, "f1", opts, cells)
	ropts := ReaderOptions{FileID: opts.FileID}
	var cache *blockcache.Combined
	if cached {
		cache = newCache(t, 32<<20, false)
		ropts.Cache = cache
	}
	r, err := Open(fs, "f1", ropts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	checkMeta(t, m, r.Meta(), cells, opts)
	if opts.IndexBlockSize == 256 && m.IndexLevels < 3 {
		t.Errorf("index levels %d with tiny index blocks, want >= 3", m.IndexLevels)
	}
	if m.DataBlocks < 50 {
		t.Errorf("only %d data blocks", m.DataBlocks)
	}

	s := r.NewScanner(ScanOptions{CacheBlocks: cached, Prefetch: !cached, PrefetchBytes: 8192})
	defer s.Close()
	sameCells(t, scanAll(t, s), cells)
	// Again: from the cache when there is one.
	sameCells(t, scanAll(t, s), cells)

	// Seeks to present keys, keys between cells, before the first and
	// after the last cell, and seek keys.
	probes := [][]byte{cell.AppendFirstOnRow(nil, nil), cell.AppendLastOnRow(nil, []byte("zzzz")),
		cells[0].key, cells[len(cells)-1].key}
	for i := 0; i < 400; i++ {
		c := cells[rng.IntN(len(cells))]
		k := c.key
		switch rng.IntN(6) {
		case 0:
			probes = append(probes, k)
		case 1:
			probes = append(probes, cell.AppendFirstOnRow(nil, k.Row()))
		case 2:
			probes = append(probes, cell.AppendLastOnRow(nil, k.Row()))
		case 3:
			probes = append(probes, cell.AppendFirstOnColumn(nil, k.Row(), k.Family(), k.Qualifier()))
		case 4:
			probes = append(probes, cell.AppendLastOnColumn(nil, k.Row(), k.Family(), k.Qualifier()))
		default:
			probes = append(probes, cell.AppendFirstOnRow(nil, append(bytes.Clone(k.Row()), '\x00')))
		}
	}
	for _, p := range probes {
		i := lowerBound(cells, p)
		ok := s.Seek(p)
		if ok != (i < len(cells)) {
			t.Fatalf("Seek(%v) = %v, want %v (err %v)", cell.Key(p), ok, i < len(cells), s.Err())
		}
		for step := 0; ok && step < 3; step++ {
			if want := cells[i]; !bytes.Equal(s.Key(), want.key) || !bytes.Equal(s.Value(), want.value) || s.Seq() != want.seq || !bytes.Equal(s.Tags(), want.tags) {
				t.Fatalf("Seek(%v)+%d: got %v seq %d, want %v", cell.Key(p), step, s.Key(), s.Seq(), want)
			}
			i++
			ok = s.Next()
			if ok != (i < len(cells)) {
				t.Fatalf("Next after Seek(%v)+%d = %v", cell.Key(p), step, ok)
			}
		}
	}

	// Reversed navigation: every row, last to first, by SeekToPreviousRow
	// (passing the scanner's own key, as a reversed region scan does).
	rows := distinctRows(cells)
	if !s.SeekToLastRow() {
		t.Fatalf("SeekToLastRow: false (%v)", s.Err())
	}
	for i := len(rows) - 1; i >= 0; i-- {
		want := cells[lowerBound(cells, cell.AppendFirstOnRow(nil, rows[i]))]
		if !bytes.Equal(s.Key(), want.key) || s.Seq() != want.seq {
			t.Fatalf("reverse row %d: got %v, want %v", i, s.Key(), want)
		}
		ok := s.SeekToPreviousRow(s.Key())
		if ok != (i > 0) {
			t.Fatalf("SeekToPreviousRow from row %d = %v (err %v)", i, ok, s.Err())
		}
	}
	// From seek keys between rows.
	for j := 0; j < 50; j++ {
		i := rng.IntN(len(rows))
		probe := cell.AppendFirstOnRow(nil, append(bytes.Clone(rows[i]), 0))
		ok := s.SeekToPreviousRow(probe)
		want := cells[lowerBound(cells, cell.AppendFirstOnRow(nil, rows[i]))]
		if !ok || !bytes.Equal(s.Key(), want.key) {
			t.Fatalf("SeekToPreviousRow(%v) = %v %v, want %v", cell.Key(probe), ok, s.Key(), want)
		}
	}
	if s.SeekToPreviousRow(cells[0].key) {
		t.Fatal("SeekToPreviousRow before the first row found a row")
	}

	// Blooms: no false negatives.
	for _, c := range cells {
		k := c.key
		if !r.MayContainRow(k.Row()) {
			t.Fatalf("MayContainRow(%q) = false for a present row", k.Row())
		}
		if !r.MayContainRowCol(k.Row(), k.Family(), k.Qualifier()) {
			t.Fatalf("MayContainRowCol(%q, %q, %q) = false for a present column", k.Row(), k.Family(), k.Qualifier())
		}
	}
	if r.MayContainRow([]byte("a")) || r.MayContainRow([]byte("zzz")) {
		t.Error("MayContainRow true outside the key range")
	}

	// MidKey: the first key of data block DataBlocks/2.
	mid, err := r.MidKey()
	if err != nil {
		t.Fatal(err)
	}
	firsts := dataBlockFirstKeys(t, r)
	if len(firsts) != m.DataBlocks {
		t.Fatalf("walked %d data blocks, meta says %d", len(firsts), m.DataBlocks)
	}
	if !bytes.Equal(mid, firsts[len(firsts)/2]) {
		t.Fatalf("MidKey %v, want %v", mid, cell.Key(firsts[len(firsts)/2]))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Seek(cells[0].key) || !errors.Is(s.Err(), ErrClosed) {
		t.Fatalf("Seek after Close: err %v", s.Err())
	}
	if cache != nil {
		checkNoReferences(t, cache, opts.FileID)
	}
}

// dataBlockFirstKeys walks the index and returns every data block's first key.
func dataBlockFirstKeys(t testing.TB, r *Reader) [][]byte {
	t.Helper()
	var keys [][]byte
	d := &dumper{r: r}
	n := 0
	if err := d.leaves(r.root, func(_ int, first []byte, _ blockHandle) error {
		keys = append(keys, bytes.Clone(first))
		return nil
	}, &n); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkNoReferences checks that no reader holds a block of the file: every
// block evicted is freed at once.
func checkNoReferences(t testing.TB, c *blockcache.Combined, fileID uint64) {
	t.Helper()
	c.L2.EvictFile(fileID)
	if p := c.L2.Stats().PendingFree; p != 0 {
		t.Fatalf("%d evicted blocks are still referenced", p)
	}
}

func checkMeta(t *testing.T, written, read Meta, cells []tcell, opts WriterOptions) {
	t.Helper()
	if written.Size != read.Size || written.DataBlocks != read.DataBlocks || written.IndexLevels != read.IndexLevels ||
		written.BloomKeys != read.BloomKeys || !written.CreatedAt.Equal(read.CreatedAt) {
		t.Errorf("writer's meta %+v differs from reader's %+v", written, read)
	}
	m := read
	minSeq, maxSeq := uint64(math.MaxUint64), uint64(0)
	minTs, maxTs := int64(math.MaxInt64), int64(math.MinInt64)
	var df int64
	earliestPut := int64(math.MaxInt64)
	for _, c := range cells {
		minSeq, maxSeq = min(minSeq, c.seq), max(maxSeq, c.seq)
		minTs, maxTs = min(minTs, c.key.Timestamp()), max(maxTs, c.key.Timestamp())
		if c.key.Type() == cell.DeleteFamily {
			df++
		}
		if c.key.Type() == cell.Put {
			earliestPut = min(earliestPut, c.key.Timestamp())
		}
	}
	if m.EarliestPutTimestamp != earliestPut || written.EarliestPutTimestamp != earliestPut {
		t.Errorf("earliest put timestamp %d (writer said %d), want %d", m.EarliestPutTimestamp, written.EarliestPutTimestamp, earliestPut)
	}
	if m.EntryCount != int64(len(cells)) || m.MinSeq != minSeq || m.MaxSeq != maxSeq || m.MinTimestamp != minTs ||
		m.MaxTimestamp != maxTs || m.DeleteFamilyCount != df {
		t.Errorf("meta %+v: want %d cells, seq %d..%d, ts %d..%d, %d delete family markers",
			m, len(cells), minSeq, maxSeq, minTs, maxTs, df)
	}
	if !bytes.Equal(m.FirstKey, cells[0].key) || !bytes.Equal(m.LastKey, cells[len(cells)-1].key) {
		t.Errorf("first/last key %v %v, want %v %v", m.FirstKey, m.LastKey, cells[0].key, cells[len(cells)-1].key)
	}
	if m.Encoding != opts.Encoding || m.Compression != opts.Compression || m.Bloom != opts.Bloom {
		t.Errorf("settings %s/%s/%s, want %s/%s/%s", m.Encoding, m.Compression, m.Bloom, opts.Encoding, opts.Compression, opts.Bloom)
	}
}

func TestEmptyFile(t *testing.T) {
	fs := storage.NewMem()
	m := writeFile(t, fs, "e", WriterOptions{Bloom: BloomRow}, nil)
	if m.EntryCount != 0 || m.DataBlocks != 0 || m.IndexLevels != 1 || m.FirstKey != nil {
		t.Fatalf("meta of an empty file: %+v", m)
	}
	r, err := Open(fs, "e", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{})
	defer s.Close()
	if s.Seek(cell.AppendFirstOnRow(nil, nil)) || s.SeekToLastRow() || s.SeekToPreviousRow(mkKey("a", "f", "", 1, cell.Put)) || s.Err() != nil {
		t.Fatalf("scanner of an empty file found something (err %v)", s.Err())
	}
	if r.MayContainRow([]byte("a")) || r.MayContainRowCol([]byte("a"), []byte("f"), nil) {
		t.Fatal("empty file may contain a row")
	}
	if _, err := r.MidKey(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("MidKey: %v", err)
	}
}

func TestWriterRejects(t *testing.T) {
	fs := storage.NewMem()
	f, _ := fs.Create("x")
	w, err := NewWriter(f, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k1, k2 := mkKey("b", "f", "q", 5, cell.Put), mkKey("a", "f", "q", 5, cell.Put)
	if err := w.Append(k1, nil, 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(k2, nil, 1); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("out of order key: %v", err)
	}
	if err := w.Append(k1, nil, 6); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("equal key with a higher sequence id: %v", err)
	}
	if err := w.Append(k1, []byte("dup"), 5); err != nil {
		t.Fatalf("equal key and sequence id: %v", err)
	}
	for _, bad := range []cell.Key{cell.Key("short"), cell.AppendFirstOnRow(nil, []byte("c")),
		mkKey("", "f", "q", 1, cell.Put), mkKey("c", "", "q", 1, cell.Put), mkKey("c", "f", "q", -1, cell.Put)} {
		if err := w.Append(bad, nil, 1); !errors.Is(err, ErrInvalidCell) {
			t.Fatalf("Append(%x): %v, want ErrInvalidCell", []byte(bad), err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(mkKey("z", "f", "q", 1, cell.Put), nil, 1); !errors.Is(err, ErrFinished) {
		t.Fatalf("Append after Finish: %v", err)
	}
	if _, err := w.Finish(); !errors.Is(err, ErrFinished) {
		t.Fatalf("second Finish: %v", err)
	}
	w.Abort() // no-op

	for _, o := range []WriterOptions{{Encoding: 9}, {Compression: 9}, {Bloom: 9}, {BloomFPRate: 1}, {BloomFPRate: -0.1}, {BlockSize: -1}} {
		f, _ := fs.Create(fmt.Sprintf("bad%v", o))
		if _, err := NewWriter(f, o); err == nil {
			t.Errorf("NewWriter(%+v) accepted", o)
		}
	}
}

func TestParse(t *testing.T) {
	for i := EncodingNone; i < numEncodings; i++ {
		if got, err := ParseEncoding(i.String()); err != nil || got != i {
			t.Errorf("ParseEncoding(%s) = %v, %v", i, got, err)
		}
	}
	for i := CompressionNone; i < numCompressions; i++ {
		if got, err := ParseCompression(i.String()); err != nil || got != i {
			t.Errorf("ParseCompression(%s) = %v, %v", i, got, err)
		}
	}
	for i := BloomNone; i < numBloomTypes; i++ {
		if got, err := ParseBloomType(i.String()); err != nil || got != i {
			t.Errorf("ParseBloomType(%s) = %v, %v", i, got, err)
		}
	}
	if got, err := ParseCompression("zstd"); err != nil || got != CompressionZstd {
		t.Errorf("lower case: %v %v", got, err)
	}
	for _, s := range []string{"FAST_DIFF", "LZO", "ROWPREFIX_FIXED_LENGTH", ""} {
		_, e1 := ParseEncoding(s)
		_, e2 := ParseCompression(s)
		_, e3 := ParseBloomType(s)
		if e1 == nil || e2 == nil || e3 == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// TestFileInfo checks caller entries, the major-compaction flag and the
// creation time.
func TestFileInfo(t *testing.T) {
	fs := storage.NewMem()
	f, _ := fs.Create("i")
	w, _ := NewWriter(f, WriterOptions{})
	if err := w.Append(mkKey("r", "f", "q", 1, cell.Put), []byte("v"), 3); err != nil {
		t.Fatal(err)
	}
	v := []byte("value")
	w.SetInfo("BULKLOAD_TIME", v)
	v[0] = 'X' // copied
	w.SetInfo("empty", nil)
	w.SetMajorCompacted(true)
	wm, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(fs, "i", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := r.Meta()
	if string(m.Info["BULKLOAD_TIME"]) != "value" || m.Info["empty"] == nil || len(m.Info) != 2 || !m.MajorCompacted {
		t.Fatalf("info %q major %v", m.Info, m.MajorCompacted)
	}
	if m.CreatedAt.IsZero() || !m.CreatedAt.Equal(wm.CreatedAt) {
		t.Fatalf("created %v, writer said %v", m.CreatedAt, wm.CreatedAt)
	}
}

// TestEarliestPutTimestamp: the file info records the earliest put's timestamp (delete markers
// do not count; none: MaxInt64), and a file info without it (an older file) reads as
// MinInt64, "puts as old as can be".
func TestEarliestPutTimestamp(t *testing.T) {
	fs := storage.NewMem()
	m := writeFile(t, fs, "p", WriterOptions{}, []tcell{
		{key: mkKey("r", "f", "a", 9, cell.Put), value: []byte("v"), seq: 1},
		{key: mkKey("r", "f", "a", 3, cell.DeleteColumn), seq: 2},
		{key: mkKey("r", "f", "b", 7, cell.Put), value: []byte("v"), seq: 1},
	})
	if m.EarliestPutTimestamp != 7 {
		t.Fatalf("earliest put %d, want 7", m.EarliestPutTimestamp)
	}
	r, err := Open(fs, "p", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Meta().EarliestPutTimestamp; got != 7 {
		t.Fatalf("read earliest put %d, want 7", got)
	}
	r.Close()
	if m := writeFile(t, fs, "d", WriterOptions{}, []tcell{{key: mkKey("r", "f", "a", 3, cell.DeleteColumn), seq: 2}}); m.EarliestPutTimestamp != math.MaxInt64 {
		t.Fatalf("earliest put of a file of markers %d, want MaxInt64", m.EarliestPutTimestamp)
	}

	fi := fileInfo{entryCount: 1, firstKey: mkKey("r", "f", "a", 3, cell.Put), lastKey: mkKey("r", "f", "a", 3, cell.Put)}
	old, reason := decodeFileInfo(fi.encode())
	if reason != "" {
		t.Fatal(reason)
	}
	if old.hasEarliestPut || metaOf(&old, &trailer{}, 0).EarliestPutTimestamp != math.MinInt64 {
		t.Fatalf("a file info without the earliest put reads %v %d", old.hasEarliestPut, metaOf(&old, &trailer{}, 0).EarliestPutTimestamp)
	}
	fi.earliestPutTs, fi.hasEarliestPut = 3, true
	if got, reason := decodeFileInfo(fi.encode()); reason != "" || !got.hasEarliestPut || got.earliestPutTs != 3 {
		t.Fatalf("decoded %v %d %q", got.hasEarliestPut, got.earliestPutTs, reason)
	}
}
