package region

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// A batch that names a row more than once writes that row's cells together, the later write of a
// cell winning, and leaves the other rows alone (resolveMutations shares one buffer among the
// mutations and keys rows without copying them).
func TestBatchRepeatsARow(t *testing.T) {
	e := newEnv(t, fam("f"))
	put := func(row, q, v string) *Mutation {
		m := NewMutation([]byte(row))
		m.Put([]byte("f"), []byte(q), 5, []byte(v))
		return m
	}
	ms := []*Mutation{put("r1", "a", "1"), put("r2", "a", "2"), put("r1", "b", "3"), put("r1", "a", "4"), put("r3", "c", "5")}
	for i, err := range e.r.Batch(ms) {
		if err != nil {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}
	want := map[string]string{"r1": "f:a@5=4 f:b@5=3", "r2": "f:a@5=2", "r3": "f:c@5=5"}
	for row, w := range want {
		res, err := e.r.Get(&Get{Row: []byte(row)})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, c := range res.Cells {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s:%s@%d=%s", c.Family(), c.Qualifier(), c.Timestamp(), c.Value)
		}
		if got != w {
			t.Errorf("row %s: got %q, want %q", row, got, w)
		}
	}
}

// Row locks stay exclusive when their entries (and the copies of the rows that key them) are
// recycled: goroutines lock random rows of a small set, each checks it is alone in its row, and
// every entry is gone at the end.
func TestRowLocksRecycled(t *testing.T) {
	l := newRowLocks()
	const rows = 6
	var holders [rows]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 0, 16)
			for range 3000 {
				i := rng.IntN(rows)
				// The caller's buffer is reused for the next row at once: the lock must hold its own copy.
				buf = fmt.Appendf(buf[:0], "row-%d", i)
				rl, err := l.lock(buf, 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				buf = append(buf[:0], "scribbled"...)
				mu.Lock()
				holders[i]++
				n := holders[i]
				mu.Unlock()
				if n != 1 {
					t.Errorf("row-%d held by %d goroutines at once", i, n)
				}
				if rl.row != fmt.Sprintf("row-%d", i) {
					t.Errorf("lock entry keyed %q, want row-%d", rl.row, i)
				}
				mu.Lock()
				holders[i]--
				mu.Unlock()
				l.unlock(rl)
			}
		}()
	}
	wg.Wait()
	for i := range l.shards {
		if n := len(l.shards[i].m); n != 0 {
			t.Errorf("shard %d keeps %d lock entries after every lock was released", i, n)
		}
	}
}
