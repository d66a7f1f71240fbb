package storage

import (
	"fmt"
	"sync"
	"testing"
)

// BenchmarkLocalAppendSync is the disk's own cost of what a WAL group commit does: write 300 bytes
// into a preallocated file and sync it, from 1, 2 and 3 goroutines at once (overlapping syncs of
// one file). It runs in the temporary directory (TMPDIR): point that at the disk to measure.
func BenchmarkLocalAppendSync(b *testing.B) {
	for _, par := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("syncers=%d", par), func(b *testing.B) {
			fs, err := NewLocal(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			f, err := fs.Create("seg")
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := f.(Preallocator).Preallocate(64 << 20); err != nil {
				b.Fatal(err)
			}
			rec := make([]byte, 300)
			var mu sync.Mutex
			var wg sync.WaitGroup
			var failed error
			per := (b.N + par - 1) / par
			b.ResetTimer()
			for range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						mu.Lock()
						_, err := f.Write(rec)
						mu.Unlock()
						if err == nil {
							err = f.Sync()
						}
						if err != nil {
							mu.Lock()
							failed = err
							mu.Unlock()
							return
						}
					}
				}()
			}
			wg.Wait()
			if failed != nil {
				b.Fatal(failed)
			}
		})
	}
}
