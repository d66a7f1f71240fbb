package sfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// holdsNoBlock fails t if the scanner holds a block of the file: every block of it is evicted and
// none may stay referenced. The slots freed are then overwritten (other blocks cached), so a cell
// still pointing into one reads other bytes.
func holdsNoBlock(t *testing.T, cache *blockcache.Combined, id uint64, round int) {
	t.Helper()
	cache.L2.EvictFile(id)
	if p := cache.L2.Stats().PendingFree; p != 0 {
		t.Fatalf("%d evicted blocks still referenced", p)
	}
	for i := range 8 {
		k := blockcache.Key{File: 1 << 40, Offset: int64(round*8 + i)}
		_ = cache.L2.Put(k, bytes.Repeat([]byte{0xa5}, 2048), blockcache.PrioritySingle)
	}
}

func sameCell(t *testing.T, s cell.Scanner, want tcell, what string) {
	t.Helper()
	if !bytes.Equal(s.Key(), want.key) || !bytes.Equal(s.Value(), want.value) || !bytes.Equal(s.Tags(), want.tags) ||
		(s.Tags() == nil) != (want.tags == nil) || s.Seq() != want.seq {
		t.Fatalf("%s: at %v/seq=%d, want %v", what, s.Key(), s.Seq(), want)
	}
	k, v, tags, seq := s.(cell.Current).Current()
	if !bytes.Equal(k, want.key) || !bytes.Equal(v, want.value) || !bytes.Equal(tags, want.tags) || seq != want.seq {
		t.Fatalf("%s: Current is %v/seq=%d, want %v", what, k, seq, want)
	}
}

// A parked scanner holds no block, still returns its cell, and goes on from it: forward through
// the file parked at random cells (its blocks evicted and their slots reused, or still cached),
// after seeks, and backwards row by row; every encoding, with and without compression.
func TestParkResumesWhereItWas(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cells := genCells(rng, 3000, 1500)
	rows := distinctRows(cells)
	for enc := EncodingNone; enc < numEncodings; enc++ {
		for _, comp := range []Compression{CompressionNone, CompressionSnappy} {
			t.Run(fmt.Sprintf("%s-%s", enc, comp), func(t *testing.T) {
				fs := storage.NewMem()
				id := uint64(100 + int(enc)*10 + int(comp))
				writeFile(t, fs, "p", WriterOptions{Encoding: enc, Compression: comp, BlockSize: 1024, IndexBlockSize: 256,
					RestartInterval: 1 + rng.IntN(8)}, cells)
				cache := newCache(t, 8<<20, false)
				r, err := Open(fs, "p", ReaderOptions{Cache: cache, FileID: id})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				round := 0
				park := func(s cell.Scanner, want tcell) {
					t.Helper()
					s.(cell.Parker).Park()
					if rng.IntN(2) == 0 {
						round++
						holdsNoBlock(t, cache, id, round)
					}
					sameCell(t, s, want, "parked")
				}

				// Forward, parked at a third of the cells.
				s := r.NewScanner(ScanOptions{CacheBlocks: true})
				var got []tcell
				for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
					got = append(got, tcell{bytes.Clone(s.Key()), bytes.Clone(s.Value()), s.Seq(), bytes.Clone(s.Tags())})
					if rng.IntN(3) == 0 {
						park(s, cells[len(got)-1])
					}
				}
				if s.Err() != nil {
					t.Fatal(s.Err())
				}
				sameCells(t, got, cells)
				// Past the last cell it holds nothing, parked or not.
				holdsNoBlock(t, cache, id, 0)
				s.Close()

				// Seeks, then a park, then a few cells on.
				s = r.NewScanner(ScanOptions{CacheBlocks: true})
				for range 200 {
					i := rng.IntN(len(cells))
					if !s.Seek(cells[i].key) {
						t.Fatalf("Seek(%v): %v", cells[i].key, s.Err())
					}
					i = lowerBound(cells, cells[i].key)
					park(s, cells[i])
					for j := i + 1; j < min(i+1+rng.IntN(40), len(cells)); j++ {
						if !s.Next() {
							t.Fatalf("Next after a parked seek: %v", s.Err())
						}
						sameCell(t, s, cells[j], "after a park")
						if rng.IntN(4) == 0 {
							park(s, cells[j])
						}
					}
				}
				s.Close()

				// Backwards: the last row, then each previous row, parked within and between rows.
				s = r.NewScanner(ScanOptions{CacheBlocks: true})
				ok := s.SeekToLastRow()
				for ri := len(rows) - 1; ri >= 0; ri-- {
					if !ok {
						t.Fatalf("row %q: not positioned: %v", rows[ri], s.Err())
					}
					i := lowerBound(cells, cell.AppendFirstOnRow(nil, rows[ri]))
					first := cell.Key(bytes.Clone(s.Key()))
					for ; i < len(cells) && bytes.Equal(cells[i].key.Row(), rows[ri]); i++ {
						sameCell(t, s, cells[i], "reversed")
						if rng.IntN(3) == 0 {
							park(s, cells[i])
						}
						if !s.Next() && i+1 < len(cells) {
							t.Fatalf("Next in row %q: %v", rows[ri], s.Err())
						}
					}
					if rng.IntN(3) == 0 && i < len(cells) {
						park(s, cells[i])
					}
					ok = s.SeekToPreviousRow(first)
				}
				if ok || s.Err() != nil {
					t.Fatalf("a row before the first: %v", s.Err())
				}
				// Before the first row it holds nothing.
				holdsNoBlock(t, cache, id, 0)
				s.Close()
				checkNoReferences(t, cache, id)
			})
		}
	}
}
