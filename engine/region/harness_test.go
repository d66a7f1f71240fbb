//go:build linux

package region

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/offheap"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cellstore/cellstore/engine/storage"
	"github.com/cellstore/cellstore/engine/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testClock is an injectable clock in ms; every call advances it by tick.
type testClock struct {
	now  atomic.Int64
	tick atomic.Int64
}

func (c *testClock) Now() time.Time {
	return time.UnixMilli(c.now.Add(c.tick.Load()) - c.tick.Load())
}

type env struct {
	t     testing.TB
	fs    storage.FS
	mem   *storage.Mem
	w     *wal.WAL
	pool  *offheap.ChunkPool
	clock *testClock
	cfg   Config
	table TableDescriptor
	info  Info
	r     *Region
}

func newPool(t testing.TB) *offheap.ChunkPool {
	b, _ := offheap.NewBudget("memstore", 256<<20, nil)
	p, err := offheap.NewChunkPool(offheap.ChunkPoolOptions{Name: "memstore", ChunkSize: 256 << 10, SlabSize: 4 << 20,
		Hugepages: offheap.HugepagesOff, Budget: b, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fam(name string) Family { return Family{Name: name, BlockSize: 1024} }

func newEnv(t testing.TB, fams ...Family) *env {
	t.Helper()
	mem := storage.NewMem()
	e := &env{t: t, fs: mem, mem: mem, clock: &testClock{}, pool: newPool(t)}
	e.clock.now.Store(1_000_000)
	e.table = TableDescriptor{Namespace: "default", Name: "t", Families: fams}
	e.info = Info{Namespace: "default", Table: "t", ID: 1}
	if err := Create(e.fs, e.table, e.info); err != nil {
		t.Fatal(err)
	}
	e.openWAL()
	e.cfg = Config{FS: e.fs, WAL: e.w, Pool: e.pool, Clock: e.clock.Now, DisableAutoFlush: true,
		DisableAutoCompaction: true, Logger: quiet, BlockingWait: time.Second, ReplayWALDirs: []string{"wal/rs1"}}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) openWAL() {
	w, err := wal.Open(wal.Options{FS: e.fs, Dir: "wal/rs1", SyncInterval: time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	e.w = w
	e.cfg.WAL = w
}

func (e *env) open() {
	e.t.Helper()
	r, err := Open(e.cfg, e.info)
	if err != nil {
		e.t.Fatal(err)
	}
	e.r = r
}

func (e *env) close() {
	if e.r != nil {
		e.r.Close()
		e.r = nil
	}
	if e.w != nil {
		e.w.Close()
		e.w = nil
	}
	if e.pool != nil {
		if err := e.pool.Close(); err != nil {
			e.t.Errorf("chunk pool: %v (memstore chunks leaked)", err)
		}
		e.pool = nil
	}
}

// reopen closes the region (flushing) and opens it again.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.r.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
}

// compactAllMinor merges every file of each family without the major
// rules (tests use it to prove minor compactions keep what reads see).
func (r *Region) compactAllMinor() error {
	r.compactMu.Lock()
	defer r.compactMu.Unlock()
	for i := range r.fams {
		saved := r.compactionConfig()
		all := saved
		all.MinFiles, all.MaxFiles, all.Ratio = 2, 1000, 1e18
		r.compaction.Store(&all)
		_, err := r.compactFamily(i, false)
		r.compaction.Store(&saved)
		if err != nil {
			return err
		}
	}
	return nil
}

// parseCell parses "fam:qual@ts=value", "fam:qual=value", "fam:qual@ts",
// "fam@ts" (family markers).
func parseCell(s string) (fam, qual []byte, ts int64, val []byte, hasVal bool) {
	ts = cell.LatestTimestamp
	if i := strings.IndexByte(s, '='); i >= 0 {
		val, hasVal = []byte(s[i+1:]), true
		s = s[:i]
	}
	if i := strings.IndexByte(s, '@'); i >= 0 {
		n, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil {
			panic(err)
		}
		ts = n
		s = s[:i]
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return []byte(s[:i]), []byte(s[i+1:]), ts, val, hasVal
	}
	return []byte(s), nil, ts, val, hasVal
}

func fmtKV(c KV) string {
	s := fmt.Sprintf("%s/%s:%s@%d", c.Row(), c.Family(), c.Qualifier(), c.Timestamp())
	if c.Type() != cell.Put {
		return s + " " + c.Type().String()
	}
	v := string(c.Value)
	if len(c.Value) == 8 && !printable(c.Value) {
		v = fmt.Sprintf("#%d", int64(binary.BigEndian.Uint64(c.Value)))
	} else if !printable(c.Value) {
		v = fmt.Sprintf("%x", c.Value)
	}
	return s + "=" + v
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// blockResults decodes a CellBlock batch into Results (copies, without
// sequence ids), failing t if the block does not hold exactly the cells
// the counts say.
func blockResults(t testing.TB, b ScanBatch) []Result {
	t.Helper()
	if len(b.Results) != 0 || len(b.CellsPerResult) != len(b.PartialPerResult) {
		t.Fatalf("CellBlock batch with %d Results, %d counts, %d partial flags", len(b.Results), len(b.CellsPerResult), len(b.PartialPerResult))
	}
	var out []Result
	rest := b.Block
	for i, n := range b.CellsPerResult {
		if n <= 0 {
			t.Fatalf("CellBlock result %d has %d cells", i, n)
		}
		res := Result{Partial: b.PartialPerResult[i]}
		for range n {
			kv, size, err := cell.ParseKeyValue(rest)
			if err != nil {
				t.Fatalf("CellBlock result %d: %v", i, err)
			}
			res.Cells = append(res.Cells, KV{Key: slices.Clone(kv.Key()), Value: slices.Clone(kv.Value())})
			rest = rest[size:]
		}
		res.Row = res.Cells[0].Row()
		out = append(out, res)
	}
	if len(rest) != 0 {
		t.Fatalf("CellBlock batch: %d bytes after the last counted cell", len(rest))
	}
	return out
}

func fmtResult(sb *strings.Builder, res Result) {
	prefix := ""
	if res.Partial {
		prefix = "partial "
	}
	for _, c := range res.Cells {
		sb.WriteString(prefix + fmtKV(c) + "\n")
	}
}

// parseFilter parses Name(arg, ...) expressions.
func parseFilter(s string) (filter.Filter, error) {
	p := &fparser{s: s}
	f, err := p.filter()
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("trailing input at %d: %q", p.i, p.s[p.i:])
	}
	return f, nil
}

type fparser struct {
	s string
	i int
}

func (p *fparser) ws() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// args reads "(a, b, Nested(...), ...)" returning raw strings; nested
// calls are returned unparsed.
func (p *fparser) args() ([]string, error) {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '(' {
		return nil, fmt.Errorf("expected ( at %d", p.i)
	}
	p.i++
	var out []string
	depth, start := 0, p.i
	for ; p.i < len(p.s); p.i++ {
		switch p.s[p.i] {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				if a := strings.TrimSpace(p.s[start:p.i]); a != "" || len(out) > 0 {
					out = append(out, a)
				}
				p.i++
				return out, nil
			}
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(p.s[start:p.i]))
				start = p.i + 1
			}
		}
	}
	return nil, fmt.Errorf("unbalanced parentheses")
}

func comparator(s string) (filter.Comparator, error) {
	kind, v, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("comparator %q needs kind:value", s)
	}
	switch kind {
	case "binary":
		return &filter.BinaryComparator{Value: []byte(v)}, nil
	case "prefix":
		return &filter.BinaryPrefixComparator{Value: []byte(v)}, nil
	case "substring":
		return &filter.SubstringComparator{Substr: v}, nil
	case "regex":
		return filter.NewRegexStringComparator(v)
	case "long":
		n, err := strconv.ParseInt(v, 10, 64)
		return &filter.LongComparator{Value: n}, err
	}
	return nil, fmt.Errorf("unknown comparator %q", kind)
}

func (p *fparser) filter() (filter.Filter, error) {
	p.ws()
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != '(' {
		p.i++
	}
	name := strings.TrimSpace(p.s[start:p.i])
	args, err := p.args()
	if err != nil {
		return nil, err
	}
	sub := func(s string) (filter.Filter, error) { return parseFilter(s) }
	op := func(s string) filter.CompareOp {
		o, err := filter.ParseCompareOp(s)
		if err != nil {
			panic(err)
		}
		return o
	}
	b := func(s string) bool { return s == "true" }
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	need := func(k int) error {
		if len(args) < k {
			return fmt.Errorf("%s needs %d arguments, got %d", name, k, len(args))
		}
		return nil
	}
	switch name {
	case "Prefix":
		return &filter.PrefixFilter{Prefix: []byte(args[0])}, need(1)
	case "Row", "Family", "Qualifier", "Value":
		if err := need(2); err != nil {
			return nil, err
		}
		c, err := comparator(args[1])
		if err != nil {
			return nil, err
		}
		switch name {
		case "Row":
			return &filter.RowFilter{Op: op(args[0]), Comparator: c}, nil
		case "Family":
			return &filter.FamilyFilter{Op: op(args[0]), Comparator: c}, nil
		case "Qualifier":
			return &filter.QualifierFilter{Op: op(args[0]), Comparator: c}, nil
		}
		return &filter.ValueFilter{Op: op(args[0]), Comparator: c}, nil
	case "SingleColumnValue", "SingleColumnValueExclude":
		// (fam, qual, op, comparator, filterIfMissing, latestOnly)
		if err := need(6); err != nil {
			return nil, err
		}
		c, err := comparator(args[3])
		if err != nil {
			return nil, err
		}
		f := filter.SingleColumnValueFilter{Family: []byte(args[0]), Qualifier: []byte(args[1]), Op: op(args[2]),
			Comparator: c, FilterIfMissing: b(args[4]), LatestVersionOnly: b(args[5])}
		if name == "SingleColumnValueExclude" {
			return &filter.SingleColumnValueExcludeFilter{SingleColumnValueFilter: f}, nil
		}
		return &f, nil
	case "KeyOnly":
		return &filter.KeyOnlyFilter{LenAsValue: len(args) > 0 && b(args[0])}, nil
	case "FirstKeyOnly":
		return &filter.FirstKeyOnlyFilter{}, nil
	case "Page":
		return &filter.PageFilter{PageSize: int64(n(args[0]))}, need(1)
	case "ColumnPrefix":
		return &filter.ColumnPrefixFilter{Prefix: []byte(args[0])}, need(1)
	case "MultipleColumnPrefix":
		var ps [][]byte
		for _, a := range args {
			ps = append(ps, []byte(a))
		}
		return &filter.MultipleColumnPrefixFilter{Prefixes: ps}, nil
	case "ColumnRange":
		// (min, minIncl, max, maxIncl); "-" is open
		if err := need(4); err != nil {
			return nil, err
		}
		f := &filter.ColumnRangeFilter{MinColumnInclusive: b(args[1]), MaxColumnInclusive: b(args[3])}
		if args[0] != "-" {
			f.MinColumn = []byte(args[0])
		}
		if args[2] != "-" {
			f.MaxColumn = []byte(args[2])
		}
		return f, nil
	case "ColumnPagination":
		f := &filter.ColumnPaginationFilter{Limit: n(args[0])}
		if len(args) > 1 {
			if v, err := strconv.Atoi(args[1]); err == nil {
				f.Offset = v
			} else {
				f.ColumnOffset = []byte(args[1])
			}
		}
		return f, nil
	case "ColumnCountGet":
		return &filter.ColumnCountGetFilter{Limit: n(args[0])}, need(1)
	case "Timestamps":
		var ts []int64
		for _, a := range args {
			v, _ := strconv.ParseInt(a, 10, 64)
			ts = append(ts, v)
		}
		return &filter.TimestampsFilter{Timestamps: ts, CanHint: true}, nil
	case "FuzzyRow":
		// pairs: template, mask (mask: 0/1 digits)
		f := &filter.FuzzyRowFilter{}
		for i := 0; i+1 < len(args); i += 2 {
			mask := make([]byte, len(args[i+1]))
			for j, c := range args[i+1] {
				mask[j] = byte(c - '0')
			}
			key := []byte(args[i])
			for j := range key {
				if key[j] == '?' {
					key[j] = 0
				}
			}
			f.Rules = append(f.Rules, filter.FuzzyRule{Key: key, Mask: mask})
		}
		return f, nil
	case "MultiRowRange":
		// start, stop (exclusive) pairs
		f := &filter.MultiRowRangeFilter{}
		for i := 0; i+1 < len(args); i += 2 {
			f.Ranges = append(f.Ranges, filter.RowRange{StartRow: []byte(args[i]), StartRowInclusive: true, StopRow: []byte(args[i+1])})
		}
		return f, nil
	case "InclusiveStop":
		return &filter.InclusiveStopFilter{StopRow: []byte(args[0])}, need(1)
	case "Skip", "WhileMatch":
		if err := need(1); err != nil {
			return nil, err
		}
		inner, err := sub(args[0])
		if err != nil {
			return nil, err
		}
		if name == "Skip" {
			return &filter.SkipFilter{Filter: inner}, nil
		}
		return &filter.WhileMatchFilter{Filter: inner}, nil
	case "DependentColumn":
		// (fam, qual, drop[, op, comparator])
		f := &filter.DependentColumnFilter{Family: []byte(args[0]), Qualifier: []byte(args[1]), DropDependentColumn: b(args[2])}
		if len(args) >= 5 {
			c, err := comparator(args[4])
			if err != nil {
				return nil, err
			}
			f.Op, f.Comparator = op(args[3]), c
		}
		return f, nil
	case "AND", "OR":
		l := &filter.FilterList{Operator: filter.MustPassAll}
		if name == "OR" {
			l.Operator = filter.MustPassOne
		}
		for _, a := range args {
			f, err := sub(a)
			if err != nil {
				return nil, err
			}
			l.Filters = append(l.Filters, f)
		}
		return l, nil
	}
	return nil, fmt.Errorf("unknown filter %q", name)
}

var _ = bytes.Equal

// countRows counts the rows a full scan of r returns.
func countRows(t *testing.T, r *Region) int {
	t.Helper()
	return len(scanResults(t, r, &Scan{}))
}

// scanResults returns every result of scan s of r.
func scanResults(t *testing.T, r *Region, s *Scan) []Result {
	t.Helper()
	sc, err := r.Scanner(s)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []Result
	for {
		b, err := sc.Next()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Results...)
		if !b.More {
			return out
		}
	}
}
