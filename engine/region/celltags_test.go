package region

import (
	"bytes"
	"errors"
	"slices"
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

// TestClientSentTags: the tags a client sends with a put's cells (HBase's
// KeyValueCodecWithTags) are stored with the cell before the server's own, across a flush; a TTL
// tag among them is honoured as a per-cell TTL; the system's tag types, tags on deletes, two TTLs
// and malformed tags are refused and nothing of the mutation is written.
func TestClientSentTags(t *testing.T) {
	e := newEnv(t, fam("f"))
	now := e.clock.now.Load()
	mine := cell.AppendTag(nil, 70, []byte("app"))
	acl := cell.AppendTag(nil, 1, []byte("server"))
	put := func(row string, ts int64, tags []byte, mutate func(m *Mutation)) error {
		m := NewMutation([]byte(row))
		m.Ops = append(m.Ops, Op{Type: cell.Put, Family: []byte("f"), Qualifier: []byte("q"), Timestamp: ts, Value: []byte(row), Tags: tags})
		if mutate != nil {
			mutate(m)
		}
		return e.r.Mutate(m)
	}
	if err := put("kept", now, mine, func(m *Mutation) { m.Tags = acl }); err != nil {
		t.Fatal(err)
	}
	if err := put("expired", now-10_000, append(cell.AppendTTLTag(nil, 1000), mine...), nil); err != nil {
		t.Fatal(err)
	}
	if err := put("alive", now-10_000, cell.AppendTTLTag(nil, 3_600_000), nil); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		res, err := e.r.Get(&Get{Row: []byte("kept")})
		if err != nil || len(res.Cells) != 1 {
			t.Fatalf("%s: kept: %v %v", when, res, err)
		}
		if tags := res.Cells[0].Tags; !bytes.Equal(tags, append(slices.Clone(mine), acl...)) {
			t.Fatalf("%s: kept's tags %x, want the client's then the server's", when, tags)
		}
		if res, err := e.r.Get(&Get{Row: []byte("expired")}); err != nil || len(res.Cells) != 0 {
			t.Fatalf("%s: a cell past its TTL tag: %v %v", when, res, err)
		}
		if res, err := e.r.Get(&Get{Row: []byte("alive")}); err != nil || len(res.Cells) != 1 {
			t.Fatalf("%s: a cell within its TTL tag: %v %v", when, res, err)
		}
	}
	check("in the memstore")
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
	for name, c := range map[string]struct {
		tags   []byte
		mutate func(m *Mutation)
	}{
		"an ACL tag":        {tags: acl},
		"a visibility tag":  {tags: cell.AppendTag(nil, cell.TagVisibility, []byte("x"))},
		"a reserved type":   {tags: cell.AppendTag(nil, 63, []byte("x"))},
		"malformed tags":    {tags: []byte{0, 9, 70}},
		"two TTL tags":      {tags: append(cell.AppendTTLTag(nil, 5), cell.AppendTTLTag(nil, 6)...)},
		"a TTL tag and TTL": {tags: cell.AppendTTLTag(nil, 5), mutate: func(m *Mutation) { m.TTL = 10 }},
		"tags on a delete": {tags: mine, mutate: func(m *Mutation) {
			m.Ops[0].Type, m.Ops[0].Value = cell.DeleteColumn, nil
		}},
	} {
		if err := put("refused", now, c.tags, c.mutate); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if res, err := e.r.Get(&Get{Row: []byte("refused")}); err != nil || len(res.Cells) != 0 {
		t.Fatalf("a refused mutation wrote %v (%v)", res, err)
	}
}
