package regionserver

import (
	"runtime"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// A request's cell count sizes the cells taken from its block only once the block could hold
// that many: a count far above it is refused before anything is allocated for it.
func TestTakeCellsBoundsTheCount(t *testing.T) {
	row := []byte("row")
	block := cell.AppendKeyValue(nil, row, []byte("f"), []byte("a"), 5, cell.Put, []byte("v"))
	block = cell.AppendKeyValue(block, row, []byte("f"), []byte("b"), 5, cell.Put, nil)
	cells, rest, err := takeCells(block, 2, row)
	if err != nil || len(cells) != 2 || len(rest) != 0 || string(cells[1].Qualifier) != "b" {
		t.Fatalf("two cells: %v, %d cells, %d bytes left", err, len(cells), len(rest))
	}
	if _, _, err := takeCells(block, 3, row); err == nil {
		t.Fatal("three cells taken from a block of two")
	}

	zeros := make([]byte, 1<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = takeCells(zeros, int32(len(zeros)), row)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing it allocated %d KiB", grew>>10)
	}
	if err == nil || !strings.Contains(err.Error(), "exceeds the cell block") {
		t.Fatalf("a count of one cell per byte: %v", err)
	}
}
