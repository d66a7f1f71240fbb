package function

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
	"github.com/cellstore/cellstore/engine/compute/function/abi"
	"github.com/cellstore/cellstore/engine/region"
)

// Set is a table's functions on one server, as a region's Observer: hooks of several functions
// run in the table's order, each seeing what the one before made.
type Set struct {
	table string
	fns   []*Function // never changed once open (hooks read it while Close runs)
	hooks region.ObserverHooks
	// closed: the region released the set. A hook called after that (a scan running through a
	// close) fails with region.ErrClosed rather than running without the functions, so a read
	// filter is never skipped; the client finds the region again.
	closed atomic.Bool
}

// Open loads a table's functions (read fetches a module by digest).
func (rt *Runtime) Open(ctx context.Context, table string, specs []*pb.TableFunction, read func(sha []byte) ([]byte, error)) (*Set, error) {
	s := &Set{table: table}
	for _, spec := range specs {
		f, err := rt.Load(ctx, table, spec, read)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.fns = append(s.fns, f)
		h := f.Hooks()
		s.hooks.PreMutate = s.hooks.PreMutate || h.PreMutate
		s.hooks.PostMutate = s.hooks.PostMutate || h.PostMutate
		s.hooks.FilterRead = s.hooks.FilterRead || h.FilterRow
		s.hooks.FilterFile = s.hooks.FilterFile || h.FileRow
	}
	return s, nil
}

// Close releases the functions.
func (s *Set) Close() {
	if s.closed.Swap(true) {
		return
	}
	for _, f := range s.fns {
		f.Release()
	}
}

// closedErr is the error of a hook called after Close, or of one whose call failed because the
// set closed meanwhile (its instance stopped with the function): nil while it is open.
func (s *Set) closedErr() error {
	if !s.closed.Load() {
		return nil
	}
	return fmt.Errorf("%w: the functions of table %s were released (the region closed): retry", region.ErrClosed, s.table)
}

// Function returns the function named name, or nil.
func (s *Set) Function(name string) *Function {
	for _, f := range s.fns {
		if f.name == name {
			return f
		}
	}
	return nil
}

// Hooks implements region.Observer.
func (s *Set) Hooks() region.ObserverHooks { return s.hooks }

// ops converts a mutation's ops to hook cells.
func mutationCells(m *region.Mutation) ([]abi.Cell, uint32) {
	cells := make([]abi.Cell, len(m.Ops))
	var flags uint32
	for i, op := range m.Ops {
		cells[i] = abi.Cell{Family: op.Family, Qualifier: op.Qualifier, Timestamp: op.Timestamp, Type: byte(op.Type), Value: op.Value}
		if op.Type.IsDelete() {
			flags |= abi.FlagDelete
		}
	}
	return cells, flags
}

var validTypes = map[byte]bool{abi.TypePut: true, abi.TypeDelete: true, abi.TypeDeleteColumn: true, abi.TypeDeleteFamily: true,
	abi.TypeDeleteFamilyVersion: true}

// PreMutate implements region.Observer: StatusDrop refuses the mutation with the function's
// reason, StatusReplace applies the output row's cells instead (client tags and per-cell TTLs
// of the original ops do not carry over).
func (s *Set) PreMutate(m *region.Mutation) error {
	if err := s.closedErr(); err != nil {
		return err
	}
	for _, f := range s.fns {
		if !f.hooks.PreMutate || f.Disabled() {
			continue
		}
		cells, flags := mutationCells(m)
		in := abi.AppendRow(nil, flags, m.Row, cells)
		var refused error
		err := f.Call(context.Background(), abi.ExportPreMutate, in, func(st int32, out []byte) error {
			switch st {
			case abi.StatusOK:
				return nil
			case abi.StatusDrop:
				refused = fmt.Errorf("%w %q of %s refused the mutation of row %q: %s", region.ErrFunction, f.name, s.table, m.Row, limitText(out))
				return nil
			case abi.StatusReplace:
				_, row, cells, err := abi.DecodeRow(out)
				if err != nil {
					return fmt.Errorf("pre_mutate's output: %w", err)
				}
				if !bytes.Equal(row, m.Row) {
					return fmt.Errorf("pre_mutate's output is of row %q, not %q", row, m.Row)
				}
				ops := make([]region.Op, len(cells))
				for i, c := range cells {
					if !validTypes[c.Type] {
						return fmt.Errorf("pre_mutate's output has a cell of type %d", c.Type)
					}
					ops[i] = region.Op{Type: cell.Type(c.Type), Family: bytes.Clone(c.Family), Qualifier: bytes.Clone(c.Qualifier),
						Timestamp: c.Timestamp, Value: bytes.Clone(c.Value)}
				}
				m.Ops = ops
				return nil
			}
			return fmt.Errorf("pre_mutate answered status %d", st)
		})
		if err != nil {
			if cerr := s.closedErr(); cerr != nil {
				return cerr
			}
			return err
		}
		if refused != nil {
			return refused
		}
	}
	return nil
}

// PostMutate implements region.Observer.
func (s *Set) PostMutate(m *region.Mutation) {
	var in []byte // the same for every function
	for _, f := range s.fns {
		if !f.hooks.PostMutate || f.Disabled() || s.closed.Load() {
			continue
		}
		if in == nil {
			cells, flags := mutationCells(m)
			in = abi.AppendRow(nil, flags, m.Row, cells)
		}
		_ = f.Call(context.Background(), abi.ExportPostMutate, in, nil)
	}
}

// kvCells converts a row's cells for a hook.
func kvCells(kvs []region.KV) []abi.Cell {
	cells := make([]abi.Cell, len(kvs))
	for i := range kvs {
		k := kvs[i].Key
		cells[i] = abi.Cell{Family: k.Family(), Qualifier: k.Qualifier(), Timestamp: k.Timestamp(), Type: byte(k.Type()), Value: kvs[i].Value}
	}
	return cells
}

// FilterRead implements region.Observer.
func (s *Set) FilterRead(row []byte, kvs []region.KV, partial bool) (bool, []region.KV, error) {
	if err := s.closedErr(); err != nil {
		return false, nil, err
	}
	var replaced []region.KV
	for _, f := range s.fns {
		if !f.hooks.FilterRow || f.Disabled() {
			continue
		}
		var flags uint32
		if partial {
			flags |= abi.FlagPartial
		}
		keep := true
		err := f.Call(context.Background(), abi.ExportFilterRow, abi.AppendRow(nil, flags, row, kvCells(kvs)), func(st int32, out []byte) error {
			switch st {
			case abi.StatusOK:
				return nil
			case abi.StatusDrop:
				keep = false
				return nil
			case abi.StatusReplace:
				_, r, cells, err := abi.DecodeRow(out)
				if err != nil {
					return fmt.Errorf("filter_row's output: %w", err)
				}
				if !bytes.Equal(r, row) {
					return fmt.Errorf("filter_row's output is of row %q, not %q", r, row)
				}
				replaced = make([]region.KV, len(cells))
				for i, c := range cells {
					if c.Type != abi.TypePut {
						return fmt.Errorf("filter_row's output has a cell of type %d (reads return puts)", c.Type)
					}
					replaced[i] = region.KV{Key: cell.AppendKey(nil, row, c.Family, c.Qualifier, c.Timestamp, cell.Put), Value: bytes.Clone(c.Value)}
				}
				kvs = replaced
				return nil
			}
			return fmt.Errorf("filter_row answered status %d", st)
		})
		if err != nil {
			if cerr := s.closedErr(); cerr != nil {
				return false, nil, cerr
			}
			return false, nil, err
		}
		if !keep {
			return false, nil, nil
		}
	}
	return true, replaced, nil
}

// FilterFile implements region.Observer. A failure keeps every cell.
func (s *Set) FilterFile(kind region.FileWrite, continued bool, row []byte, kvs []region.KV, keep []bool) {
	var flags uint32
	switch kind {
	case region.FileFlush:
		flags = abi.FlagFlush
	case region.FileMinorCompaction:
		flags = abi.FlagCompaction
	case region.FileMajorCompaction:
		flags = abi.FlagCompaction | abi.FlagMajor
	}
	if continued {
		flags |= abi.FlagContinued
	}
	var in []byte
	for _, f := range s.fns {
		if !f.hooks.FileRow || f.Disabled() || s.closed.Load() {
			continue
		}
		if in == nil {
			in = abi.AppendRow(nil, flags, row, kvCells(kvs))
		}
		_ = f.Call(context.Background(), abi.ExportFileRow, in, func(st int32, out []byte) error {
			switch st {
			case abi.StatusOK:
				return nil
			case abi.StatusDrop:
				clear(keep)
				return nil
			case abi.StatusReplace:
				if len(out) != len(keep) {
					return fmt.Errorf("file_row's mask has %d entries for %d cells", len(out), len(keep))
				}
				for i, b := range out {
					if b == 0 {
						keep[i] = false
					}
				}
				return nil
			}
			return fmt.Errorf("file_row answered status %d", st)
		})
	}
}

// ErrNoEndpoint is the error of calling an endpoint no function of the table has.
var ErrNoEndpoint = errors.New("no such endpoint")

// Endpoint is one endpoint call over a region's rows, on one instance.
type Endpoint struct {
	call   func(export string, input []byte) (int32, []byte, error)
	buf    []byte
	failed error // the function's own failure, told from the scan's
}

// Row hands the endpoint a row; stop says it asked to stop early.
func (e *Endpoint) Row(row []byte, kvs []region.KV) (stop bool, err error) {
	e.buf = abi.RowHeader(e.buf[:0], 0, row, len(kvs))
	for i := range kvs {
		k := kvs[i].Key
		e.buf = abi.AppendCell(e.buf, &abi.Cell{Family: k.Family(), Qualifier: k.Qualifier(), Timestamp: k.Timestamp(), Type: byte(k.Type()), Value: kvs[i].Value})
	}
	st, _, err := e.call(abi.ExportEndpointRow, e.buf)
	if err != nil {
		e.failed = err
	}
	return st == abi.StatusDrop, err
}

// RunEndpoint runs endpoint of function fn: begin with arg, rows (run hands them over with
// Row), end; it returns the end hook's output.
func (s *Set) RunEndpoint(ctx context.Context, fn, endpoint string, arg []byte, rows func(e *Endpoint) error) ([]byte, error) {
	if err := s.closedErr(); err != nil {
		return nil, err
	}
	f := s.Function(fn)
	if f == nil {
		return nil, fmt.Errorf("%w: table %s has no function %q", ErrNoEndpoint, s.table, fn)
	}
	found := false
	for _, e := range f.hooks.Endpoints {
		found = found || e == endpoint
	}
	if !found {
		return nil, fmt.Errorf("%w: function %q of %s has no endpoint %q (it has %q)", ErrNoEndpoint, fn, s.table, endpoint, f.hooks.Endpoints)
	}
	var out []byte
	var readErr error
	err := f.CallOn(ctx, func(call func(string, []byte) (int32, []byte, error)) error {
		if _, _, err := call(abi.ExportEndpointBegin, abi.EncodeBegin(endpoint, arg)); err != nil {
			return err
		}
		e := &Endpoint{call: call}
		if err := rows(e); err != nil {
			if e.failed != nil {
				return e.failed
			}
			readErr = err // the region's, not the function's: not counted
			return nil
		}
		_, o, err := call(abi.ExportEndpointEnd, nil)
		out = bytes.Clone(o)
		return err
	})
	if readErr != nil {
		return nil, readErr
	}
	if err != nil {
		if cerr := s.closedErr(); cerr != nil {
			return nil, cerr
		}
	}
	return out, err
}
