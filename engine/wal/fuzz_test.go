package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cellstore/cellstore/engine/storage"
)

// validSegment returns a segment with n records.
func validSegment(n int) []byte {
	data := appendHeader(nil, kindSegment, 1)
	for i := 0; i < n; i++ {
		e := testEdit("r", i)
		data = appendRecord(data, e, uint64(i+1), int64(i), payloadSize(e))
	}
	return data
}

// FuzzDecodeEdit: the payload decoder never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzDecodeEdit(f *testing.F) {
	for i := 0; i < 3; i++ {
		e := testEdit("region", i)
		rec := appendRecord(nil, e, uint64(i+1), 99, payloadSize(e))
		f.Add(rec[recordHeaderSize:])
	}
	f.Add([]byte{payloadKindEdit})
	f.Fuzz(func(t *testing.T, p []byte) {
		var e Edit
		if err := decodeEdit(p, &e); err != nil {
			return
		}
		re := appendRecord(nil, &e, e.Seq, e.WriteTime, payloadSize(&e))
		if !bytes.Equal(re[recordHeaderSize:], p) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re[recordHeaderSize:], p)
		}
	})
}

// FuzzSegmentReader feeds arbitrary bytes to the reader as the last segment
// and as a non-last segment: it never panics, and only ever fails with a
// corruption error.
func FuzzSegmentReader(f *testing.F) {
	good := validSegment(3)
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(append(bytes.Clone(good), make([]byte, 100)...))
	flipped := bytes.Clone(good)
	flipped[headerSize+20] ^= 1
	f.Add(flipped)
	f.Add(good[:headerSize])
	f.Add([]byte{})
	// Segments with commit markers (format version 2): whole, a lost page in the last commit,
	// damage before a later commit.
	marked, commits, recs := markedSegment(2, 3)
	f.Add(marked)
	holed := bytes.Clone(marked)
	clear(holed[commits[1]:recs[3]])
	f.Add(holed)
	early := bytes.Clone(marked)
	early[recs[0]+20] ^= 1
	f.Add(early)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, last := range []bool{true, false} {
			mem := storage.NewMem()
			mem.MkdirAll("w")
			storage.WriteFile(mem, "w/"+segmentName(1), data)
			if !last {
				storage.WriteFile(mem, "w/"+segmentName(2), appendHeader(nil, kindSegment, 2))
			}
			r, err := NewReader(mem, "w", ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var prev uint64
			for r.Next() {
				e := r.Edit()
				if e.Seq <= prev && prev != 0 {
					t.Fatalf("sequence ids not increasing: %d after %d", e.Seq, prev)
				}
				prev = e.Seq
				for _, c := range e.Cells {
					_ = c.Key().Row()
				}
			}
			if err := r.Err(); err != nil && !errors.Is(err, ErrCorruption) {
				t.Fatalf("non-corruption error: %v", err)
			}
			if _, torn := r.TornTail(); torn && !last {
				t.Fatal("torn tail tolerated in a non-last segment")
			}
			r.Close()
		}
	})
}
