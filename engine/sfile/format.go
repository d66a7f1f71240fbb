package sfile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"time"

	"github.com/cellstore/cellstore/engine/cell"
)

// FormatVersion is the store file format version this package writes and
// reads (docs/storage-format.md, "Store files").
const FormatVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Block framing: every block on disk is
//
//	kind u8 | codec u8 | reserved u16 (0) | uncompressed length u32 | payload | CRC32C u32
//
// little-endian, the checksum covering header and payload.
const (
	blockHeaderSize  = 8
	blockTrailerSize = 4
	blockOverhead    = blockHeaderSize + blockTrailerSize

	// maxBlockLen bounds a block's uncompressed length: one cell of the
	// largest size plus slack. Larger claims are corruption.
	maxBlockLen = cell.MaxKeyValueSize + 1<<20
)

type blockKind uint8

const (
	kindData       blockKind = 1
	kindIndex      blockKind = 2
	kindBloomChunk blockKind = 3
	kindBloomIndex blockKind = 4
	kindFileInfo   blockKind = 5
)

func (k blockKind) String() string {
	switch k {
	case kindData:
		return "data"
	case kindIndex:
		return "index"
	case kindBloomChunk:
		return "bloom chunk"
	case kindBloomIndex:
		return "bloom index"
	case kindFileInfo:
		return "file info"
	}
	return fmt.Sprintf("unknown(%d)", uint8(k))
}

// blockHandle locates a block: its offset and on-disk size (header,
// payload and checksum).
type blockHandle struct {
	off  uint64
	size uint64
}

// appendFramed appends a framed block to dst.
func appendFramed(dst []byte, kind blockKind, codec Compression, ulen int, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, byte(kind), byte(codec), 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(ulen))
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// frame is a parsed, checksum-verified block.
type frame struct {
	kind    blockKind
	codec   Compression
	ulen    int
	payload []byte // possibly compressed
}

// parseFrame checks the checksum and header of an on-disk block. It
// returns a reason on failure (the caller adds file and offset).
func parseFrame(raw []byte, want blockKind) (frame, string) {
	if len(raw) < blockOverhead {
		return frame{}, fmt.Sprintf("%s block of %d bytes is shorter than its framing (%d)", want, len(raw), blockOverhead)
	}
	body := raw[:len(raw)-blockTrailerSize]
	stored := binary.LittleEndian.Uint32(raw[len(raw)-blockTrailerSize:])
	if sum := crc32.Checksum(body, castagnoli); sum != stored {
		return frame{}, fmt.Sprintf("%s block: checksum mismatch (stored %08x, computed %08x)", want, stored, sum)
	}
	f := frame{kind: blockKind(raw[0]), codec: Compression(raw[1]), ulen: int(binary.LittleEndian.Uint32(raw[4:8])),
		payload: body[blockHeaderSize:]}
	if f.kind != want {
		return frame{}, fmt.Sprintf("expected a %s block, found block kind %s", want, f.kind)
	}
	if raw[2] != 0 || raw[3] != 0 {
		return frame{}, fmt.Sprintf("%s block: reserved header bytes %02x%02x are not zero", want, raw[2], raw[3])
	}
	if f.codec >= numCompressions {
		return frame{}, fmt.Sprintf("%s block: unknown compression codec %d", want, uint8(f.codec))
	}
	if f.ulen > maxBlockLen {
		return frame{}, fmt.Sprintf("%s block: uncompressed length %d exceeds the limit %d", want, f.ulen, maxBlockLen)
	}
	if reason := checkDecodedLen(f.codec, f.payload, f.ulen); reason != "" {
		return frame{}, fmt.Sprintf("%s block: %s", want, reason)
	}
	return f, ""
}

// Trailer: the last trailerSize bytes of a store file.
//
//	0   8  root index offset
//	8   8  file info offset
//	16  8  bloom index offset
//	24  8  data block count
//	32  4  root index size
//	36  4  file info size
//	40  4  bloom index size (0: no bloom filter)
//	44  4  index levels
//	48  4  CRC32C of bytes 0..47 and 52..63
//	52  2  format version
//	54  2  trailer size (64)
//	56  8  magic
const (
	trailerSize = 64
	magic       = "CSSFILE\x1a"
)

type trailer struct {
	rootIndex  blockHandle
	fileInfo   blockHandle
	bloomIndex blockHandle
	dataBlocks uint64
	levels     uint32
}

func (t *trailer) encode() []byte {
	b := make([]byte, trailerSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], t.rootIndex.off)
	le.PutUint64(b[8:], t.fileInfo.off)
	le.PutUint64(b[16:], t.bloomIndex.off)
	le.PutUint64(b[24:], t.dataBlocks)
	le.PutUint32(b[32:], uint32(t.rootIndex.size))
	le.PutUint32(b[36:], uint32(t.fileInfo.size))
	le.PutUint32(b[40:], uint32(t.bloomIndex.size))
	le.PutUint32(b[44:], t.levels)
	le.PutUint16(b[52:], FormatVersion)
	le.PutUint16(b[54:], trailerSize)
	copy(b[56:], magic)
	le.PutUint32(b[48:], trailerChecksum(b))
	return b
}

func trailerChecksum(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:48], castagnoli), castagnoli, b[52:trailerSize])
}

// decodeTrailer parses the trailer at offset off of file: a
// *CorruptionError for a damaged or missing trailer, an error wrapping
// ErrUnsupportedVersion for another format version.
func decodeTrailer(b []byte, file string, off int64) (trailer, error) {
	le := binary.LittleEndian
	if string(b[56:]) != magic {
		return trailer{}, corruptf(file, off,
			"no store file trailer (last 8 bytes %x, want magic %x): truncated, or not a store file", b[56:], magic)
	}
	if v := le.Uint16(b[52:]); v != FormatVersion {
		return trailer{}, fmt.Errorf("%w: %s has format version %d (this build reads version %d)",
			ErrUnsupportedVersion, file, v, FormatVersion)
	}
	if n := le.Uint16(b[54:]); n != trailerSize {
		return trailer{}, corruptf(file, off, "trailer: size field %d, want %d", n, trailerSize)
	}
	if sum, stored := trailerChecksum(b), le.Uint32(b[48:]); sum != stored {
		return trailer{}, corruptf(file, off, "trailer: checksum mismatch (stored %08x, computed %08x)", stored, sum)
	}
	t := trailer{
		rootIndex:  blockHandle{le.Uint64(b[0:]), uint64(le.Uint32(b[32:]))},
		fileInfo:   blockHandle{le.Uint64(b[8:]), uint64(le.Uint32(b[36:]))},
		bloomIndex: blockHandle{le.Uint64(b[16:]), uint64(le.Uint32(b[40:]))},
		dataBlocks: le.Uint64(b[24:]),
		levels:     le.Uint32(b[44:]),
	}
	return t, nil
}

// uvarint decodes an unsigned varint at b[i:]. It returns the next offset,
// or -1 if the varint is truncated or overlong.
func uvarint(b []byte, i int) (uint64, int) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	if i >= len(b) {
		return 0, -1
	}
	v, n := binary.Uvarint(b[i:])
	if n <= 0 {
		return 0, -1
	}
	return v, i + n
}

// uvarintInt decodes an unsigned varint that must be a length at most
// limit.
func uvarintLen(b []byte, i, limit int) (int, int) {
	v, j := uvarint(b, i)
	if j < 0 || v > uint64(limit) {
		return 0, -1
	}
	return int(v), j
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// fileInfo is the decoded file info block.
type fileInfo struct {
	entryCount        uint64
	minSeq, maxSeq    uint64
	minTs, maxTs      int64
	deleteFamilyCount uint64
	majorCompacted    bool
	createdAt         int64 // Unix nanoseconds
	encoding          Encoding
	compression       Compression
	bloom             BloomType
	blockSize         uint64
	bloomFPRate       float64
	firstKey, lastKey []byte
	midLeaf           blockHandle
	midEntry          uint64
	info              map[string][]byte

	// earliestPutTs is the smallest timestamp of a Put cell (math.MaxInt64: none), known when
	// hasEarliestPut: files written before the field existed lack it.
	earliestPutTs  int64
	hasEarliestPut bool
}

const fileInfoMajorCompacted = 1

// encode returns the file info payload:
//
//	builtin length uvarint | builtin fields | count uvarint | (name, value)*
func (fi *fileInfo) encode() []byte {
	var b []byte
	b = binary.AppendUvarint(b, fi.entryCount)
	b = binary.AppendUvarint(b, fi.minSeq)
	b = binary.AppendUvarint(b, fi.maxSeq)
	b = binary.AppendVarint(b, fi.minTs)
	b = binary.AppendVarint(b, fi.maxTs)
	b = binary.AppendUvarint(b, fi.deleteFamilyCount)
	var flags uint64
	if fi.majorCompacted {
		flags |= fileInfoMajorCompacted
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, fi.createdAt)
	b = append(b, byte(fi.encoding), byte(fi.compression), byte(fi.bloom))
	b = binary.AppendUvarint(b, fi.blockSize)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(fi.bloomFPRate))
	b = binary.AppendUvarint(b, uint64(len(fi.firstKey)))
	b = append(b, fi.firstKey...)
	b = binary.AppendUvarint(b, uint64(len(fi.lastKey)))
	b = append(b, fi.lastKey...)
	b = binary.AppendUvarint(b, fi.midLeaf.off)
	b = binary.AppendUvarint(b, fi.midLeaf.size)
	b = binary.AppendUvarint(b, fi.midEntry)
	// Fields added later follow, each optional: a reader of an older version skips them.
	if fi.hasEarliestPut {
		b = binary.AppendVarint(b, fi.earliestPutTs)
	}

	out := binary.AppendUvarint(nil, uint64(len(b)))
	out = append(out, b...)
	names := make([]string, 0, len(fi.info))
	for n := range fi.info {
		names = append(names, n)
	}
	sort.Strings(names)
	out = binary.AppendUvarint(out, uint64(len(names)))
	for _, n := range names {
		out = binary.AppendUvarint(out, uint64(len(n)))
		out = append(out, n...)
		out = binary.AppendUvarint(out, uint64(len(fi.info[n])))
		out = append(out, fi.info[n]...)
	}
	return out
}

// decodeFileInfo parses a file info payload; it returns a reason on
// failure. Keys are copied out of b.
func decodeFileInfo(b []byte) (fileInfo, string) {
	var fi fileInfo
	blen, i := uvarintLen(b, 0, len(b))
	if i < 0 || i+blen > len(b) {
		return fi, "file info: bad builtin section length"
	}
	bb := b[i : i+blen]
	rest := b[i+blen:]
	j := 0
	bad := false
	u := func() uint64 {
		if bad {
			return 0
		}
		v, n := uvarint(bb, j)
		if n < 0 {
			bad = true
			return 0
		}
		j = n
		return v
	}
	s := func() int64 {
		if bad {
			return 0
		}
		v, n := binary.Varint(bb[j:])
		if n <= 0 {
			bad = true
			return 0
		}
		j += n
		return v
	}
	bytesField := func() []byte {
		n := u()
		if bad || n > uint64(len(bb)-j) {
			bad = true
			return nil
		}
		v := append([]byte(nil), bb[j:j+int(n)]...)
		j += int(n)
		return v
	}
	fi.entryCount = u()
	fi.minSeq = u()
	fi.maxSeq = u()
	fi.minTs = s()
	fi.maxTs = s()
	fi.deleteFamilyCount = u()
	flags := u()
	fi.majorCompacted = flags&fileInfoMajorCompacted != 0
	fi.createdAt = s()
	if bad || j+3 > len(bb) {
		return fi, "file info: truncated builtin fields"
	}
	fi.encoding, fi.compression, fi.bloom = Encoding(bb[j]), Compression(bb[j+1]), BloomType(bb[j+2])
	j += 3
	fi.blockSize = u()
	if bad || j+8 > len(bb) {
		return fi, "file info: truncated builtin fields"
	}
	fi.bloomFPRate = math.Float64frombits(binary.LittleEndian.Uint64(bb[j:]))
	j += 8
	fi.firstKey = bytesField()
	fi.lastKey = bytesField()
	fi.midLeaf.off = u()
	fi.midLeaf.size = u()
	fi.midEntry = u()
	if bad {
		return fi, "file info: truncated builtin fields"
	}
	if fi.encoding >= numEncodings || fi.compression >= numCompressions || fi.bloom >= numBloomTypes {
		return fi, fmt.Sprintf("file info: unknown encoding %d, compression %d or bloom type %d",
			fi.encoding, fi.compression, fi.bloom)
	}
	if fi.entryCount > 0 {
		if _, err := cell.ParseKey(fi.firstKey); err != nil {
			return fi, fmt.Sprintf("file info: first key: %v", err)
		}
		if _, err := cell.ParseKey(fi.lastKey); err != nil {
			return fi, fmt.Sprintf("file info: last key: %v", err)
		}
	}
	// Optional fields, absent from the files of older versions.
	if j < len(bb) {
		fi.earliestPutTs = s()
		if bad {
			return fi, "file info: truncated earliest put timestamp"
		}
		fi.hasEarliestPut = true
	}
	// Fields a later version appends to the builtin section are skipped.

	n, k := uvarintLen(rest, 0, len(rest))
	if k < 0 {
		return fi, "file info: bad entry count"
	}
	fi.info = make(map[string][]byte, n)
	for e := 0; e < n; e++ {
		var nl, vl int
		nl, k = uvarintLen(rest, k, len(rest))
		if k < 0 || k+nl > len(rest) {
			return fi, "file info: truncated entry name"
		}
		name := string(rest[k : k+nl])
		k += nl
		vl, k = uvarintLen(rest, k, len(rest))
		if k < 0 || k+vl > len(rest) {
			return fi, "file info: truncated entry value"
		}
		fi.info[name] = append([]byte{}, rest[k:k+vl]...)
		k += vl
	}
	if k != len(rest) {
		return fi, fmt.Sprintf("file info: %d trailing bytes", len(rest)-k)
	}
	return fi, ""
}

func (fi *fileInfo) createdTime() time.Time { return time.Unix(0, fi.createdAt).UTC() }
