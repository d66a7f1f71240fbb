package sfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The zstd encoder and decoder are shared: EncodeAll and DecodeAll are
// safe for concurrent use. Frames carry no zstd checksum (blocks have
// their own CRC32C) and always record their content size.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false),
			zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(true))
		if err != nil {
			panic(fmt.Sprintf("sfile: zstd encoder: %v", err)) // only with invalid options
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(maxBlockLen))
		if err != nil {
			panic(fmt.Sprintf("sfile: zstd decoder: %v", err)) // only with invalid options
		}
		return d
	})
)

// compressor compresses data blocks for one writer.
type compressor struct {
	codec Compression
	lz4   lz4.Compressor
	buf   []byte
	gz    *gzip.Writer
	gzOut bytes.Buffer
}

// gzipReaders are reused gzip readers (each holds a DEFLATE window).
var gzipReaders sync.Pool

// compress returns the compressed form of src (valid until the next call)
// and the codec to record, CompressionNone when compression did not
// shrink the block.
func (c *compressor) compress(src []byte) ([]byte, Compression) {
	var out []byte
	switch c.codec {
	case CompressionSnappy:
		c.buf = grow(c.buf, snappy.MaxEncodedLen(len(src)))
		// s2's fast Snappy-compatible encoder: snappy.Encode is the
		// slower "better" mode.
		out = s2.EncodeSnappy(c.buf, src)
	case CompressionLZ4:
		c.buf = grow(c.buf, lz4.CompressBlockBound(len(src)))
		n, err := c.lz4.CompressBlock(src, c.buf)
		if err != nil || n == 0 {
			return src, CompressionNone
		}
		out = c.buf[:n]
	case CompressionZstd:
		c.buf = zstdEncoder().EncodeAll(src, c.buf[:0])
		out = c.buf
	case CompressionGZ:
		c.gzOut.Reset()
		if c.gz == nil {
			c.gz, _ = gzip.NewWriterLevel(&c.gzOut, gzip.DefaultCompression)
		} else {
			c.gz.Reset(&c.gzOut)
		}
		if _, err := c.gz.Write(src); err != nil {
			return src, CompressionNone
		}
		if err := c.gz.Close(); err != nil {
			return src, CompressionNone
		}
		out = c.gzOut.Bytes()
	default:
		return src, CompressionNone
	}
	if len(out) >= len(src) {
		return src, CompressionNone
	}
	return out, c.codec
}

// checkDecodedLen checks what a codec can tell about the decoded length
// before anything is allocated for it.
func checkDecodedLen(codec Compression, src []byte, ulen int) string {
	switch codec {
	case CompressionNone:
		if len(src) != ulen {
			return fmt.Sprintf("uncompressed payload of %d bytes, header says %d", len(src), ulen)
		}
	case CompressionSnappy:
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return fmt.Sprintf("snappy: %v", err)
		}
		if n != ulen {
			return fmt.Sprintf("snappy payload decodes to %d bytes, header says %d", n, ulen)
		}
	case CompressionLZ4:
		// An LZ4 sequence expands at most about 255 times.
		if uint64(ulen) > 255*uint64(len(src))+16 {
			return fmt.Sprintf("lz4 payload of %d bytes cannot decode to %d bytes", len(src), ulen)
		}
	case CompressionZstd:
		var h zstd.Header
		if err := h.Decode(src); err != nil {
			return fmt.Sprintf("zstd: %v", err)
		}
		if !h.HasFCS || h.FrameContentSize != uint64(ulen) {
			return fmt.Sprintf("zstd frame content size %d (present %v), header says %d", h.FrameContentSize, h.HasFCS, ulen)
		}
	case CompressionGZ:
		// gzip's trailer ends with the length it holds (mod 2^32; blocks are smaller).
		if len(src) < 18 {
			return fmt.Sprintf("gzip payload of %d bytes is shorter than gzip's header and trailer", len(src))
		}
		if n := binary.LittleEndian.Uint32(src[len(src)-4:]); n != uint32(ulen) {
			return fmt.Sprintf("gzip payload holds %d bytes, header says %d", n, ulen)
		}
	}
	return ""
}

// decompress decodes src into dst, which has exactly the uncompressed
// length. It returns a reason on failure.
func decompress(codec Compression, src, dst []byte) string {
	switch codec {
	case CompressionNone:
		if len(src) != len(dst) {
			return fmt.Sprintf("uncompressed payload of %d bytes, want %d", len(src), len(dst))
		}
		copy(dst, src)
	case CompressionSnappy:
		if n, err := snappy.DecodedLen(src); err != nil || n != len(dst) {
			return fmt.Sprintf("snappy payload does not decode to %d bytes", len(dst))
		}
		out, err := snappy.Decode(dst, src)
		if err != nil {
			return fmt.Sprintf("snappy: %v", err)
		}
		if len(out) != len(dst) || len(out) > 0 && &out[0] != &dst[0] {
			return fmt.Sprintf("snappy payload decoded to %d bytes, want %d", len(out), len(dst))
		}
	case CompressionLZ4:
		n, err := lz4.UncompressBlock(src, dst)
		if err != nil {
			return fmt.Sprintf("lz4: %v", err)
		}
		if n != len(dst) {
			return fmt.Sprintf("lz4 payload decoded to %d bytes, want %d", n, len(dst))
		}
	case CompressionZstd:
		out, err := zstdDecoder().DecodeAll(src, dst[:0])
		if err != nil {
			return fmt.Sprintf("zstd: %v", err)
		}
		if len(out) != len(dst) || len(out) > 0 && &out[0] != &dst[0] {
			return fmt.Sprintf("zstd payload decoded to %d bytes, want %d", len(out), len(dst))
		}
	case CompressionGZ:
		return gunzip(src, dst)
	default:
		return fmt.Sprintf("unknown compression codec %d", uint8(codec))
	}
	return ""
}

// gunzip decodes one gzip member into dst exactly, checking its CRC-32 (read at its end).
func gunzip(src, dst []byte) string {
	r, _ := gzipReaders.Get().(*gzip.Reader)
	br := bytes.NewReader(src) // a ByteReader: the gzip reader reads no further than its member
	var err error
	if r == nil {
		r, err = gzip.NewReader(br)
	} else {
		err = r.Reset(br)
	}
	if err != nil {
		return fmt.Sprintf("gzip: %v", err)
	}
	defer gzipReaders.Put(r)
	r.Multistream(false)
	if _, err := io.ReadFull(r, dst); err != nil {
		return fmt.Sprintf("gzip payload does not decode to %d bytes: %v", len(dst), err)
	}
	var one [1]byte
	if n, err := r.Read(one[:]); n != 0 || err != io.EOF {
		return fmt.Sprintf("gzip payload decodes to more than %d bytes, or its checksum does not match (%v)", len(dst), err)
	}
	if br.Len() != 0 {
		return fmt.Sprintf("gzip payload has %d bytes after its member", br.Len())
	}
	return ""
}

// grow returns b with length n, reallocating when its capacity is short.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, n+n/8)
	}
	return b[:n]
}
