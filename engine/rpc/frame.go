package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Preamble opens every connection: "CSRP" and the protocol version.
var Preamble = [5]byte{'C', 'S', 'R', 'P', 1}

// DefaultMaxFrame bounds a frame (header, message and cell block) unless the options say otherwise.
const DefaultMaxFrame = 256 << 20

// ErrFrameTooLarge is returned for a frame whose declared length exceeds the limit.
var ErrFrameTooLarge = errors.New("rpc: frame too large")

// header is a RequestHeader or ResponseHeader, encoded and decoded by hand (protobuf wire format,
// field numbers as in client.proto) so the hot path allocates nothing.
type header struct {
	callID    uint64
	method    uint32
	timeoutMS uint32
	errBytes  []byte // ResponseHeader.error, still encoded
}

const (
	fieldCallID    = 1
	fieldMethod    = 2 // RequestHeader
	fieldTimeoutMS = 3 // RequestHeader
	fieldError     = 2 // ResponseHeader
)

func appendRequestHeader(b []byte, h *header) []byte {
	b = protowire.AppendTag(b, fieldCallID, protowire.VarintType)
	b = protowire.AppendVarint(b, h.callID)
	b = protowire.AppendTag(b, fieldMethod, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.method))
	if h.timeoutMS != 0 {
		b = protowire.AppendTag(b, fieldTimeoutMS, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(h.timeoutMS))
	}
	return b
}

func appendResponseHeader(b []byte, callID uint64, errDetail []byte) []byte {
	b = protowire.AppendTag(b, fieldCallID, protowire.VarintType)
	b = protowire.AppendVarint(b, callID)
	if errDetail != nil {
		b = protowire.AppendTag(b, fieldError, protowire.BytesType)
		b = protowire.AppendBytes(b, errDetail)
	}
	return b
}

// parseHeader decodes either header kind; request says which field 2 means.
func parseHeader(b []byte, request bool) (header, error) {
	var h header
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return h, fmt.Errorf("rpc: bad header: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == fieldCallID && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, fmt.Errorf("rpc: bad call id: %w", protowire.ParseError(n))
			}
			h.callID, b = v, b[n:]
		case request && num == fieldMethod && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, fmt.Errorf("rpc: bad method: %w", protowire.ParseError(n))
			}
			h.method, b = uint32(v), b[n:]
		case request && num == fieldTimeoutMS && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, fmt.Errorf("rpc: bad timeout: %w", protowire.ParseError(n))
			}
			h.timeoutMS, b = uint32(v), b[n:]
		case !request && num == fieldError && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return h, fmt.Errorf("rpc: bad error detail: %w", protowire.ParseError(n))
			}
			h.errBytes, b = v, b[n:]
		default: // unknown fields are skipped, as protobuf does
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return h, fmt.Errorf("rpc: bad header field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return h, nil
}

// frame is a decoded frame: slices into its buffer.
type frame struct {
	header []byte
	msg    []byte
	cells  []byte
}

// splitFrame splits the body of a frame (everything after the length) into its parts.
func splitFrame(b []byte) (frame, error) {
	hl, n := binary.Uvarint(b)
	if n <= 0 || hl > uint64(len(b)-n) {
		return frame{}, errors.New("rpc: malformed frame: bad header length")
	}
	f := frame{header: b[n : n+int(hl)]}
	b = b[n+int(hl):]
	ml, n := binary.Uvarint(b)
	if n <= 0 || ml > uint64(len(b)-n) {
		return frame{}, errors.New("rpc: malformed frame: bad message length")
	}
	f.msg = b[n : n+int(ml)]
	f.cells = b[n+int(ml):]
	return f, nil
}

// appendFrame appends a whole frame: header bytes, the marshalled message and the cell blocks.
func appendFrame(b []byte, hdr []byte, msg proto.Message, rawMsg []byte, cells ...[]byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.AppendUvarint(b, uint64(len(hdr)))
	b = append(b, hdr...)
	if msg != nil {
		size := proto.Size(msg)
		b = binary.AppendUvarint(b, uint64(size))
		var err error
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, msg); err != nil {
			return b[:start], err
		}
	} else {
		b = binary.AppendUvarint(b, uint64(len(rawMsg)))
		b = append(b, rawMsg...)
	}
	for _, c := range cells {
		b = append(b, c...)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b, nil
}

// readFrame reads one frame body into buf (grown as needed) and returns it.
func readFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return buf, err
	}
	n := int(binary.BigEndian.Uint32(lenBuf[:]))
	if n > max || n < 0 {
		return buf, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, max)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	return buf, nil
}

// marshalError encodes an ErrorDetail for a response header.
func marshalError(d *pb.ErrorDetail) []byte {
	b, err := proto.Marshal(d.WithValidUTF8())
	if err != nil { // cannot happen for a well-formed message; never send an empty error
		b, _ = proto.Marshal(&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_UNKNOWN, Message: err.Error()})
	}
	if b == nil {
		b = []byte{}
	}
	return b
}
