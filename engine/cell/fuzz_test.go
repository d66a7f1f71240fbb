package cell

import (
	"bytes"
	"testing"
)

// FuzzParseKeyValue feeds arbitrary bytes to the parsers: they must never
// panic, and whatever they accept must decode and re-encode to the same
// bytes and be usable by the comparator.
func FuzzParseKeyValue(f *testing.F) {
	f.Add(AppendKeyValue(nil, []byte("row"), []byte("f"), []byte("q"), 1, Put, []byte("value")))
	f.Add(AppendKeyValue(nil, nil, nil, nil, LatestTimestamp, Maximum, nil))
	f.Add([]byte{0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4})
	f.Add(AppendTaggedKeyValue(nil, AppendKey(nil, []byte("row"), []byte("f"), []byte("q"), 1, Put), []byte("v"), AppendTTLTag(nil, 60000)))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, n, err := ParseKeyValue(b)
		if err != nil {
			if kv != nil || n != 0 {
				t.Fatalf("error %v with result", err)
			}
			return
		}
		c := kv.Decode()
		re := c.AppendKeyValue(nil)
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:n])
		}
		if Compare(kv.Key(), kv.Key()) != 0 {
			t.Fatal("key not equal to itself")
		}
		_ = kv.Validate(0)
		_ = kv.String()
		if _, err := ParseKey(b); err == nil {
			_ = Key(b).String()
			_ = Compare(b, kv.Key())
		}
	})
}

// FuzzCompare builds two keys from fuzzed fields and checks the encoded
// comparator against the reference comparator on the decoded fields.
func FuzzCompare(f *testing.F) {
	f.Add([]byte("r"), []byte("f"), []byte("q"), int64(1), uint8(Put), []byte("r"), []byte("f"), []byte("q"), int64(2), uint8(Put))
	f.Add([]byte("r"), []byte(""), []byte(""), LatestTimestamp, uint8(Minimum), []byte("r"), []byte("\xff"), []byte("\xff"), OldestTimestamp, uint8(Minimum))
	f.Add([]byte("ab"), []byte("a"), []byte("zz"), int64(0), uint8(Delete), []byte("ab"), []byte("ab"), []byte("a"), int64(0), uint8(DeleteColumn))
	f.Fuzz(func(t *testing.T, r1, f1, q1 []byte, ts1 int64, t1 uint8, r2, f2, q2 []byte, ts2 int64, t2 uint8) {
		if len(r1) > MaxRowLength || len(r2) > MaxRowLength || len(f1) > MaxFamilyLength || len(f2) > MaxFamilyLength {
			return
		}
		a := Cell{Row: r1, Family: f1, Qualifier: q1, Timestamp: ts1, Type: Type(t1)}
		b := Cell{Row: r2, Family: f2, Qualifier: q2, Timestamp: ts2, Type: Type(t2)}
		if !a.Type.IsKeyType() || !b.Type.IsKeyType() {
			return
		}
		ka, kb := a.AppendKey(nil), b.AppendKey(nil)
		if got, want := Compare(ka, kb), refCompare(a, b); got != want {
			t.Fatalf("Compare(%v, %v) = %d, reference %d", a, b, got, want)
		}
		if got, want := Compare(kb, ka), refCompare(b, a); got != want {
			t.Fatalf("Compare(%v, %v) = %d, reference %d", b, a, got, want)
		}
	})
}
