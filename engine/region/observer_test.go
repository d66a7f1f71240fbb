//go:build linux

package region

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// goObserver is an Observer in Go (engine/compute/function's tests run the WebAssembly one): values say
// what it does.
type goObserver struct {
	mu          sync.Mutex
	posts       int
	fileCalls   []string
	readPartial int
}

func (o *goObserver) Hooks() ObserverHooks {
	return ObserverHooks{PreMutate: true, PostMutate: true, FilterRead: true, FilterFile: true}
}

func (o *goObserver) PreMutate(m *Mutation) error {
	for i := range m.Ops {
		switch string(m.Ops[i].Value) {
		case "refuse":
			return fmt.Errorf("%w: refused", ErrFunction)
		case "x":
			m.Ops[i].Value = []byte("y")
		case "badrow":
			m.Row = []byte("elsewhere")
		}
	}
	return nil
}

func (o *goObserver) PostMutate(m *Mutation) {
	o.mu.Lock()
	o.posts += len(m.Ops)
	o.mu.Unlock()
}

func (o *goObserver) FilterRead(row []byte, cells []KV, partial bool) (bool, []KV, error) {
	if partial {
		o.mu.Lock()
		o.readPartial++
		o.mu.Unlock()
	}
	var out []KV
	changed := false
	for _, c := range cells {
		switch string(c.Value) {
		case "hidden":
			return false, nil, nil
		case "fail":
			return false, nil, fmt.Errorf("%w: read failed", ErrFunction)
		case "secret":
			c = KV{Key: c.Key, Value: []byte("***")}
			changed = true
		case "short":
			// Longer than it was, and the cells after it keep pointing into the scanner's memory.
			c = KV{Key: c.Key, Value: []byte("a value much longer than the one it replaces")}
			changed = true
		case "wrongrow":
			return true, []KV{{Key: cell.AppendKey(nil, []byte("other"), c.Family(), c.Qualifier(), 1, cell.Put)}}, nil
		}
		out = append(out, c)
	}
	if changed {
		// In reverse: the region puts them back in order.
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return true, out, nil
	}
	return true, nil, nil
}

func (o *goObserver) FilterFile(kind FileWrite, continued bool, row []byte, cells []KV, keep []bool) {
	o.mu.Lock()
	o.fileCalls = append(o.fileCalls, fmt.Sprintf("%d/%v/%s/%d", kind, continued, row, len(cells)))
	o.mu.Unlock()
	for i := range cells {
		if cells[i].Key.Type() != cell.Put {
			panic("FilterFile was handed a delete marker")
		}
		if string(cells[i].Value) == "garbage" {
			keep[i] = false
		}
	}
}

func observedScan(t *testing.T, r *Region, s *Scan) []string {
	t.Helper()
	sc, err := r.Scanner(s)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	for {
		b, err := sc.Next()
		if err != nil {
			t.Fatal(err)
		}
		res := b.Results
		if s.CellBlock {
			res = blockResults(t, b)
		}
		for _, r := range res {
			for _, c := range r.Cells {
				out = append(out, fmtKV(c))
			}
		}
		if !b.More {
			return out
		}
	}
}

func TestObserver(t *testing.T) {
	e := newEnv(t, fam("f"), fam("g"))
	o := &goObserver{}
	e.r.SetObserver(o)
	mut := func(row string, cells ...string) error {
		m := NewMutation([]byte(row))
		for _, c := range cells {
			f, q, ts, v, _ := parseCell(c)
			m.Put(f, q, ts, v)
		}
		return e.r.Mutate(m)
	}
	for _, c := range [][]string{
		{"a", "f:q@1=plain", "g:q@1=garbage"},
		{"b", "f:q@1=hidden"},
		{"c", "f:q@1=secret", "f:r@1=open"},
		{"d", "f:q@1=x"},
		{"dd", "f:q@1=short", "f:r@1=after", "f:s@1=end"},
	} {
		if err := mut(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := mut("e", "f:q@1=refuse"); !errors.Is(err, ErrFunction) {
		t.Fatalf("a refused put: %v", err)
	}
	if err := mut("e", "f:q@1=badrow"); !errors.Is(err, ErrFunction) || !strings.Contains(err.Error(), "changed the row") {
		t.Fatalf("a function moving a put to another row: %v", err)
	}
	// Refused mutations of a batch fail alone.
	errs := e.r.Batch([]*Mutation{NewMutation([]byte("e")).Put([]byte("f"), []byte("q"), 1, []byte("refuse")),
		NewMutation([]byte("e")).Put([]byte("f"), []byte("q"), 2, []byte("ok"))})
	if !errors.Is(errs[0], ErrFunction) || errs[1] != nil {
		t.Fatalf("batch errors %v", errs)
	}
	if ok, err := e.r.CheckAndMutate(&CheckAndMutate{Row: []byte("e"), Family: []byte("f"), Qualifier: []byte("zz"),
		Mutations: []*Mutation{NewMutation([]byte("e")).Put([]byte("f"), []byte("z"), 1, []byte("refuse"))}}); ok || !errors.Is(err, ErrFunction) {
		t.Fatalf("check-and-mutate refused: %v %v", ok, err)
	}
	if o.posts != 10 {
		t.Fatalf("post hook saw %d ops, want 10 (the applied ones)", o.posts)
	}
	want := "a/f:q@1=plain a/g:q@1=garbage c/f:q@1=*** c/f:r@1=open d/f:q@1=y " +
		"dd/f:q@1=a value much longer than the one it replaces dd/f:r@1=after dd/f:s@1=end e/f:q@2=ok"
	check := func(when string) {
		t.Helper()
		for _, s := range []*Scan{{}, {CellBlock: true}, {Batch: 1, AllowPartialResults: true}, {CellBlock: true, Batch: 1, AllowPartialResults: true}} {
			if got := strings.Join(observedScan(t, e.r, s), " "); got != want {
				t.Fatalf("%s: scan %+v:\n got %s\nwant %s", when, *s, got, want)
			}
		}
		// Gets see the same; raw scans and the region's own reads see what is stored.
		if res, err := e.r.Get(&Get{Row: []byte("b")}); err != nil || len(res.Cells) != 0 {
			t.Fatalf("%s: get of a hidden row: %v %v", when, res, err)
		}
		if raw := strings.Join(observedScan(t, e.r, &Scan{Raw: true, StartRow: []byte("b"), StopRow: []byte("c")}), " "); raw != "b/f:q@1=hidden" {
			t.Fatalf("%s: raw scan %q", when, raw)
		}
	}
	check("memstore")
	if o.readPartial == 0 {
		t.Fatal("partial rows never reached the read hook")
	}
	// A flush leaves out what the file hook drops; reads are the same, raw scans lose it.
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	want = strings.Replace(want, "a/g:q@1=garbage ", "", 1)
	check("after flush")
	if len(o.fileCalls) == 0 || !strings.HasPrefix(o.fileCalls[0], fmt.Sprintf("%d/false/a/", FileFlush)) {
		t.Fatalf("file calls %q", o.fileCalls)
	}
	// A compaction: garbage written while no observer ran goes at the next major compaction;
	// delete markers pass through untouched.
	e.r.SetObserver(nil)
	if err := mut("a", "g:q@2=garbage"); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Delete(NewMutation([]byte("c")).DeleteColumn([]byte("f"), []byte("r"), 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := mut("a", "g:q@3=garbage"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	if raw := strings.Join(observedScan(t, e.r, &Scan{Raw: true, StopRow: []byte("b")}), " "); !strings.Contains(raw, "garbage") {
		t.Fatalf("without the observer the flush kept garbage: %q", raw)
	}
	e.r.SetObserver(o)
	o.fileCalls = nil
	if err := e.r.compactAllMinor(); err != nil {
		t.Fatal(err)
	}
	if raw := strings.Join(observedScan(t, e.r, &Scan{Raw: true}), " "); strings.Contains(raw, "garbage") || !strings.Contains(raw, "c/f:r@5 DeleteColumn") {
		t.Fatalf("after a compaction with the observer: %q", raw)
	}
	if !strings.HasPrefix(o.fileCalls[0], fmt.Sprintf("%d/", FileMinorCompaction)) {
		t.Fatalf("compaction file calls %q", o.fileCalls)
	}
	want = "a/f:q@1=plain c/f:q@1=*** d/f:q@1=y dd/f:q@1=a value much longer than the one it replaces dd/f:r@1=after dd/f:s@1=end e/f:q@2=ok"
	check("after compaction")

	// A read hook's failure fails the read; a wrong replacement too.
	for _, v := range []string{"fail", "wrongrow"} {
		if err := mut("z"+v, "f:q@1="+v); err != nil {
			t.Fatal(err)
		}
		sc, err := e.r.Scanner(&Scan{StartRow: []byte("z" + v)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Next(); !errors.Is(err, ErrFunction) {
			t.Fatalf("read hook %s: %v", v, err)
		}
		sc.Close()
	}
}

// A row of more cells than FileRowCells reaches the file hook in parts, in order.
func TestObserverWideRow(t *testing.T) {
	e := newEnv(t, fam("f"))
	o := &goObserver{}
	e.r.SetObserver(o)
	m := NewMutation([]byte("wide"))
	n := FileRowCells + 10
	for i := range n {
		v := "keep"
		if i%2 == 1 {
			v = "garbage"
		}
		m.Put([]byte("f"), fmt.Appendf(nil, "q%05d", i), 1, []byte(v))
	}
	if err := e.r.Mutate(m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("%d/false/wide/%d", FileFlush, FileRowCells), fmt.Sprintf("%d/true/wide/10", FileFlush)}
	if fmt.Sprint(o.fileCalls) != fmt.Sprint(want) {
		t.Fatalf("file calls %q, want %q", o.fileCalls, want)
	}
	got := observedScan(t, e.r, &Scan{Raw: true})
	if len(got) != n/2 {
		t.Fatalf("%d cells after the flush, want %d", len(got), n/2)
	}
	for i, c := range got {
		if want := fmt.Sprintf("wide/f:q%05d@1=keep", 2*i); c != want {
			t.Fatalf("cell %d: %s, want %s", i, c, want)
		}
	}
}
