package wal

import (
	"errors"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// Edits shipped to read replicas round-trip through AppendEditRecord and
// DecodeEditRecord, and any damage is reported, never a panic.
func TestEditRecordRoundTripAndDamage(t *testing.T) {
	e := &Edit{Region: []byte("r1"), Seq: 42, WriteTime: 7, HasNonce: true, NonceGroup: 3, Nonce: 9,
		Cells: []cell.KeyValue{cell.AppendKeyValue(nil, []byte("row"), []byte("f"), []byte("q"), 5, cell.Put, []byte("v"))}}
	b, err := AppendEditRecord(nil, e)
	if err != nil {
		t.Fatal(err)
	}
	var got Edit
	if err := DecodeEditRecord(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Seq != 42 || got.WriteTime != 7 || !got.HasNonce || got.Nonce != 9 || string(got.Region) != "r1" ||
		len(got.Cells) != 1 || string(got.Cells[0]) != string(e.Cells[0]) {
		t.Fatalf("decoded %+v", got)
	}
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x40
		if err := DecodeEditRecord(bad, &got); !errors.Is(err, ErrCorruption) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	for n := range len(b) {
		if err := DecodeEditRecord(b[:n], &got); !errors.Is(err, ErrCorruption) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := AppendEditRecord(nil, &Edit{}); !errors.Is(err, ErrInvalidEdit) {
		t.Fatalf("edit without a region: %v", err)
	}
}
