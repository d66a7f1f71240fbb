//go:build linux && !invariants

package offheap

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Without the invariants tag a double release is reported, not fatal, and
// the chunk is not pooled twice (which would give it to two memstores).
func TestChunkDoubleReleaseNotPooledTwice(t *testing.T) {
	var log bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(testLogger(&log))
	t.Cleanup(func() { slog.SetDefault(prev) })

	p, _ := newTestPool(t, 64<<10, 4<<20)
	defer p.Close()
	c, _ := p.Get()
	c.Release()
	free := p.Stats().Free
	c.Release()
	if got := p.Stats().Free; got != free {
		t.Fatalf("double release pooled the chunk again: free %d -> %d", free, got)
	}
	if !strings.Contains(log.String(), "released more times than it was acquired") {
		t.Fatalf("double release not reported: %q", log.String())
	}
	a, _ := p.Get()
	b, _ := p.Get()
	if a == b {
		t.Fatal("one chunk handed out twice")
	}
	a.Release()
	b.Release()
}
