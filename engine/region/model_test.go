//go:build linux

package region

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/memstore"
)

var (
	modelSeeds = flag.Int("model.seeds", 12, "seeds for TestModel")
	modelOps   = flag.Int("model.ops", 250, "operations per seed for TestModel")
	modelSeed  = flag.Uint64("model.seed", 0, "run TestModel with only this seed")
)

// The reference model: every cell ever written, and the HBase rules
// spelled out declaratively over them.

type mcell struct {
	row, fam, qual string
	ts             int64
	typ            cell.Type
	val            string
	seq            uint64
	ttl            int64 // per-cell TTL of a put, ms (0: none)
}

// cellExpired: a put past its per-cell TTL, which every read skips (and
// compactions drop) before anything else looks at it.
func (c mcell) cellExpired(now int64) bool { return c.ttl > 0 && c.ttl < now-c.ts }

type model struct {
	fams  map[string]Family
	cells []mcell
	seq   uint64
}

func (m *model) visibleCells(row, fam string, now int64) []mcell {
	var out []mcell
	for _, c := range m.cells {
		if c.row == row && c.fam == fam {
			out = append(out, c)
		}
	}
	// store order: qualifier asc, ts desc, type desc, seq desc
	slices.SortFunc(out, func(a, b mcell) int {
		if c := strings.Compare(a.qual, b.qual); c != 0 {
			return c
		}
		if c := cmp.Compare(b.ts, a.ts); c != 0 {
			return c
		}
		if c := cmp.Compare(b.typ, a.typ); c != 0 {
			return c
		}
		return cmp.Compare(b.seq, a.seq)
	})
	return out
}

func (m *model) oldest(f Family, now int64) int64 {
	if ttl := f.ttlMillis(); ttl > 0 {
		return now - ttl
	}
	return math.MinInt64
}

// masked reports whether put p is deleted by one of markers.
func masked(p mcell, markers []mcell) bool {
	for _, d := range markers {
		switch d.typ {
		case cell.DeleteFamily:
			if d.ts >= p.ts {
				return true
			}
		case cell.DeleteFamilyVersion:
			if d.ts == p.ts {
				return true
			}
		case cell.DeleteColumn:
			if d.qual == p.qual && d.ts >= p.ts {
				return true
			}
		case cell.Delete:
			if d.qual == p.qual && d.ts == p.ts {
				return true
			}
		}
	}
	return false
}

type mread struct {
	versions int
	min, max int64 // time range [min, max)
	raw      bool
}

// readRowFamily returns what a read returns for one row and family.
func (m *model) readRowFamily(row, fam string, rd mread, now int64) []mcell {
	f := m.fams[fam]
	cells := m.visibleCells(row, fam, now)
	old := m.oldest(f, now)
	if rd.raw {
		old = math.MinInt64 // raw reads see cells past the family's TTL until a compaction drops them
	}
	var live []mcell
	for _, c := range cells {
		if f.MinVersions == 0 && c.ts < old {
			continue // expired
		}
		if c.cellExpired(now) {
			continue
		}
		live = append(live, c)
	}
	var markers []mcell
	if !rd.raw {
		for _, c := range live {
			if !c.typ.IsDelete() {
				continue
			}
			use := c.ts >= rd.min
			if f.KeepDeletedCells != KeepDeletedFalse {
				use = c.ts >= rd.min && c.ts < rd.max
			}
			if use {
				markers = append(markers, c)
			}
		}
	}
	maxV := rd.versions
	if !rd.raw {
		maxV = min(rd.versions, f.maxVersions())
	}
	var out []mcell
	var col string
	first := true
	count := 0
	var lastTs int64
	var lastTyp cell.Type
	haveLast := false
	stopped := false
	for _, c := range live {
		if first || c.qual != col {
			col, first, count, haveLast, stopped = c.qual, false, 0, false, false
		}
		if stopped {
			continue
		}
		if c.typ.IsDelete() && !rd.raw {
			continue
		}
		if !rd.raw && masked(c, markers) {
			continue
		}
		if c.ts >= rd.max || c.ts < rd.min {
			continue
		}
		if haveLast && c.ts == lastTs && c.typ == lastTyp {
			continue
		}
		if !c.typ.IsDelete() {
			count++
		}
		if count > maxV {
			stopped = true
			continue
		}
		if !(count <= f.MinVersions || c.ts >= old) {
			stopped = true
			continue
		}
		haveLast, lastTs, lastTyp = true, c.ts, c.typ
		out = append(out, c)
	}
	return out
}

func (m *model) rows() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range m.cells {
		if !seen[c.row] {
			seen[c.row] = true
			out = append(out, c.row)
		}
	}
	slices.Sort(out)
	return out
}

func (m *model) famNames() []string {
	var out []string
	for n := range m.fams {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// majorCompact applies the major compaction rules to rows in [lo, hi). earliest is, per family,
// the earliest put of the files compacted (HBase's earliestPutTs: with deleted cells kept, a
// marker older than it goes). The files are not modelled (a daughter's references hold the
// parent's files, other rows too; a flush leaves out cells expired by then), so the caller takes
// it from the files' metadata; majorCompact checks it against the model: no later than any put
// the files must still hold (the live ones of the rows compacted), which would drop markers
// that still mask.
func (m *model) majorCompact(lo, hi string, now int64, earliest map[string]int64, fams ...string) error {
	var keep []mcell
	var affected []mcell
	for _, c := range m.cells {
		if c.row >= lo && (hi == "" || c.row < hi) && (fams == nil || slices.Contains(fams, c.fam)) {
			affected = append(affected, c)
		} else {
			keep = append(keep, c)
		}
	}
	for _, c := range affected {
		f := m.fams[c.fam]
		if c.typ == cell.Put && !c.cellExpired(now) && !(f.MinVersions == 0 && c.ts < m.oldest(f, now)) && c.ts < earliest[c.fam] {
			return fmt.Errorf("the files' earliest put of family %s is %d, after the put %v they hold", c.fam, earliest[c.fam], fmtM(c))
		}
	}
	type rf struct{ row, fam string }
	done := map[rf]bool{}
	for _, c := range affected {
		k := rf{c.row, c.fam}
		if done[k] {
			continue
		}
		done[k] = true
		f := m.fams[c.fam]
		old := m.oldest(f, now)
		var markers []mcell
		all := m.visibleCells(c.row, c.fam, now)
		for _, d := range all {
			if d.typ.IsDelete() && !(f.MinVersions == 0 && d.ts < old) {
				if f.KeepDeletedCells == KeepDeletedFalse || f.KeepDeletedCells == KeepDeletedTTL && d.ts < old {
					markers = append(markers, d)
				}
			}
		}
		var col string
		first := true
		count := 0
		haveLast := false
		var lastTs int64
		var lastTyp cell.Type
		for _, d := range all {
			if first || d.qual != col {
				col, first, count, haveLast = d.qual, false, 0, false
			}
			expired := d.ts < old
			if f.MinVersions == 0 && expired {
				continue
			}
			if d.cellExpired(now) {
				continue
			}
			if d.typ.IsDelete() {
				if slices.Contains(markers, d) {
					continue
				}
				if d.ts < earliest[d.fam] {
					continue // older than every put: masks nothing
				}
				if count <= f.maxVersions() {
					keep = append(keep, d)
				}
				continue
			}
			if masked(d, markers) {
				continue
			}
			if haveLast && d.ts == lastTs && d.typ == lastTyp {
				continue
			}
			count++
			if count > f.maxVersions() {
				continue
			}
			if count <= f.MinVersions || !expired {
				haveLast, lastTs, lastTyp = true, d.ts, d.typ
				keep = append(keep, d)
			}
		}
	}
	m.cells = keep
	return nil
}

// filesEarliestPut is, for each family of r, the earliest put timestamp of its files (as a
// major compaction of them all reads it).
func filesEarliestPut(r *Region) map[string]int64 {
	out := map[string]int64{}
	for fi, fs := range r.files.Load().byFamily {
		e := int64(math.MaxInt64)
		for _, f := range fs {
			e = min(e, f.meta.EarliestPutTimestamp)
		}
		out[r.fams[fi].Name] = e
	}
	return out
}

// Operations.

type mop struct {
	kind      string // put del incr get scan flush minor major reopen split clock
	row       string
	fam, qual string
	ts        int64
	typ       cell.Type
	val       string
	amount    int64
	read      mread
	start     string
	stop      string
	reversed  bool
	advance   int64
	ttl       int64 // put, incr: per-cell TTL, ms
}

func (o mop) String() string {
	switch o.kind {
	case "put":
		if o.ttl > 0 {
			return fmt.Sprintf("put %s %s:%s@%d=%s ttl=%d", o.row, o.fam, o.qual, o.ts, o.val, o.ttl)
		}
		return fmt.Sprintf("put %s %s:%s@%d=%s", o.row, o.fam, o.qual, o.ts, o.val)
	case "del":
		return fmt.Sprintf("delete %s %v %s:%s@%d", o.row, o.typ, o.fam, o.qual, o.ts)
	case "incr":
		if o.ttl > 0 {
			return fmt.Sprintf("incr %s %s:%s by %d ttl=%d", o.row, o.fam, o.qual, o.amount, o.ttl)
		}
		return fmt.Sprintf("incr %s %s:%s by %d", o.row, o.fam, o.qual, o.amount)
	case "get":
		return fmt.Sprintf("get %s versions=%d time=[%d,%d) raw=%v", o.row, o.read.versions, o.read.min, o.read.max, o.read.raw)
	case "scan":
		return fmt.Sprintf("scan [%q,%q) reversed=%v versions=%d time=[%d,%d) raw=%v", o.start, o.stop, o.reversed, o.read.versions, o.read.min, o.read.max, o.read.raw)
	case "clock":
		return fmt.Sprintf("clock +%d", o.advance)
	case "split":
		return "split at " + o.row
	}
	return o.kind
}

var modelRows = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

func genOps(r *rand.Rand, n int) []mop {
	var ops []mop
	randRead := func() mread {
		rd := mread{versions: 1 + r.IntN(4), max: math.MaxInt64}
		if r.IntN(4) == 0 {
			rd.min = int64(r.IntN(15))
			rd.max = rd.min + 1 + int64(r.IntN(15))
		}
		rd.raw = r.IntN(6) == 0
		return rd
	}
	fams := []string{"a", "b", "c"}
	for i := 0; i < n; i++ {
		row := modelRows[r.IntN(len(modelRows))]
		fam := fams[r.IntN(len(fams))]
		qual := []string{"", "x", "y"}[r.IntN(3)]
		ts := int64(1 + r.IntN(20))
		if r.IntN(5) == 0 {
			ts = cell.LatestTimestamp
		}
		switch p := r.IntN(100); {
		case p < 30:
			o := mop{kind: "put", row: row, fam: fam, qual: qual, ts: ts, val: fmt.Sprintf("v%d", i)}
			switch {
			case r.IntN(3) > 0:
			case ts == cell.LatestTimestamp:
				o.ttl = 1 + int64(r.IntN(100_000)) // expires within a few clock steps
			default:
				o.ttl = 1_000_000 + int64(r.IntN(300_000)) // the clock starts at 1 000 000
			}
			ops = append(ops, o)
		case p < 42:
			typ := []cell.Type{cell.Delete, cell.DeleteColumn, cell.DeleteFamily, cell.DeleteFamilyVersion}[r.IntN(4)]
			if typ == cell.DeleteFamily || typ == cell.DeleteFamilyVersion {
				qual = ""
			}
			ops = append(ops, mop{kind: "del", row: row, fam: fam, qual: qual, ts: ts, typ: typ})
		case p < 48:
			o := mop{kind: "incr", row: row, fam: fam, qual: "n", amount: int64(r.IntN(10)) - 3}
			if r.IntN(4) == 0 {
				o.ttl = 1 + int64(r.IntN(100_000)) // replaces the counter's TTL
			}
			ops = append(ops, o)
		case p < 62:
			ops = append(ops, mop{kind: "get", row: row, read: randRead()})
		case p < 74:
			a, b := modelRows[r.IntN(len(modelRows))], modelRows[r.IntN(len(modelRows))]
			if a > b {
				a, b = b, a
			}
			o := mop{kind: "scan", start: a, stop: b, reversed: r.IntN(2) == 0, read: randRead()}
			if r.IntN(3) == 0 {
				o.start, o.stop = "", ""
			}
			ops = append(ops, o)
		case p < 82:
			ops = append(ops, mop{kind: "flush"})
		case p < 86:
			ops = append(ops, mop{kind: "minor"})
		case p < 90:
			ops = append(ops, mop{kind: "major"})
		case p < 93:
			ops = append(ops, mop{kind: "reopen"})
		case p < 96:
			ops = append(ops, mop{kind: "split", row: modelRows[1+r.IntN(len(modelRows)-1)]})
		default:
			ops = append(ops, mop{kind: "clock", advance: int64(r.IntN(60_000))})
		}
	}
	return ops
}

func modelFamilies() []Family {
	a := fam("a")
	a.MaxVersions = 3
	b := fam("b")
	b.MaxVersions = 2
	b.KeepDeletedCells = KeepDeletedTrue
	c := fam("c")
	c.MaxVersions = 3
	c.MinVersions = 1
	c.TTL = 100
	return []Family{a, b, c}
}

// modelRun executes ops against regions and the model; it returns a
// description of the first divergence.
func modelRun(t testing.TB, ops []mop) (failure string) {
	e := newEnv(t, modelFamilies()...)
	defer e.close()
	m := &model{fams: map[string]Family{}}
	for _, f := range modelFamilies() {
		m.fams[f.Name] = f
	}
	regions := []*Region{e.r}
	defer func() {
		for _, r := range regions {
			r.Close()
		}
		e.r = nil
		if n := memstore.OpenScanners(); n != 0 {
			failure = fmt.Sprintf("%d memstore scanners left open", n)
		}
	}()
	route := func(row string) int {
		for i, r := range regions {
			if r.info.ContainsRow([]byte(row)) {
				return i
			}
		}
		return -1
	}
	now := func() int64 { return e.clock.now.Load() }
	for i, o := range ops {
		fail := func(format string, args ...any) string {
			return fmt.Sprintf("op %d (%v): %s", i, o, fmt.Sprintf(format, args...))
		}
		switch o.kind {
		case "put", "del":
			r := regions[route(o.row)]
			mu := NewMutation([]byte(o.row))
			mu.TTL = o.ttl
			if o.kind == "put" {
				mu.Put([]byte(o.fam), []byte(o.qual), o.ts, []byte(o.val))
			} else {
				mu.Ops = append(mu.Ops, Op{Type: o.typ, Family: []byte(o.fam), Qualifier: []byte(o.qual), Timestamp: o.ts})
			}
			if err := r.Mutate(mu); err != nil {
				return fail("%v", err)
			}
			ts := o.ts
			if ts == cell.LatestTimestamp {
				ts = now()
				if o.typ == cell.Delete {
					got := m.readRowFamily(o.row, o.fam, mread{versions: 1, max: math.MaxInt64}, now())
					for _, c := range got {
						if c.qual == o.qual {
							ts = c.ts
							break
						}
					}
				}
			}
			typ := cell.Put
			if o.kind == "del" {
				typ = o.typ
			}
			m.seq++
			m.cells = append(m.cells, mcell{row: o.row, fam: o.fam, qual: o.qual, ts: ts, typ: typ, val: o.val, seq: m.seq, ttl: o.ttl})
		case "incr":
			r := regions[route(o.row)]
			res, err := r.Increment(&Increment{Row: []byte(o.row), Columns: []IncrementColumn{{Family: []byte(o.fam), Qualifier: []byte(o.qual), Amount: o.amount}}, TTL: o.ttl})
			cur := m.readRowFamily(o.row, o.fam, mread{versions: 1, max: math.MaxInt64}, now())
			var old *mcell
			for i := range cur {
				if cur[i].qual == o.qual {
					old = &cur[i]
					break
				}
			}
			var v int64
			ts, ttl := now(), o.ttl
			if old != nil {
				if len(old.val) != 8 {
					if !errors.Is(err, ErrNotALong) {
						return fail("want ErrNotALong, got %v", err)
					}
					continue
				}
				v = int64(binary.BigEndian.Uint64([]byte(old.val)))
				ts = max(ts, old.ts+1)
				if ttl == 0 {
					ttl = old.ttl // carried forward
				}
			}
			if err != nil {
				return fail("%v", err)
			}
			nv := string(binary.BigEndian.AppendUint64(nil, uint64(v+o.amount)))
			if len(res.Cells) != 1 || string(res.Cells[0].Value) != nv || res.Cells[0].Timestamp() != ts {
				return fail("increment returned %v, model %d@%d", res.Cells, v+o.amount, ts)
			}
			m.seq++
			m.cells = append(m.cells, mcell{row: o.row, fam: o.fam, qual: o.qual, ts: ts, typ: cell.Put, val: nv, seq: m.seq, ttl: ttl})
		case "get", "scan":
			var want []string
			inRange := func(row string) bool {
				if o.kind == "get" {
					return row == o.row
				}
				return row >= o.start && (o.stop == "" || row < o.stop)
			}
			rows := m.rows()
			if o.reversed {
				slices.Reverse(rows)
			}
			for _, row := range rows {
				if !inRange(row) {
					continue
				}
				for _, f := range m.famNames() {
					for _, c := range m.readRowFamily(row, f, o.read, now()) {
						want = append(want, fmtM(c))
					}
				}
			}
			var got []string
			tr := TimeRange{Min: o.read.min, Max: o.read.max}
			if o.kind == "get" {
				res, err := regions[route(o.row)].Get(&Get{Row: []byte(o.row), MaxVersions: o.read.versions, TimeRange: tr})
				if err != nil && !o.read.raw {
					return fail("%v", err)
				}
				if o.read.raw {
					// Gets are never raw: read the row with a raw scan.
					got = scanAll(regions, &Scan{StartRow: []byte(o.row), StopRow: []byte(o.row), IncludeStopRow: true,
						MaxVersions: o.read.versions, TimeRange: tr, Raw: true}, false)
				} else {
					for _, c := range res.Cells {
						got = append(got, fmtKVm(c))
					}
				}
			} else {
				got = scanAll(regions, &Scan{StartRow: []byte(o.start), StopRow: []byte(o.stop), Reversed: o.reversed,
					MaxVersions: o.read.versions, TimeRange: tr, Raw: o.read.raw, Caching: 1 + i%3,
					CellBlock: i%2 == 1, ReuseResults: i%4 == 1}, o.reversed)
				if o.reversed {
					// A reversed scan starts at StartRow (the highest row).
					got = scanAll(regions, &Scan{StartRow: []byte(o.stop), ExcludeStartRow: true, StopRow: []byte(o.start),
						IncludeStopRow: true, Reversed: true, MaxVersions: o.read.versions, TimeRange: tr, Raw: o.read.raw,
						Caching: 1 + i%3, CellBlock: i%2 == 1, ReuseResults: i%4 == 1}, true)
				}
			}
			if !slices.Equal(got, want) {
				return fail("\n got  %v\n want %v", got, want)
			}
		case "flush":
			for _, r := range regions {
				if _, err := r.Flush(); err != nil {
					return fail("%v", err)
				}
			}
		case "minor":
			for _, r := range regions {
				r.Flush()
				// A daughter's references are compacted whole, with the
				// major rules.
				var refFams []string
				for fi, fs := range r.files.Load().byFamily {
					if slices.ContainsFunc(fs, func(f *storeFile) bool { return f.ref != nil }) {
						refFams = append(refFams, r.fams[fi].Name)
					}
				}
				earliest := filesEarliestPut(r)
				if err := r.compactAllMinor(); err != nil {
					return fail("%v", err)
				}
				if refFams != nil {
					if err := m.majorCompact(string(r.info.StartKey), string(r.info.EndKey), now(), earliest, refFams...); err != nil {
						return fail("%v", err)
					}
				}
			}
		case "major":
			for _, r := range regions {
				if _, err := r.Flush(); err != nil {
					return fail("%v", err)
				}
				earliest := filesEarliestPut(r)
				if _, err := r.Compact(true); err != nil {
					return fail("%v", err)
				}
				if err := m.majorCompact(string(r.info.StartKey), string(r.info.EndKey), now(), earliest); err != nil {
					return fail("%v", err)
				}
			}
		case "reopen":
			for i, r := range regions {
				info := r.info
				if err := r.Close(); err != nil {
					return fail("%v", err)
				}
				nr, err := Open(e.cfg, info)
				if err != nil {
					return fail("%v", err)
				}
				regions[i] = nr
			}
		case "split":
			i := route(o.row)
			r := regions[i]
			if r.HasReferences() || string(r.info.StartKey) == o.row {
				continue
			}
			lo, hi, err := r.Split([]byte(o.row), r.info.ID+1)
			if err != nil {
				return fail("%v", err)
			}
			rl, err := Open(e.cfg, lo)
			if err != nil {
				return fail("open daughter: %v", err)
			}
			rh, err := Open(e.cfg, hi)
			if err != nil {
				return fail("open daughter: %v", err)
			}
			regions = slices.Replace(regions, i, i+1, rl, rh)
		case "clock":
			e.clock.now.Add(o.advance)
		}
	}
	return ""
}

func scanAll(regions []*Region, s *Scan, reversed bool) []string {
	var out []string
	order := slices.Clone(regions)
	if reversed {
		slices.Reverse(order)
	}
	for _, r := range order {
		sc, err := r.Scanner(s)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		for {
			b, err := sc.Next()
			if err != nil {
				sc.Close()
				return append(out, "error: "+err.Error())
			}
			for _, res := range b.Results {
				for _, c := range res.Cells {
					out = append(out, fmtKVm(c))
				}
			}
			// A CellBlock batch: its cells, as many as the counts say.
			rest := b.Block
			for _, n := range b.CellsPerResult {
				for range n {
					kv, size, err := cell.ParseKeyValue(rest)
					if err != nil {
						sc.Close()
						return append(out, "error: cell block: "+err.Error())
					}
					out = append(out, fmtKVm(KV{Key: kv.Key(), Value: kv.Value()}))
					rest = rest[size:]
				}
			}
			if len(rest) > 0 {
				sc.Close()
				return append(out, fmt.Sprintf("error: %d bytes after the counted cells", len(rest)))
			}
			if !b.More {
				break
			}
		}
		sc.Close()
	}
	return out
}

func fmtM(c mcell) string {
	return fmtKVm(KV{Key: cell.AppendKey(nil, []byte(c.row), []byte(c.fam), []byte(c.qual), c.ts, c.typ), Value: []byte(c.val)})
}

func fmtKVm(c KV) string {
	if c.Type() != cell.Put {
		return fmt.Sprintf("%s/%s:%s@%d/%v", c.Row(), c.Family(), c.Qualifier(), c.Timestamp(), c.Type())
	}
	return fmt.Sprintf("%s/%s:%s@%d=%x", c.Row(), c.Family(), c.Qualifier(), c.Timestamp(), c.Value)
}

// TestModel runs random operations against regions and the reference
// model; a divergence is shrunk to a minimal operation sequence and
// printed with its seed.
func TestModel(t *testing.T) {
	seeds := *modelSeeds
	if testing.Short() {
		seeds = 3
	}
	for s := 0; s < seeds; s++ {
		seed := uint64(s + 1)
		if *modelSeed != 0 {
			if s > 0 {
				break
			}
			seed = *modelSeed
		}
		ops := genOps(rand.New(rand.NewPCG(seed, 99)), *modelOps)
		failure := modelRun(t, ops)
		if failure == "" {
			continue
		}
		// Shrink: drop operations while the run still fails.
		for changed := true; changed; {
			changed = false
			for i := 0; i < len(ops); i++ {
				cand := slices.Delete(slices.Clone(ops), i, i+1)
				if f := modelRun(t, cand); f != "" {
					ops, failure, changed = cand, f, true
					i--
				}
			}
		}
		var sb strings.Builder
		for i, o := range ops {
			fmt.Fprintf(&sb, "  %d: %v\n", i, o)
		}
		t.Fatalf("seed %d diverges from the model (rerun: -run TestModel -model.seed=%d).\nMinimal reproducer:\n%s%s", seed, seed, sb.String(), failure)
	}
}

var _ = bytes.Equal
