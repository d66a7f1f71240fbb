package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/cellstore/cellstore/engine/cell"
)

// On-disk format (docs/storage-format.md has the full description).
//
// Segment file = header, then records. Little-endian integers.
//
//	header (24 bytes):
//	  0   8  magic "CSWALSEG"
//	  8   2  format version (2 in WAL segments written since commit markers: see below; 1 in
//	         older segments and in every other kind)
//	  10  1  kind (1 = WAL segment, 2 = recovered edits, 3 = log object, 4 = fence marker: ObjectLog, 5 = archive object, 6 = compressed log object)
//	  11  1  reserved, zero
//	  12  8  segment number (0 in recovered-edits files)
//	  20  4  CRC32C of bytes 0..19
//
//	record:
//	  0   4  CRC32C of bytes 4..8+N (the length field and the payload)
//	  4   4  payload length N (1..MaxRecordSize)
//	  8   N  payload
//
//	payload of a commit marker (format version 2 segments only; the first record of every
//	write to the segment, i.e. of every commit):
//	  u8       payload kind (2 = commit marker)
//	  u64      synced offset: every byte of the segment before it was synced when the commit
//	           was staged
//
//	payload (one edit batch):
//	  u8       payload kind (1 = edit)
//	  u64      sequence id
//	  i64      write time, Unix nanoseconds
//	  u8       flags (bit 0: nonce present)
//	  [u64 nonce group, u64 nonce]      if bit 0
//	  uvarint  region name length, region name
//	  uvarint  cell count
//	  cells    serialized cells (cell.KeyValue), back to back
const (
	segmentMagic  = "CSWALSEG"
	formatVersion = 1
	// markedVersion is the format version of WAL segments whose commits begin with a commit
	// marker (a reader of version 1 refuses them).
	markedVersion     = 2
	kindSegment       = 1
	kindRecovered     = 2
	headerSize        = 24
	recordHeaderSize  = 8
	payloadKindEdit   = 1
	payloadKindCommit = 2
	// commitMarkerSize is a commit marker record's size, header included.
	commitMarkerSize  = recordHeaderSize + 1 + 8
	flagNonce         = 1
	fixedPayloadSize  = 1 + 8 + 8 + 1
	segmentSuffix     = ".wal"
	recoveredSuffix   = ".edits"
	recoveredTmpExt   = ".tmp"
	segmentNameDigits = 20

	// MaxRecordSize is the format's limit on a record payload (1 GiB).
	// Options.MaxRecordSize sets the writer's (lower) limit.
	MaxRecordSize = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors.
var (
	// ErrCorruption is wrapped by *CorruptionError.
	ErrCorruption = errors.New("wal: corruption")
	// ErrClosed is returned by operations on a closed WAL.
	ErrClosed = errors.New("wal: closed")
	// ErrBroken wraps the cause when the WAL refuses appends after a
	// failed write or sync; Roll recovers.
	ErrBroken = errors.New("wal: broken by an earlier write or sync failure")
	// ErrLost is returned by WaitDurable for a record that was dropped by a
	// failed write or sync (its appender got, or gets, an error).
	ErrLost = errors.New("wal: record lost by a failed write or sync")
	// ErrRecordTooLarge is returned by Append for an edit whose record
	// exceeds the configured limit.
	ErrRecordTooLarge = errors.New("wal: record too large")
	// ErrInvalidEdit is returned by Append for an edit that cannot be
	// logged (empty region, malformed cell).
	ErrInvalidEdit = errors.New("wal: invalid edit")
)

// CorruptionError reports damaged bytes that are not a torn tail: replay
// stops there.
type CorruptionError struct {
	File   string // path within the storage backend
	Offset int64  // byte offset of the damaged record or header (in a compressed log object: in its header followed by the decoded records)
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corruption in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorruption) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

// Edit is one WAL record: a batch of cells of one region, applied
// atomically with one sequence id.
type Edit struct {
	// Region is the encoded region name.
	Region []byte
	// Seq is the sequence id, assigned by the WAL on append (ignored on
	// input).
	Seq uint64
	// WriteTime is the write time in Unix nanoseconds; zero on append
	// means "now".
	WriteTime int64
	// HasNonce says whether NonceGroup and Nonce identify the client
	// operation, for de-duplication of retries.
	HasNonce   bool
	NonceGroup uint64
	Nonce      uint64
	// Cells are serialized cells (cell.KeyValue).
	Cells []cell.KeyValue
}

// Reset clears e, keeping the capacity of Cells.
func (e *Edit) Reset() {
	cells := e.Cells[:0]
	*e = Edit{Cells: cells}
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// payloadSize returns the encoded size of e's payload.
func payloadSize(e *Edit) int {
	n := fixedPayloadSize + uvarintLen(uint64(len(e.Region))) + len(e.Region) + uvarintLen(uint64(len(e.Cells)))
	if e.HasNonce {
		n += 16
	}
	for _, c := range e.Cells {
		n += len(c)
	}
	return n
}

// appendRecord appends the record of e (with the given sequence id and
// write time) to dst. The payload size must have been checked.
func appendRecord(dst []byte, e *Edit, seq uint64, writeTime int64, size int) []byte {
	start := len(dst)
	if cap(dst)-len(dst) < recordHeaderSize+size {
		grown := make([]byte, len(dst), 2*cap(dst)+recordHeaderSize+size)
		copy(grown, dst)
		dst = grown
	}
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = append(dst, payloadKindEdit)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(writeTime))
	if e.HasNonce {
		dst = append(dst, flagNonce)
		dst = binary.LittleEndian.AppendUint64(dst, e.NonceGroup)
		dst = binary.LittleEndian.AppendUint64(dst, e.Nonce)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Region)))
	dst = append(dst, e.Region...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Cells)))
	for _, c := range e.Cells {
		dst = append(dst, c...)
	}
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(dst)-start-recordHeaderSize))
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// decodeEdit decodes a record payload into e. Cells and Region alias
// payload. It never panics on bad input.
func decodeEdit(p []byte, e *Edit) error {
	e.Reset()
	if len(p) < fixedPayloadSize {
		return fmt.Errorf("payload of %d bytes is shorter than %d", len(p), fixedPayloadSize)
	}
	if p[0] != payloadKindEdit {
		return fmt.Errorf("unknown payload kind %d", p[0])
	}
	e.Seq = binary.LittleEndian.Uint64(p[1:])
	e.WriteTime = int64(binary.LittleEndian.Uint64(p[9:]))
	flags := p[17]
	p = p[fixedPayloadSize:]
	if flags&^flagNonce != 0 {
		return fmt.Errorf("unknown flags %#x", flags)
	}
	if flags&flagNonce != 0 {
		if len(p) < 16 {
			return errors.New("truncated nonce")
		}
		e.HasNonce = true
		e.NonceGroup = binary.LittleEndian.Uint64(p)
		e.Nonce = binary.LittleEndian.Uint64(p[8:])
		p = p[16:]
	}
	rl, n := binary.Uvarint(p)
	if n <= 0 || n != uvarintLen(rl) || rl > uint64(len(p)-n) {
		return errors.New("bad region name length")
	}
	p = p[n:]
	e.Region = p[:rl:rl]
	p = p[rl:]
	if len(e.Region) == 0 {
		return errors.New("empty region name")
	}
	count, n := binary.Uvarint(p)
	if n <= 0 || n != uvarintLen(count) || count > uint64(len(p)) { // every cell takes more than one byte
		return errors.New("bad cell count")
	}
	p = p[n:]
	for i := uint64(0); i < count; i++ {
		kv, used, err := cell.ParseKeyValue(p)
		if err != nil {
			return fmt.Errorf("cell %d: %w", i, err)
		}
		e.Cells = append(e.Cells, kv)
		p = p[used:]
	}
	if len(p) != 0 {
		return fmt.Errorf("%d trailing bytes after %d cells", len(p), count)
	}
	return nil
}

func appendHeader(dst []byte, kind byte, segNum uint64) []byte {
	return appendVersionedHeader(dst, formatVersion, kind, segNum)
}

func appendVersionedHeader(dst []byte, version uint16, kind byte, segNum uint64) []byte {
	start := len(dst)
	dst = append(dst, segmentMagic...)
	dst = binary.LittleEndian.AppendUint16(dst, version)
	dst = append(dst, kind, 0)
	dst = binary.LittleEndian.AppendUint64(dst, segNum)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// checkHeader validates a segment header and returns its kind and number.
func checkHeader(h []byte) (kind byte, segNum uint64, err error) {
	kind, segNum, _, err = checkVersionedHeader(h)
	return kind, segNum, err
}

// checkVersionedHeader is checkHeader that also returns the format version.
func checkVersionedHeader(h []byte) (kind byte, segNum uint64, version uint16, err error) {
	if len(h) < headerSize {
		return 0, 0, 0, fmt.Errorf("header of %d bytes is shorter than %d", len(h), headerSize)
	}
	if string(h[:8]) != segmentMagic {
		return 0, 0, 0, fmt.Errorf("bad magic %q", h[:8])
	}
	if crc32.Checksum(h[:20], castagnoli) != binary.LittleEndian.Uint32(h[20:]) {
		return 0, 0, 0, errors.New("header checksum mismatch")
	}
	version = binary.LittleEndian.Uint16(h[8:])
	kind = h[10]
	if version != formatVersion && (version != markedVersion || kind != kindSegment) {
		return 0, 0, 0, fmt.Errorf("unsupported format version %d (for file kind %d)", version, kind)
	}
	if kind != kindSegment && kind != kindRecovered && kind != kindObject && kind != kindFence && kind != kindArchive && kind != kindObjectS2 {
		return 0, 0, 0, fmt.Errorf("unknown file kind %d", kind)
	}
	return kind, binary.LittleEndian.Uint64(h[12:]), version, nil
}

// putCommitMarker writes a commit marker record saying that the segment was synced up to
// synced into rec (commitMarkerSize bytes).
func putCommitMarker(rec []byte, synced int64) {
	binary.LittleEndian.PutUint32(rec[4:], commitMarkerSize-recordHeaderSize)
	rec[recordHeaderSize] = payloadKindCommit
	binary.LittleEndian.PutUint64(rec[recordHeaderSize+1:], uint64(synced))
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:commitMarkerSize], castagnoli))
}

// commitMarker decodes a record payload that is a commit marker, found at offset at (ok false for
// any other kind; an error for a malformed marker, or one saying the segment was synced before
// its header's end or past the marker itself).
func commitMarker(p []byte, at int64) (synced int64, ok bool, err error) {
	if len(p) == 0 || p[0] != payloadKindCommit {
		return 0, false, nil
	}
	if len(p) != commitMarkerSize-recordHeaderSize {
		return 0, true, fmt.Errorf("commit marker of %d bytes, want %d", len(p), commitMarkerSize-recordHeaderSize)
	}
	v := binary.LittleEndian.Uint64(p[1:])
	if v < headerSize || v > uint64(at) {
		return 0, true, fmt.Errorf("it says the segment was synced to offset %d", v)
	}
	return int64(v), true, nil
}

// segmentName returns the file name of segment n.
func segmentName(n uint64) string { return fmt.Sprintf("%0*d%s", segmentNameDigits, n, segmentSuffix) }

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	return parseNumbered(name, segmentSuffix)
}

func parseNumbered(name, suffix string) (uint64, bool) {
	if len(name) != segmentNameDigits+len(suffix) || name[segmentNameDigits:] != suffix {
		return 0, false
	}
	var n uint64
	for _, c := range name[:segmentNameDigits] {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// AppendEditRecord appends e as one checksummed record in the segment
// encoding, with e.Seq and e.WriteTime as given: the form in which a
// primary region ships its edits to read replicas.
func AppendEditRecord(dst []byte, e *Edit) ([]byte, error) {
	if len(e.Region) == 0 {
		return dst, fmt.Errorf("%w: empty region name", ErrInvalidEdit)
	}
	size := payloadSize(e)
	if size > MaxRecordSize {
		return dst, fmt.Errorf("%w: %d bytes", ErrRecordTooLarge, size)
	}
	return appendRecord(dst, e, e.Seq, e.WriteTime, size), nil
}

// DecodeEditRecord decodes one record made by AppendEditRecord (the whole
// of p), checking its checksum and length. Region and Cells alias p. It
// never panics on bad input.
func DecodeEditRecord(p []byte, e *Edit) error {
	if len(p) < recordHeaderSize {
		return fmt.Errorf("%w: record of %d bytes is shorter than its header", ErrCorruption, len(p))
	}
	n := binary.LittleEndian.Uint32(p[4:])
	if uint64(n) != uint64(len(p)-recordHeaderSize) {
		return fmt.Errorf("%w: record says %d payload bytes, has %d", ErrCorruption, n, len(p)-recordHeaderSize)
	}
	if crc32.Checksum(p[4:], castagnoli) != binary.LittleEndian.Uint32(p) {
		return fmt.Errorf("%w: record checksum mismatch", ErrCorruption)
	}
	if err := decodeEdit(p[recordHeaderSize:], e); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	return nil
}
