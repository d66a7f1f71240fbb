package sfile

import (
	"encoding/binary"
	"fmt"

	"github.com/cellstore/cellstore/engine/cell"
)

// Index block payload (leaf, intermediate and root alike):
//
//	entries | entry offsets (u32 LE each) | entry count (u32 LE) | level (u8)
//	entry:  keyLen uv | key | block offset uv | block size uv
//
// Level 1 entries point to data blocks (key: the block's first key);
// level n > 1 entries point to index blocks of level n-1 (key: the first
// key of that block). Entries are back to back in key order.
const indexTrailerLen = 5

type indexBuilder struct {
	buf      []byte
	offs     []uint32
	firstKey []byte
}

func (b *indexBuilder) n() int { return len(b.offs) }

func (b *indexBuilder) size() int { return len(b.buf) + 4*len(b.offs) + indexTrailerLen }

func (b *indexBuilder) add(key []byte, h blockHandle) {
	if len(b.offs) == 0 {
		b.firstKey = append(b.firstKey[:0], key...)
	}
	b.offs = append(b.offs, uint32(len(b.buf)))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)))
	b.buf = append(b.buf, key...)
	b.buf = binary.AppendUvarint(b.buf, h.off)
	b.buf = binary.AppendUvarint(b.buf, h.size)
}

// finish returns the payload, valid until reset.
func (b *indexBuilder) finish(level int) []byte {
	for _, o := range b.offs {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, o)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.offs)))
	return append(b.buf, byte(level))
}

func (b *indexBuilder) reset() {
	b.buf = b.buf[:0]
	b.offs = b.offs[:0]
}

func indexEntrySize(keyLen int, h blockHandle) int {
	return uvarintSize(uint64(keyLen)) + keyLen + uvarintSize(h.off) + uvarintSize(h.size) + 4
}

func uvarintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// indexBlock is a view of a validated index block payload.
type indexBlock struct {
	data  []byte
	n     int
	offs  int // start of the offset array
	level int
}

// indexBlockOf wraps a payload that was validated when it was read (a
// cached block).
func indexBlockOf(data []byte) indexBlock {
	l := len(data)
	n := int(binary.LittleEndian.Uint32(data[l-indexTrailerLen:]))
	return indexBlock{data: data, n: n, offs: l - indexTrailerLen - 4*n, level: int(data[l-1])}
}

// parseIndexBlock validates an index block payload: structure, keys,
// order, and handles within [0, limit).
func parseIndexBlock(data []byte, limit uint64) (indexBlock, string) {
	l := len(data)
	if l < indexTrailerLen {
		return indexBlock{}, fmt.Sprintf("index block of %d bytes is shorter than its trailer", l)
	}
	n := uint64(binary.LittleEndian.Uint32(data[l-indexTrailerLen:]))
	if n*4 > uint64(l-indexTrailerLen) {
		return indexBlock{}, fmt.Sprintf("index block: %d entries do not fit in %d bytes", n, l)
	}
	b := indexBlock{data: data, n: int(n), offs: l - indexTrailerLen - 4*int(n), level: int(data[l-1])}
	if b.level < 1 {
		return indexBlock{}, "index block: level 0"
	}
	entries := data[:b.offs]
	o := 0
	var prev []byte
	for i := 0; i < b.n; i++ {
		if int(binary.LittleEndian.Uint32(data[b.offs+4*i:])) != o {
			return indexBlock{}, fmt.Sprintf("index block: entry %d offset does not follow entry %d", i, i-1)
		}
		var kl int
		kl, o = uvarintLen(entries, o, len(entries))
		if o < 0 || kl > len(entries)-o {
			return indexBlock{}, fmt.Sprintf("index block: entry %d: bad key length", i)
		}
		key := entries[o : o+kl]
		o += kl
		if _, err := cell.ParseKey(key); err != nil {
			return indexBlock{}, fmt.Sprintf("index block: entry %d: %v", i, err)
		}
		if prev != nil && cell.Compare(prev, key) > 0 {
			return indexBlock{}, fmt.Sprintf("index block: entry %d sorts before entry %d", i, i-1)
		}
		prev = key
		var h blockHandle
		h.off, o = uvarint(entries, o)
		if o < 0 {
			return indexBlock{}, fmt.Sprintf("index block: entry %d: bad block offset", i)
		}
		h.size, o = uvarint(entries, o)
		if o < 0 {
			return indexBlock{}, fmt.Sprintf("index block: entry %d: bad block size", i)
		}
		if h.size < blockOverhead || h.off > limit || h.size > limit-h.off {
			return indexBlock{}, fmt.Sprintf("index block: entry %d: block at %d of %d bytes outside the file's blocks (end %d)",
				i, h.off, h.size, limit)
		}
	}
	if o != len(entries) {
		return indexBlock{}, fmt.Sprintf("index block: %d stray bytes after the entries", len(entries)-o)
	}
	return b, ""
}

func (b indexBlock) key(i int) []byte {
	o := int(binary.LittleEndian.Uint32(b.data[b.offs+4*i:]))
	kl, o := uvarint(b.data, o)
	return b.data[o : o+int(kl) : o+int(kl)]
}

func (b indexBlock) entry(i int) ([]byte, blockHandle) {
	o := int(binary.LittleEndian.Uint32(b.data[b.offs+4*i:]))
	kl, o := uvarint(b.data, o)
	key := b.data[o : o+int(kl) : o+int(kl)]
	var h blockHandle
	h.off, o = uvarint(b.data, o+int(kl))
	h.size, _ = uvarint(b.data, o)
	return key, h
}

// searchLT returns the largest i whose key sorts before k, or -1.
func (b indexBlock) searchLT(k []byte) int {
	lo, hi := 0, b.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if cell.Compare(b.key(mid), k) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}
