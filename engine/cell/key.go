package cell

import (
	"encoding/binary"
	"fmt"
)

// Key layout (all integers big-endian):
//
//	offset          size  field
//	0               2     row length R (0..32767)
//	2               R     row
//	2+R             1     family length F (0..127)
//	3+R             F     family
//	3+R+F           Q     qualifier (Q = key length - R - F - 12)
//	len-9           8     timestamp (int64, two's complement)
//	len-1           1     type
const (
	rowLenSize     = 2
	famLenSize     = 1
	timestampSize  = 8
	typeSize       = 1
	keyInfraSize   = rowLenSize + famLenSize + timestampSize + typeSize // 12
	minKeyLen      = keyInfraSize
	kvHeaderLen    = 8 // key length (4) + value length (4)
	keyTrailerSize = timestampSize + typeSize
)

// KeyLen returns the length of the encoded key of a cell with the given row,
// family and qualifier lengths.
func KeyLen(rowLen, familyLen, qualifierLen int) int {
	return keyInfraSize + rowLen + familyLen + qualifierLen
}

// Key is an encoded key. Its accessors return sub-slices of the key (no
// copies) and assume a well-formed key (see the package documentation).
type Key []byte

// AppendKey appends the encoded key to dst and returns the extended slice.
// It does not validate: call Validate first for user input. Rows longer than
// MaxRowLength or families longer than MaxFamilyLength produce a malformed
// key.
func AppendKey(dst, row, family, qualifier []byte, ts int64, t Type) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(row)))
	dst = append(dst, row...)
	dst = append(dst, byte(len(family)))
	dst = append(dst, family...)
	dst = append(dst, qualifier...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, byte(t))
}

// ParseKey checks that b is a well-formed key and returns it as a Key. It
// checks structure (lengths, type code), not the rules of Validate: seek keys
// with empty rows or families and Minimum/Maximum types are accepted.
func ParseKey(b []byte) (Key, error) {
	if len(b) < minKeyLen {
		return nil, fmt.Errorf("%w: key of %d bytes is shorter than the minimum %d", ErrMalformed, len(b), minKeyLen)
	}
	r := int(binary.BigEndian.Uint16(b))
	if r > MaxRowLength {
		return nil, fmt.Errorf("%w: row length %d exceeds %d", ErrMalformed, r, MaxRowLength)
	}
	if rowLenSize+r+famLenSize+keyTrailerSize > len(b) {
		return nil, fmt.Errorf("%w: row length %d overruns key of %d bytes", ErrMalformed, r, len(b))
	}
	f := int(b[rowLenSize+r])
	if f > MaxFamilyLength {
		return nil, fmt.Errorf("%w: family length %d exceeds %d", ErrMalformed, f, MaxFamilyLength)
	}
	if keyInfraSize+r+f > len(b) {
		return nil, fmt.Errorf("%w: family length %d overruns key of %d bytes", ErrMalformed, f, len(b))
	}
	if t := Type(b[len(b)-1]); !t.IsKeyType() {
		return nil, fmt.Errorf("%w: %w: %d", ErrMalformed, ErrInvalidType, uint8(t))
	}
	return Key(b), nil
}

// RowLen returns the length of the row.
func (k Key) RowLen() int { return int(binary.BigEndian.Uint16(k)) }

// Row returns the row.
func (k Key) Row() []byte {
	r := int(binary.BigEndian.Uint16(k))
	return k[rowLenSize : rowLenSize+r : rowLenSize+r]
}

// Family returns the family.
func (k Key) Family() []byte {
	o := rowLenSize + int(binary.BigEndian.Uint16(k))
	f := int(k[o])
	return k[o+1 : o+1+f : o+1+f]
}

// Qualifier returns the qualifier.
func (k Key) Qualifier() []byte {
	o := rowLenSize + int(binary.BigEndian.Uint16(k))
	o += famLenSize + int(k[o])
	e := len(k) - keyTrailerSize
	return k[o:e:e]
}

// Timestamp returns the timestamp.
func (k Key) Timestamp() int64 { return int64(binary.BigEndian.Uint64(k[len(k)-keyTrailerSize:])) }

// Type returns the type.
func (k Key) Type() Type { return Type(k[len(k)-1]) }

// Decode returns the fields of k as a Cell (sub-slices of k, no value).
func (k Key) Decode() Cell {
	return Cell{Row: k.Row(), Family: k.Family(), Qualifier: k.Qualifier(), Timestamp: k.Timestamp(), Type: k.Type()}
}

// String formats the key for debugging.
func (k Key) String() string {
	if _, err := ParseKey(k); err != nil {
		return fmt.Sprintf("malformed key %x", []byte(k))
	}
	return k.Decode().keyString()
}

func (c Cell) keyString() string {
	return fmt.Sprintf("%q/%q:%q/%d/%s", c.Row, c.Family, c.Qualifier, c.Timestamp, c.Type)
}

// AppendFirstOnRow appends the seek key that sorts before every cell of row.
func AppendFirstOnRow(dst, row []byte) []byte {
	return AppendKey(dst, row, nil, nil, LatestTimestamp, Maximum)
}

// AppendLastOnRow appends the seek key that sorts after every cell of row
// and before every cell of the next row.
func AppendLastOnRow(dst, row []byte) []byte {
	return AppendKey(dst, row, nil, nil, LatestTimestamp, Minimum)
}

// AppendFirstOnColumn appends the seek key that sorts before every cell of
// the column row/family:qualifier.
func AppendFirstOnColumn(dst, row, family, qualifier []byte) []byte {
	return AppendKey(dst, row, family, qualifier, LatestTimestamp, Maximum)
}

// AppendLastOnColumn appends the seek key that sorts after every cell of the
// column row/family:qualifier and before the next column.
func AppendLastOnColumn(dst, row, family, qualifier []byte) []byte {
	return AppendKey(dst, row, family, qualifier, OldestTimestamp, Minimum)
}

// AppendFirstOnColumnAtTimestamp appends the seek key that sorts before every
// cell of the column with a timestamp <= ts, and after every cell of the
// column with a timestamp > ts (HBase's createFirstOnRowColTS).
func AppendFirstOnColumnAtTimestamp(dst, row, family, qualifier []byte, ts int64) []byte {
	return AppendKey(dst, row, family, qualifier, ts, Maximum)
}

// AppendFirstOnRowFamily appends the seek key that sorts before every cell of
// the family in row.
func AppendFirstOnRowFamily(dst, row, family []byte) []byte {
	return AppendKey(dst, row, family, nil, LatestTimestamp, Maximum)
}
