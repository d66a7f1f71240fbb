package sfile

import (
	"bytes"
	"strings"
	"testing"
)

// A GZ block decodes to exactly its length, and a payload that holds something else — another
// length, a flipped bit (gzip's CRC-32), trailing bytes — is refused with a reason, never a panic.
func TestGZPayloadChecks(t *testing.T) {
	src := bytes.Repeat([]byte("cellstore gz block "), 200)
	c := compressor{codec: CompressionGZ}
	payload, codec := c.compress(src)
	if codec != CompressionGZ || len(payload) >= len(src) {
		t.Fatalf("compress: codec %v, %d bytes of %d", codec, len(payload), len(src))
	}
	payload = bytes.Clone(payload)
	if why := checkDecodedLen(CompressionGZ, payload, len(src)); why != "" {
		t.Fatal(why)
	}
	dst := make([]byte, len(src))
	if why := decompress(CompressionGZ, payload, dst); why != "" || !bytes.Equal(dst, src) {
		t.Fatalf("decompress: %q", why)
	}
	// The compressor is reused: a second block comes out the same.
	again, _ := c.compress(src)
	if !bytes.Equal(again, payload) {
		t.Fatal("a reused compressor wrote another payload")
	}
	for name, tc := range map[string]struct {
		payload []byte
		ulen    int
	}{
		"length":   {payload, len(src) + 1},
		"short":    {payload[:10], len(src)},
		"trailing": {append(bytes.Clone(payload), payload...), len(src)},
		"bit":      {func() []byte { p := bytes.Clone(payload); p[len(p)/2] ^= 0x10; return p }(), len(src)},
		"crc":      {func() []byte { p := bytes.Clone(payload); p[len(p)-6] ^= 1; return p }(), len(src)},
	} {
		why := checkDecodedLen(CompressionGZ, tc.payload, tc.ulen)
		if why == "" {
			why = decompress(CompressionGZ, tc.payload, make([]byte, tc.ulen))
		}
		if why == "" || !strings.Contains(why, "gzip") {
			t.Errorf("%s: accepted (%q)", name, why)
		}
	}
}
