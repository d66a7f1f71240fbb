package region

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// visTags are the test's visibilities: none, label 1, label 2, and "1|2" (two terms).
var visTags = [][]byte{
	nil,
	cell.AppendTag(nil, cell.TagVisibility, []byte{2}),
	cell.AppendTag(nil, cell.TagVisibility, []byte{4}),
	cell.AppendTag(cell.AppendTag(nil, cell.TagVisibility, []byte{2}), cell.TagVisibility, []byte{4}),
}

// visibleWith is a reader's check (what engine/access does, reduced to one-label terms): a cell
// without visibility tags is visible, one with them when the reader holds the label of a term.
func visibleWith(auths map[byte]bool) CellCheck {
	return func(_ cell.Key, tags []byte) bool {
		if !cell.HasVisibility(tags) {
			return true
		}
		ok := false
		cell.EachTag(tags, cell.TagVisibility, func(v []byte) bool {
			ok = auths[v[0]>>1]
			return !ok
		})
		return ok
	}
}

type visCell struct {
	row, q string
	ts     int64
	vis    int // index in visTags
}

type visMark struct {
	t      cell.Type
	row, q string
	ts     int64
	vis    int
}

// TestVisibilityModel: random puts and deletes carrying visibility tags, flushes and major
// compactions between them, and gets with random authorizations, checked against a model of
// HBase's rules: a reader sees a cell its authorizations satisfy, unless a delete marker with the
// same visibility masks it (a marker without masks only cells without); deleting the newest
// version deletes the newest one of the marker's visibility.
func TestVisibilityModel(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { visibilityModel(t, seed) })
	}
}

func visibilityModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	f := fam("f")
	f.MaxVersions = 1000
	e := newEnv(t, f)
	e.r.SetLabelsInUse(true)
	rows, quals := []string{"r0", "r1", "r2"}, []string{"a", "b"}
	var cells []visCell
	var marks []visMark
	ts := int64(0)
	masked := func(c visCell) bool {
		for _, m := range marks {
			if m.row != c.row || m.vis != c.vis {
				continue
			}
			switch {
			case m.t == cell.DeleteFamily && c.ts <= m.ts,
				m.t == cell.DeleteColumn && m.q == c.q && c.ts <= m.ts,
				m.t == cell.Delete && m.q == c.q && c.ts == m.ts:
				return true
			}
		}
		return false
	}
	mutate := func(m *Mutation, vis int) {
		t.Helper()
		m.Visibility = visTags[vis]
		if err := e.r.Mutate(m); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 400 {
		row, q, vis := rows[r.IntN(len(rows))], quals[r.IntN(len(quals))], r.IntN(len(visTags))
		ts++
		switch k := r.IntN(20); {
		case k < 11:
			mutate(NewMutation([]byte(row)).Put([]byte("f"), []byte(q), ts, fmt.Appendf(nil, "v%d", ts)), vis)
			cells = append(cells, visCell{row, q, ts, vis})
		case k < 14: // the newest version of this visibility
			mutate(NewMutation([]byte(row)).DeleteVersion([]byte("f"), []byte(q), cell.LatestTimestamp), vis)
			newest := int64(-1)
			for _, c := range cells {
				if c.row == row && c.q == q && c.vis == vis && !masked(c) && c.ts > newest {
					newest = c.ts
				}
			}
			if newest >= 0 {
				marks = append(marks, visMark{cell.Delete, row, q, newest, vis})
			}
		case k < 15: // an exact version, of any visibility
			if len(cells) > 0 {
				c := cells[r.IntN(len(cells))]
				mutate(NewMutation([]byte(c.row)).DeleteVersion([]byte("f"), []byte(c.q), c.ts), vis)
				marks = append(marks, visMark{cell.Delete, c.row, c.q, c.ts, vis})
			}
		case k < 17:
			mutate(NewMutation([]byte(row)).DeleteColumn([]byte("f"), []byte(q), ts), vis)
			marks = append(marks, visMark{cell.DeleteColumn, row, q, ts, vis})
		case k < 18:
			mutate(NewMutation([]byte(row)).DeleteFamily([]byte("f"), ts), vis)
			marks = append(marks, visMark{cell.DeleteFamily, row, "", ts, vis})
		case k < 19:
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := e.r.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := e.r.Compact(true); err != nil {
				t.Fatal(err)
			}
		}
		// Read every row with every set of authorizations.
		for set := range 4 {
			auths := map[byte]bool{1: set&1 != 0, 2: set&2 != 0}
			for _, row := range rows {
				var want []string
				for _, c := range cells {
					if c.row == row && !masked(c) && (c.vis == 0 || c.vis == 1 && auths[1] || c.vis == 2 && auths[2] || c.vis == 3 && (auths[1] || auths[2])) {
						want = append(want, fmt.Sprintf("%s/%d", c.q, c.ts))
					}
				}
				res, err := e.r.Get(&Get{Row: []byte(row), MaxVersions: 1000, CellCheck: visibleWith(auths)})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, kv := range res.Cells {
					got = append(got, fmt.Sprintf("%s/%d", kv.Qualifier(), kv.Timestamp()))
				}
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d, row %s, authorizations %b: got %v, want %v", step, row, set, got, want)
				}
			}
		}
	}
}

// A delete without visibility tags still skips a whole deleted column at once when no label is
// in use, and masks cells without visibility tags either way.
func TestVisibilityDeleteWithoutLabels(t *testing.T) {
	f := fam("f")
	f.MaxVersions = 10
	e := newEnv(t, f)
	for ts := int64(1); ts <= 5; ts++ {
		if err := e.r.Mutate(NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), ts, []byte("v"))); err != nil {
			t.Fatal(err)
		}
	}
	m := NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), 3, []byte("secret"))
	m.Visibility = visTags[1]
	if err := e.r.Mutate(m); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Mutate(NewMutation([]byte("r")).DeleteColumn([]byte("f"), []byte("q"), 4)); err != nil {
		t.Fatal(err)
	}
	all := map[byte]bool{1: true, 2: true}
	for _, inUse := range []bool{false, true} {
		e.r.SetLabelsInUse(inUse)
		res, err := e.r.Get(&Get{Row: []byte("r"), MaxVersions: 10, CellCheck: visibleWith(all)})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, kv := range res.Cells {
			got = append(got, kv.Timestamp())
		}
		// Labels in use: the labelled version 3 survives the unlabelled delete. Not in use, the
		// scan skips the column at the marker (no labelled cell can exist then).
		want := []int64{5}
		if inUse {
			want = []int64{5, 3}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("labels in use %v: versions %v, want %v", inUse, got, want)
		}
	}
	bad := NewMutation([]byte("r")).Put([]byte("f"), []byte("q"), 1, []byte("v"))
	bad.Visibility = cell.AppendTag(nil, cell.TagACL, []byte("x"))
	if err := e.r.Mutate(bad); err == nil {
		t.Fatal("Mutation.Visibility with an ACL tag was accepted")
	}
}
