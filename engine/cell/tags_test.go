package cell

import (
	"bytes"
	"errors"
	"testing"
)

func TestTaggedKeyValue(t *testing.T) {
	key := AppendKey(nil, []byte("row"), []byte("f"), []byte("q"), 1000, Put)
	tags := AppendTTLTag(AppendTag(nil, 99, []byte("other")), 5000)
	kv := KeyValue(AppendTaggedKeyValue(nil, key, []byte("value"), tags))
	got, n, err := ParseKeyValue(kv)
	if err != nil || n != len(kv) {
		t.Fatalf("ParseKeyValue: %v, %d of %d bytes", err, n, len(kv))
	}
	if string(got.Value()) != "value" || !bytes.Equal(got.Tags(), tags) || got.ValueLen() != 5 || got.Len() != len(kv) {
		t.Fatalf("value %q tags %x (want %x) value len %d len %d", got.Value(), got.Tags(), tags, got.ValueLen(), got.Len())
	}
	if ttl, ok := TTLOf(got.Tags()); !ok || ttl != 5000 {
		t.Fatalf("TTLOf = %d, %v", ttl, ok)
	}
	c := got.Decode()
	if re := c.AppendKeyValue(nil); !bytes.Equal(re, kv) || c.EncodedLen() != len(kv) {
		t.Fatalf("re-encoding differs: %x vs %x (EncodedLen %d)", re, kv, c.EncodedLen())
	}
	// Without tags the encoding is the plain one.
	plain := AppendTaggedKeyValue(nil, key, []byte("value"), nil)
	if !bytes.Equal(plain, AppendKeyValueFromKey(nil, key, []byte("value"))) || KeyValue(plain).Tags() != nil {
		t.Fatal("untagged cell encoded differently")
	}

	// Expiry: ts + ttl < now, as HBase.
	for _, tc := range []struct {
		now  int64
		want bool
	}{{5999, false}, {6000, false}, {6001, true}} {
		if got := TTLExpired(tags, 1000, tc.now); got != tc.want {
			t.Errorf("TTLExpired(ts 1000, ttl 5000, now %d) = %v", tc.now, got)
		}
	}
	if TTLExpired(nil, 0, 1<<62) {
		t.Error("a cell without a TTL tag expired")
	}

	// Malformed tags are errors, never panics.
	bad := map[string][]byte{
		"truncated tag":      {0, 5, 8, 1},
		"short ttl":          AppendTag(nil, TagTTL, []byte{1, 2, 3}),
		"zero-length tag":    {0, 0},
		"one byte left over": append(AppendTTLTag(nil, 1), 7),
	}
	for name, tg := range bad {
		if err := ParseTags(tg); !errors.Is(err, ErrBadTags) {
			t.Errorf("%s: ParseTags = %v", name, err)
		}
		b := AppendTaggedKeyValue(nil, key, nil, tg)
		if _, _, err := ParseKeyValue(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseKeyValue = %v", name, err)
		}
	}
	// A tags length beyond the value, and a flagged value without tags.
	b := AppendTaggedKeyValue(nil, key, nil, AppendTTLTag(nil, 1))
	b[len(b)-1] = 200
	if _, _, err := ParseKeyValue(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("tags length overrun: %v", err)
	}
	empty := AppendKeyValueFromKey(nil, key, []byte{0, 0})
	empty[4] |= 0x80
	if _, _, err := ParseKeyValue(empty); !errors.Is(err, ErrMalformed) {
		t.Errorf("flagged value without tags: %v", err)
	}
}

func TestWithTTL(t *testing.T) {
	other := AppendTag(nil, 99, []byte("other"))
	tags := AppendTTLTag(append(AppendTTLTag(nil, 10), other...), 20)
	got := WithTTL(tags, 500)
	if err := ParseTags(got); err != nil {
		t.Fatal(err)
	}
	if ttl, ok := TTLOf(got); !ok || ttl != 500 {
		t.Fatalf("TTLOf = %d, %v; want the new TTL", ttl, ok)
	}
	if v, ok := FindTag(got, 99); !ok || string(v) != "other" {
		t.Fatalf("other tag lost: %x", got)
	}
	if want := len(other) + len(AppendTTLTag(nil, 500)); len(got) != want {
		t.Fatalf("%d bytes of tags, want %d (old TTL tags dropped)", len(got), want)
	}
	if !bytes.Equal(WithTTL(tags, 0), tags) {
		t.Fatal("a zero TTL changed the tags")
	}
	if ttl, ok := TTLOf(WithTTL(nil, 7)); !ok || ttl != 7 {
		t.Fatalf("TTL on no tags = %d, %v", ttl, ok)
	}
}
