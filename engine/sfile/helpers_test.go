package sfile

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/storage"
)

// tcell is a cell of a test file.
type tcell struct {
	key   cell.Key
	value []byte
	seq   uint64
	tags  []byte // nil without
}

func (c tcell) String() string {
	return fmt.Sprintf("%v/seq=%d/vlen=%d", c.key, c.seq, len(c.value))
}

func mkKey(row, fam, qual string, ts int64, t cell.Type) cell.Key {
	return cell.AppendKey(nil, []byte(row), []byte(fam), []byte(qual), ts, t)
}

// sortCells sorts into store order and drops exact duplicates (same key
// and sequence id).
func sortCells(cells []tcell) []tcell {
	slices.SortFunc(cells, func(a, b tcell) int { return cell.CompareWithSeq(a.key, a.seq, b.key, b.seq) })
	return slices.CompactFunc(cells, func(a, b tcell) bool {
		return cell.CompareWithSeq(a.key, a.seq, b.key, b.seq) == 0
	})
}

var cellTypes = []cell.Type{cell.Put, cell.Put, cell.Put, cell.Put, cell.Delete, cell.DeleteColumn,
	cell.DeleteFamily, cell.DeleteFamilyVersion}

// genCells makes n random cells of family "f" with the shapes that matter
// to the encodings: short and long rows, rows with many columns, columns
// with many versions, equal keys with different sequence ids, empty
// values, values larger than a block, sequence ids of 0.
func genCells(rng *rand.Rand, n int, bigValue int) []tcell {
	var cells []tcell
	letters := "abcdefghijklmnopqrstuvwxyz0123456789"
	randStr := func(min, max int) string {
		l := min + rng.IntN(max-min+1)
		b := make([]byte, l)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	value := func() []byte {
		switch r := rng.IntN(100); {
		case r < 10:
			return nil
		case r < 11 && bigValue > 0:
			v := make([]byte, bigValue+rng.IntN(bigValue))
			for i := range v {
				v[i] = byte(rng.IntN(4))
			}
			return v
		default:
			v := make([]byte, rng.IntN(120))
			for i := range v {
				v[i] = letters[rng.IntN(8)]
			}
			return v
		}
	}
	seq := func() uint64 {
		if rng.IntN(5) == 0 {
			return 0
		}
		return uint64(rng.IntN(1 << 20))
	}
	for len(cells) < n {
		row := fmt.Sprintf("row%06d", rng.IntN(n))
		if rng.IntN(10) == 0 {
			row += randStr(20, 200) // long row key
		}
		switch rng.IntN(4) {
		case 0: // many versions of one column
			q := randStr(0, 10)
			for v := 0; v < 1+rng.IntN(40); v++ {
				ts := int64(1_700_000_000_000 + rng.IntN(1000))
				cells = append(cells, tcell{mkKey(row, "f", q, ts, cellTypes[rng.IntN(len(cellTypes))]), value(), seq(), nil})
			}
		case 1: // a row with many columns
			for c := 0; c < 1+rng.IntN(60); c++ {
				cells = append(cells, tcell{mkKey(row, "f", randStr(1, 12), int64(rng.IntN(1<<40)), cell.Put), value(), seq(), nil})
			}
		case 2: // equal keys with different sequence ids
			k := mkKey(row, "f", randStr(1, 5), int64(rng.IntN(1000)), cell.Put)
			for v := 0; v < 1+rng.IntN(5); v++ {
				cells = append(cells, tcell{k, value(), uint64(rng.IntN(1 << 30)), nil})
			}
		default:
			cells = append(cells, tcell{mkKey(row, "f", randStr(0, 30), int64(rng.IntN(1<<62)), cellTypes[rng.IntN(len(cellTypes))]),
				value(), seq(), nil})
		}
	}
	// Every fifth put carries a TTL tag (the stored form of a tagged value).
	for i := range cells {
		if i%5 == 1 && cells[i].key.Type() == cell.Put {
			cells[i].tags = cell.AppendTTLTag(nil, int64(i))
		}
	}
	return sortCells(cells)
}

// writeFile writes cells to path and returns the Meta.
func writeFile(t testing.TB, fs storage.FS, path string, opts WriterOptions, cells []tcell) Meta {
	t.Helper()
	f, err := fs.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		if err := w.AppendTagged(c.key, c.value, c.tags, c.seq); err != nil {
			t.Fatalf("Append(%v): %v", c, err)
		}
	}
	m, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newCache returns a combined cache: an on-heap L1 and an off-heap L2 of
// the given size on plain pages. It is closed at the end of the test.
func newCache(t testing.TB, l2Bytes int64, cacheOnWrite bool) *blockcache.Combined {
	t.Helper()
	l1, err := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: l2Bytes,
		Hugepages: offheap.HugepagesOff, Logger: quietLogger(), CacheOnWrite: cacheOnWrite})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l2.Close() })
	return blockcache.NewCombined(l1, l2)
}

// scanAll reads every cell from the start.
func scanAll(t testing.TB, s cell.Scanner) []tcell {
	t.Helper()
	var out []tcell
	for ok := s.Seek(cell.AppendFirstOnRow(nil, nil)); ok; ok = s.Next() {
		out = append(out, tcell{bytes.Clone(s.Key()), bytes.Clone(s.Value()), s.Seq(), bytes.Clone(s.Tags())})
	}
	if err := s.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

func sameCells(t testing.TB, got, want []tcell) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d cells, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) || got[i].seq != want[i].seq {
			t.Fatalf("cell %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// lowerBound returns the index of the first cell whose key is >= k.
func lowerBound(cells []tcell, k []byte) int {
	i, _ := slices.BinarySearchFunc(cells, k, func(c tcell, k []byte) int {
		if cell.Compare(c.key, k) < 0 {
			return -1
		}
		return 1
	})
	return i
}

// distinctRows returns the rows of cells in order.
func distinctRows(cells []tcell) [][]byte {
	var rows [][]byte
	for _, c := range cells {
		if r := c.key.Row(); len(rows) == 0 || !bytes.Equal(rows[len(rows)-1], r) {
			rows = append(rows, r)
		}
	}
	return rows
}
