package main

import (
	"testing"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/compute/function/guest"
)

func item(flags uint32, cells ...abi.Cell) []byte {
	return abi.AppendRow(nil, flags, []byte("item1"), cells)
}

func q(qual, value string, ts int64) abi.Cell {
	return abi.Cell{Family: []byte("q"), Qualifier: []byte(qual), Timestamp: ts, Type: abi.TypePut, Value: []byte(value)}
}

func TestQueueCleanup(t *testing.T) {
	now = func() int64 { return 10_000 }
	if st, out := guest.Call(abi.ExportInit, abi.EncodeArgs([]string{"retain_ms"}, []string{"1000"})); st != abi.StatusOK {
		t.Fatalf("init: %d %s", st, out)
	}
	for _, c := range []struct {
		name   string
		export string
		input  []byte
		want   int32
	}{
		{"a new item", abi.ExportPreMutate, item(0, q("payload", "x", 1), q("state", "ready", 1)), abi.StatusOK},
		{"a bad state", abi.ExportPreMutate, item(0, q("state", "eaten", 1)), abi.StatusDrop},
		{"a bad column", abi.ExportPreMutate, item(0, q("colour", "red", 1)), abi.StatusDrop},
		{"a bad expiry", abi.ExportPreMutate, item(0, q("expires", "soon", 1)), abi.StatusDrop},
		{"a ready item is read", abi.ExportFilterRow, item(0, q("payload", "x", 1), q("state", "ready", 1)), abi.StatusOK},
		{"a done item is hidden", abi.ExportFilterRow, item(0, q("state", "done", 9_999), q("state", "ready", 1)), abi.StatusDrop},
		{"only its newest state counts", abi.ExportFilterRow, item(0, q("state", "ready", 9_999), q("state", "done", 1)), abi.StatusOK},
		{"an expired item is hidden", abi.ExportFilterRow, item(0, q("expires", "9000", 1), q("state", "ready", 1)), abi.StatusDrop},
		{"a live item is kept", abi.ExportFilterRow, item(0, q("expires", "20000", 1), q("state", "ready", 1)), abi.StatusOK},
		{"a major compaction drops an old done item", abi.ExportFileRow, item(abi.FlagCompaction|abi.FlagMajor, q("state", "done", 8_000)), abi.StatusDrop},
		{"but not a recent one", abi.ExportFileRow, item(abi.FlagCompaction|abi.FlagMajor, q("state", "done", 9_500)), abi.StatusOK},
		{"a minor compaction drops nothing", abi.ExportFileRow, item(abi.FlagCompaction, q("state", "done", 1)), abi.StatusOK},
		{"a flush drops nothing", abi.ExportFileRow, item(abi.FlagFlush, q("state", "done", 1)), abi.StatusOK},
	} {
		if st, out := guest.Call(c.export, c.input); st != c.want {
			t.Errorf("%s: status %d (%s), want %d", c.name, st, out, c.want)
		}
	}
}
