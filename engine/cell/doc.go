// Package cell defines Cellstore's cell model and its binary encodings: the
// encoded key (row, family, qualifier, timestamp, type), the serialized cell
// (KeyValue: key length, value length, key, value) and the comparator that
// orders keys the way HBase does:
//
//	row ascending (unsigned bytes), family ascending, qualifier ascending,
//	timestamp descending, type descending
//
// and, for cells with equal keys in a memstore, sequence id descending.
//
// Everything works on byte slices. Comparisons read the encoded keys in
// place: they never decode into structs and never allocate. Builders use the
// append style (AppendKey(dst, ...)) so that callers can reuse buffers.
//
// # Trust boundary
//
// The accessors of Key and KeyValue and the comparators assume a well-formed
// encoding: one produced by this package's builders, or one accepted by
// ParseKey or ParseKeyValue. Bytes read from disk or the network must go
// through a Parse function first; Parse functions never panic and report
// malformed input as errors. Builds with the "invariants" tag additionally
// verify keys on every comparison.
//
// # Seek keys
//
// Scanners position themselves with fake keys that sort before or after
// real cells: FirstOnRow, LastOnRow, FirstOnColumn, LastOnColumn and
// FirstOnColumnAtTimestamp. They use the Maximum (255) and Minimum (0) type
// codes, which never appear in stored cells. As in HBase, a key with empty
// family and qualifier and type Minimum sorts after every other key of its
// row ("last on row").
//
// The formats are documented in docs/storage-format.md.
package cell
