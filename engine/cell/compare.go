package cell

import (
	"bytes"
	"encoding/binary"
)

// Compare compares two encoded keys in HBase order: row ascending (unsigned
// bytes), family ascending, qualifier ascending, timestamp descending, type
// descending. A key with an empty family and qualifier and type Minimum
// ("last on row") sorts after every other key of its row. It returns -1, 0
// or +1 and does not allocate. Both keys must be well-formed.
func Compare(a, b []byte) int {
	checkKey(a)
	checkKey(b)
	ra := int(binary.BigEndian.Uint16(a))
	rb := int(binary.BigEndian.Uint16(b))
	if c := bytes.Compare(a[rowLenSize:rowLenSize+ra], b[rowLenSize:rowLenSize+rb]); c != 0 {
		return c
	}
	return compareAfterRow(a, b, rowLenSize+ra, rowLenSize+rb)
}

// CompareWithSeq compares two encoded keys with Compare and, when they are
// equal, orders the higher sequence id first (memstore order: the newest
// write of a key is seen first).
func CompareWithSeq(a []byte, aSeq uint64, b []byte, bSeq uint64) int {
	if c := Compare(a, b); c != 0 {
		return c
	}
	switch {
	case aSeq > bSeq:
		return -1
	case aSeq < bSeq:
		return 1
	}
	return 0
}

// CompareKeyValues compares the keys of two serialized cells with Compare.
func CompareKeyValues(a, b KeyValue) int { return Compare(a.Key(), b.Key()) }

// CompareRows compares the rows of two encoded keys.
func CompareRows(a, b []byte) int {
	ra := int(binary.BigEndian.Uint16(a))
	rb := int(binary.BigEndian.Uint16(b))
	return bytes.Compare(a[rowLenSize:rowLenSize+ra], b[rowLenSize:rowLenSize+rb])
}

// CompareRow compares the row of an encoded key with a row.
func CompareRow(key, row []byte) int {
	r := int(binary.BigEndian.Uint16(key))
	return bytes.Compare(key[rowLenSize:rowLenSize+r], row)
}

// SameRow reports whether two encoded keys have the same row.
func SameRow(a, b []byte) bool {
	ra := int(binary.BigEndian.Uint16(a))
	rb := int(binary.BigEndian.Uint16(b))
	return ra == rb && bytes.Equal(a[rowLenSize:rowLenSize+ra], b[rowLenSize:rowLenSize+rb])
}

// SameColumn reports whether two encoded keys have the same row, family and
// qualifier.
func SameColumn(a, b []byte) bool {
	// Row, family and qualifier are the bytes before the trailer; with the
	// length prefixes included, equal prefixes mean equal columns.
	return bytes.Equal(a[:len(a)-keyTrailerSize], b[:len(b)-keyTrailerSize])
}

func compareAfterRow(a, b []byte, oa, ob int) int {
	fa, fb := int(a[oa]), int(b[ob])
	la, lb := len(a), len(b)
	ta, tb := Type(a[la-1]), Type(b[lb-1])
	// Column bytes: family and qualifier follow the family length byte and
	// end at the trailer. An empty column with type Minimum is "last on
	// row".
	lastA := ta == Minimum && oa+famLenSize+keyTrailerSize == la
	lastB := tb == Minimum && ob+famLenSize+keyTrailerSize == lb
	if lastA || lastB {
		switch {
		case lastA && lastB:
			return 0
		case lastA:
			return 1
		default:
			return -1
		}
	}
	if fa != fb {
		// Families of different lengths are never equal, so they decide.
		return bytes.Compare(a[oa+famLenSize:oa+famLenSize+fa], b[ob+famLenSize:ob+famLenSize+fb])
	}
	// Same family length: family and qualifier compare as one run of bytes.
	// A difference inside the family decides family order, one in the
	// qualifier decides qualifier order, and a prefix relation can only
	// arise in the qualifier, where the shorter qualifier sorts first.
	if c := bytes.Compare(a[oa+famLenSize:la-keyTrailerSize], b[ob+famLenSize:lb-keyTrailerSize]); c != 0 {
		return c
	}
	tsA := int64(binary.BigEndian.Uint64(a[la-keyTrailerSize:]))
	tsB := int64(binary.BigEndian.Uint64(b[lb-keyTrailerSize:]))
	switch {
	case tsA > tsB:
		return -1
	case tsA < tsB:
		return 1
	}
	switch {
	case ta > tb:
		return -1
	case ta < tb:
		return 1
	}
	return 0
}
