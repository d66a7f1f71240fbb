package sfile

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/cellstore/cellstore/engine/cell"
)

// Bloom filters are cache-line blocked: a key's 64-bit XXH64 hash h picks
// one 512-bit line of a chunk with its low 32 bits (line = lo32(h) *
// lines >> 32) and sets k bits in that line: for i = 1..k, bit i is the
// top 9 bits of h * 0x9E3779B97F4A7C15^i (mod 2^64); bit b of a line is
// bit b%8 of byte b/8. A lookup touches one cache line.
//
// Bloom keys: ROW hashes the row; ROWCOL hashes the key's column part
// (row length u16 BE | row | family length u8 | family | qualifier, the
// encoded key without its timestamp and type). Each distinct row (or
// column) is added once.
const (
	bloomLineBits  = 512
	bloomLineBytes = bloomLineBits / 8
	bloomHashXXH64 = 1 // hash/probe scheme version in the bloom index
	bloomMaxProbes = 30
	// bloomProbeMul generates the probes: p_i = h * m^i (mod 2^64), bit i
	// = the top 9 bits of p_i.
	bloomProbeMul = 0x9E3779B97F4A7C15
)

// bloomParams chooses bits per key and probes for a target false-positive
// rate, from the blocked filter's model: keys per line are Poisson with
// mean 512/bitsPerKey, and a line holding j keys answers a false positive
// with probability (1 - (1-1/512)^(k*j))^k.
func bloomParams(fp float64) (bitsPerKey float64, k int) {
	for bpk := 2.0; bpk < 100; bpk += 0.25 {
		best, bestK := 1.0, 1
		for k := 1; k <= bloomMaxProbes; k++ {
			if p := blockedBloomFP(bpk, k); p < best {
				best, bestK = p, k
			}
		}
		if best <= fp {
			return bpk, bestK
		}
	}
	return 100, bloomMaxProbes
}

func blockedBloomFP(bitsPerKey float64, k int) float64 {
	lambda := bloomLineBits / bitsPerKey
	p := math.Exp(-lambda)
	sum := 0.0
	jmax := int(lambda + 12*math.Sqrt(lambda) + 30)
	for j := 0; j <= jmax; j++ {
		if j > 0 {
			p *= lambda / float64(j)
		}
		fill := 1 - math.Pow(1-1.0/bloomLineBits, float64(k*j))
		sum += p * math.Pow(fill, float64(k))
	}
	return sum
}

// bloomLines returns the number of lines for n keys.
func bloomLines(n int, bitsPerKey float64) int {
	return max(1, int(math.Ceil(float64(n)*bitsPerKey/bloomLineBits)))
}

// buildBloomChunk returns the bit array for the hashes.
func buildBloomChunk(hashes []uint64, bitsPerKey float64, k int) []byte {
	lines := bloomLines(len(hashes), bitsPerKey)
	b := make([]byte, lines*bloomLineBytes)
	for _, h := range hashes {
		line := b[bloomLine(h, lines)*bloomLineBytes:][:bloomLineBytes]
		p := h
		for i := 0; i < k; i++ {
			p *= bloomProbeMul
			bit := p >> (64 - 9)
			line[bit>>3] |= 1 << (bit & 7)
		}
	}
	return b
}

func bloomLine(h uint64, lines int) int {
	return int(uint64(uint32(h)) * uint64(lines) >> 32)
}

// bloomChunkMayContain tests a hash against a chunk (len a multiple of
// 64, at least 64: checked when the chunk is read).
func bloomChunkMayContain(chunk []byte, h uint64, k int) bool {
	lines := len(chunk) / bloomLineBytes
	line := chunk[bloomLine(h, lines)*bloomLineBytes:][:bloomLineBytes]
	p := h
	for i := 0; i < k; i++ {
		p *= bloomProbeMul
		bit := p >> (64 - 9)
		if line[bit>>3]&(1<<(bit&7)) == 0 {
			return false
		}
	}
	return true
}

func rowBloomHash(row []byte) uint64 { return xxhash.Sum64(row) }

// colBloomHash hashes the column part of an encoded key.
func colBloomHash(key []byte) uint64 { return xxhash.Sum64(key[:len(key)-keyTrailerLen]) }

// Bloom index payload:
//
//	hash scheme u8 (1) | bloom type u8 | probes u8 | total keys uv | chunk count uv |
//	chunks: firstKeyLen uv | firstKey | offset uv | size uv | keys uv
//
// A chunk's first key is an encoded seek key: FirstOnRow(row) for ROW,
// FirstOnColumn(row, family, qualifier) for ROWCOL; a lookup uses the last
// chunk whose first key sorts at or before the probe's.
type bloomChunkRef struct {
	firstKey []byte
	h        blockHandle
	keys     uint64
}

type bloomIndex struct {
	typ       BloomType
	k         int
	totalKeys uint64
	chunks    []bloomChunkRef
}

func (bi *bloomIndex) encode() []byte {
	b := []byte{bloomHashXXH64, byte(bi.typ), byte(bi.k)}
	b = binary.AppendUvarint(b, bi.totalKeys)
	b = binary.AppendUvarint(b, uint64(len(bi.chunks)))
	for _, c := range bi.chunks {
		b = binary.AppendUvarint(b, uint64(len(c.firstKey)))
		b = append(b, c.firstKey...)
		b = binary.AppendUvarint(b, c.h.off)
		b = binary.AppendUvarint(b, c.h.size)
		b = binary.AppendUvarint(b, c.keys)
	}
	return b
}

// decodeBloomIndex parses and checks a bloom index payload; chunk handles
// must lie within [0, limit). The keys alias b.
func decodeBloomIndex(b []byte, limit uint64) (bloomIndex, string) {
	var bi bloomIndex
	if len(b) < 3 {
		return bi, "bloom index: truncated header"
	}
	if b[0] != bloomHashXXH64 {
		return bi, fmt.Sprintf("bloom index: unknown hash scheme %d", b[0])
	}
	bi.typ, bi.k = BloomType(b[1]), int(b[2])
	if bi.typ == BloomNone || bi.typ >= numBloomTypes {
		return bi, fmt.Sprintf("bloom index: bad bloom type %d", b[1])
	}
	if bi.k < 1 || bi.k > bloomMaxProbes {
		return bi, fmt.Sprintf("bloom index: %d probes", bi.k)
	}
	o := 3
	bi.totalKeys, o = uvarint(b, o)
	if o < 0 {
		return bi, "bloom index: bad key count"
	}
	var n int
	n, o = uvarintLen(b, o, len(b))
	if o < 0 {
		return bi, "bloom index: bad chunk count"
	}
	bi.chunks = make([]bloomChunkRef, 0, n)
	for i := 0; i < n; i++ {
		var c bloomChunkRef
		var kl int
		kl, o = uvarintLen(b, o, len(b))
		if o < 0 || kl > len(b)-o {
			return bi, fmt.Sprintf("bloom index: chunk %d: bad key length", i)
		}
		c.firstKey = b[o : o+kl : o+kl]
		o += kl
		if _, err := cell.ParseKey(c.firstKey); err != nil {
			return bi, fmt.Sprintf("bloom index: chunk %d: %v", i, err)
		}
		if i > 0 && cell.Compare(bi.chunks[i-1].firstKey, c.firstKey) >= 0 {
			return bi, fmt.Sprintf("bloom index: chunk %d out of order", i)
		}
		c.h.off, o = uvarint(b, o)
		if o >= 0 {
			c.h.size, o = uvarint(b, o)
		}
		if o >= 0 {
			c.keys, o = uvarint(b, o)
		}
		if o < 0 {
			return bi, fmt.Sprintf("bloom index: chunk %d: truncated", i)
		}
		if c.h.size < blockOverhead+bloomLineBytes || c.h.off > limit || c.h.size > limit-c.h.off {
			return bi, fmt.Sprintf("bloom index: chunk %d at %d of %d bytes outside the file's blocks", i, c.h.off, c.h.size)
		}
		bi.chunks = append(bi.chunks, c)
	}
	if o != len(b) {
		return bi, fmt.Sprintf("bloom index: %d trailing bytes", len(b)-o)
	}
	return bi, ""
}

// chunkFor returns the index of the chunk that would hold probe (an
// encoded seek key), or -1.
func (bi *bloomIndex) chunkFor(probe []byte) int {
	lo, hi := 0, len(bi.chunks)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if cell.Compare(bi.chunks[mid].firstKey, probe) <= 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}
