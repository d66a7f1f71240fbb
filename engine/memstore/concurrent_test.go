package memstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cellstore/engine/cell"
)

// TestRowSeeksUnderConcurrentInserts: while a writer inserts rows of three cells, a scanner at a
// fixed read point finds the same rows backwards (SeekToLastRow, SeekToPreviousRow: reversed
// scans) as forwards. A seek used to take the node after "the last node before the key" with a
// second load of its link, which could return a cell the writer had just linked in between —
// one still before the key — so a reversed scan skipped a row whose visible cells were all there.
func TestRowSeeksUnderConcurrentInserts(t *testing.T) {
	for round := range 600 {
		m, err := New(testPool(t, 64<<10, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		var done atomic.Uint64 // every cell with a sequence id <= done is in
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			rng := rand.New(rand.NewPCG(uint64(round), 1))
			for seq := uint64(1); seq <= 300; seq++ {
				row := fmt.Appendf(nil, "row%02d", rng.IntN(20))
				for _, q := range []string{"a", "b", "c"} {
					if err := m.Add(cell.AppendKey(nil, row, []byte("f"), []byte(q), 5, cell.Put), []byte("v"), seq); err != nil {
						t.Error(err)
						return
					}
				}
				done.Store(seq)
			}
		}()
		for running := true; running; {
			select {
			case <-finished:
				running = false // one more pass over the final state
			default:
			}
			rp := done.Load()
			scs, err := m.Scanners(rp)
			if err != nil {
				t.Fatal(err)
			}
			if len(scs) == 0 {
				continue
			}
			sc := scs[0]
			var forward, backward []string
			for ok := sc.Seek(cell.AppendFirstOnRow(nil, []byte("row"))); ok; ok = sc.Next() {
				if r := string(sc.Key().Row()); len(forward) == 0 || forward[len(forward)-1] != r {
					forward = append(forward, r)
				}
			}
			for ok := sc.SeekToLastRow(); ok; ok = sc.SeekToPreviousRow(cell.AppendFirstOnRow(nil, sc.Key().Row())) {
				backward = append(backward, string(sc.Key().Row()))
			}
			slices.Reverse(backward)
			sc.Close()
			if !slices.Equal(forward, backward) {
				m.Close()
				t.Fatalf("round %d, read point %d: rows forwards %v, backwards %v", round, rp, forward, backward)
			}
		}
		m.Close()
	}
}
