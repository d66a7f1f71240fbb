//go:build invariants

package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Invariants reports whether the binary was built with the invariants tag.
const Invariants = true

// checkAppended decodes the record just encoded and checks it against the
// edit: same sequence id, region and cells, valid checksum.
func checkAppended(rec []byte, e *Edit, seq uint64) {
	if len(rec) < recordHeaderSize {
		panic("wal: invariant violated: short record")
	}
	if crc32.Checksum(rec[4:], castagnoli) != binary.LittleEndian.Uint32(rec) {
		panic("wal: invariant violated: record checksum")
	}
	var d Edit
	if err := decodeEdit(rec[recordHeaderSize:], &d); err != nil {
		panic(fmt.Sprintf("wal: invariant violated: appended record does not decode: %v", err))
	}
	if d.Seq != seq || !bytes.Equal(d.Region, e.Region) || len(d.Cells) != len(e.Cells) || d.HasNonce != e.HasNonce {
		panic(fmt.Sprintf("wal: invariant violated: decoded record differs (seq %d/%d)", d.Seq, seq))
	}
	for i := range d.Cells {
		if !bytes.Equal(d.Cells[i], e.Cells[i]) {
			panic(fmt.Sprintf("wal: invariant violated: cell %d differs", i))
		}
	}
}

func checkSeqIncreasing(prev, seq uint64) {
	if seq <= prev {
		panic(fmt.Sprintf("wal: invariant violated: sequence id %d appended after %d", seq, prev))
	}
}

// checkDurable: the durable point only moves forward, and never past the
// highest sequence id assigned.
func checkDurable(prev, next, assigned uint64) {
	if next < prev || next > assigned {
		panic(fmt.Sprintf("wal: invariant violated: durable point moved from %d to %d (highest assigned %d)", prev, next, assigned))
	}
}

// checkCommitMarker: a commit's marker never says the segment was synced past the commit's own
// start, and what the markers say only grows.
func checkCommitMarker(prev, synced, start int64) {
	if synced > start || synced < prev {
		panic(fmt.Sprintf("wal: invariant violated: commit at %d marked synced to %d (previous mark %d)", start, synced, prev))
	}
}
