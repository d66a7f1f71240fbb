package cell

import (
	"errors"
	"fmt"
	"math"
)

// Type is the type code of a cell, with the byte values of HBase's
// KeyValue.Type. Keys of equal row, column and timestamp sort by type
// descending, so delete markers sort before the puts they mask.
type Type uint8

// Cell types. Minimum and Maximum only appear in seek keys.
const (
	Minimum             Type = 0
	Put                 Type = 4
	Delete              Type = 8
	DeleteFamilyVersion Type = 10
	DeleteColumn        Type = 12
	DeleteFamily        Type = 14
	Maximum             Type = 255
)

// String returns the HBase name of the type.
func (t Type) String() string {
	switch t {
	case Minimum:
		return "Minimum"
	case Put:
		return "Put"
	case Delete:
		return "Delete"
	case DeleteFamilyVersion:
		return "DeleteFamilyVersion"
	case DeleteColumn:
		return "DeleteColumn"
	case DeleteFamily:
		return "DeleteFamily"
	case Maximum:
		return "Maximum"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// IsCellType reports whether t may appear in a stored cell (Put or one of
// the delete types).
func (t Type) IsCellType() bool {
	switch t {
	case Put, Delete, DeleteFamilyVersion, DeleteColumn, DeleteFamily:
		return true
	}
	return false
}

// IsKeyType reports whether t may appear in a key: a cell type, or Minimum or
// Maximum (seek keys).
func (t Type) IsKeyType() bool { return t == Minimum || t == Maximum || t.IsCellType() }

// IsDelete reports whether t is one of the delete marker types.
func (t Type) IsDelete() bool { return t.IsCellType() && t != Put }

// Limits of the encoding and defaults, as in HBase.
const (
	// MaxRowLength is the largest row key (Short.MAX_VALUE in HBase).
	MaxRowLength = math.MaxInt16
	// MaxFamilyLength is the largest family name (Byte.MAX_VALUE in HBase).
	MaxFamilyLength = math.MaxInt8
	// DefaultMaxCellSize is the default limit of a serialized cell
	// (hbase.server.keyvalue.maxsize): 10 MiB.
	DefaultMaxCellSize = 10 << 20
	// MaxKeyValueSize is the hard limit of a serialized cell imposed by the
	// 32-bit length fields (kept below 2 GiB so lengths fit an int32).
	MaxKeyValueSize = math.MaxInt32
	// maxUntaggedSize is the hard limit Validate applies: it leaves room for
	// the largest tags section, so a tagged cell's length never reaches
	// TaggedFlag or MaxKeyValueSize.
	maxUntaggedSize = MaxKeyValueSize - MaxTagsLength - tagTrailerSize

	// LatestTimestamp is the largest timestamp. In a mutation it means "now"
	// (the region server substitutes the current time); in seek keys it
	// sorts first within a column.
	LatestTimestamp int64 = math.MaxInt64
	// OldestTimestamp sorts last within a column; used by LastOnColumn.
	OldestTimestamp int64 = math.MinInt64
)

// Validation errors. Errors returned by Validate and the Parse functions wrap
// one of these, so callers can test them with errors.Is.
var (
	ErrEmptyRow          = errors.New("cell: empty row")
	ErrRowTooLong        = errors.New("cell: row too long")
	ErrEmptyFamily       = errors.New("cell: empty family")
	ErrFamilyTooLong     = errors.New("cell: family too long")
	ErrCellTooLarge      = errors.New("cell: cell too large")
	ErrInvalidType       = errors.New("cell: invalid type")
	ErrNegativeTimestamp = errors.New("cell: negative timestamp")
	ErrMalformed         = errors.New("cell: malformed encoding")
)

// Cell is the decoded form of a cell. The hot paths work on encoded keys and
// KeyValues; Cell is for building mutations, tests and debugging.
type Cell struct {
	Row       []byte
	Family    []byte
	Qualifier []byte
	Timestamp int64
	Type      Type
	Value     []byte
	// Tags are the cell's tags (see Tags); nil for most cells.
	Tags []byte
	// Seq is the sequence id (MVCC write number). It is not part of the
	// key or of the KeyValue encoding: containers (memstore, WAL batch
	// header, store file) carry it next to the cell.
	Seq uint64
}

// KeyLen returns the length of the encoded key of c.
func (c *Cell) KeyLen() int { return KeyLen(len(c.Row), len(c.Family), len(c.Qualifier)) }

// EncodedLen returns the length of the serialized cell (KeyValue) of c.
func (c *Cell) EncodedLen() int {
	if len(c.Tags) > 0 {
		return kvHeaderLen + c.KeyLen() + TaggedLen(len(c.Value), len(c.Tags))
	}
	return kvHeaderLen + c.KeyLen() + len(c.Value)
}

// AppendKey appends the encoded key of c to dst.
func (c *Cell) AppendKey(dst []byte) []byte {
	return AppendKey(dst, c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type)
}

// AppendKeyValue appends the serialized cell of c to dst.
func (c *Cell) AppendKeyValue(dst []byte) []byte {
	if len(c.Tags) > 0 {
		return AppendTaggedKeyValue(dst, AppendKey(nil, c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type), c.Value, c.Tags)
	}
	return AppendKeyValue(dst, c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type, c.Value)
}

// Validate checks c with Validate.
func (c *Cell) Validate(maxCellSize int) error {
	return Validate(c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type, c.Value, maxCellSize)
}

// String formats c for debugging: row/family:qualifier/timestamp/type/vlen=N/seqid=S.
func (c Cell) String() string {
	return fmt.Sprintf("%q/%q:%q/%d/%s/vlen=%d/seqid=%d",
		c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type, len(c.Value), c.Seq)
}

// Validate checks that the fields make a storable cell: non-empty row of at
// most MaxRowLength bytes, non-empty family of at most MaxFamilyLength bytes,
// a cell type (not Minimum/Maximum), a non-negative timestamp, and a
// serialized size of at most maxCellSize bytes (DefaultMaxCellSize when
// maxCellSize <= 0; never more than MaxKeyValueSize less room for the
// largest tags section, so adding tags cannot overflow a length field).
func Validate(row, family, qualifier []byte, ts int64, t Type, value []byte, maxCellSize int) error {
	if len(row) == 0 {
		return ErrEmptyRow
	}
	if len(row) > MaxRowLength {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRowTooLong, len(row), MaxRowLength)
	}
	if len(family) == 0 {
		return ErrEmptyFamily
	}
	if len(family) > MaxFamilyLength {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFamilyTooLong, len(family), MaxFamilyLength)
	}
	if !t.IsCellType() {
		return fmt.Errorf("%w: %d", ErrInvalidType, uint8(t))
	}
	if ts < 0 {
		return fmt.Errorf("%w: %d", ErrNegativeTimestamp, ts)
	}
	if maxCellSize <= 0 {
		maxCellSize = DefaultMaxCellSize
	}
	if maxCellSize > maxUntaggedSize {
		maxCellSize = maxUntaggedSize
	}
	// Compute in int64 so huge qualifiers or values cannot overflow.
	size := int64(kvHeaderLen) + int64(KeyLen(len(row), len(family), 0)) + int64(len(qualifier)) + int64(len(value))
	if size > int64(maxCellSize) {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrCellTooLarge, size, maxCellSize)
	}
	return nil
}
