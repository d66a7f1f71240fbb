package hbase

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cellstore/cellstore/engine/cell"
)

// HBase's RPC framing (what the stock client's NettyRpcConnection writes and reads):
//
//	connection: "HBas" | version 0 | auth method (0x50 SIMPLE)
//	            length (4, big-endian) | ConnectionHeader
//	call:       length (4) | varint-delimited RequestHeader | varint-delimited request | cell block
//	answer:     length (4) | varint-delimited ResponseHeader | varint-delimited response | cell block
//
// or, before any of that, the connection-registry preamble "Regist", answered with one
// length-prefixed ResponseHeader and GetConnectionRegistryResponse (the cluster id) before the
// client closes. Cell blocks use KeyValueCodec: per cell its KeyValue's length (4) then the
// KeyValue (key length, value length, key, value: the layout engine/cell keeps, without tags).

var (
	connPreamble     = []byte("HBas")
	registryPreamble = []byte("Regist")
	securityPreamble = []byte("Securi")
)

// Auth method bytes of the connection preamble.
const (
	authSimple   = 0x50
	authKerberos = 0x51
	authDigest   = 0x52
)

// errMalformed marks requests that break the framing: the connection cannot continue.
var errMalformed = errors.New("malformed HBase RPC")

// readFrame reads one length-prefixed frame into buf (grown as needed), refusing one over max.
func readFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", errMalformed, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// splitDelimited takes one varint-delimited message off b.
func splitDelimited(b []byte) (msg, rest []byte, err error) {
	n, used := protowire.ConsumeVarint(b)
	if used < 0 || n > uint64(len(b)-used) {
		return nil, nil, fmt.Errorf("%w: a delimited message overruns its frame", errMalformed)
	}
	return b[used : used+int(n)], b[used+int(n):], nil
}

// appendDelimited appends a varint-delimited message.
func appendDelimited(dst, msg []byte) []byte {
	dst = protowire.AppendVarint(dst, uint64(len(msg)))
	return append(dst, msg...)
}

// appendCell appends one cell to a KeyValueCodec cell block, without its tags.
func appendCell(dst []byte, kv cell.KeyValue) []byte {
	if kv.Tags() == nil {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(kv)))
		return append(dst, kv...)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = cell.AppendKeyValueFromKey(dst, kv.Key(), kv.Value())
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
