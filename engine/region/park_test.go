//go:build linux

package region

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/blockcache"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/sfile"
)

// cachedEnv is newEnv with a block cache whose L2 has slots of 4 KiB in buckets of 64 KiB (16
// slots each), capacity bytes in all; the region is closed before the cache.
func cachedEnv(t *testing.T, capacity int64, fams ...Family) (*env, *blockcache.BucketCache) {
	t.Helper()
	e := newEnv(t, fams...)
	l1, err := blockcache.NewLRU(blockcache.LRUOptions{Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := blockcache.NewBucketCache(blockcache.BucketCacheOptions{Capacity: capacity, BucketSize: 64 << 10,
		SizeClasses: []int{4 << 10}, Hugepages: offheap.HugepagesOff, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.close()
		l2.Close()
	})
	e.cfg.Cache = blockcache.NewCombined(l1, l2)
	e.reopen()
	return e, l2
}

// nextRows reads one batch as the region server does (a CellBlock batch with reused memory)
// and returns its results formatted.
func nextRows(t *testing.T, sc *RegionScanner) (string, bool) {
	t.Helper()
	b, err := sc.Next()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, res := range blockResults(t, b) {
		fmtResult(&sb, res)
		sb.WriteString("\n")
	}
	return sb.String(), b.More
}

// Idle scanners pin no L2 slot: many scanners left between batches (ReleaseBatch, as the region
// server leaves a client's scanner between its calls), each positioned in other blocks of two
// files, used to hold every slot of the L2, and a block read then could not be cached. Each
// scanner then reads on to the end, finding the rows it would have.
func TestIdleScannersPinNoBlocks(t *testing.T) {
	f := fam("f")
	f.Encoding = sfile.EncodingDiff
	e, l2 := cachedEnv(t, 128<<10, f) // 32 slots
	const rows = 1200
	row := func(i int) []byte { return fmt.Appendf(nil, "row%05d", i) }
	value := bytes.Repeat([]byte("v"), 100)
	for _, q := range []string{"a", "b"} { // two files, each with every row
		for i := range rows {
			if err := e.r.Put(NewMutation(row(i)).Put([]byte("f"), []byte(q), 1, value)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// 40 scanners 25 rows apart (about 3 blocks of 1 KiB): 80 blocks wanted, 32 slots.
	var scanners []*RegionScanner
	for i := range 40 {
		sc, err := e.r.Scanner(&Scan{StartRow: row(i * 25), StopRow: row(i*25 + 20), Caching: 1, CellBlock: true, ReuseResults: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		if got, _ := nextRows(t, sc); !strings.HasPrefix(got, string(row(i*25))) {
			t.Fatalf("scanner %d's first batch: %q", i, got)
		}
		sc.ReleaseBatch()
		scanners = append(scanners, sc)
	}
	before := l2.Stats()
	// A Get of a row no scanner is in: its blocks are cached.
	if _, err := e.r.Get(&Get{Row: row(rows - 10)}); err != nil {
		t.Fatal(err)
	}
	after := l2.Stats()
	if after.FailedPuts != before.FailedPuts || after.Misses == before.Misses {
		t.Fatalf("with 40 idle scanners a Get missed %d blocks and could not cache %d (of 32 slots, %d hold blocks)",
			after.Misses-before.Misses, after.FailedPuts-before.FailedPuts, after.Blocks)
	}
	if _, err := e.r.Get(&Get{Row: row(rows - 10)}); err != nil {
		t.Fatal(err)
	}
	if again := l2.Stats(); again.Misses != after.Misses || again.Hits == after.Hits {
		t.Fatalf("the Get's blocks were not cached: a second Get missed %d blocks", again.Misses-after.Misses)
	}
	for i, sc := range scanners {
		var got strings.Builder
		for more := true; more; {
			var s string
			s, more = nextRows(t, sc)
			got.WriteString(s)
			sc.ReleaseBatch()
		}
		var want strings.Builder
		for r := i*25 + 1; r < i*25+20; r++ {
			fmt.Fprintf(&want, "%s/f:a@1=%s\n%s/f:b@1=%s\n\n", row(r), value, row(r), value)
		}
		if got.String() != want.String() {
			t.Fatalf("scanner %d read after idling:\n%s\nwant:\n%s", i, got.String(), want.String())
		}
	}
}

// A scan left idle after every batch returns what it would have: many files with versions and
// every kind of delete, two families, forward and reversed, filters (cell, hint, row and
// on-demand families), raw, partial results; the L2 is churned between batches, so blocks the
// scan gave back are evicted and their slots reused.
func TestParkedScansReturnTheSameCells(t *testing.T) {
	fa, fb := fam("a"), fam("b")
	fa.MaxVersions, fb.MaxVersions = 3, 2
	fa.Encoding, fb.Encoding = sfile.EncodingPrefix, sfile.EncodingNone
	fa.Compression = sfile.CompressionSnappy
	e, l2 := cachedEnv(t, 256<<10, fa, fb)
	rng := rand.New(rand.NewPCG(7, 8))
	row := func() []byte { return fmt.Appendf(nil, "r%03d", rng.IntN(150)) }
	qual := func() []byte { return fmt.Appendf(nil, "q%d", rng.IntN(6)) }
	famName := func() []byte { return [][]byte{[]byte("a"), []byte("b")}[rng.IntN(2)] }
	ts := int64(100)
	for file := range 7 {
		for range 500 {
			ts++
			m := NewMutation(row())
			switch k := rng.IntN(20); {
			case k == 0:
				m.DeleteFamily(famName(), ts-int64(rng.IntN(50)))
			case k == 1:
				m.DeleteColumn(famName(), qual(), ts-int64(rng.IntN(50)))
			case k == 2:
				m.DeleteVersion(famName(), qual(), ts-int64(rng.IntN(20)))
			case k == 3:
				m.DeleteFamilyVersion(famName(), ts-int64(rng.IntN(20)))
			default:
				m.Put(famName(), qual(), ts-int64(rng.IntN(30)), bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(200)))
			}
			if err := e.r.Put(m); err != nil {
				t.Fatal(err)
			}
		}
		if file < 6 { // the last edits stay in the memstore
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stamps []string // every third timestamp
	for t := int64(100); t < ts; t += 3 {
		stamps = append(stamps, fmt.Sprint(t))
	}
	filters := []string{
		"",
		"ColumnPrefix(q1)",
		"ColumnRange(q2, true, q4, false)",
		"ColumnPagination(2, 1)",
		"Timestamps(" + strings.Join(stamps, ", ") + ")",
		"SingleColumnValue(a, q2, >, binary:m, true, true)",
		"OR(Qualifier(=, binary:q3), Value(<, binary:g))",
		"FuzzyRow(r?5?, 0101)",
	}
	type variant struct {
		name string
		scan Scan
	}
	var variants []variant
	for _, fs := range filters {
		for _, v := range []variant{
			{"forward", Scan{}},
			{"reversed", Scan{Reversed: true}},
			{"versions", Scan{MaxVersions: 5}},
			{"raw", Scan{Raw: true, MaxVersions: 10}},
			{"batch", Scan{Batch: 2, MaxVersions: 2}},
			{"partial", Scan{MaxResultSize: 300, AllowPartialResults: true}},
			{"on-demand", Scan{LoadColumnFamiliesOnDemand: true, StartRow: []byte("r050")}},
			{"reversed-bounded", Scan{Reversed: true, StartRow: []byte("r120"), StopRow: []byte("r020"), MaxVersions: 2}},
		} {
			if fs == "" && v.name == "on-demand" {
				continue
			}
			v.name = fs + "/" + v.name
			variants = append(variants, v)
		}
	}
	churn, junk := 0, bytes.Repeat([]byte{0xa5}, 1500)
	read := func(v variant, caching int, park bool) string {
		t.Helper()
		s := v.scan
		s.Caching, s.CellBlock, s.ReuseResults = caching, true, true
		if fs := strings.SplitN(v.name, "/", 2)[0]; fs != "" {
			f, err := parseFilter(fs) // a new one per scan: filters keep state
			if err != nil {
				t.Fatal(err)
			}
			s.Filter = f
		}
		sc, err := e.r.Scanner(&s)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		var out strings.Builder
		for more := true; more; {
			var got string
			got, more = nextRows(t, sc)
			out.WriteString(got)
			if park {
				sc.ReleaseBatch()
				// Fill the L2 with other blocks: what the scan gave back is evicted, its slots
				// overwritten.
				for range 30 {
					churn++
					k := blockcache.Key{File: 1 << 40, Offset: int64(churn)}
					_ = l2.Put(k, junk, blockcache.PrioritySingle)
				}
			}
			out.WriteString("--\n")
		}
		return out.String()
	}
	for _, v := range variants {
		for _, caching := range []int{1, 4} {
			if caching > 1 && !strings.HasPrefix(v.name, "/") {
				continue // the filters once, parked after every row
			}
			want := read(v, caching, false)
			if strings.Count(want, "--\n") < 4 {
				t.Fatalf("%s, caching %d: a test of too few batches:\n%s", v.name, caching, want)
			}
			if got := read(v, caching, true); got != want {
				t.Fatalf("%s, caching %d: parked between batches it read\n%s\nnot\n%s", v.name, caching, got, want)
			}
		}
	}
	if p := l2.Stats().PendingFree; p != 0 {
		t.Fatalf("%d evicted blocks still referenced after every scanner closed", p)
	}
}
