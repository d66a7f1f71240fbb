package region

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cellstore/cellstore/engine/cell"
)

// observed is an Observer with its hooks read once.
type observed struct {
	o     Observer
	hooks ObserverHooks
}

// SetObserver sets (nil: removes) the user code the region runs around its writes, reads and
// file writes. Reads and writes already under way go on with the one they started with. When
// the region closes it calls the observer's Close method, if it has one; one replaced here is
// the caller's to close.
func (r *Region) SetObserver(o Observer) {
	if o == nil {
		r.observer.Store(nil)
		return
	}
	r.observer.Store(&observed{o: o, hooks: o.Hooks()})
}

// preMutate runs the observer's PreMutate on a valid mutation and checks what it made of it.
func (ob *observed) preMutate(r *Region, m *Mutation) error {
	if ob == nil || !ob.hooks.PreMutate {
		return nil
	}
	row := m.Row
	if err := ob.o.PreMutate(m); err != nil {
		return err
	}
	if !bytes.Equal(m.Row, row) {
		return fmt.Errorf("%w: a function changed the row of a mutation from %q to %q", ErrFunction, row, m.Row)
	}
	if err := r.validateMutation(m); err != nil {
		return fmt.Errorf("%w: the mutation a function made of row %q: %w", ErrFunction, row, err)
	}
	return nil
}

func (ob *observed) postMutate(ms ...*Mutation) {
	if ob == nil || !ob.hooks.PostMutate {
		return
	}
	for _, m := range ms {
		ob.o.PostMutate(m)
	}
}

// observeRow runs the observer's FilterRead on the scanner's pending cells of the current row
// before they are returned.
func (s *RegionScanner) observeRow(partial bool) {
	ob := s.observer
	if ob == nil || s.pendingCells() == 0 {
		return
	}
	var kvs []KV
	if s.s.CellBlock {
		b := s.arena[s.blockRowStart:]
		for len(b) > 0 {
			kv, n, err := cell.ParseKeyValue(b)
			if err != nil {
				s.err = fmt.Errorf("region %s: %w: %w", s.r.name, ErrCorrupt, err)
				return
			}
			kvs = append(kvs, KV{Key: kv.Key(), Value: kv.Value(), Tags: kv.Tags()})
			b = b[n:]
		}
	} else {
		kvs = s.kvs[s.rowStart:]
	}
	keep, repl, err := ob.o.FilterRead(s.row, kvs, partial)
	if err != nil {
		s.err = fmt.Errorf("region %s: %w", s.r.name, err)
		return
	}
	if !keep {
		s.dropPending()
		return
	}
	if repl == nil {
		return
	}
	for i := range repl {
		k := repl[i].Key
		if _, err := cell.ParseKey(k); err != nil || !bytes.Equal(k.Row(), s.row) || k.Type() != cell.Put {
			s.err = fmt.Errorf("region %s: %w: a read function returned a cell that is not a put of row %q", s.r.name, ErrFunction, s.row)
			return
		}
		if s.r.familyIndex(k.Family()) < 0 {
			s.err = fmt.Errorf("region %s: %w: a read function returned a cell of unknown family %q", s.r.name, ErrFunction, k.Family())
			return
		}
	}
	slices.SortStableFunc(repl, func(a, b KV) int { return cell.Compare(a.Key, b.Key) })
	if s.s.CellBlock {
		// The replacement may point into the pending cells it replaces: encode it aside first.
		var block []byte
		for i := range repl {
			block = cell.AppendKeyValueFromKey(block, repl[i].Key, repl[i].Value)
		}
		s.arena = append(s.arena[:s.blockRowStart], block...)
		s.blockPending = len(repl)
		return
	}
	s.kvs = append(s.kvs[:s.rowStart], repl...)
}

// fileFilter passes what a flush or compaction writes through the observer's FilterFile, one
// row and family (at most FileRowCells cells) at a time, in order.
type fileFilter struct {
	o    Observer
	kind FileWrite
	out  func(k cell.Key, v, tags []byte, seq uint64) error

	row, fam  []byte
	buf       []byte // the buffered cells' bytes
	pending   []bufferedCell
	puts      []KV
	keep      []bool
	continued bool
}

type bufferedCell struct {
	k, v, tags [2]int // offsets in buf
	seq        uint64
	put        int // index in puts, -1 for delete markers
}

func newFileFilter(ob *observed, kind FileWrite, out func(k cell.Key, v, tags []byte, seq uint64) error) *fileFilter {
	if ob == nil || !ob.hooks.FilterFile {
		return nil
	}
	return &fileFilter{o: ob.o, kind: kind, out: out}
}

func (f *fileFilter) add(k cell.Key, v, tags []byte, seq uint64) error {
	if len(f.pending) > 0 && (!bytes.Equal(k.Row(), f.row) || !bytes.Equal(k.Family(), f.fam)) {
		if err := f.flush(); err != nil {
			return err
		}
		f.continued = false
	}
	if len(f.pending) == 0 {
		f.row = append(f.row[:0], k.Row()...)
		f.fam = append(f.fam[:0], k.Family()...)
	}
	span := func(b []byte) [2]int {
		f.buf = append(f.buf, b...)
		return [2]int{len(f.buf) - len(b), len(f.buf)}
	}
	c := bufferedCell{k: span(k), v: span(v), tags: span(tags), seq: seq, put: -1}
	if k.Type() == cell.Put {
		c.put = 0 // numbered in flush
	}
	f.pending = append(f.pending, c)
	if len(f.pending) >= FileRowCells {
		if err := f.flush(); err != nil {
			return err
		}
		f.continued = true
	}
	return nil
}

func (f *fileFilter) flush() error {
	if len(f.pending) == 0 {
		return nil
	}
	f.puts, f.keep = f.puts[:0], f.keep[:0]
	for i := range f.pending {
		c := &f.pending[i]
		if c.put < 0 {
			continue
		}
		c.put = len(f.puts)
		f.puts = append(f.puts, KV{Key: cell.Key(f.buf[c.k[0]:c.k[1]]), Value: f.buf[c.v[0]:c.v[1]], Seq: c.seq})
		f.keep = append(f.keep, true)
	}
	if len(f.puts) > 0 {
		f.o.FilterFile(f.kind, f.continued, f.row, f.puts, f.keep)
	}
	for i := range f.pending {
		c := &f.pending[i]
		if c.put >= 0 && !f.keep[c.put] {
			continue
		}
		var tags []byte
		if c.tags[1] > c.tags[0] {
			tags = f.buf[c.tags[0]:c.tags[1]]
		}
		if err := f.out(cell.Key(f.buf[c.k[0]:c.k[1]]), f.buf[c.v[0]:c.v[1]], tags, c.seq); err != nil {
			return err
		}
	}
	f.pending, f.buf = f.pending[:0], f.buf[:0]
	return nil
}
