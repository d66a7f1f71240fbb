//go:build linux

package region

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
	"github.com/cellstore/cellstore/engine/region/filter"
	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs every file of testdata/ three times: with the data
// in the memstore, flushed after every write (many files), and flushed and
// minor-compacted before every read. The expected output is the same in
// all three modes, which proves the read path merges memstore and files
// correctly and that flushes and minor compactions keep what reads see.
func TestDataDriven(t *testing.T) {
	for _, mode := range []string{"memstore", "flushed", "compacted"} {
		t.Run(mode, func(t *testing.T) {
			datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
				if filepath.Ext(path) != "" {
					return
				}
				h := &ddHarness{mode: mode}
				defer h.close()
				datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
					return h.run(t, d)
				})
			})
		})
	}
}

type ddHarness struct {
	mode string
	e    *env
}

func (h *ddHarness) close() {
	if h.e != nil {
		h.e.close()
		h.e = nil
	}
	if n := memstore.OpenScanners(); n != 0 {
		panic(fmt.Sprintf("%d memstore scanners left open", n))
	}
}

func argStr(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

func argInt(d *datadriven.TestData, key string, def int64) int64 {
	if s, ok := argStr(d, key); ok {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(err)
		}
		return v
	}
	return def
}

func (h *ddHarness) afterWrite(t *testing.T) {
	if h.mode != "memstore" {
		if _, err := h.e.r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// scan runs the scan of d, with Scan.CellBlock and ReuseResults when
// cellBlock, and formats what it returned.
func (h *ddHarness) scan(t *testing.T, d *datadriven.TestData, cellBlock bool) string {
	sc := h.scanFromArgs(t, d)
	sc.CellBlock, sc.ReuseResults = cellBlock, cellBlock
	s, err := h.e.r.Scanner(sc)
	if err != nil {
		return "error: " + err.Error()
	}
	defer s.Close()
	var sb strings.Builder
	batches := 0
	for {
		b, err := s.Next()
		if err != nil {
			return sb.String() + "error: " + err.Error()
		}
		if cellBlock {
			b.Results = blockResults(t, b)
		}
		batches++
		if d.HasArg("batches") {
			fmt.Fprintf(&sb, "-- batch %d (%d results, more=%v)\n", batches, len(b.Results), b.More)
		}
		if b.Heartbeat {
			fmt.Fprintf(&sb, "heartbeat cursor=%s\n", b.Cursor)
		}
		for _, r := range b.Results {
			fmtResult(&sb, r)
		}
		if !b.More || batches > 1000 {
			break
		}
	}
	if sb.Len() == 0 {
		return "(empty)"
	}
	return sb.String()
}

func (h *ddHarness) beforeRead(t *testing.T) {
	if h.mode == "compacted" {
		if err := h.e.r.compactAllMinor(); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *ddHarness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "new":
		// new families=f,g [versions=N] [minversions=N] [ttl=S] [kdc=TRUE] [bloom=ROW]
		h.close()
		names := []string{"f"}
		if s, ok := argStr(d, "families"); ok {
			names = strings.Split(s, ",")
		}
		var fams []Family
		for _, n := range names {
			f := fam(n)
			f.MaxVersions = int(argInt(d, "versions", 0))
			f.MinVersions = int(argInt(d, "minversions", 0))
			f.TTL = argInt(d, "ttl", 0)
			if s, ok := argStr(d, "kdc"); ok {
				k, err := ParseKeepDeletedCells(s)
				if err != nil {
					return err.Error()
				}
				f.KeepDeletedCells = k
			}
			fams = append(fams, f)
		}
		h.e = newEnv(t, fams...)
		h.e.clock.now.Store(argInt(d, "now", 1_000_000))
		return "ok"
	case "clock":
		if v, ok := argStr(d, "set"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			h.e.clock.now.Store(n)
		}
		if v, ok := argStr(d, "advance"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			h.e.clock.now.Add(n)
		}
		if v, ok := argStr(d, "tick"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			h.e.clock.tick.Store(n)
		}
		return fmt.Sprintf("now=%d", h.e.clock.now.Load())
	case "put", "delete":
		// put ROW [durability=skip] with body lines: fam:qual@ts=value, or for
		// delete: version fam:qual@ts | column fam:qual@ts | family fam@ts |
		// familyversion fam@ts | row @ts
		m, err := parseMutation(d.CmdArgs[0].Key, d.Cmd, d.Input)
		if err != nil {
			return err.Error()
		}
		m.TTL = argInt(d, "ttl", 0) // per-cell TTL, ms
		if err := h.e.r.Mutate(m); err != nil {
			return "error: " + err.Error()
		}
		h.afterWrite(t)
		return "ok"
	case "mutaterow":
		// body: put fam:qual@ts=v / delete column fam:qual@ts ...
		row := d.CmdArgs[0].Key
		var ms []*Mutation
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			kind, rest, _ := strings.Cut(line, " ")
			m, err := parseMutation(row, kind, rest)
			if err != nil {
				return err.Error()
			}
			ms = append(ms, m)
		}
		if err := h.e.r.MutateRow(ms); err != nil {
			return "error: " + err.Error()
		}
		h.afterWrite(t)
		return "ok"
	case "incr", "append":
		row := []byte(d.CmdArgs[0].Key)
		group, nonce := uint64(argInt(d, "group", 0)), uint64(argInt(d, "nonce", 0))
		var res *Result
		var err error
		if d.Cmd == "incr" {
			inc := &Increment{Row: row, NonceGroup: group, Nonce: nonce, TTL: argInt(d, "ttl", 0)}
			for _, line := range strings.Fields(d.Input) {
				f, q, _, v, _ := parseCell(line)
				n, perr := strconv.ParseInt(string(v), 10, 64)
				if perr != nil {
					return perr.Error()
				}
				inc.Columns = append(inc.Columns, IncrementColumn{Family: f, Qualifier: q, Amount: n})
			}
			res, err = h.e.r.Increment(inc)
		} else {
			app := &Append{Row: row, NonceGroup: group, Nonce: nonce, TTL: argInt(d, "ttl", 0)}
			for _, line := range strings.Fields(d.Input) {
				f, q, _, v, _ := parseCell(line)
				app.Columns = append(app.Columns, AppendColumn{Family: f, Qualifier: q, Value: v})
			}
			res, err = h.e.r.Append(app)
		}
		if err != nil {
			return "error: " + errors.Unwrap(err).Error()
		}
		h.afterWrite(t)
		var sb strings.Builder
		fmtResult(&sb, *res)
		return sb.String()
	case "cam":
		// cam ROW [check=fam:qual] [op=EQUAL] [value=v|missing] then body:
		// "filter: EXPR" and/or mutation lines as in mutaterow
		row := d.CmdArgs[0].Key
		cm := &CheckAndMutate{Row: []byte(row)}
		if s, ok := argStr(d, "check"); ok {
			f, q, _, _, _ := parseCell(s)
			cm.Family, cm.Qualifier = f, q
		}
		if s, ok := argStr(d, "op"); ok {
			o, err := filter.ParseCompareOp(s)
			if err != nil {
				return err.Error()
			}
			cm.Op = o
		}
		if s, ok := argStr(d, "value"); ok && s != "missing" {
			cm.Value = []byte(s)
		}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if expr, ok := strings.CutPrefix(line, "filter: "); ok {
				f, err := parseFilter(expr)
				if err != nil {
					return err.Error()
				}
				cm.Filter = f
				continue
			}
			kind, rest, _ := strings.Cut(line, " ")
			m, err := parseMutation(row, kind, rest)
			if err != nil {
				return err.Error()
			}
			cm.Mutations = append(cm.Mutations, m)
		}
		ok, err := h.e.r.CheckAndMutate(cm)
		if err != nil {
			return "error: " + err.Error()
		}
		h.afterWrite(t)
		return fmt.Sprintf("applied=%v", ok)
	case "get":
		h.beforeRead(t)
		g := &Get{Row: []byte(d.CmdArgs[0].Key)}
		sc := h.scanFromArgs(t, d)
		g.Columns, g.TimeRange, g.MaxVersions, g.Filter = sc.Columns, sc.TimeRange, sc.MaxVersions, sc.Filter
		g.StoreLimit, g.StoreOffset = sc.StoreLimit, sc.StoreOffset
		res, err := h.e.r.Get(g)
		if err != nil {
			return "error: " + err.Error()
		}
		if len(res.Cells) == 0 {
			return "(empty)"
		}
		var sb strings.Builder
		fmtResult(&sb, *res)
		return sb.String()
	case "scan":
		h.beforeRead(t)
		// Every scan runs twice, with Results and with a reused cell
		// block, from the same clock: both must return the same.
		start := h.e.clock.now.Load()
		out := h.scan(t, d, false)
		h.e.clock.now.Store(start)
		if blk := h.scan(t, d, true); blk != out {
			t.Fatalf("%s: the CellBlock scan returned\n%s\nthe Results scan\n%s", d.Pos, blk, out)
		}
		return out
	case "flush":
		if _, err := h.e.r.Flush(); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "compact":
		if _, err := h.e.r.Flush(); err != nil {
			return "error: " + err.Error()
		}
		_, err := h.e.r.Compact(d.HasArg("major"))
		if err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "reopen":
		h.e.reopen()
		return "ok"
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func (h *ddHarness) scanFromArgs(t *testing.T, d *datadriven.TestData) *Scan {
	sc := &Scan{}
	for _, a := range d.CmdArgs {
		v := strings.Join(a.Vals, ",")
		switch a.Key {
		case "start":
			sc.StartRow = []byte(v)
		case "stop":
			sc.StopRow = []byte(v)
		case "stopincl":
			sc.StopRow, sc.IncludeStopRow = []byte(v), true
		case "reversed":
			sc.Reversed = true
		case "raw":
			sc.Raw = true
		case "versions":
			sc.MaxVersions, _ = strconv.Atoi(v)
		case "time":
			sc.TimeRange.Min, _ = strconv.ParseInt(a.Vals[0], 10, 64)
			sc.TimeRange.Max, _ = strconv.ParseInt(a.Vals[1], 10, 64)
		case "cols":
			for _, c := range a.Vals {
				f, q, _, _, _ := parseCell(c)
				if q == nil && strings.Contains(c, ":") {
					q = []byte{}
				}
				sc.Columns = append(sc.Columns, Column{Family: f, Qualifier: q})
			}
		case "limit":
			sc.Limit, _ = strconv.Atoi(v)
		case "storelimit":
			sc.StoreLimit, _ = strconv.Atoi(v)
		case "storeoffset":
			sc.StoreOffset, _ = strconv.Atoi(v)
		case "caching":
			sc.Caching, _ = strconv.Atoi(v)
		case "batch":
			sc.Batch, _ = strconv.Atoi(v)
		case "maxsize":
			n, _ := strconv.ParseInt(v, 10, 64)
			sc.MaxResultSize = n
		case "partial":
			sc.AllowPartialResults = true
		case "timelimit":
			n, _ := strconv.ParseInt(v, 10, 64)
			sc.TimeLimit = time.Duration(n) * time.Millisecond
		}
	}
	if expr, ok := strings.CutPrefix(strings.TrimSpace(d.Input), "filter: "); ok {
		f, err := parseFilter(expr)
		if err != nil {
			t.Fatal(err)
		}
		sc.Filter = f
	}
	return sc
}

func parseMutation(row, kind, body string) (*Mutation, error) {
	m := NewMutation([]byte(row))
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		switch kind {
		case "put":
			for _, c := range strings.Fields(line) {
				if ttl, ok := strings.CutPrefix(c, "ttl="); ok { // the mutation's per-cell TTL, ms
					n, err := strconv.ParseInt(ttl, 10, 64)
					if err != nil {
						return nil, err
					}
					m.TTL = n
					continue
				}
				f, q, ts, v, _ := parseCell(c)
				m.Put(f, q, ts, v)
			}
		case "delete":
			what, spec, _ := strings.Cut(line, " ")
			f, q, ts, _, _ := parseCell(spec)
			switch what {
			case "version":
				m.DeleteVersion(f, q, ts)
			case "column":
				m.DeleteColumn(f, q, ts)
			case "family":
				m.DeleteFamily(f, ts)
			case "familyversion":
				m.DeleteFamilyVersion(f, ts)
			case "row":
				m.DeleteRow(ts)
			default:
				return nil, fmt.Errorf("unknown delete %q", what)
			}
		default:
			return nil, fmt.Errorf("unknown mutation %q", kind)
		}
	}
	return m, nil
}

var _ = cell.Put
