//go:build linux && invariants

package offheap

import (
	"strings"
	"testing"
)

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic; want one mentioning %q", want)
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) {
			t.Fatalf("panic %v; want it to mention %q", r, want)
		}
	}()
	f()
}

// A write through a view kept after the chunk was released is detected
// when the chunk is handed out again.
func TestChunkUseAfterFreeDetected(t *testing.T) {
	if !InvariantsEnabled {
		t.Fatal("invariants tag set but InvariantsEnabled is false")
	}
	p, _ := newTestPool(t, 64<<10, 1<<20)
	c, _ := p.Get()
	stale, _ := c.Alloc(16)
	copy(stale, "live cell")
	c.Release()
	// The released chunk is poisoned.
	if off := PoisonIntact(c.mem); off != -1 {
		t.Fatalf("released chunk not poisoned at %d", off)
	}
	stale[3] = 'X' // use after free
	// The pool is LIFO: the next Get hands out the same chunk and checks it.
	mustPanic(t, "written after it was released (use after free): byte 3", func() { p.Get() })
}

func TestChunkDoubleReleasePanics(t *testing.T) {
	p, _ := newTestPool(t, 64<<10, 1<<20)
	c, _ := p.Get()
	c.Release()
	mustPanic(t, "released more times than it was acquired", c.Release)
	mustPanic(t, "Alloc on chunk", func() { c.Alloc(1) })
	mustPanic(t, "Retain on chunk", c.Retain)
	mustPanic(t, "Bytes on chunk", func() { c.Bytes() })
}

func TestPoison(t *testing.T) {
	buf := make([]byte, 1000)
	for _, r := range [][2]int{{0, 1000}, {1, 999}, {3, 10}, {7, 8}, {5, 5}} {
		b := buf[r[0]:r[1]]
		Poison(b)
		if off := PoisonIntact(b); off != -1 {
			t.Fatalf("%v: intact poison reported changed at %d", r, off)
		}
		for i := range b {
			b[i] ^= 1
			if off := PoisonIntact(b); off != i {
				t.Fatalf("%v: change at %d reported at %d", r, i, off)
			}
			b[i] ^= 1
		}
	}
}
