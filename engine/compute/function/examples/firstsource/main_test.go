package main

import (
	"testing"

	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/compute/function/guest"
)

func src(name, value string, ts int64) abi.Cell {
	return abi.Cell{Family: []byte("s"), Qualifier: []byte(name), Timestamp: ts, Type: abi.TypePut, Value: []byte(value)}
}

func TestFirstSource(t *testing.T) {
	if st, _ := guest.Call(abi.ExportInit, abi.EncodeArgs(nil, nil)); st >= 0 {
		t.Fatal("init without sources succeeded")
	}
	if st, out := guest.Call(abi.ExportInit, abi.EncodeArgs([]string{"sources"}, []string{"exchange, vendor1,vendor2"})); st != abi.StatusOK {
		t.Fatalf("init: %d %s", st, out)
	}
	if st, out := guest.Call(abi.ExportEndpointBegin, abi.EncodeBegin("first", []byte("OK"))); st != abi.StatusOK {
		t.Fatalf("begin: %d %s", st, out)
	}
	rows := []struct {
		row   string
		cells []abi.Cell
	}{
		{"IBM", []abi.Cell{src("exchange", "STALE 1", 2), src("vendor1", "OK 140", 1), src("vendor2", "OK 141", 1)}},
		{"MSFT", []abi.Cell{src("exchange", "OK 400", 3), src("exchange", "STALE", 2), src("vendor1", "OK 399", 1)}},
		{"XYZ", []abi.Cell{src("vendor2", "STALE", 1), src("other", "OK", 1)}},
		{"ZZZ", []abi.Cell{src("exchange", "STALE", 5), src("exchange", "OK old", 1), src("vendor2", "OK 7", 1)}},
	}
	for _, r := range rows {
		if st, out := guest.Call(abi.ExportEndpointRow, abi.AppendRow(nil, 0, []byte(r.row), r.cells)); st != abi.StatusOK {
			t.Fatalf("row %s: %d %s", r.row, st, out)
		}
	}
	_, out := guest.Call(abi.ExportEndpointEnd, nil)
	// The newest exchange value of ZZZ is stale: an older one that matches does not count.
	if want := "IBM\tvendor1\tOK 140\nMSFT\texchange\tOK 400\nZZZ\tvendor2\tOK 7\n"; string(out) != want {
		t.Fatalf("answer\n%q\nwant\n%q", out, want)
	}
}
