//go:build linux

package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// BenchmarkAddRandom inserts cells with random rows (14-byte rows, 100-byte
// values, as the region's put benchmark) into a memstore that already holds
// `held` cells: the skiplist search dominates once it outgrows the CPU
// caches.
func BenchmarkAddRandom(b *testing.B) {
	value := make([]byte, 100)
	for _, held := range []int{10_000, 400_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			m, err := New(testPool(b, 2<<20, 1<<30))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			seq := uint64(0)
			add := func() {
				seq++
				k := cell.AppendKey(nil, fmt.Appendf(nil, "user%010d", rng.IntN(1<<30)), []byte("f"), []byte("q"), 1, cell.Put)
				if err := m.Add(k, value, seq); err != nil {
					b.Fatal(err)
				}
			}
			for range held {
				add()
			}
			b.ResetTimer()
			for b.Loop() {
				add()
			}
		})
	}
}
