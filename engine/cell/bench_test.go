package cell

import "testing"

func BenchmarkCompare(b *testing.B) {
	mk := func(row string, q string, ts int64) []byte {
		return AppendKey(nil, []byte(row), []byte("f"), []byte(q), ts, Put)
	}
	cases := []struct {
		name string
		a, b []byte
	}{
		{"row-differs", mk("user0000001234", "field0", 1), mk("user0000001235", "field0", 1)},
		{"qualifier-differs", mk("user0000001234", "field0", 1), mk("user0000001234", "field1", 1)},
		{"timestamp-differs", mk("user0000001234", "field0", 2), mk("user0000001234", "field0", 1)},
		{"equal", mk("user0000001234", "field0", 1), mk("user0000001234", "field0", 1)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var sink int
			for b.Loop() {
				sink += Compare(c.a, c.b)
			}
			_ = sink
		})
	}
}

func BenchmarkAppendKeyValue(b *testing.B) {
	buf := make([]byte, 0, 256)
	row, fam, qual, val := []byte("user0000001234"), []byte("f"), []byte("field0"), make([]byte, 100)
	b.SetBytes(int64(KeyValueLen(len(row), len(fam), len(qual), len(val))))
	for b.Loop() {
		buf = AppendKeyValue(buf[:0], row, fam, qual, 1, Put, val)
	}
}

func BenchmarkParseKeyValue(b *testing.B) {
	kv := AppendKeyValue(nil, []byte("user0000001234"), []byte("f"), []byte("field0"), 1, Put, make([]byte, 100))
	for b.Loop() {
		if _, _, err := ParseKeyValue(kv); err != nil {
			b.Fatal(err)
		}
	}
}
