// Package abi is the binary interface between Cellstore and a table's WebAssembly functions
// (docs/functions.md): the names of the hooks a module exports, what the host writes into the
// module's memory before a call and how it reads the answer. It has no dependencies, so the guest
// side (engine/compute/function/guest, compiled to wasip1) and the host side (engine/compute/function) share it.
//
// All integers are little-endian. A row is
//
//	u32 len, row, u32 cells, then per cell: u32 len, family, u32 len, qualifier, i64 timestamp,
//	u8 type, u32 len, value
//
// and every hook's input starts with a u32 of flags.
package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Exports a module may have. Alloc is required; the others are hooks, each optional.
const (
	// ExportAlloc (size i32) -> ptr i32 returns memory of at least size bytes for the next
	// call's input; it stays valid until the next alloc.
	ExportAlloc = "cellstore_alloc"
	// ExportInit (ptr, len) -> status: once per instance, with the table's args (EncodeArgs).
	ExportInit = "cellstore_init"
	// ExportPreMutate (ptr, len) -> status: a put or delete of one row before it is applied:
	// StatusOK lets it through, StatusDrop refuses it (output: the reason), StatusReplace
	// applies the cells of the output row instead.
	ExportPreMutate = "cellstore_pre_mutate"
	// ExportPostMutate (ptr, len) -> status: a put or delete of one row after it was applied
	// (durable); the answer is ignored but a failure is counted.
	ExportPostMutate = "cellstore_post_mutate"
	// ExportFilterRow (ptr, len) -> status: a row (or part of one, FlagPartial) a read returns:
	// StatusOK keeps it, StatusDrop hides it, StatusReplace returns the output row's cells.
	ExportFilterRow = "cellstore_filter_row"
	// ExportFileRow (ptr, len) -> status: the cells of a row a flush or compaction writes to a
	// store file (one family, up to FileRowCells cells at a time): StatusOK keeps them,
	// StatusDrop drops them all, StatusReplace keeps those whose byte in the output is 1.
	ExportFileRow = "cellstore_file_row"
	// ExportEndpointBegin (ptr, len) -> status starts an endpoint call (EncodeBegin);
	// ExportEndpointRow (ptr, len) -> status hands it each row (StatusDrop: stop early);
	// ExportEndpointEnd () -> status ends it, its result being the output.
	ExportEndpointBegin = "cellstore_endpoint_begin"
	ExportEndpointRow   = "cellstore_endpoint_row"
	ExportEndpointEnd   = "cellstore_endpoint_end"
	// ExportEndpoints () -> status: the module's endpoint names, one per line, as its output.
	ExportEndpoints = "cellstore_endpoints"
	// ExportHooks () -> i32: which hooks the module really has (Hook* bits), for modules (such
	// as engine/compute/function/guest's) that export every hook; without it every exported hook is.
	ExportHooks = "cellstore_hooks"
)

// Hook bits of ExportHooks.
const (
	HookPreMutate = 1 << iota
	HookPostMutate
	HookFilterRow
	HookFileRow
	HookEndpoints
)

// HostModule is the import module of the host's functions:
//
//	output(ptr, len): the call's output (a reason, a row, a mask, an endpoint result)
//	log(ptr, len): a line for the server's log
const (
	HostModule = "cellstore"
	HostOutput = "output"
	HostLog    = "log"
)

// Statuses a hook returns. A negative status is the module's own failure (output: why).
const (
	StatusOK      = 0
	StatusDrop    = 1
	StatusReplace = 2
)

// Flags in front of a hook's input.
const (
	// FlagPartial: a read's row is cut in parts (batch or size limits); more may follow.
	FlagPartial = 1 << 0
	// FlagFlush, FlagCompaction, FlagMajor: who writes the file of a file row.
	FlagFlush      = 1 << 1
	FlagCompaction = 1 << 2
	FlagMajor      = 1 << 3
	// FlagContinued: a file row continues the previous call's row (a row of more cells than
	// FileRowCells).
	FlagContinued = 1 << 4
	// FlagDelete: a mutation of deletes (its cells are delete markers).
	FlagDelete = 1 << 5
)

// FileRowCells bounds the cells of one file-row call.
const FileRowCells = 1024

// Cell types (HBase's KeyValue.Type codes).
const (
	TypePut                 = 4
	TypeDelete              = 8
	TypeDeleteFamilyVersion = 10
	TypeDeleteColumn        = 12
	TypeDeleteFamily        = 14
)

// Cell is a cell as a hook sees it.
type Cell struct {
	Family, Qualifier []byte
	Timestamp         int64
	Type              byte
	Value             []byte
}

// ErrShort is the error of decoding a truncated input.
var ErrShort = errors.New("abi: input ends early")

// AppendRow appends flags and a row of cells.
func AppendRow(b []byte, flags uint32, row []byte, cells []Cell) []byte {
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = appendBytes(b, row)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(cells)))
	for i := range cells {
		b = AppendCell(b, &cells[i])
	}
	return b
}

// AppendCell appends one cell of a row.
func AppendCell(b []byte, c *Cell) []byte {
	b = appendBytes(b, c.Family)
	b = appendBytes(b, c.Qualifier)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Timestamp))
	b = append(b, c.Type)
	return appendBytes(b, c.Value)
}

// RowHeader appends flags, the row and a cell count, for callers that append the cells
// themselves (AppendCell).
func RowHeader(b []byte, flags uint32, row []byte, cells int) []byte {
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = appendBytes(b, row)
	return binary.LittleEndian.AppendUint32(b, uint32(cells))
}

func appendBytes(b, v []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// Reader decodes an input or an output. Slices it returns point into the input.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first decoding error.
func (r *Reader) Err() error { return r.err }

// Rest is the bytes not read yet.
func (r *Reader) Rest() []byte { return r.b }

// U32 reads a u32.
func (r *Reader) U32() uint32 {
	if len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

// U64 reads a u64.
func (r *Reader) U64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// Byte reads a byte.
func (r *Reader) Byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Bytes reads a u32 length and that many bytes.
func (r *Reader) Bytes() []byte {
	n := r.U32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *Reader) fail() {
	if r.err == nil {
		r.err = ErrShort
	}
	r.b = nil
}

// Cell reads one cell of a row into c.
func (r *Reader) Cell(c *Cell) {
	c.Family = r.Bytes()
	c.Qualifier = r.Bytes()
	c.Timestamp = int64(r.U64())
	c.Type = r.Byte()
	c.Value = r.Bytes()
}

// Row reads flags and a row, appending its cells to cells.
func (r *Reader) Row(cells []Cell) (flags uint32, row []byte, out []Cell) {
	flags = r.U32()
	row = r.Bytes()
	n := r.U32()
	if r.err != nil {
		return 0, nil, cells
	}
	// Each cell takes at least 21 bytes: a count beyond what the input holds is a lie.
	if uint64(n)*21 > uint64(len(r.b)) {
		r.fail()
		return 0, nil, cells
	}
	for range n {
		var c Cell
		r.Cell(&c)
		if r.err != nil {
			return 0, nil, cells
		}
		cells = append(cells, c)
	}
	return flags, row, cells
}

// DecodeRow decodes a whole input or output row; nothing may follow it.
func DecodeRow(b []byte) (flags uint32, row []byte, cells []Cell, err error) {
	r := NewReader(b)
	flags, row, cells = r.Row(nil)
	if r.err != nil {
		return 0, nil, nil, r.err
	}
	if len(r.b) != 0 {
		return 0, nil, nil, fmt.Errorf("abi: %d bytes after the row", len(r.b))
	}
	return flags, row, cells, nil
}

// EncodeArgs encodes an init hook's input: flags 0, a count, then key and value pairs in the
// order given.
func EncodeArgs(keys, values []string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for i := range keys {
		b = appendBytes(b, []byte(keys[i]))
		b = appendBytes(b, []byte(values[i]))
	}
	return b
}

// DecodeArgs decodes EncodeArgs.
func DecodeArgs(b []byte) (map[string]string, error) {
	r := NewReader(b)
	r.U32()
	n := r.U32()
	if uint64(n)*8 > uint64(len(r.b)) {
		r.fail()
	}
	out := make(map[string]string, min(n, 1024))
	for i := uint32(0); i < n && r.err == nil; i++ {
		k := r.Bytes()
		v := r.Bytes()
		out[string(k)] = string(v)
	}
	return out, r.err
}

// EncodeBegin encodes an endpoint's begin input: flags 0, the endpoint's name and the caller's
// argument.
func EncodeBegin(endpoint string, arg []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0)
	b = appendBytes(b, []byte(endpoint))
	return appendBytes(b, arg)
}

// DecodeBegin decodes EncodeBegin.
func DecodeBegin(b []byte) (endpoint string, arg []byte, err error) {
	r := NewReader(b)
	r.U32()
	e := r.Bytes()
	arg = r.Bytes()
	return string(e), arg, r.err
}
