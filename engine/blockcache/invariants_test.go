//go:build invariants

package blockcache

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

func TestRefDoubleReleasePanics(t *testing.T) {
	c, _ := newCache(t, 2<<20, 0, nil)
	k := Key{File: 1}
	mustPut(t, c, k, 1000, PrioritySingle)
	r, _ := c.Get(k)
	other, _ := c.Get(k) // a second reader whose reference must not be stolen
	r.Release()
	mustPanic(t, "released twice through the same BlockRef", r.Release)
	mustPanic(t, "Bytes of block 1@0 after Release", func() { r.Bytes() })
	if err := checkBlock(k, other.Bytes(), 1000); err != nil {
		t.Fatal(err)
	}
	other.Release()
}

// A write through bytes kept after Release, into a slot freed by eviction,
// is caught when the slot is handed out again.
func TestWriteAfterReleaseDetected(t *testing.T) {
	c, _ := newCache(t, 256<<10, 256<<10, []int{64 << 10})
	k := Key{File: 1}
	mustPut(t, c, k, 64<<10, PrioritySingle)
	r, _ := c.Get(k)
	stale := r.Bytes()
	r.Release()
	c.Evict(k)
	stale[10] ^= 0xFF // use after release
	mustPanic(t, "written after it was freed (use after release): byte 10", func() {
		c.Put(Key{File: 2}, make([]byte, 100), PrioritySingle)
	})
}

// A block modified while cached (readers must treat it as read-only) is
// caught at the next Get or Release.
func TestBlockChangedWhileReferencedDetected(t *testing.T) {
	c, _ := newCache(t, 256<<10, 256<<10, []int{64 << 10})
	k := Key{File: 1}
	mustPut(t, c, k, 4096, PrioritySingle)
	r, _ := c.Get(k)
	r.Bytes()[7]++
	mustPanic(t, "changed while referenced (at Release)", r.Release)
}
