package wal

import "testing"

// Objects read together (a dead server's log split, the catalog's replay, archiving) are at most
// readAhead at once and at most fetchBytes of listed size together, so that a log of large
// objects (or a stray large object) is not read 32 at a time into memory; an object larger than
// fetchBytes is read alone; every object is read once, in order.
func TestFetchBatchesBoundTheirBytes(t *testing.T) {
	const mib = 1 << 20
	for name, sizes := range map[string][]int64{
		"small":         make([]int64, 100),
		"16 MiB each":   {16 * mib, 16 * mib, 16 * mib, 16 * mib, 16 * mib, 16 * mib},
		"a stray 1 GiB": {100, 1 << 30, 100, 100},
		"mixed":         {60 * mib, 5 * mib, 1 * mib, 70 * mib, 0, 0, 64 * mib},
		"unknown (0)":   make([]int64, 70),
	} {
		objs := make([]numberedObject, len(sizes))
		for i, sz := range sizes {
			objs[i] = numberedObject{n: uint64(i + 1), size: sz}
		}
		next := 0
		for start := 0; start < len(objs); {
			end := fetchBatchEnd(objs, start)
			if end <= start || end > len(objs) || end-start > readAhead {
				t.Fatalf("%s: batch [%d, %d)", name, start, end)
			}
			var bytes int64
			for _, o := range objs[start:end] {
				bytes += o.size
			}
			if end-start > 1 && bytes > fetchBytes {
				t.Errorf("%s: batch [%d, %d) holds %d MiB", name, start, end, bytes/mib)
			}
			next += end - start
			start = end
		}
		if next != len(objs) {
			t.Errorf("%s: %d of %d objects fetched", name, next, len(objs))
		}
	}
}
