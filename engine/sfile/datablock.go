package sfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/cellstore/cellstore/engine/cell"
)

// Data block payload (uncompressed):
//
//	entries | restart offsets (u32 LE each) | restart count (u32 LE) | encoding (u8)
//
// Entry layouts by encoding:
//
//	NONE:   keyLen uv | valueLen uv | seq uv | key | value
//	ROW_INDEX_V1: as NONE, with a restart point at each row's first cell (and every
//	        RestartInterval cells within a longer row)
//	PREFIX: shared uv | unshared uv | valueLen uv | seq uv | key[shared:] | value
//	DIFF:   flags u8 | shared uv | unshared uv | [valueLen uv] | [tsDelta zz] |
//	        [type u8] | [seqDelta zz] | column[shared:] | value
//
// (uv: unsigned varint, zz: zigzag varint.) A cell with tags stores its
// tagged value (value, tags, tags length: see cell.Tags) as its value, with
// cell.TaggedFlag set in valueLen. In DIFF the "column" is the key
// without its 9-byte timestamp+type trailer; timestamp, type, value length
// and sequence id are stored only when they differ from the previous
// entry's (flags say which are the same), the timestamp as previous minus
// current and the sequence id as current minus previous. An entry at a
// restart point shares nothing: shared is 0 and, in DIFF, the restart flag
// resets the previous timestamp, type, value length and sequence id to 0.
const (
	blockTrailerLen = 5 // restart count + encoding

	diffSameTS   = 0x01
	diffSameType = 0x02
	diffSameVlen = 0x04
	diffSameSeq  = 0x08
	diffRestart  = 0x10
	diffFlagMask = 0x1f

	keyTrailerLen = 9 // timestamp + type at the end of a key
)

// blockBuilder encodes the cells of one data block.
type blockBuilder struct {
	enc         Encoding
	interval    int
	lastRestart int // the cell number of the last restart point
	buf         []byte
	restarts    []uint32
	n           int
	prevKey     []byte
	ts          int64
	typ         byte
	vlen        int
	seq         uint64
}

func (b *blockBuilder) reset() {
	b.buf = b.buf[:0]
	b.restarts = b.restarts[:0]
	b.n = 0
	b.prevKey = b.prevKey[:0]
}

// size is the payload size if the block were finished now.
func (b *blockBuilder) size() int { return len(b.buf) + 4*len(b.restarts) + blockTrailerLen }

func (b *blockBuilder) empty() bool { return b.n == 0 }

// add appends a cell; key is well-formed. value is the stored value and
// vlField its length field (see cell.StoredValue).
func (b *blockBuilder) add(key, value []byte, vlField uint32, seq uint64) {
	restart := b.n%b.interval == 0
	if b.enc == EncodingRowIndex {
		// At each row's first cell, and every interval cells within a long row.
		restart = b.n == 0 || b.n-b.lastRestart >= b.interval || !bytes.Equal(cell.Key(key).Row(), cell.Key(b.prevKey).Row())
	}
	if restart {
		b.restarts = append(b.restarts, uint32(len(b.buf)))
		b.lastRestart = b.n
	}
	switch b.enc {
	case EncodingNone, EncodingRowIndex:
		b.buf = binary.AppendUvarint(b.buf, uint64(len(key)))
		b.buf = binary.AppendUvarint(b.buf, uint64(vlField))
		b.buf = binary.AppendUvarint(b.buf, seq)
		b.buf = append(b.buf, key...)
		if b.enc == EncodingRowIndex {
			b.prevKey = append(b.prevKey[:0], key...)
		}
	case EncodingPrefix:
		shared := 0
		if !restart {
			shared = commonPrefix(b.prevKey, key)
		}
		b.buf = binary.AppendUvarint(b.buf, uint64(shared))
		b.buf = binary.AppendUvarint(b.buf, uint64(len(key)-shared))
		b.buf = binary.AppendUvarint(b.buf, uint64(vlField))
		b.buf = binary.AppendUvarint(b.buf, seq)
		b.buf = append(b.buf, key[shared:]...)
		b.prevKey = append(b.prevKey[:0], key...)
	case EncodingDiff:
		col := key[:len(key)-keyTrailerLen]
		ts := int64(binary.BigEndian.Uint64(key[len(col):]))
		typ := key[len(key)-1]
		var flags byte
		shared := 0
		if restart {
			flags |= diffRestart
			b.ts, b.typ, b.vlen, b.seq = 0, 0, 0, 0
		} else {
			shared = commonPrefix(b.prevKey[:len(b.prevKey)-keyTrailerLen], col)
		}
		if ts == b.ts {
			flags |= diffSameTS
		}
		if typ == b.typ {
			flags |= diffSameType
		}
		if int(vlField) == b.vlen {
			flags |= diffSameVlen
		}
		if seq == b.seq {
			flags |= diffSameSeq
		}
		b.buf = append(b.buf, flags)
		b.buf = binary.AppendUvarint(b.buf, uint64(shared))
		b.buf = binary.AppendUvarint(b.buf, uint64(len(col)-shared))
		if flags&diffSameVlen == 0 {
			b.buf = binary.AppendUvarint(b.buf, uint64(vlField))
		}
		if flags&diffSameTS == 0 {
			b.buf = binary.AppendUvarint(b.buf, zigzag(int64(uint64(b.ts)-uint64(ts))))
		}
		if flags&diffSameType == 0 {
			b.buf = append(b.buf, typ)
		}
		if flags&diffSameSeq == 0 {
			b.buf = binary.AppendUvarint(b.buf, zigzag(int64(seq-b.seq)))
		}
		b.buf = append(b.buf, col[shared:]...)
		b.ts, b.typ, b.vlen, b.seq = ts, typ, int(vlField), seq
		b.prevKey = append(b.prevKey[:0], key...)
	}
	b.buf = append(b.buf, value...)
	b.n++
}

// entryLayout is how an encoding lays its entries out: ROW_INDEX_V1's are NONE's (only its
// restart points differ, and readers take restart points as they come).
func entryLayout(e Encoding) Encoding {
	if e == EncodingRowIndex {
		return EncodingNone
	}
	return e
}

// finish appends the restart array and trailer and returns the payload,
// valid until reset.
func (b *blockBuilder) finish() []byte {
	for _, r := range b.restarts {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.restarts)))
	return append(b.buf, byte(b.enc))
}

// commonPrefix returns the length of the common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
		if x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for ; i < n && a[i] == b[i]; i++ {
	}
	return i
}

// blockIter decodes entries of a validated data block. Decoding assumes
// the block passed validateDataBlock: it does not re-check bounds beyond
// what Go does.
type blockIter struct {
	data      []byte
	enc       Encoding
	end       int // end of the entries (start of the restart array)
	nRestarts int

	off, next int    // current entry and the one after it
	key       []byte // current key: into data (NONE) or keyBuf
	val       []byte
	tags      []byte // nil without
	seq       uint64

	keyBuf []byte // reconstructed key (PREFIX, DIFF)
	ts     int64  // DIFF state of the current entry
	typ    byte
	vlen   int // value length field, with cell.TaggedFlag
}

// init points the iterator at a validated block payload.
func (it *blockIter) init(data []byte) {
	n := len(data)
	it.data = data
	it.enc = entryLayout(Encoding(data[n-1]))
	it.nRestarts = int(binary.LittleEndian.Uint32(data[n-blockTrailerLen:]))
	it.end = n - blockTrailerLen - 4*it.nRestarts
	it.off, it.next = 0, 0
}

func (it *blockIter) restart(i int) int {
	return int(binary.LittleEndian.Uint32(it.data[it.end+4*i:]))
}

// uv decodes a varint of a validated block (fast path inlined).
func uv(d []byte, o int) (uint64, int) {
	if c := d[o]; c < 0x80 {
		return uint64(c), o + 1
	}
	return uvSlow(d, o)
}

//go:noinline
func uvSlow(d []byte, o int) (uint64, int) {
	var x uint64
	for s := uint(0); s < 64; s += 7 {
		c := d[o]
		o++
		if c < 0x80 {
			return x | uint64(c)<<s, o
		}
		x |= uint64(c&0x7f) << s
	}
	return x, o
}

// decode decodes the entry at o. For PREFIX and DIFF entries that are not
// restart points, the iterator must hold the previous entry.
func (it *blockIter) decode(o int) {
	switch it.enc {
	case EncodingNone:
		it.decodeNone(o)
	case EncodingPrefix:
		it.decodePrefix(o)
	default:
		it.decodeDiff(o)
	}
}

func (it *blockIter) decodeNone(o int) {
	d := it.data
	it.off = o
	kl, o := uv(d, o)
	vl, o := uv(d, o)
	it.seq, o = uv(d, o)
	ke := o + int(kl)
	it.key = d[o:ke:ke]
	ve := ke + int(vl&^cell.TaggedFlag)
	it.setValue(d[ke:ve:ve], vl&cell.TaggedFlag != 0)
	it.next = ve
}

func (it *blockIter) decodePrefix(o int) {
	d := it.data
	it.off = o
	shared, o := uv(d, o)
	unshared, o := uv(d, o)
	vl, o := uv(d, o)
	it.seq, o = uv(d, o)
	ke := o + int(unshared)
	n := int(shared) + int(unshared)
	if cap(it.keyBuf) < n {
		it.keyBuf = append(it.keyBuf[:shared], make([]byte, n-int(shared)+64)...)
	}
	kb := it.keyBuf[:n]
	copy(kb[shared:], d[o:ke])
	it.keyBuf = kb
	it.key = kb[:n:n]
	ve := ke + int(vl&^cell.TaggedFlag)
	it.setValue(d[ke:ve:ve], vl&cell.TaggedFlag != 0)
	it.next = ve
}

func (it *blockIter) decodeDiff(o int) {
	d := it.data
	it.off = o
	flags := d[o]
	o++
	if flags&diffRestart != 0 {
		it.ts, it.typ, it.vlen, it.seq = 0, 0, 0, 0
	}
	var u uint64
	shared, o := uv(d, o)
	unshared, o := uv(d, o)
	if flags&diffSameVlen == 0 {
		u, o = uv(d, o)
		it.vlen = int(u)
	}
	if flags&diffSameTS == 0 {
		u, o = uv(d, o)
		it.ts = int64(uint64(it.ts) - uint64(unzigzag(u)))
	}
	if flags&diffSameType == 0 {
		it.typ = d[o]
		o++
	}
	if flags&diffSameSeq == 0 {
		u, o = uv(d, o)
		it.seq += uint64(unzigzag(u))
	}
	ke := o + int(unshared)
	n := int(shared) + int(unshared) + keyTrailerLen
	if cap(it.keyBuf) < n {
		it.keyBuf = append(it.keyBuf[:shared], make([]byte, n-int(shared)+64)...)
	}
	kb := it.keyBuf[:n]
	copy(kb[shared:], d[o:ke])
	binary.BigEndian.PutUint64(kb[n-keyTrailerLen:], uint64(it.ts))
	kb[n-1] = it.typ
	it.keyBuf = kb
	it.key = kb[:n:n]
	ve := ke + it.vlen&^cell.TaggedFlag
	it.setValue(d[ke:ve:ve], it.vlen&cell.TaggedFlag != 0)
	it.next = ve
}

// setValue sets the current value (and tags) from a stored value.
func (it *blockIter) setValue(v []byte, tagged bool) {
	if tagged {
		it.val, it.tags = cell.SplitTagged(v)
		return
	}
	it.val, it.tags = v, nil
}

// checkValue is setValue for a block being validated: a tagged value must
// be well-formed.
func (it *blockIter) checkValue(v []byte, tagged bool) string {
	if tagged {
		if _, _, err := cell.ParseTagged(v); err != nil {
			return err.Error()
		}
	}
	it.setValue(v, tagged)
	return ""
}

// valueLenField reads a value length field at o; it returns the stored
// length and whether it is a tagged value (o < 0: malformed).
func valueLenField(d []byte, o int) (int, bool, int) {
	f, o := uvarint(d, o)
	if o < 0 || f > 1<<32-1 {
		return 0, false, -1
	}
	return int(f &^ cell.TaggedFlag), f&cell.TaggedFlag != 0, o
}

// validator holds scratch buffers for validateDataBlock.
type validator struct {
	it   blockIter
	prev []byte
}

// validateDataBlock checks a data block payload completely: structure,
// restart points on entry boundaries, every key well-formed and a stored
// cell type, keys in store order. It returns "" for a valid block. Blocks
// are validated once when read from the file; cached blocks are trusted.
func validateDataBlock(data []byte, v *validator) string {
	n := len(data)
	if n < blockTrailerLen {
		return fmt.Sprintf("data block of %d bytes is shorter than its trailer", n)
	}
	enc := Encoding(data[n-1])
	if enc >= numEncodings {
		return fmt.Sprintf("data block: unknown encoding %d", uint8(enc))
	}
	nr := uint64(binary.LittleEndian.Uint32(data[n-blockTrailerLen:]))
	if nr == 0 {
		return "data block: no restart points"
	}
	if nr*4 > uint64(n-blockTrailerLen) {
		return fmt.Sprintf("data block: %d restart points do not fit in %d bytes", nr, n)
	}
	it := &v.it
	it.data = data
	it.enc = entryLayout(enc)
	it.nRestarts = int(nr)
	it.end = n - blockTrailerLen - 4*int(nr)
	if it.end == 0 {
		return "data block: no cells"
	}
	prevR := -1
	for i := 0; i < it.nRestarts; i++ {
		r := it.restart(i)
		if r <= prevR || r >= it.end || i == 0 && r != 0 {
			return fmt.Sprintf("data block: restart point %d at offset %d out of order or out of range", i, r)
		}
		prevR = r
	}
	v.prev = v.prev[:0]
	var prevSeq uint64
	ri := 0
	for o, count := 0, 0; o < it.end; count++ {
		isRestart := false
		if ri < it.nRestarts {
			r := it.restart(ri)
			if r < o {
				return fmt.Sprintf("data block: restart point %d at offset %d is not an entry boundary", ri, r)
			}
			if r == o {
				isRestart = true
				ri++
			}
		}
		next, reason := it.decodeChecked(o, isRestart, len(v.prev))
		if reason != "" {
			return fmt.Sprintf("data block: cell %d at offset %d: %s", count, o, reason)
		}
		k, err := cell.ParseKey(it.key)
		if err != nil {
			return fmt.Sprintf("data block: cell %d at offset %d: %v", count, o, err)
		}
		if !k.Type().IsCellType() {
			return fmt.Sprintf("data block: cell %d at offset %d: type %d is not a cell type", count, o, uint8(k.Type()))
		}
		if count > 0 {
			if c := cell.CompareWithSeq(v.prev, prevSeq, it.key, it.seq); c > 0 {
				return fmt.Sprintf("data block: cell %d at offset %d sorts before the previous cell", count, o)
			}
		}
		v.prev = append(v.prev[:0], it.key...)
		prevSeq = it.seq
		o = next
	}
	if ri != it.nRestarts {
		return fmt.Sprintf("data block: restart point %d is not an entry boundary", ri)
	}
	return ""
}

// decodeChecked decodes the entry at o with bounds checks; prevLen is the
// length of the previous key (0 at the first entry). It returns the offset
// of the next entry or a reason.
func (it *blockIter) decodeChecked(o int, isRestart bool, prevLen int) (int, string) {
	d := it.data[:it.end]
	it.off = o
	switch it.enc {
	case EncodingNone:
		var kl, vl int
		var tagged bool
		kl, o = uvarintLen(d, o, len(d))
		if o < 0 {
			return 0, "bad key length"
		}
		vl, tagged, o = valueLenField(d, o)
		if o < 0 {
			return 0, "bad value length"
		}
		it.seq, o = uvarint(d, o)
		if o < 0 {
			return 0, "bad sequence id"
		}
		if kl > len(d)-o || vl > len(d)-o-kl {
			return 0, "cell overruns the block"
		}
		it.key = d[o : o+kl : o+kl]
		if msg := it.checkValue(d[o+kl:o+kl+vl:o+kl+vl], tagged); msg != "" {
			return 0, msg
		}
		return o + kl + vl, ""
	case EncodingPrefix:
		var shared, unshared, vl int
		var tagged bool
		shared, o = uvarintLen(d, o, prevLen)
		if o < 0 {
			return 0, "bad shared prefix length"
		}
		if isRestart && shared != 0 {
			return 0, "restart point shares a prefix"
		}
		unshared, o = uvarintLen(d, o, len(d))
		if o < 0 {
			return 0, "bad key suffix length"
		}
		vl, tagged, o = valueLenField(d, o)
		if o < 0 {
			return 0, "bad value length"
		}
		it.seq, o = uvarint(d, o)
		if o < 0 {
			return 0, "bad sequence id"
		}
		if unshared > len(d)-o || vl > len(d)-o-unshared {
			return 0, "cell overruns the block"
		}
		it.keyBuf = append(it.keyBuf[:shared], d[o:o+unshared]...)
		it.key = it.keyBuf[:len(it.keyBuf):len(it.keyBuf)]
		o += unshared
		if msg := it.checkValue(d[o:o+vl:o+vl], tagged); msg != "" {
			return 0, msg
		}
		return o + vl, ""
	case EncodingDiff:
		if o >= len(d) {
			return 0, "truncated flags"
		}
		flags := d[o]
		o++
		if flags&^diffFlagMask != 0 {
			return 0, fmt.Sprintf("unknown flags %#x", flags)
		}
		if isRestart && flags&diffRestart == 0 {
			return 0, "restart point without the restart flag"
		}
		if flags&diffRestart != 0 {
			it.ts, it.typ, it.vlen, it.seq = 0, 0, 0, 0
			prevLen = 0
		}
		prevCol := max(prevLen-keyTrailerLen, 0)
		var shared, unshared int
		shared, o = uvarintLen(d, o, prevCol)
		if o < 0 {
			return 0, "bad shared prefix length"
		}
		unshared, o = uvarintLen(d, o, len(d))
		if o < 0 {
			return 0, "bad key suffix length"
		}
		if flags&diffSameVlen == 0 {
			var f uint64
			f, o = uvarint(d, o)
			if o < 0 || f > 1<<32-1 {
				return 0, "bad value length"
			}
			it.vlen = int(f)
		}
		vlen, tagged := it.vlen&^cell.TaggedFlag, it.vlen&cell.TaggedFlag != 0
		if flags&diffSameTS == 0 {
			var u uint64
			u, o = uvarint(d, o)
			if o < 0 {
				return 0, "bad timestamp delta"
			}
			it.ts = int64(uint64(it.ts) - uint64(unzigzag(u)))
		}
		if flags&diffSameType == 0 {
			if o >= len(d) {
				return 0, "truncated type"
			}
			it.typ = d[o]
			o++
		}
		if flags&diffSameSeq == 0 {
			var u uint64
			u, o = uvarint(d, o)
			if o < 0 {
				return 0, "bad sequence id delta"
			}
			it.seq += uint64(unzigzag(u))
		}
		if unshared > len(d)-o || vlen > len(d)-o-unshared {
			return 0, "cell overruns the block"
		}
		kb := append(it.keyBuf[:shared], d[o:o+unshared]...)
		kb = binary.BigEndian.AppendUint64(kb, uint64(it.ts))
		kb = append(kb, it.typ)
		it.keyBuf = kb
		it.key = kb[:len(kb):len(kb)]
		o += unshared
		if msg := it.checkValue(d[o:o+vlen:o+vlen], tagged); msg != "" {
			return 0, msg
		}
		return o + vlen, ""
	}
	return 0, "unknown encoding"
}
