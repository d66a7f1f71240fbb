package sfile

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/quick"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// TestBloomFalsePositiveRate writes the even rows of a key space and asks
// for the odd ones (inside the file's key range, so only the filter can
// answer): the measured rate must be near the configured one.
func TestBloomFalsePositiveRate(t *testing.T) {
	const rows = 60000
	for _, tc := range []struct {
		typ   BloomType
		fp    float64
		chunk int
	}{
		{BloomRow, 0.01, 0},
		{BloomRow, 0.01, 4096}, // many chunks
		{BloomRow, 0.001, 0},
		{BloomRow, 0.1, 0},
		{BloomRowCol, 0.01, 0},
	} {
		t.Run(fmt.Sprintf("%s-%g-chunk%d", tc.typ, tc.fp, tc.chunk), func(t *testing.T) {
			cells := make([]tcell, 0, rows/2)
			for i := 0; i < rows; i += 2 {
				cells = append(cells, tcell{key: mkKey(fmt.Sprintf("user%010d", i), "f", "q", 1, cell.Put), value: []byte("v")})
			}
			fs := storage.NewMem()
			m := writeFile(t, fs, "b", WriterOptions{Bloom: tc.typ, BloomFPRate: tc.fp, BloomBlockSize: tc.chunk}, cells)
			r, err := Open(fs, "b", ReaderOptions{Cache: newCache(t, 4<<20, false)})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if m.BloomKeys != rows/2 {
				t.Fatalf("bloom keys %d, want %d", m.BloomKeys, rows/2)
			}
			if tc.chunk != 0 && len(r.bloom.chunks) < 10 {
				t.Fatalf("%d chunks", len(r.bloom.chunks))
			}
			fps := 0
			for i := 1; i < rows; i += 2 {
				row := []byte(fmt.Sprintf("user%010d", i))
				var may bool
				if tc.typ == BloomRow {
					may = r.MayContainRow(row)
				} else {
					may = r.MayContainRowCol(row, []byte("f"), []byte("q"))
				}
				if may {
					fps++
				}
			}
			// A present row with another column is absent too for ROWCOL.
			if tc.typ == BloomRowCol {
				for i := 0; i < rows; i += 2 {
					if r.MayContainRowCol([]byte(fmt.Sprintf("user%010d", i)), []byte("f"), []byte("other")) {
						fps++
					}
				}
			}
			probes := rows / 2
			if tc.typ == BloomRowCol {
				probes = rows
			}
			rate := float64(fps) / float64(probes)
			t.Logf("false-positive rate %.4f (target %g), %d bytes of bloom for %d keys", rate, tc.fp,
				bloomBytes(r), m.BloomKeys)
			if rate > tc.fp*1.3 || rate < tc.fp/4 {
				t.Fatalf("false-positive rate %.4f, target %g", rate, tc.fp)
			}
		})
	}
}

func bloomBytes(r *Reader) uint64 {
	var n uint64
	for _, c := range r.bloom.chunks {
		n += c.h.size - blockOverhead
	}
	return n
}

// TestBloomNoFalseNegatives: whatever rows are written, every one is
// reported as possibly present (property test).
func TestBloomNoFalseNegatives(t *testing.T) {
	n := 0
	prop := func(rows [][]byte, seed uint64) bool {
		n++
		var cells []tcell
		for _, r := range rows {
			if len(r) == 0 || len(r) > 1000 {
				continue
			}
			cells = append(cells, tcell{key: mkKey(string(r), "f", string(r[:len(r)/2]), 7, cell.Put)})
		}
		if len(cells) == 0 {
			return true
		}
		cells = sortCells(cells)
		rng := rand.New(rand.NewPCG(seed, 0))
		typ := []BloomType{BloomRow, BloomRowCol}[rng.IntN(2)]
		fs := storage.NewMem()
		writeFile(t, fs, "p", WriterOptions{Bloom: typ, BloomFPRate: 0.5 * rng.Float64(), BloomBlockSize: 64 * (1 + rng.IntN(3)),
			BlockSize: 64}, cells)
		r, err := Open(fs, "p", ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for _, c := range cells {
			if !r.MayContainRow(c.key.Row()) || !r.MayContainRowCol(c.key.Row(), c.key.Family(), c.key.Qualifier()) {
				t.Logf("false negative for %v (%s)", c.key, typ)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 200}); err != nil {
		t.Fatal(err)
	}
}

func TestBloomParams(t *testing.T) {
	for _, fp := range []float64{0.5, 0.1, 0.01, 0.001, 1e-6} {
		bpk, k := bloomParams(fp)
		if got := blockedBloomFP(bpk, k); got > fp {
			t.Errorf("fp %g: %v bits/key, %d probes give %g", fp, bpk, k, got)
		}
		t.Logf("fp %g: %.2f bits/key, %d probes", fp, bpk, k)
	}
}
