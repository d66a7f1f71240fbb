package cell

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// KeyValue is a serialized cell:
//
//	offset  size  field
//	0       4     key length K (big-endian uint32)
//	4       4     value length V (big-endian uint32)
//	8       K     key (see Key)
//	8+K     V     value
//
// A cell with tags (see Tags) sets TaggedFlag in the value length field;
// its V bytes are then the tagged value (value, tags, tags length).
//
// The sequence id is not part of the encoding; containers carry it. The
// accessors assume a well-formed KeyValue (built here or accepted by
// ParseKeyValue).
type KeyValue []byte

// KeyValueHeaderLen is the length of a serialized cell's header (its key
// and value lengths).
const KeyValueHeaderLen = kvHeaderLen

// KeyValueLen returns the serialized length of a cell with the given field
// lengths.
func KeyValueLen(rowLen, familyLen, qualifierLen, valueLen int) int {
	return kvHeaderLen + KeyLen(rowLen, familyLen, qualifierLen) + valueLen
}

// AppendKeyValue appends a serialized cell to dst. It does not validate: call
// Validate first for user input.
func AppendKeyValue(dst, row, family, qualifier []byte, ts int64, t Type, value []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(KeyLen(len(row), len(family), len(qualifier))))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
	dst = AppendKey(dst, row, family, qualifier, ts, t)
	return append(dst, value...)
}

// AppendTaggedKeyValue appends a serialized cell made of an encoded key, a
// value and tags to dst (without tags when tags is empty).
func AppendTaggedKeyValue(dst []byte, key Key, value, tags []byte) []byte {
	if len(tags) == 0 {
		return AppendKeyValueFromKey(dst, key, value)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(TaggedLen(len(value), len(tags)))|TaggedFlag)
	dst = append(dst, key...)
	return AppendTagged(dst, value, tags)
}

// AppendKeyValueFromKey appends a serialized cell made of an encoded key and a
// value to dst.
func AppendKeyValueFromKey(dst []byte, key Key, value []byte) []byte {
	// One capacity check for the four parts (scans build cell blocks with it).
	n := len(dst)
	size := kvHeaderLen + len(key) + len(value)
	if cap(dst)-n < size {
		dst = slices.Grow(dst, size)
	}
	dst = dst[:n+size]
	binary.BigEndian.PutUint32(dst[n:], uint32(len(key)))
	binary.BigEndian.PutUint32(dst[n+4:], uint32(len(value)))
	copy(dst[n+kvHeaderLen:], key)
	copy(dst[n+kvHeaderLen+len(key):], value)
	return dst
}

// ParseKeyValue parses the serialized cell at the start of b. It returns the
// cell (a sub-slice of b, capacity clipped) and the number of bytes it
// occupies. The key is checked with ParseKey; the size is checked against
// MaxKeyValueSize only (callers enforce their configured cell size limit).
func ParseKeyValue(b []byte) (kv KeyValue, n int, err error) {
	if len(b) < kvHeaderLen {
		return nil, 0, fmt.Errorf("%w: %d bytes cannot hold a cell header", ErrMalformed, len(b))
	}
	k := uint64(binary.BigEndian.Uint32(b))
	vf := binary.BigEndian.Uint32(b[4:])
	v := uint64(vf &^ TaggedFlag)
	total := kvHeaderLen + k + v
	if total > MaxKeyValueSize {
		return nil, 0, fmt.Errorf("%w: cell of %d bytes exceeds %d", ErrMalformed, total, uint64(MaxKeyValueSize))
	}
	if total > uint64(len(b)) {
		return nil, 0, fmt.Errorf("%w: cell of %d bytes overruns buffer of %d", ErrMalformed, total, len(b))
	}
	if _, err := ParseKey(b[kvHeaderLen : kvHeaderLen+k]); err != nil {
		return nil, 0, err
	}
	if vf&TaggedFlag != 0 {
		if _, _, err := ParseTagged(b[kvHeaderLen+k : total]); err != nil {
			return nil, 0, err
		}
	}
	n = int(total)
	return KeyValue(b[:n:n]), n, nil
}

// Key returns the encoded key.
func (kv KeyValue) Key() Key {
	k := binary.BigEndian.Uint32(kv)
	return Key(kv[kvHeaderLen : kvHeaderLen+k : kvHeaderLen+k])
}

// Value returns the value.
func (kv KeyValue) Value() []byte {
	k := binary.BigEndian.Uint32(kv)
	if binary.BigEndian.Uint32(kv[4:])&TaggedFlag != 0 {
		v, _ := SplitTagged(kv[kvHeaderLen+k:])
		return v
	}
	return kv[kvHeaderLen+k : len(kv) : len(kv)]
}

// Tags returns the cell's tags (nil without).
func (kv KeyValue) Tags() []byte {
	if binary.BigEndian.Uint32(kv[4:])&TaggedFlag == 0 {
		return nil
	}
	k := binary.BigEndian.Uint32(kv)
	_, t := SplitTagged(kv[kvHeaderLen+k:])
	return t
}

// Len returns the serialized length of the cell at the start of kv.
func (kv KeyValue) Len() int {
	return kvHeaderLen + kv.KeyLen() + int(binary.BigEndian.Uint32(kv[4:])&^TaggedFlag)
}

// KeyLen returns the length of the key.
func (kv KeyValue) KeyLen() int { return int(binary.BigEndian.Uint32(kv)) }

// StoredValueLen returns the length of the value with its tags (the
// tagged value), as containers store it.
func (kv KeyValue) StoredValueLen() int { return int(binary.BigEndian.Uint32(kv[4:]) &^ TaggedFlag) }

// ValueLen returns the length of the value (without tags).
func (kv KeyValue) ValueLen() int {
	if binary.BigEndian.Uint32(kv[4:])&TaggedFlag != 0 {
		return len(kv.Value())
	}
	return int(binary.BigEndian.Uint32(kv[4:]))
}

// Decode returns the fields of kv as a Cell (sub-slices of kv).
func (kv KeyValue) Decode() Cell {
	c := kv.Key().Decode()
	c.Value = kv.Value()
	c.Tags = kv.Tags()
	return c
}

// Validate applies Validate to the fields of kv.
func (kv KeyValue) Validate(maxCellSize int) error {
	k := kv.Key()
	return Validate(k.Row(), k.Family(), k.Qualifier(), k.Timestamp(), k.Type(), kv.Value(), maxCellSize)
}

// String formats the cell for debugging.
func (kv KeyValue) String() string {
	if _, _, err := ParseKeyValue(kv); err != nil {
		return fmt.Sprintf("malformed cell %x", []byte(kv))
	}
	c := kv.Decode()
	return c.keyString() + fmt.Sprintf("/vlen=%d", len(c.Value))
}
