//go:build linux

package region

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/storage"
)

// readCountingFS counts the bytes read from each file opened through it.
type readCountingFS struct {
	storage.FS
	mu    sync.Mutex
	bytes map[string]int64
}

type countedFile struct {
	storage.ReadableFile
	fs   *readCountingFS
	name string
}

func (f *readCountingFS) Open(name string) (storage.ReadableFile, error) {
	rf, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &countedFile{ReadableFile: rf, fs: f, name: name}, nil
}

func (c *countedFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.ReadableFile.ReadAt(p, off)
	c.fs.mu.Lock()
	c.fs.bytes[c.name] += int64(n)
	c.fs.mu.Unlock()
	return n, err
}

// read returns the bytes read so far from files whose path has part, and zeroes every count.
func (f *readCountingFS) read(part string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for name, b := range f.bytes {
		if strings.Contains(name, part) {
			n += b
		}
	}
	clear(f.bytes)
	return n
}

// TestLoadColumnFamiliesOnDemand: a scan that loads column families on demand returns exactly
// what the same scan returns without (cells, order, versions, deletes, columns selected, rows
// in both store files and the memstore, results and cell blocks, batches of a few rows), and
// reads the non-essential family's store files only for the rows the filter keeps.
func TestLoadColumnFamiliesOnDemand(t *testing.T) {
	a, f, z := fam("a"), fam("f"), fam("z")
	a.MaxVersions, z.MaxVersions = 3, 3
	e := newEnv(t, a, f, z)
	counting := &readCountingFS{FS: e.fs, bytes: map[string]int64{}}
	e.cfg.FS = counting
	e.reopen()

	big := bytes.Repeat([]byte("v"), 200) // non-essential cells that fill blocks
	put := func(row int, ts int64) {
		t.Helper()
		r := fmt.Appendf(nil, "r%04d", row)
		m := NewMutation(r)
		m.Put([]byte("a"), []byte("x"), ts, append(fmt.Appendf(nil, "a%d-%d-", row, ts), big...))
		m.Put([]byte("z"), []byte("y"), ts, append(fmt.Appendf(nil, "z%d-%d-", row, ts), big...))
		m.Put([]byte("z"), []byte("w"), ts, []byte("w"))
		switch {
		case row%50 == 0:
			m.Put([]byte("f"), []byte("flag"), ts, []byte("yes"))
		case row%7 == 0:
			// no flag: FilterIfMissing drops the row
		default:
			m.Put([]byte("f"), []byte("flag"), ts, []byte("no"))
		}
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	for row := range 600 {
		put(row, 10)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	// Newer versions of some rows in the memstore, and deletes of a non-essential column.
	for row := 0; row < 600; row += 3 {
		put(row, 20)
	}
	for row := 0; row < 600; row += 20 {
		d := NewMutation(fmt.Appendf(nil, "r%04d", row))
		d.Ops = append(d.Ops, Op{Type: cell.DeleteColumn, Family: []byte("z"), Qualifier: []byte("w"), Timestamp: 30})
		if err := e.r.Mutate(d); err != nil {
			t.Fatal(err)
		}
	}

	scanAll := func(scan Scan) ([]string, int) {
		t.Helper()
		sc, err := e.r.Scanner(&scan)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		var out []string
		rows := 0
		for {
			b, err := sc.Next()
			if err != nil {
				t.Fatal(err)
			}
			if scan.CellBlock {
				for kvs := b.Block; len(kvs) > 0; {
					n := cell.KeyValue(kvs).Len()
					kv := cell.KeyValue(kvs[:n])
					out = append(out, fmt.Sprintf("%s/%s", kv.Key(), kv.Value()[:min(len(kv.Value()), 12)]))
					kvs = kvs[n:]
				}
				rows += len(b.CellsPerResult)
			}
			for _, r := range b.Results {
				rows++
				for _, c := range r.Cells {
					out = append(out, fmt.Sprintf("%s/%s", c.Key, c.Value[:min(len(c.Value), 12)]))
				}
			}
			if !b.More {
				return out, rows
			}
		}
	}
	scvf := func() filter.Filter {
		return &filter.SingleColumnValueFilter{Family: []byte("f"), Qualifier: []byte("flag"), Op: filter.Equal,
			Comparator: &filter.BinaryComparator{Value: []byte("yes")}, FilterIfMissing: true, LatestVersionOnly: true}
	}
	for _, c := range []struct {
		name string
		scan Scan
	}{
		{"all families", Scan{Caching: 7}},
		{"versions", Scan{Caching: 7, MaxVersions: 3}},
		{"columns", Scan{Caching: 100, Columns: []Column{{Family: []byte("z"), Qualifier: []byte("w")}, {Family: []byte("f")}}}},
		{"cell block", Scan{Caching: 5, CellBlock: true, ReuseResults: true}},
		{"time range", Scan{Caching: 50, TimeRange: TimeRange{Min: 5, Max: 15}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := c.scan
			plain.Filter = scvf()
			want, wantRows := scanAll(plain)
			plainZ := counting.read("/z/")
			onDemand := c.scan
			onDemand.Filter, onDemand.LoadColumnFamiliesOnDemand = scvf(), true
			got, gotRows := scanAll(onDemand)
			onDemandZ := counting.read("/z/")
			if gotRows != wantRows || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("on demand: %d rows, %d cells; loading everything: %d rows, %d cells\nfirst cells on demand: %v\nloading everything: %v",
					gotRows, len(got), wantRows, len(want), got[:min(8, len(got))], want[:min(8, len(want))])
			}
			if wantRows == 0 {
				t.Fatal("the filter kept no row")
			}
			t.Logf("%d rows; family z's files: %d bytes read loading everything, %d on demand", wantRows, plainZ, onDemandZ)
			if plainZ == 0 || onDemandZ*3 > plainZ {
				t.Fatalf("family z's files: %d bytes read on demand, %d loading everything: want less than a third", onDemandZ, plainZ)
			}
		})
	}

	// A filter that needs every family, and a reversed scan, read every family (and agree).
	for _, c := range []struct {
		name string
		scan Scan
	}{
		{"essential everywhere", Scan{Filter: &filter.SingleColumnValueFilter{Family: []byte("f"), Qualifier: []byte("flag"), Op: filter.Equal,
			Comparator: &filter.BinaryComparator{Value: []byte("yes")}, LatestVersionOnly: true}}},
		{"reversed", Scan{Reversed: true, Filter: scvf()}},
	} {
		plain := c.scan
		want, _ := scanAll(plain)
		onDemand := c.scan
		onDemand.LoadColumnFamiliesOnDemand = true
		got, _ := scanAll(onDemand)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: on demand %d cells, loading everything %d", c.name, len(got), len(want))
		}
	}
}

// BenchmarkScanOnDemand scans a two-family table (a small flag family, a family of 1 KiB
// values) for the 1 % of rows whose flag matches, loading every family or the value family on
// demand; the store files are on the storage, no block cache.
//
//	go test -run '^$' -bench BenchmarkScanOnDemand -benchtime 20x ./engine/region/
func BenchmarkScanOnDemand(b *testing.B) {
	d, f := fam("d"), fam("f")
	d.BlockSize, f.BlockSize = 64<<10, 64<<10
	e := newEnv(b, d, f)
	counting := &readCountingFS{FS: e.fs, bytes: map[string]int64{}}
	e.cfg.FS = counting
	e.reopen()
	const rows = 20000
	value := bytes.Repeat([]byte("x"), 1024)
	for i := range rows {
		m := NewMutation(fmt.Appendf(nil, "row%06d", i))
		m.Put([]byte("d"), []byte("v"), 1, value)
		flag := []byte("no")
		if i%100 == 0 {
			flag = []byte("yes")
		}
		m.Put([]byte("f"), []byte("flag"), 1, flag)
		if err := e.r.Mutate(m); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.r.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, onDemand := range []bool{false, true} {
		name := "loadAll"
		if onDemand {
			name = "onDemand"
		}
		b.Run(name, func(b *testing.B) {
			counting.read("")
			for b.Loop() {
				sc, err := e.r.Scanner(&Scan{Caching: 1000, NoCache: true, LoadColumnFamiliesOnDemand: onDemand,
					Filter: &filter.SingleColumnValueFilter{Family: []byte("f"), Qualifier: []byte("flag"), Op: filter.Equal,
						Comparator: &filter.BinaryComparator{Value: []byte("yes")}, FilterIfMissing: true, LatestVersionOnly: true}})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					batch, err := sc.Next()
					if err != nil {
						b.Fatal(err)
					}
					n += len(batch.Results)
					if !batch.More {
						break
					}
				}
				sc.Close()
				if n != rows/100 {
					b.Fatalf("%d rows, want %d", n, rows/100)
				}
			}
			b.ReportMetric(float64(counting.read(""))/float64(b.N), "bytes-read/op")
		})
	}
}
