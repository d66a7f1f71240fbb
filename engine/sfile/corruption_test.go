package sfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/storage/faultfs"
)

// smallFile is a file with every kind of block: several data blocks, a
// three-level index, two bloom chunks.
func smallFile(t testing.TB, comp Compression) ([]byte, []tcell) {
	t.Helper()
	var cells []tcell
	for i := 0; i < 80; i++ {
		cells = append(cells, tcell{key: mkKey(fmt.Sprintf("row%03d", i), "f", "q", int64(i), cell.Put),
			value: bytes.Repeat([]byte{'v'}, i%7), seq: uint64(i)})
	}
	fs := storage.NewMem()
	m := writeFile(t, fs, "s", WriterOptions{Encoding: EncodingDiff, Compression: comp, BlockSize: 200, IndexBlockSize: 50,
		Bloom: BloomRow, BloomBlockSize: 16, RestartInterval: 3}, cells)
	if m.IndexLevels < 3 {
		t.Fatalf("want a 3-level index, have %d", m.IndexLevels)
	}
	data, err := storage.ReadFile(fs, "s")
	if err != nil {
		t.Fatal(err)
	}
	return data, cells
}

// exercise opens a file and uses every read path; it returns the first
// error.
func exercise(fs storage.FS, path string, cells []tcell) error {
	r, err := Open(fs, path, ReaderOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{})
	defer s.Close()
	n := 0
	for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
		n++
	}
	if s.Err() != nil {
		return s.Err()
	}
	for ok := s.SeekToLastRow(); ok; ok = s.SeekToPreviousRow(s.Key()) {
	}
	if s.Err() != nil {
		return s.Err()
	}
	for _, c := range cells {
		r.MayContainRow(c.key.Row())
		if _, err := r.bloomChunkFor(c.key.Row()); err != nil {
			return err
		}
	}
	if _, err := r.MidKey(); err != nil {
		return err
	}
	if err := Dump(io.Discard, fs, path, DumpOptions{Meta: true, Index: true, Blocks: true, Cells: true}); err != nil {
		return err
	}
	if n != len(cells) {
		return fmt.Errorf("scanned %d cells, want %d", n, len(cells))
	}
	return nil
}

// bloomChunkFor reads the bloom chunk a row maps to (tests only: the
// public API hides read errors behind "may contain").
func (r *Reader) bloomChunkFor(row []byte) ([]byte, error) {
	if r.bloom == nil {
		return nil, nil
	}
	i := r.bloom.chunkFor(cell.AppendFirstOnRow(nil, row))
	if i < 0 {
		return nil, nil
	}
	return r.bloomChunk(i)
}

// blockStarts lists the offsets of every block of a healthy file.
func blockStarts(t *testing.T, fs storage.FS, path string) []uint64 {
	t.Helper()
	r, err := Open(fs, path, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	starts := []uint64{r.tr.rootIndex.off, r.tr.fileInfo.off, r.tr.bloomIndex.off}
	for _, c := range r.bloom.chunks {
		starts = append(starts, c.h.off)
	}
	var walk func(ib indexBlock)
	walk = func(ib indexBlock) {
		for i := 0; i < ib.n; i++ {
			_, h := ib.entry(i)
			starts = append(starts, h.off)
			if ib.level > 1 {
				var buf []byte
				child, err := r.loadIndexBlock(h, ib.level-1, &buf)
				if err != nil {
					t.Fatal(err)
				}
				walk(child)
			}
		}
	}
	walk(r.root)
	slices.Sort(starts)
	return slices.Compact(starts)
}

// TestCorruptionEveryByte flips each byte of a file in turn: every flip is
// detected, as ErrCorruption naming the file and the damaged block's
// offset (or ErrUnsupportedVersion for the version field), never a panic.
func TestCorruptionEveryByte(t *testing.T) {
	for _, comp := range []Compression{CompressionNone, CompressionSnappy} {
		t.Run(comp.String(), func(t *testing.T) {
			data, cells := smallFile(t, comp)
			fs := storage.NewMem()
			if err := storage.WriteFile(fs, "good", data); err != nil {
				t.Fatal(err)
			}
			if err := exercise(fs, "good", cells); err != nil {
				t.Fatalf("healthy file: %v", err)
			}
			starts := blockStarts(t, fs, "good")
			trailerOff := uint64(len(data) - trailerSize)
			if starts[0] != 0 {
				t.Fatalf("first block at %d", starts[0])
			}
			for p := range data {
				bad := bytes.Clone(data)
				bad[p] ^= 0x5a
				if err := storage.WriteFile(fs, "bad", bad); err != nil {
					t.Fatal(err)
				}
				err := exercise(fs, "bad", cells)
				if err == nil {
					t.Fatalf("flip at %d not detected", p)
				}
				if uint64(p) >= trailerOff+52 && uint64(p) < trailerOff+54 {
					if !errors.Is(err, ErrUnsupportedVersion) {
						t.Fatalf("flip of the version at %d: %v", p, err)
					}
					continue
				}
				var ce *CorruptionError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorruption) {
					t.Fatalf("flip at %d: %v is not a CorruptionError", p, err)
				}
				want := trailerOff
				if uint64(p) < trailerOff {
					i, found := slices.BinarySearch(starts, uint64(p))
					if !found {
						i--
					}
					want = starts[i]
				}
				if ce.File != "bad" || uint64(ce.Offset) != want {
					t.Fatalf("flip at %d: error names %s offset %d, want bad offset %d: %v", p, ce.File, ce.Offset, want, err)
				}
			}
		})
	}
}

func TestCorruptionMessages(t *testing.T) {
	data, _ := smallFile(t, CompressionNone)
	fs := storage.NewMem()
	open := func(b []byte) error {
		if err := storage.WriteFile(fs, "x", b); err != nil {
			t.Fatal(err)
		}
		r, err := Open(fs, "x", ReaderOptions{})
		if err == nil {
			r.Close()
		}
		return err
	}
	check := func(name string, err error, wantCorrupt bool, wantText string) {
		t.Helper()
		if err == nil || errors.Is(err, ErrCorruption) != wantCorrupt || !strings.Contains(err.Error(), wantText) {
			t.Errorf("%s: %v; want corruption=%v mentioning %q", name, err, wantCorrupt, wantText)
		}
	}
	// Truncated anywhere.
	for _, n := range []int{0, 1, 10, trailerSize - 1, trailerSize, len(data) / 2, len(data) - 1} {
		check(fmt.Sprintf("truncated to %d", n), open(data[:n]), true, "truncated")
	}
	check("foreign file", open([]byte(strings.Repeat("not a store file\n", 20))), true, "not a store file")
	check("appended bytes", open(append(bytes.Clone(data), 0, 0)), true, "not a store file")

	// Another version, checksum fixed: a clear version error.
	v2 := bytes.Clone(data)
	tr := v2[len(v2)-trailerSize:]
	binary.LittleEndian.PutUint16(tr[52:], 2)
	binary.LittleEndian.PutUint32(tr[48:], trailerChecksum(tr))
	err := open(v2)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("version 2: %v", err)
	}

	// A data block checksum error names the kind and offset.
	if err := storage.WriteFile(fs, "good", data); err != nil {
		t.Fatal(err)
	}
	good, err := Open(fs, "good", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var first blockHandle
	n := 0
	(&dumper{r: good}).leaves(good.root, func(i int, _ []byte, h blockHandle) error {
		if i == 0 {
			first = h
		}
		return nil
	}, &n)
	good.Close()
	bad := bytes.Clone(data)
	bad[first.off+20] ^= 1
	if err := storage.WriteFile(fs, "y", bad); err != nil {
		t.Fatal(err)
	}
	r, err := Open(fs, "y", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{})
	defer s.Close()
	if s.Seek(cell.AppendFirstOnRow(nil, nil)) {
		t.Fatal("seek into a corrupt block succeeded")
	}
	check("data block", s.Err(), true, fmt.Sprintf("sfile: corruption in y at offset %d: data block: checksum mismatch", first.off))
	if s.Next() || s.Seek(cell.AppendFirstOnRow(nil, nil)) {
		t.Fatal("scanner moved after an error")
	}
}

// TestFinishSyncs: a finished file survives a crash once its name is
// durable (the region syncs the directory after renaming it into place).
func TestFinishSyncs(t *testing.T) {
	mem := storage.NewMem()
	if err := mem.MkdirAll("d"); err != nil {
		t.Fatal(err)
	}
	ffs := faultfs.New(mem)
	cells := userCells(500, 100)
	writeFile(t, ffs, "d/f", WriterOptions{Compression: CompressionLZ4, BlockSize: 4096}, cells)
	if n := ffs.Count(faultfs.OpSync); n != 1 {
		t.Fatalf("%d syncs, want 1", n)
	}
	if n := ffs.Count(faultfs.OpClose); n != 1 {
		t.Fatalf("%d closes, want 1", n)
	}
	if err := mem.SyncDir("d"); err != nil {
		t.Fatal(err)
	}
	after, err := ffs.CrashClone(storage.CrashOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(after, "d/f", ReaderOptions{})
	if err != nil {
		t.Fatalf("after a crash: %v", err)
	}
	defer r.Close()
	s := r.NewScanner(ScanOptions{})
	defer s.Close()
	sameCells(t, scanAll(t, s), cells)
}

// TestWriteErrors: a failing write or sync fails Finish (or Append) and
// closes the file; Abort closes without finishing.
func TestWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule faultfs.Rule
	}{
		{"write", faultfs.Rule{Ops: faultfs.OpWrite, Nth: 3, Action: faultfs.Fail}},
		{"short write", faultfs.Rule{Ops: faultfs.OpWrite, Nth: 2, Action: faultfs.ShortWrite}},
		{"last write", faultfs.Rule{Ops: faultfs.OpWrite, Nth: 0, Action: faultfs.Fail, Path: "never"}},
		{"sync", faultfs.Rule{Ops: faultfs.OpSync, Action: faultfs.Fail}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := storage.NewMem()
			ffs := faultfs.New(mem)
			ffs.AddRule(tc.rule)
			f, err := ffs.Create("f")
			if err != nil {
				t.Fatal(err)
			}
			w, err := NewWriter(f, WriterOptions{BlockSize: 1024})
			if err != nil {
				t.Fatal(err)
			}
			var appendErr error
			for _, c := range userCells(200, 100) {
				if appendErr = w.Append(c.key, c.value, c.seq); appendErr != nil {
					break
				}
			}
			_, err = w.Finish()
			if tc.rule.Path == "never" {
				if err != nil || appendErr != nil {
					t.Fatalf("no fault injected: %v %v", appendErr, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Finish succeeded (append error %v)", appendErr)
			}
			if !errors.Is(err, faultfs.ErrInjected) && !errors.Is(err, ErrFinished) {
				t.Fatalf("Finish: %v", err)
			}
			if appendErr != nil && !errors.Is(appendErr, faultfs.ErrInjected) {
				t.Fatalf("Append: %v", appendErr)
			}
			if n := ffs.Count(faultfs.OpClose); n != 1 {
				t.Fatalf("%d closes, want 1", n)
			}
		})
	}
	mem := storage.NewMem()
	ffs := faultfs.New(mem)
	f, _ := ffs.Create("a")
	w, _ := NewWriter(f, WriterOptions{})
	w.Append(mkKey("r", "f", "q", 1, cell.Put), nil, 1)
	w.Abort()
	w.Abort()
	if n := ffs.Count(faultfs.OpClose); n != 1 {
		t.Fatalf("Abort: %d closes", n)
	}
	if _, err := w.Finish(); !errors.Is(err, ErrFinished) {
		t.Fatalf("Finish after Abort: %v", err)
	}
}

// TestReadErrors: an I/O error while reading a block is returned by the
// scanner (not as corruption).
func TestReadErrors(t *testing.T) {
	mem := storage.NewMem()
	cells := userCells(500, 100)
	writeFile(t, mem, "f", WriterOptions{BlockSize: 4096}, cells)
	ffs := faultfs.New(mem)
	r, err := Open(ffs, "f", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ffs.AddRule(faultfs.Rule{Ops: faultfs.OpRead, Action: faultfs.Fail})
	s := r.NewScanner(ScanOptions{})
	defer s.Close()
	if s.Seek(cells[100].key) {
		t.Fatal("Seek succeeded despite read errors")
	}
	if !errors.Is(s.Err(), faultfs.ErrInjected) || errors.Is(s.Err(), ErrCorruption) {
		t.Fatalf("Err: %v", s.Err())
	}
}
