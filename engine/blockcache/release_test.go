//go:build !invariants

package blockcache

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Without the invariants tag a double Release of a single reader is
// reported and undone, and the block stays usable.
func TestRefDoubleReleaseReported(t *testing.T) {
	var log bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	c, _ := newCache(t, 2<<20, 0, nil)
	k := Key{File: 1}
	mustPut(t, c, k, 1000, PrioritySingle)
	r, _ := c.Get(k)
	r.Release()
	r.Release()
	if !strings.Contains(log.String(), "released more times than it was acquired") {
		t.Fatalf("not reported: %q", log.String())
	}
	r2, ok := c.Get(k)
	if !ok {
		t.Fatal("block lost after a double release")
	}
	if !c.Evict(k) || c.Stats().PendingFree != 1 {
		t.Fatalf("reference count corrupted: %+v", c.Stats())
	}
	r2.Release()
	if c.Stats().PendingFree != 0 {
		t.Fatal("slot not freed")
	}
}
