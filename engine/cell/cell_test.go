package cell

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// refCompare is the reference comparator: it works on decoded structs and
// spells out the HBase rules one field at a time.
func refCompare(a, b Cell) int {
	if c := bytes.Compare(a.Row, b.Row); c != 0 {
		return c
	}
	lastA := len(a.Family) == 0 && len(a.Qualifier) == 0 && a.Type == Minimum
	lastB := len(b.Family) == 0 && len(b.Qualifier) == 0 && b.Type == Minimum
	switch {
	case lastA && lastB:
		return 0
	case lastA:
		return 1
	case lastB:
		return -1
	}
	if c := bytes.Compare(a.Family, b.Family); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Qualifier, b.Qualifier); c != 0 {
		return c
	}
	if a.Timestamp != b.Timestamp {
		if a.Timestamp > b.Timestamp {
			return -1
		}
		return 1
	}
	if a.Type != b.Type {
		if a.Type > b.Type {
			return -1
		}
		return 1
	}
	return 0
}

var allKeyTypes = []Type{Minimum, Put, Delete, DeleteFamilyVersion, DeleteColumn, DeleteFamily, Maximum}

// randBytes draws short strings from a tiny alphabet so that random cells
// share prefixes and collide often.
func randBytes(r *rand.Rand, maxLen int) []byte {
	n := r.IntN(maxLen + 1)
	b := make([]byte, n)
	for i := range b {
		b[i] = []byte{0x00, 'a', 'b', 0x7f, 0x80, 0xff}[r.IntN(6)]
	}
	return b
}

func randCell(r *rand.Rand) Cell {
	c := Cell{
		Row:       randBytes(r, 3),
		Family:    randBytes(r, 2),
		Qualifier: randBytes(r, 3),
		Type:      allKeyTypes[r.IntN(len(allKeyTypes))],
		Value:     randBytes(r, 4),
	}
	switch r.IntN(4) {
	case 0:
		c.Timestamp = LatestTimestamp
	case 1:
		c.Timestamp = OldestTimestamp
	case 2:
		c.Timestamp = int64(r.IntN(3)) - 1
	default:
		c.Timestamp = r.Int64()
	}
	return c
}

func sameCell(a, b Cell) bool {
	return bytes.Equal(a.Row, b.Row) && bytes.Equal(a.Family, b.Family) &&
		bytes.Equal(a.Qualifier, b.Qualifier) && a.Timestamp == b.Timestamp &&
		a.Type == b.Type && bytes.Equal(a.Value, b.Value)
}

func TestKeyValueRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	for i := 0; i < 20000; i++ {
		c := randCell(r)
		buf = c.AppendKeyValue(buf[:0])
		if len(buf) != c.EncodedLen() {
			t.Fatalf("encoded length %d, EncodedLen %d", len(buf), c.EncodedLen())
		}
		kv, n, err := ParseKeyValue(buf)
		if err != nil {
			t.Fatalf("ParseKeyValue(%v): %v", c, err)
		}
		if n != len(buf) {
			t.Fatalf("consumed %d of %d", n, len(buf))
		}
		if got := kv.Decode(); !sameCell(got, c) {
			t.Fatalf("round trip: got %v want %v", got, c)
		}
		if kv.KeyLen() != c.KeyLen() || kv.ValueLen() != len(c.Value) {
			t.Fatalf("lengths: key %d/%d value %d/%d", kv.KeyLen(), c.KeyLen(), kv.ValueLen(), len(c.Value))
		}
		key := c.AppendKey(nil)
		if !bytes.Equal(key, kv.Key()) {
			t.Fatalf("AppendKey differs from KeyValue key")
		}
		if _, err := ParseKey(key); err != nil {
			t.Fatalf("ParseKey: %v", err)
		}
	}
}

func TestCompareAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		a, b := randCell(r), randCell(r)
		if r.IntN(4) == 0 { // force equal rows or columns
			b.Row = a.Row
			if r.IntN(2) == 0 {
				b.Family, b.Qualifier = a.Family, a.Qualifier
			}
		}
		ka, kb := a.AppendKey(nil), b.AppendKey(nil)
		want := refCompare(a, b)
		if got := Compare(ka, kb); got != want {
			t.Fatalf("Compare(%v, %v) = %d, reference %d", a, b, got, want)
		}
		if got := Compare(kb, ka); got != -want {
			t.Fatalf("Compare not antisymmetric for %v, %v", a, b)
		}
		if got := CompareRows(ka, kb); got != bytes.Compare(a.Row, b.Row) {
			t.Fatalf("CompareRows(%v, %v) = %d", a, b, got)
		}
		if got := SameRow(ka, kb); got != bytes.Equal(a.Row, b.Row) {
			t.Fatalf("SameRow(%v, %v) = %v", a, b, got)
		}
		wantCol := bytes.Equal(a.Row, b.Row) && bytes.Equal(a.Family, b.Family) && bytes.Equal(a.Qualifier, b.Qualifier)
		if got := SameColumn(ka, kb); got != wantCol {
			t.Fatalf("SameColumn(%v, %v) = %v", a, b, got)
		}
		kva, kvb := KeyValue(a.AppendKeyValue(nil)), KeyValue(b.AppendKeyValue(nil))
		if got := CompareKeyValues(kva, kvb); got != want {
			t.Fatalf("CompareKeyValues = %d, want %d", got, want)
		}
	}
}

func TestCompareWithSeq(t *testing.T) {
	k := AppendKey(nil, []byte("r"), []byte("f"), []byte("q"), 5, Put)
	if CompareWithSeq(k, 7, k, 3) != -1 || CompareWithSeq(k, 3, k, 7) != 1 || CompareWithSeq(k, 3, k, 3) != 0 {
		t.Fatal("sequence id must order equal keys newest first")
	}
	older := AppendKey(nil, []byte("r"), []byte("f"), []byte("q"), 4, Put)
	if CompareWithSeq(k, 1, older, 9) != -1 {
		t.Fatal("key order must win over sequence id")
	}
}

func TestSortMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cells := make([]Cell, 3000)
	keys := make([][]byte, len(cells))
	for i := range cells {
		cells[i] = randCell(r)
		keys[i] = cells[i].AppendKey(nil)
	}
	slices.SortStableFunc(cells, refCompare)
	slices.SortStableFunc(keys, func(a, b []byte) int { return Compare(a, b) })
	for i := range keys {
		if refCompare(Key(keys[i]).Decode(), cells[i]) != 0 {
			t.Fatalf("position %d: key %v, reference %v", i, Key(keys[i]), cells[i])
		}
		if i > 0 && Compare(keys[i-1], keys[i]) > 0 {
			t.Fatalf("not sorted at %d", i)
		}
	}
}

func TestSeekKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 20000; i++ {
		c := randCell(r)
		c.Type = []Type{Put, Delete, DeleteFamilyVersion, DeleteColumn, DeleteFamily}[r.IntN(5)]
		c.Family = append([]byte{'f'}, c.Family...) // real cells have a family
		if c.Timestamp == OldestTimestamp {
			c.Timestamp = 0
		}
		k := c.AppendKey(nil)
		other := randCell(r)
		other.Family = append([]byte{'f'}, other.Family...)
		if other.Timestamp == OldestTimestamp {
			other.Timestamp = 0
		}
		ok := other.AppendKey(nil)

		first := AppendFirstOnRow(nil, c.Row)
		last := AppendLastOnRow(nil, c.Row)
		if Compare(first, k) >= 0 || Compare(k, last) >= 0 {
			t.Fatalf("%v not between first/last on row", c)
		}
		// Seek keys of a row bracket exactly the cells of that row.
		rowCmp := bytes.Compare(other.Row, c.Row)
		if rowCmp < 0 && (Compare(ok, first) >= 0) || rowCmp > 0 && Compare(ok, last) <= 0 {
			t.Fatalf("%v is inside the row range of %v", other, c)
		}
		fam := AppendFirstOnRowFamily(nil, c.Row, c.Family)
		if Compare(fam, k) >= 0 {
			t.Fatalf("first on family sorts after %v", c)
		}
		fc := AppendFirstOnColumn(nil, c.Row, c.Family, c.Qualifier)
		lc := AppendLastOnColumn(nil, c.Row, c.Family, c.Qualifier)
		if Compare(fc, k) >= 0 || Compare(k, lc) >= 0 {
			t.Fatalf("%v not between first/last on column", c)
		}
		if !SameColumn(other.AppendKey(nil), k) {
			if (Compare(ok, fc) > 0) != (Compare(ok, lc) > 0) {
				t.Fatalf("%v falls inside the column range of %v", other, c)
			}
		}
		ts := int64(r.IntN(5))
		at := AppendFirstOnColumnAtTimestamp(nil, c.Row, c.Family, c.Qualifier, ts)
		if got, want := Compare(at, k) < 0, c.Timestamp <= ts; got != want {
			t.Fatalf("at-ts %d vs %v: before=%v want %v", ts, c, got, want)
		}
	}
}

func TestKeyAccessors(t *testing.T) {
	k := Key(AppendKey(nil, []byte("row1"), []byte("fam"), []byte("qual"), -3, DeleteColumn))
	if string(k.Row()) != "row1" || string(k.Family()) != "fam" || string(k.Qualifier()) != "qual" ||
		k.Timestamp() != -3 || k.Type() != DeleteColumn || k.RowLen() != 4 {
		t.Fatalf("accessors: %v", k)
	}
	if got := k.String(); got != `"row1"/"fam":"qual"/-3/DeleteColumn` {
		t.Fatalf("String = %s", got)
	}
	// Sub-slices are capacity-clipped: appending to one never overwrites the key.
	row := k.Row()
	_ = append(row, 'X')
	if string(k.Family()) != "fam" {
		t.Fatal("append to Row() overwrote the key")
	}
	if CompareRow(k, []byte("row1")) != 0 || CompareRow(k, []byte("row2")) >= 0 {
		t.Fatal("CompareRow")
	}
}

func TestValidate(t *testing.T) {
	long := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	cases := []struct {
		name                string
		row, fam, qual, val []byte
		ts                  int64
		typ                 Type
		max                 int
		want                error
		wantMsg             string
	}{
		{name: "ok", row: []byte("r"), fam: []byte("f"), typ: Put},
		{name: "max row", row: long(MaxRowLength), fam: []byte("f"), typ: Put},
		{name: "max family", row: []byte("r"), fam: long(MaxFamilyLength), typ: DeleteFamily},
		{name: "empty row", fam: []byte("f"), typ: Put, want: ErrEmptyRow},
		{name: "long row", row: long(MaxRowLength + 1), fam: []byte("f"), typ: Put, want: ErrRowTooLong, wantMsg: "32768 bytes, limit 32767"},
		{name: "empty family", row: []byte("r"), typ: Put, want: ErrEmptyFamily},
		{name: "long family", row: []byte("r"), fam: long(128), typ: Put, want: ErrFamilyTooLong, wantMsg: "128 bytes, limit 127"},
		{name: "type min", row: []byte("r"), fam: []byte("f"), typ: Minimum, want: ErrInvalidType},
		{name: "type max", row: []byte("r"), fam: []byte("f"), typ: Maximum, want: ErrInvalidType},
		{name: "type 5", row: []byte("r"), fam: []byte("f"), typ: 5, want: ErrInvalidType, wantMsg: "invalid type: 5"},
		{name: "negative ts", row: []byte("r"), fam: []byte("f"), typ: Put, ts: -1, want: ErrNegativeTimestamp},
		{name: "default max ok", row: []byte("r"), fam: []byte("f"), typ: Put, val: long(DefaultMaxCellSize - KeyValueLen(1, 1, 0, 0))},
		{name: "default max exceeded", row: []byte("r"), fam: []byte("f"), typ: Put, val: long(DefaultMaxCellSize - KeyValueLen(1, 1, 0, 0) + 1), want: ErrCellTooLarge, wantMsg: "10485761 bytes, limit 10485760"},
		{name: "configured max", row: []byte("r"), fam: []byte("f"), qual: long(100), typ: Put, max: 100, want: ErrCellTooLarge},
	}
	for _, tc := range cases {
		err := Validate(tc.row, tc.fam, tc.qual, tc.ts, tc.typ, tc.val, tc.max)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)) {
			t.Errorf("%s: error %v does not mention %q", tc.name, err, tc.wantMsg)
		}
	}
	// The hard limit leaves room for a full tags section below TaggedFlag.
	if n := int64(maxUntaggedSize) + int64(TaggedLen(0, MaxTagsLength)); n > MaxKeyValueSize || n >= TaggedFlag {
		t.Errorf("largest tagged cell is %d bytes: beyond MaxKeyValueSize or into TaggedFlag", n)
	}
	c := Cell{Row: []byte("r"), Family: []byte("f"), Type: Put}
	kv := KeyValue(c.AppendKeyValue(nil))
	if err := kv.Validate(0); err != nil {
		t.Fatal(err)
	}
}

func TestParseMalformed(t *testing.T) {
	good := AppendKeyValue(nil, []byte("row"), []byte("f"), []byte("q"), 1, Put, []byte("v"))
	for i := 0; i < len(good); i++ {
		if _, _, err := ParseKeyValue(good[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d: err %v", i, err)
		}
	}
	bad := slices.Clone(good)
	bad[8] = 0xff // row length 65280 > key
	if _, _, err := ParseKeyValue(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad row length: %v", err)
	}
	bad = slices.Clone(good)
	bad[len(bad)-2] = 3 // type 3
	if _, _, err := ParseKeyValue(bad); !errors.Is(err, ErrInvalidType) {
		t.Fatalf("bad type: %v", err)
	}
	bad = slices.Clone(good)
	bad[0] = 0x7f // huge key length
	if _, _, err := ParseKeyValue(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge key length: %v", err)
	}
	key := AppendKey(nil, []byte("r"), []byte("fam"), nil, 0, Put)
	key[2+1] = 200 // family length > 127
	if _, err := ParseKey(key); !errors.Is(err, ErrMalformed) {
		t.Fatalf("family length 200: %v", err)
	}
	if Key(key).String() == "" || KeyValue(good[:5]).String() == "" {
		t.Fatal("String of malformed input")
	}
	// Concatenated cells parse one at a time.
	two := append(slices.Clone(good), good...)
	kv, n, err := ParseKeyValue(two)
	if err != nil || n != len(good) || !bytes.Equal(kv, good) {
		t.Fatalf("first of two: n=%d err=%v", n, err)
	}
}

func TestCompareDoesNotAllocate(t *testing.T) {
	if Invariants {
		t.Skip("invariant checks format errors")
	}
	a := AppendKey(nil, []byte("row-0001"), []byte("f"), []byte("q1"), 10, Put)
	b := AppendKey(nil, []byte("row-0001"), []byte("f"), []byte("q1"), 9, Put)
	kv := KeyValue(AppendKeyValue(nil, []byte("row-0001"), []byte("f"), []byte("q1"), 9, Put, []byte("v")))
	var sink int
	allocs := testing.AllocsPerRun(1000, func() {
		sink += Compare(a, b) + CompareWithSeq(a, 1, b, 2) + CompareKeyValues(kv, kv)
		sink += len(Key(a).Row()) + len(Key(a).Qualifier()) + len(kv.Value())
	})
	if allocs != 0 {
		t.Fatalf("comparisons allocate: %v allocs/op", allocs)
	}
	_ = sink
}

func TestTypeNames(t *testing.T) {
	for _, typ := range allKeyTypes {
		if strings.HasPrefix(typ.String(), "Type(") || !typ.IsKeyType() {
			t.Fatalf("type %d", typ)
		}
	}
	if Type(3).String() != "Type(3)" || Type(3).IsKeyType() || Put.IsDelete() || !DeleteFamily.IsDelete() {
		t.Fatal("type predicates")
	}
	if LatestTimestamp != math.MaxInt64 {
		t.Fatal("LatestTimestamp")
	}
}
