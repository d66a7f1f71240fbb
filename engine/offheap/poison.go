package offheap

import (
	"encoding/binary"
	"unsafe"
)

// PoisonByte is the pattern freed off-heap memory is filled with in builds
// with the invariants tag (0xDB: "dead block").
const PoisonByte byte = 0xDB

const poisonWord = uint64(PoisonByte) * 0x0101010101010101

// Poison fills b with PoisonByte.
func Poison(b []byte) {
	words, head, tail := asWords(b)
	for i := range head {
		head[i] = PoisonByte
	}
	for i := range words {
		words[i] = poisonWord
	}
	for i := range tail {
		tail[i] = PoisonByte
	}
}

// PoisonIntact reports the offset of the first byte of b that no longer holds
// PoisonByte, or -1 if the whole of b is intact.
func PoisonIntact(b []byte) int {
	words, head, tail := asWords(b)
	for i, c := range head {
		if c != PoisonByte {
			return i
		}
	}
	for i, w := range words {
		if w != poisonWord {
			var buf [8]byte
			binary.NativeEndian.PutUint64(buf[:], w)
			for j, c := range buf {
				if c != PoisonByte {
					return len(head) + i*8 + j
				}
			}
		}
	}
	for i, c := range tail {
		if c != PoisonByte {
			return len(head) + len(words)*8 + i
		}
	}
	return -1
}

// asWords splits b into an unaligned head, 8-byte aligned words and a tail.
func asWords(b []byte) (words []uint64, head, tail []byte) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	skip := int((8 - p%8) % 8)
	if skip >= len(b) {
		return nil, b, nil
	}
	head = b[:skip]
	rest := b[skip:]
	n := len(rest) / 8
	if n > 0 {
		words = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(rest))), n)
	}
	return words, head, rest[n*8:]
}
