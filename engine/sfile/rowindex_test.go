package sfile

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/storage"
)

// ROW_INDEX_V1 blocks have a restart point at each row's first cell and every 16 cells within a
// row (NONE's every 16 cells wherever rows start): with rows of 40 cells (restarts at cells 0, 16
// and 32 of each) a block of N cells has about 3N/40 restarts, and every cell is found.
func TestRowIndexRestartsAtRows(t *testing.T) {
	fs := storage.NewMem()
	var cells []tcell
	for r := range 200 {
		for q := range 40 {
			cells = append(cells, tcell{key: mkKey(fmt.Sprintf("row%04d", r), "f", fmt.Sprintf("q%02d", q), 5, cell.Put), value: []byte("v"), seq: 1})
		}
	}
	blockLine := regexp.MustCompile(`, (\d+) cells, (\d+) restarts`)
	for _, enc := range []Encoding{EncodingNone, EncodingRowIndex} {
		name := enc.String()
		writeFile(t, fs, name, WriterOptions{Encoding: enc, BlockSize: 4096}, cells)
		var out bytes.Buffer
		if err := Dump(&out, fs, name, DumpOptions{Blocks: true}); err != nil {
			t.Fatal(err)
		}
		blocks, total := 0, 0
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			m := blockLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			blocks++
			n, _ := strconv.Atoi(m[1])
			restarts, _ := strconv.Atoi(m[2])
			total += restarts
			if want := (n + 15) / 16; enc == EncodingNone && restarts != want {
				t.Fatalf("%s block of %d cells has %d restarts, want %d", name, n, restarts, want)
			}
		}
		if blocks < 5 {
			t.Fatalf("%s: %d data blocks in the dump", name, blocks)
		}
		// Three restarts per 40-cell row (cells 0, 16, 32), and one more where a block cuts a row.
		if enc == EncodingRowIndex && (total < 3*200 || total > 3*200+blocks) {
			t.Fatalf("%s: %d restarts in %d blocks, want 600 to %d", name, total, blocks, 600+blocks)
		}
		r, err := Open(fs, name, ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := r.NewScanner(ScanOptions{})
		for _, c := range []tcell{cells[0], cells[4123], cells[len(cells)-1]} {
			if !s.Seek(c.key) || !bytes.Equal(s.Key(), c.key) {
				t.Fatalf("%s: seek to %v found %v", name, c.key, cell.Key(s.Key()))
			}
		}
		s.Close()
		r.Close()
	}
}
