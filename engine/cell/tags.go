package cell

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tags are metadata attached to a stored cell (HBase's cell tags), never part
// of its key or returned to clients. A cell's tags are a sequence of
//
//	length (2, big-endian: type + value) | type (1) | value
//
// The only tag the engine interprets is TagTTL.
//
// # Stored form
//
// Containers keep a tagged cell's value and tags together as one "tagged
// value":
//
//	value | tags | tags length (2, big-endian)
//
// and mark it by setting TaggedFlag in the value-length field they already
// have (a KeyValue's 32-bit value length, a memstore node's, a store-file
// entry's varint), so cells without tags are stored exactly as before tags
// existed. Cells are limited to MaxKeyValueSize (< 2 GiB), so that bit is
// never part of a real length.
const (
	// TaggedFlag marks a value-length field whose bytes are a tagged value.
	TaggedFlag = 1 << 31
	// MaxTagsLength is the largest tags section (a 16-bit length, as HBase).
	MaxTagsLength = math.MaxUint16

	tagLenSize     = 2
	tagTypeSize    = 1
	tagTrailerSize = 2 // tags length after the tags
)

// Tag types (HBase's TagType values).
const (
	// TagTTL is a per-cell time to live: an 8-byte big-endian count of
	// milliseconds after the cell's timestamp at which it expires.
	TagTTL byte = 8
	// TagACL holds a cell's access control list (HBase's ACL tag type): the permissions it
	// grants, written by the region server from a mutation's ACL and read by its access checks
	// (engine/access). Clients never send tags.
	TagACL byte = 1
	// TagVisibility is one conjunction of a cell's visibility expression (HBase's
	// VISIBILITY_TAG_TYPE): a cell carries one per term of the expression's disjunctive normal
	// form and is visible to a reader whose authorizations satisfy any of them (engine/access).
	// Deletes mask only the cells whose visibility tags equal theirs (SameVisibility).
	TagVisibility byte = 2
)

// FirstClientTagType is the first tag type a client may send with its cells (besides TagTTL):
// the types below are the system's (HBase's ACL, visibility, MOB, TTL ... and room for more).
const FirstClientTagType byte = 64

// ClientTagType says whether a client may send a tag of type typ (TagTTL is one).
func ClientTagType(typ byte) bool { return typ == TagTTL || typ >= FirstClientTagType }

// ForEachTag calls fn with the type and value of every tag of a well-formed tags section, in
// order, until fn returns false.
func ForEachTag(tags []byte, fn func(typ byte, value []byte) bool) {
	for o := 0; o+tagLenSize+tagTypeSize <= len(tags); {
		n := int(binary.BigEndian.Uint16(tags[o:]))
		if o+tagLenSize+n > len(tags) || !fn(tags[o+tagLenSize], tags[o+tagLenSize+tagTypeSize:o+tagLenSize+n]) {
			return
		}
		o += tagLenSize + n
	}
}

// ErrBadTags is matched (errors.Is) by the errors for malformed tags.
var ErrBadTags = fmt.Errorf("%w: bad tags", ErrMalformed)

// AppendTag appends one tag to dst.
func AppendTag(dst []byte, typ byte, value []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(tagTypeSize+len(value)))
	dst = append(dst, typ)
	return append(dst, value...)
}

// AppendTTLTag appends a TagTTL tag of ttlMillis to dst.
func AppendTTLTag(dst []byte, ttlMillis int64) []byte {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(ttlMillis))
	return AppendTag(dst, TagTTL, v[:])
}

// ParseTags checks that tags is a well-formed tags section: complete tags,
// at most MaxTagsLength bytes, TTL tags holding 8 bytes.
func ParseTags(tags []byte) error {
	if len(tags) > MaxTagsLength {
		return fmt.Errorf("%w: %d bytes of tags, limit %d", ErrBadTags, len(tags), MaxTagsLength)
	}
	for o := 0; o < len(tags); {
		if len(tags)-o < tagLenSize+tagTypeSize {
			return fmt.Errorf("%w: %d bytes at offset %d cannot hold a tag", ErrBadTags, len(tags)-o, o)
		}
		n := int(binary.BigEndian.Uint16(tags[o:]))
		if n < tagTypeSize || n > len(tags)-o-tagLenSize {
			return fmt.Errorf("%w: tag at offset %d has length %d, %d bytes left", ErrBadTags, o, n, len(tags)-o-tagLenSize)
		}
		if tags[o+tagLenSize] == TagTTL && n != tagTypeSize+8 {
			return fmt.Errorf("%w: TTL tag at offset %d has a %d-byte value, not 8", ErrBadTags, o, n-tagTypeSize)
		}
		o += tagLenSize + n
	}
	return nil
}

// FindTag returns the value of the first tag of type typ in a well-formed
// tags section.
func FindTag(tags []byte, typ byte) ([]byte, bool) {
	o := 0
	return nextOfType(tags, &o, typ)
}

// TTLOf returns the per-cell TTL of a well-formed tags section, in
// milliseconds (HBase uses the first TTL tag).
func TTLOf(tags []byte) (ttlMillis int64, ok bool) {
	if len(tags) == 0 {
		return 0, false
	}
	v, ok := FindTag(tags, TagTTL)
	if !ok || len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// WithTTL returns a copy of a well-formed tags section with its TTL tags
// replaced by one of ttlMillis (ttlMillis <= 0: tags unchanged), as HBase
// carries a cell's tags forward through an increment or append.
func WithTTL(tags []byte, ttlMillis int64) []byte {
	if ttlMillis <= 0 {
		return tags
	}
	out := make([]byte, 0, len(tags)+tagLenSize+tagTypeSize+8)
	for o := 0; o+tagLenSize+tagTypeSize <= len(tags); {
		n := int(binary.BigEndian.Uint16(tags[o:]))
		if tags[o+tagLenSize] != TagTTL {
			out = append(out, tags[o:o+tagLenSize+n]...)
		}
		o += tagLenSize + n
	}
	return AppendTTLTag(out, ttlMillis)
}

// TTLExpired reports whether a cell with timestamp ts and these tags has
// outlived its per-cell TTL at time now (milliseconds), as HBase decides it:
// ts + ttl < now. A cell without a TTL tag never expires by this rule (its
// family's TTL still applies).
func TTLExpired(tags []byte, ts, now int64) bool {
	ttl, ok := TTLOf(tags)
	if !ok {
		return false
	}
	// ts + ttl < now without overflow: ttl < now - ts (now - ts cannot
	// overflow for non-negative timestamps and clocks).
	return ttl < now-ts
}

// TaggedLen returns the length of the tagged value of value and tags.
func TaggedLen(valueLen, tagsLen int) int { return valueLen + tagsLen + tagTrailerSize }

// AppendTagged appends the tagged value of value and tags to dst.
func AppendTagged(dst, value, tags []byte) []byte {
	dst = append(dst, value...)
	dst = append(dst, tags...)
	return binary.BigEndian.AppendUint16(dst, uint16(len(tags)))
}

// SplitTagged splits a well-formed tagged value into its value and tags.
func SplitTagged(b []byte) (value, tags []byte) {
	n := len(b) - tagTrailerSize
	t := int(binary.BigEndian.Uint16(b[n:]))
	return b[: n-t : n-t], b[n-t : n : n]
}

// ParseTagged checks a tagged value and splits it.
func ParseTagged(b []byte) (value, tags []byte, err error) {
	if len(b) < tagTrailerSize {
		return nil, nil, fmt.Errorf("%w: tagged value of %d bytes has no tags length", ErrBadTags, len(b))
	}
	n := len(b) - tagTrailerSize
	if t := int(binary.BigEndian.Uint16(b[n:])); t > n {
		return nil, nil, fmt.Errorf("%w: tags length %d exceeds the %d bytes before it", ErrBadTags, t, n)
	}
	value, tags = SplitTagged(b)
	if len(tags) == 0 {
		return nil, nil, fmt.Errorf("%w: tagged value without tags", ErrBadTags)
	}
	if err := ParseTags(tags); err != nil {
		return nil, nil, err
	}
	return value, tags, nil
}

// StoredValue returns what a container stores for value and tags: value
// itself without tags, else their tagged value; and the value-length field
// (with TaggedFlag for a tagged value). scratch is reused for the tagged
// value when it has room.
func StoredValue(scratch, value, tags []byte) (stored []byte, lenField uint32) {
	if len(tags) == 0 {
		return value, uint32(len(value))
	}
	stored = AppendTagged(scratch[:0], value, tags)
	return stored, uint32(len(stored)) | TaggedFlag
}

// HasVisibility reports whether a well-formed tags section holds a TagVisibility tag.
func HasVisibility(tags []byte) bool {
	if len(tags) == 0 {
		return false
	}
	_, ok := FindTag(tags, TagVisibility)
	return ok
}

// SameVisibility reports whether two well-formed tags sections hold the same TagVisibility
// tags in the same order (writers put them in a canonical order): the rule by which a delete
// marker masks a cell when visibility labels are in use.
func SameVisibility(a, b []byte) bool {
	ia, ib := 0, 0
	for {
		va, oka := nextOfType(a, &ia, TagVisibility)
		vb, okb := nextOfType(b, &ib, TagVisibility)
		if oka != okb {
			return false
		}
		if !oka {
			return true
		}
		if string(va) != string(vb) {
			return false
		}
	}
}

// OnlyTagsOf reports whether every tag of a well-formed tags section is of type typ.
func OnlyTagsOf(tags []byte, typ byte) bool {
	for o := 0; o+tagLenSize+tagTypeSize <= len(tags); {
		if tags[o+tagLenSize] != typ {
			return false
		}
		o += tagLenSize + int(binary.BigEndian.Uint16(tags[o:]))
	}
	return true
}

// EachTag calls fn with the value of every tag of type typ in a well-formed tags section, in
// order, until fn returns false.
func EachTag(tags []byte, typ byte, fn func(v []byte) bool) {
	for o := 0; ; {
		v, ok := nextOfType(tags, &o, typ)
		if !ok || !fn(v) {
			return
		}
	}
}

// nextOfType returns the value of the next tag of type typ at or after offset *o, advancing *o
// past it.
func nextOfType(tags []byte, o *int, typ byte) ([]byte, bool) {
	for *o+tagLenSize+tagTypeSize <= len(tags) {
		at := *o
		n := int(binary.BigEndian.Uint16(tags[at:]))
		*o = at + tagLenSize + n
		if *o > len(tags) {
			return nil, false
		}
		if tags[at+tagLenSize] == typ {
			return tags[at+tagLenSize+tagTypeSize : at+tagLenSize+n], true
		}
	}
	return nil, false
}
