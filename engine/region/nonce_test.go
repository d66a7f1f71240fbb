package region

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// The nonce table stays small whatever the operations write: a growing Append keeps only its
// cells' keys (a retry answers the column's current value, not applying again), the table holds at
// most NonceTableBytes, and entries past the TTL go without further writes. (It kept every
// result whole for 30 minutes: 1,000 appends of 1 KiB to one cell held about 500 MiB.)
func TestNonceTableStaysSmall(t *testing.T) {
	e := newEnv(t, fam("f"))
	chunk := bytes.Repeat([]byte("x"), 1024)
	const n = 1000
	for i := range n {
		if _, err := e.r.Append(&Append{Row: []byte("log"), NonceGroup: 1, Nonce: uint64(i + 1),
			Columns: []AppendColumn{{Family: []byte("f"), Qualifier: []byte("q"), Value: chunk}}}); err != nil {
			t.Fatal(err)
		}
	}
	entries, size := e.r.nonces.size()
	if entries != n || size > 256<<10 {
		t.Fatalf("nonce table: %d entries, %d bytes; want %d entries in at most 256 KiB", entries, size, n)
	}
	// A retry of an early append is not applied again and answers the current value.
	res, err := e.r.Append(&Append{Row: []byte("log"), NonceGroup: 1, Nonce: 7,
		Columns: []AppendColumn{{Family: []byte("f"), Qualifier: []byte("q"), Value: chunk}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 1 || len(res.Cells[0].Value) != n*len(chunk) {
		t.Fatalf("retry answered %d cells, value of %d bytes; want the current %d bytes", len(res.Cells), len(res.Cells[0].Value), n*len(chunk))
	}
	if got := e.r.Metrics().NonceDuplicates.Load(); got != 1 {
		t.Fatalf("%d duplicates counted, want 1", got)
	}
	// A retried increment answers its own first result.
	inc := func(nonce uint64) int64 {
		t.Helper()
		res, err := e.r.Increment(&Increment{Row: []byte("ctr"), NonceGroup: 2, Nonce: nonce,
			Columns: []IncrementColumn{{Family: []byte("f"), Qualifier: []byte("c"), Amount: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return int64(binary.BigEndian.Uint64(res.Cells[0].Value))
	}
	if a, b, again := inc(1), inc(2), inc(1); a != 1 || b != 2 || again != 1 {
		t.Fatalf("increments answered %d, %d, then the retry of the first %d; want 1, 2, 1", a, b, again)
	}
	// Past the TTL, with no further write, the entries go.
	e.clock.now.Add((31 * time.Minute).Milliseconds())
	if _, _, _, ok := e.r.nonces.get(2, 1, e.r.cfg.Clock()); ok {
		t.Fatal("a nonce past the TTL was still remembered")
	}
	if entries, size := e.r.nonces.size(); entries != 0 || size != 0 {
		t.Fatalf("after the TTL: %d entries, %d bytes", entries, size)
	}
}

// The table holds at most NonceTableBytes of entries older than nonceMinAge: the oldest go first,
// but none a retry may still come for (a hot counter's table evicted entries seconds old, and a
// retried increment was applied twice).
func TestNonceTableBounded(t *testing.T) {
	tab := newNonceTable(time.Hour, 64<<10)
	start := time.Unix(1000, 0)
	for i := range 10_000 {
		tab.put(1, uint64(i+1), nil, uint64(i+1), start)
	}
	if entries, _ := tab.size(); entries != 10_000 {
		t.Fatalf("%d entries within the minimum age, want all 10000", entries)
	}
	if _, _, _, ok := tab.get(1, 1, start.Add(nonceMinAge-time.Second)); !ok {
		t.Fatal("a nonce younger than the minimum age was dropped for the table's size")
	}
	later := start.Add(nonceMinAge)
	tab.put(1, 20_000, nil, 20_000, later)
	entries, size := tab.size()
	if size > 64<<10 || entries == 0 || entries >= 10_000 {
		t.Fatalf("%d entries in %d bytes once past the minimum age, want at most 64 KiB", entries, size)
	}
	if _, _, _, ok := tab.get(1, 1, later); ok {
		t.Error("the oldest nonce is still there")
	}
	if _, _, _, ok := tab.get(1, 20_000, later); !ok {
		t.Error("the newest nonce is gone")
	}
}
