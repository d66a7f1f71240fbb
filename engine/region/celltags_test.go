package region

import (
	"bytes"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// TestMutationTagsAndCellCheck: a mutation's tags reach every cell it puts (with a TTL tag
// beside them), survive a flush and an increment, and a read's CellCheck hides the cells it
// refuses, older visible versions still counting as HBase's filters do.
func TestMutationTagsAndCellCheck(t *testing.T) {
	f := fam("f")
	f.MaxVersions = 3
	e := newEnv(t, f)
	secret := cell.AppendTag(nil, 1, []byte("secret"))
	put := func(row, q string, ts int64, tags []byte, ttl int64) {
		t.Helper()
		m := NewMutation([]byte(row)).Put([]byte("f"), []byte(q), ts, []byte(row+q))
		m.Tags, m.TTL = tags, ttl
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	put("r1", "open", 10, nil, 0)
	put("r1", "hidden", 10, secret, 0)
	put("r2", "both", 10, secret, 1_000_000)
	hide := func(_ cell.Key, tags []byte) bool { return !bytes.Contains(tags, []byte("secret")) }
	check := func(when string) {
		t.Helper()
		res, err := e.r.Get(&Get{Row: []byte("r1"), CellCheck: hide})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Cells) != 1 || string(res.Cells[0].Qualifier()) != "open" {
			t.Fatalf("%s: got %d cells, want only f:open", when, len(res.Cells))
		}
		res, err = e.r.Get(&Get{Row: []byte("r1")})
		if err != nil || len(res.Cells) != 2 {
			t.Fatalf("%s: without a check %d cells, %v", when, len(res.Cells), err)
		}
		for _, kv := range res.Cells {
			if string(kv.Qualifier()) == "hidden" && !bytes.Equal(kv.Tags, secret) {
				t.Fatalf("%s: tags %x, want %x", when, kv.Tags, secret)
			}
		}
		res, err = e.r.Get(&Get{Row: []byte("r2")})
		if err != nil || len(res.Cells) != 1 {
			t.Fatalf("%s: r2 %d cells, %v", when, len(res.Cells), err)
		}
		if _, ok := cell.TTLOf(res.Cells[0].Tags); !ok || !bytes.Contains(res.Cells[0].Tags, []byte("secret")) {
			t.Fatalf("%s: r2 tags %x: want the TTL and the mutation's tag", when, res.Cells[0].Tags)
		}
	}
	check("in the memstore")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")

	// A hidden newer version: the older one shows (the check skips, as a filter does).
	put("r3", "q", 10, nil, 0)
	put("r3", "q", 20, secret, 0)
	res, err := e.r.Get(&Get{Row: []byte("r3"), CellCheck: hide, MaxVersions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 1 || res.Cells[0].Timestamp() != 10 {
		t.Fatalf("r3: %d cells; want the older, visible version (10)", len(res.Cells))
	}

	// Bad tags are refused: malformed, or a TTL smuggled in.
	m := NewMutation([]byte("r4")).Put([]byte("f"), []byte("q"), 1, []byte("v"))
	m.Tags = []byte{0, 9, 1}
	if err := e.r.Mutate(m); err == nil {
		t.Error("malformed tags accepted")
	}
	m.Tags = cell.AppendTTLTag(nil, 5)
	if err := e.r.Mutate(m); err == nil {
		t.Error("a TTL in the mutation's tags accepted")
	}
}
